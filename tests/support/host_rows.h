#pragma once
// Runs a CUDA row body (core/cuda/kernels/rows.h: operator()(r, lane, lanes, reduce)) on the host
// as the GPU does: `lanes` threads walk the rows together, each its strided share of a row, and
// meet at every reduction (a std::barrier standing in for the warp shuffle / block_sum). So the
// host tests check the lane partition and the combination of partial sums, not a serial rewrite.
#include <barrier>
#include <cstdint>
#include <thread>
#include <vector>

namespace packrat::testing {

// Sum / max over the lanes, in lane order, the result in every lane.
class HostLaneReducer {
 public:
  HostLaneReducer(std::barrier<>& sync, std::vector<double>& slots, int lane) : sync_(sync), slots_(slots), lane_(lane) {}
  template <typename T>
  T sum(T v) const {
    return combine(v, [](T a, T b) { return a + b; });
  }
  float max(float v) const {
    return combine(v, [](float a, float b) { return a < b ? b : a; });
  }

 private:
  template <typename T, class Op>
  T combine(T v, Op op) const {
    slots_[static_cast<size_t>(lane_)] = static_cast<double>(v);  // exact for f32 and f64
    sync_.arrive_and_wait();
    T r = static_cast<T>(slots_[0]);
    for (size_t l = 1; l < slots_.size(); ++l) r = op(r, static_cast<T>(slots_[l]));
    sync_.arrive_and_wait();  // every lane has read before the next reduction writes
    return r;
  }
  std::barrier<>& sync_;
  std::vector<double>& slots_;
  int lane_;
};

template <class Row>
void run_rows_on_host(int64_t rows, int lanes, const Row& row) {
  std::barrier<> sync(lanes);
  std::vector<double> slots(static_cast<size_t>(lanes));
  std::vector<std::thread> threads;
  for (int lane = 0; lane < lanes; ++lane)
    threads.emplace_back([&, lane] {
      const HostLaneReducer red(sync, slots, lane);
      for (int64_t r = 0; r < rows; ++r) row(r, lane, lanes, red);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace packrat::testing
