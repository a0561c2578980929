#pragma once
// Gradient fidelity: how far a storage scheme's compressed backward pass moves each parameter's
// gradient from the FP32 gradient, on one batch, before training for a day.
//
//   g      the FP32 gradient (every saved tensor kept exactly)
//   g_d    the gradient with the scheme's saved tensors, draw d = 1..N; draw d quantizes with the
//          Philox key of step first_step + d, so every draw has fresh rounding noise
//   mean   the mean of the g_d
//
// Per parameter tensor (and over all parameters together, "total"):
//   cosine        mean over draws of cos(g_d, g)
//   rel_bias      ||mean - g|| / ||g||
//   rel_variance  sum over elements of the sample variance of g_d (N - 1 denominator), / ||g||^2
//   bias_z        (||mean - g||^2 - V/N) / (sqrt(2 sum_i var_i^2) / N), V = sum_i var_i: under
//                 "the scheme is unbiased" ||mean - g||^2 has mean V/N and (elements independent,
//                 normal) that standard deviation, so |bias_z| beyond a few units says the bias is
//                 real. +inf when the draws do not vary (deterministic rounding) and mean != g.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/saved_tensor_store.h"
#include "core/tensor.h"
#include "experiments/lib/config.h"
#include "experiments/lib/session.h"  // InputSpec
#include "experiments/lib/json.h"
#include "layers/module.h"

namespace packrat {

struct TensorFidelity {
  std::string name;  // "layer1.0.conv1.weight", or "total"
  int64_t numel = 0;
  double grad_norm = 0;  // ||g||
  double cosine = 0, cosine_min = 0;
  double rel_bias = 0, rel_variance = 0;
  double bias_z = std::numeric_limits<double>::quiet_NaN();
};

struct FidelityReport {
  int64_t draws = 0, batch_size = 0;
  std::string scheme;  // what the config stores saved tensors with, in words
  std::vector<TensorFidelity> tensors;  // model parameter order
  TensorFidelity total;                 // all parameters as one vector
  Json json() const;
  std::string table() const;  // per-layer text table for stdout
};

// N >= 2 draws of `scheme`'s noise against `reference` (FP32) on (images, labels). The model is
// in train mode (batch statistics, as in training); its buffers (batchnorm running statistics)
// are restored afterwards and its parameters are untouched. Parameters without a gradient are
// left out. An adaptive store (GACT) first allocates its bits from the batch, or from
// `estimate_on` when given: in training its bits, allocated at a refresh, serve the later batches
// (the memory plan estimates on kFirstEstimateBatch samples of another batch, tools.h; the
// measured estimator runs one backward per saved tensor).
struct LabelledBatch {
  Tensor images, labels;
};
FidelityReport measure_gradient_fidelity(Module& model, StorePolicy& reference, StorePolicy& scheme,
                                         const Tensor& images, const Tensor& labels, int64_t draws,
                                         int64_t first_step = 0, double label_smoothing = 0,
                                         const LabelledBatch* estimate_on = nullptr);

// The gradient's sampling variance between batches (GACT's yardstick for the variance a
// compression may add): the sum over parameter elements of the sample variance (N - 1
// denominator) of the FP32 gradients of `batches` (at least 2), the model as it is, in train mode;
// its buffers are restored afterwards.
double gradient_sampling_variance(Module& model, StorePolicy& reference, const std::vector<LabelledBatch>& batches,
                                  double label_smoothing = 0);

// The first `count` batches of `batch` samples of c's training set, in the trainer's first-epoch
// order (shuffled under the run seed, the train transforms applied), and the input they make.
// Throws naming `who` when the set holds fewer.
struct TrainingBatches {
  std::vector<LabelledBatch> batches;
  InputSpec input;
};
TrainingBatches training_batches(const Config& c, int64_t batch, int64_t count, std::string_view who);

// The trainer's --gradient-fidelity N: the config's model at initialisation, its first training
// batch (the loader's order under the run seed), N draws; writes <output.dir>/gradient_fidelity.json
// and gradient_fidelity.png (gnuplot) and returns the report.
FidelityReport gradient_fidelity_mode(const Config& c, int64_t draws);
// The most draws --gradient-fidelity and a sweep file's gradient_fidelity accept: each draw is a
// backward pass, so 10^9 of them would run for days.
constexpr int64_t kMaxFidelityDraws = 10000;

// Whether saved_tensors keeps every saved tensor in FP32 (fp32, or a preset that is, by default
// and in every rule): a run with it has no compression noise to measure.
bool keeps_every_tensor_exact(const StorePolicySpec& s);
// Throws naming the config when its saved_tensors keep every saved tensor in FP32 (fp32, or a
// preset that is): the measurement would compare FP32 with FP32.
void check_fidelity_compares_a_scheme(const Config& c);

// Writes the report's plot (cosine and relative bias / standard deviation per tensor) to `png`.
void plot_gradient_fidelity(const FidelityReport& r, const std::string& png);

}  // namespace packrat
