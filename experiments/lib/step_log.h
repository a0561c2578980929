#pragma once
// Curves by step: <run dir>/steps.csv, one row every train.log_interval steps (and at the end of
// each epoch) with the training loss and accuracy averaged over the steps since the previous row,
// and the learning rate of the row's last step. A two-epoch run is a curve, not two points.
#include <cstdint>
#include <string>
#include <vector>

namespace packrat {

struct StepRow {
  int64_t step = 0;    // global training steps done
  int64_t epoch = 0;   // 1-based epoch the steps belong to
  double train_loss = 0, train_acc = 0;  // means over the row's steps (per image)
  double lr = 0;
};

std::string step_csv_header();  // "step,epoch,train_loss,train_acc,lr"
std::string step_csv_row(const StepRow& r);

class StepLogWriter {
 public:
  // create: makes `dir` when missing (false: only reads, for check()).
  explicit StepLogWriter(std::string dir, bool create = true);
  // For a resumed run: keeps the rows of steps <= `step` (0: none), so a resumed run's file
  // equals an uninterrupted run's.
  void truncate_after(int64_t step);
  // What truncate_after checks, before anything is written: throws naming a damaged line.
  void check(int64_t step) const { (void)rows_up_to(step); }
  void append(const StepRow& r);
  const std::string& path() const { return csv_; }

 private:
  std::string rows_up_to(int64_t step) const;
  std::string csv_;
};

// Accumulates the steps between two rows.
class StepAverager {
 public:
  void add(double loss, int64_t correct, int64_t count);
  bool empty() const { return count_ == 0; }
  // Replaces the interval's sums {loss * images, correct, images} by reduce(sums)'s result
  // (data parallelism: the sums over every rank).
  template <class Reduce>
  void reduce(Reduce&& reduce) {
    std::vector<double> sums{loss_sum_, static_cast<double>(correct_), static_cast<double>(count_)};
    reduce(sums);
    loss_sum_ = sums[0];
    correct_ = static_cast<int64_t>(sums[1]);
    count_ = static_cast<int64_t>(sums[2]);
  }
  // The row for the steps added since the last take(), which starts the next interval.
  StepRow take(int64_t step, int64_t epoch, double lr);

 private:
  double loss_sum_ = 0;
  int64_t correct_ = 0, count_ = 0;
};

}  // namespace packrat
