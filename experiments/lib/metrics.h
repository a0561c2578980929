#pragma once
// One row per epoch in metrics.csv and metrics.jsonl of a run directory.
#include <array>
#include <cstdint>
#include <limits>
#include <string>

#include "core/allocator.h"
#include "experiments/lib/json.h"

namespace packrat {

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based: the number of epochs done
  int64_t step = 0;   // global training steps done
  double train_loss = 0, train_acc = 0;
  double test_loss = std::numeric_limits<double>::quiet_NaN();  // NaN when not evaluated this epoch
  double test_acc = std::numeric_limits<double>::quiet_NaN();
  double lr = 0;      // at the end of the epoch
  double img_per_s = 0;
  double seconds = 0;
  int64_t peak_bytes = 0;                  // highest total over the epoch's training steps
  std::array<int64_t, kNumTags> peak_by_tag{};
  int64_t saved_bytes = 0;                 // held after the forward of the epoch's first step
  // Text runs (data.dataset: text): mean cross-entropy in bits per byte (= loss / ln 2); NaN otherwise.
  double train_bpb = std::numeric_limits<double>::quiet_NaN();
  double test_bpb = std::numeric_limits<double>::quiet_NaN();
};

Json metrics_json(const EpochMetrics& m);
std::string metrics_csv_header();
std::string metrics_csv_row(const EpochMetrics& m);

// For a resumed run whose checkpoint has done `epoch` epochs, before anything is written: throws
// naming the file when metrics.csv is missing, lacks the row of an epoch up to `epoch`, or holds
// a line that is not a row (and so does metrics.jsonl).
void check_metrics_for_resume(const std::string& dir, int64_t epoch);

// Appends rows to <dir>/metrics.csv and <dir>/metrics.jsonl (header written when new).
class MetricsWriter {
 public:
  explicit MetricsWriter(std::string dir);
  // For a resumed run: drops rows after `epoch` (written after the checkpoint it resumes from).
  void truncate_after(int64_t epoch);
  void append(const EpochMetrics& m);

 private:
  std::string csv_, jsonl_;
};

}  // namespace packrat
