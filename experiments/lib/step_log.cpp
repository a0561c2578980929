#include "experiments/lib/step_log.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic

namespace packrat {

std::string step_csv_header() { return "step,epoch,train_loss,train_acc,lr"; }

std::string step_csv_row(const StepRow& r) {
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("nan"); };
  return fmt::format("{},{},{},{},{}", r.step, r.epoch, num(r.train_loss), num(r.train_acc), num(r.lr));
}

StepLogWriter::StepLogWriter(std::string dir, bool create) {
  if (create) std::filesystem::create_directories(dir);
  csv_ = (std::filesystem::path(dir) / "steps.csv").string();
}

std::string StepLogWriter::rows_up_to(int64_t step) const {
  std::string kept = step_csv_header() + "\n";
  std::ifstream in(csv_);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (n == 1 || line.empty()) continue;
    int64_t row_step = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), row_step);
    PACKRAT_CHECK(ec == std::errc() && end != line.data() + line.size() && *end == ',',
                  "{}: line {} is not a step row (it starts '{}'): the file was edited or damaged; fix or remove the "
                  "line to resume",
                  csv_, n, line.substr(0, 40));
    if (row_step <= step) kept += line + "\n";
  }
  return kept;
}

void StepLogWriter::truncate_after(int64_t step) { write_file_atomic(csv_, rows_up_to(step)); }

void StepLogWriter::append(const StepRow& r) {
  const bool fresh = !std::filesystem::exists(csv_) || std::filesystem::file_size(csv_) == 0;
  std::ofstream csv(csv_, std::ios::app);
  if (fresh) csv << step_csv_header() << "\n";
  csv << step_csv_row(r) << "\n";
  PACKRAT_CHECK(csv.good(), "cannot write the step log {}", csv_);
}

void StepAverager::add(double loss, int64_t correct, int64_t count) {
  loss_sum_ += loss * static_cast<double>(count);
  correct_ += correct;
  count_ += count;
}

StepRow StepAverager::take(int64_t step, int64_t epoch, double lr) {
  StepRow r;
  r.step = step;
  r.epoch = epoch;
  r.lr = lr;
  if (count_ > 0) {
    r.train_loss = loss_sum_ / static_cast<double>(count_);
    r.train_acc = static_cast<double>(correct_) / static_cast<double>(count_);
  }
  *this = StepAverager();
  return r;
}

}  // namespace packrat
