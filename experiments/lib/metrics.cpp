#include "experiments/lib/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic

namespace packrat {

Json metrics_json(const EpochMetrics& m) {
  Json j = Json::object();
  j["epoch"] = Json(m.epoch);
  j["step"] = Json(m.step);
  j["train_loss"] = Json(m.train_loss);
  j["train_acc"] = Json(m.train_acc);
  j["test_loss"] = Json(m.test_loss);  // NaN is written as null
  j["test_acc"] = Json(m.test_acc);
  j["lr"] = Json(m.lr);
  j["img_per_s"] = Json(m.img_per_s);
  j["seconds"] = Json(m.seconds);
  j["peak_bytes"] = Json(m.peak_bytes);
  Json tags = Json::object();
  for (size_t i = 0; i < kNumTags; ++i) tags[std::string(tag_name(static_cast<MemTag>(i)))] = Json(m.peak_by_tag[i]);
  j["peak_by_tag"] = tags;
  j["saved_bytes"] = Json(m.saved_bytes);
  j["train_bpb"] = Json(m.train_bpb);
  j["test_bpb"] = Json(m.test_bpb);
  return j;
}

std::string metrics_csv_header() {
  std::string h = "epoch,step,train_loss,train_acc,test_loss,test_acc,lr,img_per_s,seconds,peak_bytes,saved_bytes";
  for (size_t i = 0; i < kNumTags; ++i) h += fmt::format(",peak_{}", tag_name(static_cast<MemTag>(i)));
  return h + ",train_bpb,test_bpb";
}

std::string metrics_csv_row(const EpochMetrics& m) {
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("nan"); };
  std::string r = fmt::format("{},{},{},{},{},{},{},{},{},{},{}", m.epoch, m.step, num(m.train_loss), num(m.train_acc),
                              num(m.test_loss), num(m.test_acc), num(m.lr), num(m.img_per_s), num(m.seconds),
                              m.peak_bytes, m.saved_bytes);
  for (size_t i = 0; i < kNumTags; ++i) r += fmt::format(",{}", m.peak_by_tag[i]);
  return r + fmt::format(",{},{}", num(m.train_bpb), num(m.test_bpb));
}

MetricsWriter::MetricsWriter(std::string dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  csv_ = (fs::path(dir) / "metrics.csv").string();
  jsonl_ = (fs::path(dir) / "metrics.jsonl").string();
}

namespace {
std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}
}  // namespace

namespace {
// The rows of metrics.csv and metrics.jsonl up to `epoch` (the header included), and the epochs of
// the csv rows kept; throws naming the file at a line that is not a row.
struct KeptRows {
  std::string csv, jsonl;
  std::vector<int64_t> csv_epochs;
};

KeptRows rows_up_to(const std::string& csv_path, const std::string& jsonl_path, int64_t epoch) {
  KeptRows k;
  k.csv = metrics_csv_header() + "\n";
  auto lines = read_lines(csv_path);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    int64_t row_epoch = 0;
    const auto [end, ec] = std::from_chars(l.data(), l.data() + l.size(), row_epoch);
    PACKRAT_CHECK(ec == std::errc() && end != l.data() + l.size() && *end == ',',
                  "{}: line {} is not a metrics row (it starts '{}'): the file was edited or damaged; fix or remove "
                  "the line to resume",
                  csv_path, i + 1, l.substr(0, 40));
    if (row_epoch <= epoch) {
      k.csv += l + "\n";
      k.csv_epochs.push_back(row_epoch);
    }
  }
  for (const auto& l : read_lines(jsonl_path))
    if (json_integer(parse_json(l, jsonl_path).at("epoch")) <= epoch) k.jsonl += l + "\n";
  return k;
}
}  // namespace

void check_metrics_for_resume(const std::string& dir, int64_t epoch) {
  namespace fs = std::filesystem;
  const std::string csv = (fs::path(dir) / "metrics.csv").string();
  PACKRAT_CHECK(fs::is_regular_file(csv), "--resume {}: {} is missing: it holds the metrics of the {} epoch(s) done "
                "so far, which the resumed run would lose; put it back (or start afresh with --overwrite)",
                dir, csv, epoch);
  const KeptRows k = rows_up_to(csv, (fs::path(dir) / "metrics.jsonl").string(), epoch);
  for (int64_t e = 1; e <= epoch; ++e)
    PACKRAT_CHECK(std::find(k.csv_epochs.begin(), k.csv_epochs.end(), e) != k.csv_epochs.end(),
                  "--resume {}: {} has no row for epoch {}, but the checkpoint has done {} epoch(s): the file was "
                  "edited or replaced, and the resumed run would lose that epoch's metrics; put the file back (or "
                  "start afresh with --overwrite)",
                  dir, csv, e, epoch);
}

void MetricsWriter::truncate_after(int64_t epoch) {
  const KeptRows k = rows_up_to(csv_, jsonl_, epoch);
  write_file_atomic(csv_, k.csv);
  write_file_atomic(jsonl_, k.jsonl);
}

void MetricsWriter::append(const EpochMetrics& m) {
  const bool fresh = !std::filesystem::exists(csv_) || std::filesystem::file_size(csv_) == 0;
  std::ofstream csv(csv_, std::ios::app);
  if (fresh) csv << metrics_csv_header() << "\n";
  csv << metrics_csv_row(m) << "\n";
  std::ofstream jsonl(jsonl_, std::ios::app);
  jsonl << metrics_json(m).dump() << "\n";
  PACKRAT_CHECK(csv.good() && jsonl.good(), "cannot write metrics to {}", csv_);
}

}  // namespace packrat
