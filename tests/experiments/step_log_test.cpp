// steps.csv: the training curve by step (experiments/lib/step_log.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/lib/run.h"
#include "experiments/lib/step_log.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::vector<double>> csv_rows(const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<double> r;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) r.push_back(std::stod(c));
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

// 64 images in batches of 16: 4 steps per epoch; a row every 3 steps and at each epoch's end.
// The rows of an epoch, weighted by their steps, give the epoch's train loss in metrics.csv;
// a run stopped after epoch 1 and resumed writes the same file as one run straight through.
TEST(StepLog, RowsEveryIntervalAverageToTheEpochAndSurviveResume) {
  const fs::path data = make_idx_dataset("steplog", 64, 32);
  RunOptions quiet;
  quiet.tty = 0;
  quiet.print_report = false;
  const fs::path straight = temp_dir("steplog_straight"), resumed = temp_dir("steplog_resumed");
  const std::vector<std::string> sets = {"train.log_interval=3"};
  const RunResult a = run_training(tiny_config(data, straight, sets), quiet);
  const std::string text = read_text(straight / "steps.csv");
  ASSERT_EQ(text.substr(0, text.find('\n')), step_csv_header());
  const auto rows = csv_rows(text);
  ASSERT_EQ(rows.size(), 4u) << text;  // steps 3, 4 (epoch end), 7, 8
  const double steps[] = {3, 4, 7, 8}, epochs[] = {1, 1, 2, 2};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], steps[i]);
    EXPECT_EQ(rows[i][1], epochs[i]);
    EXPECT_GT(rows[i][4], 0.0);  // lr
  }
  for (int e = 0; e < 2; ++e) {  // 3 steps + 1 step, equal batches
    const double mean = (3 * rows[2 * e][2] + rows[2 * e + 1][2]) / 4;
    EXPECT_NEAR(mean, a.epochs[e].train_loss, 1e-4) << "epoch " << e + 1;
  }
  EXPECT_NE(rows[0][4], rows[3][4]) << "the cosine schedule's lr changes from row to row";

  RunOptions first = quiet;
  first.stop_after_epoch = 1;
  run_training(tiny_config(data, resumed, sets), first);
  ASSERT_EQ(csv_rows(read_text(resumed / "steps.csv")).size(), 2u);
  RunOptions again = quiet;
  again.resume = true;
  run_training(tiny_config(data, resumed, sets), again);
  EXPECT_EQ(read_text(resumed / "steps.csv"), text);
}

TEST(StepLog, TruncateKeepsRowsUpToTheStep) {
  const fs::path dir = temp_dir("steplog_truncate");
  StepLogWriter w(dir.string());
  for (int64_t s : {5, 10, 15}) w.append(StepRow{s, 1, 1.0, 0.5, 0.1});
  w.truncate_after(10);
  EXPECT_EQ(csv_rows(read_text(dir / "steps.csv")).size(), 2u);
  std::ofstream(dir / "steps.csv", std::ios::app) << "garbage\n";
  EXPECT_THROW(w.truncate_after(10), Error);
}
