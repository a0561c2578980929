#pragma once
// GACT's adaptive bit allocation over the per-group store. Each quantized tensor l (numbered
// by its order of saving within a step) has a sensitivity c_l: the gradient variance its
// quantization causes per unit of S(b) = 1/(2^b - 1)^2 (GACT, Thm. 2). Every adapt_interval
// steps the sensitivities are re-estimated and the bits re-assigned to minimise
// sum_l c_l S(b_l) subject to sum_l b_l D_l <= avg_bits * sum_l D_l (greedy, as ActNN). The
// candidates are 1, 2, 3, 4 and 8 bits of per-group quantization and 32: the tensor passes
// through in FP32 (GACT's max_bits; S(32) ~ 0), for the few tensors too sensitive to compress.
//
// The budget is kept apart for tensors held for different times. Under recomputation
// (memory.recompute) a recomputed segment's tensors are saved again in the backward and held only
// for that segment's backward, while the forward's (the segments' inputs, the layers not
// recomputed) are held through the whole backward. One average over all of them let GACT give the
// short-lived tensors fewer bits and move theirs onto the held ones (the 24 layer inputs of the
// BERT-style encoder went from 4 to 8 bits, its peak 7.9% over the first bits'; docs/planning.md).
// So the average holds within each pool: the forward's tensors, and each recompute's (so the
// peak, the held bytes plus one segment's, stays that of avg_bits everywhere). Without
// recomputation there is one pool: GACT's budget.
//
// Estimators:
//  - measured (GACT Alg. 1): gradient evaluations that differ only in tensor l's quantization
//    noise; c_l = ||g0 - g_l||^2 / (2 S(b_l)). One shared baseline g0 makes it L + 1 passes per
//    refresh instead of 2L, and `tensors_per_refresh` = k spreads the tensors round-robin over
//    refreshes (k + 1 passes each).
//    A tensor held at 32 bits is quantized at 8 bits during these passes, so that it has noise
//    to measure.
//    A segment's input (op "checkpoint", memory.recompute) is measured against its exact value
//    instead: its pass holds it in FP32 and c_l = ||g0 - g_l||^2 / S(b_l). Recomputing a segment
//    from a quantized input evaluates the segment's backward at a perturbed point, so its
//    gradients are biased (layernorm, GELU, softmax are not linear in it); GACT's difference of
//    two draws cancels that bias and measured such inputs as harmless (docs/attention.md), the
//    distance to the exact input holds variance and bias both. Same passes; a plain tensor, which
//    the gradient reads linearly, keeps GACT's estimate (both agree there in expectation).
//    The recompute's first op saving the segment's input (the buffer it was decoded into) is
//    that tensor again, held as its codes (compressing_store.h): one entry of the table, whose
//    exact pass gives that op the exact input too.
//  - analytic (ActNN): c_l = sum_n J_n * sum_{i in n} R_i, R_i = (range of i's group)^2 / 4,
//    from the group ranges the quantizer computes, and J_n = ||dL/d(output of l's consumer)_n||^2
//    times the squared norm of a weight-gradient Jacobian column per input element of sample n,
//    relative to that output gradient (analytic_jacobian_factor): exact for a linear layer,
//    KH*KW / (H*W) for a convolution with a KH x KW kernel over an H x W input (ActNN's
//    num_locations; the kernel sizes come from the model, set_conv_kernels), 1 / (elements per
//    sample) for other ops. No extra passes.
//
// The compression-variance warning: predicted_variance() against the sampling variance of the
// gradient, which observe_gradients() estimates from the gradients of the training steps (the
// trainer feeds every step's gradient, whichever the estimator).
//
// Devices: the estimators work where the model's tensors and gradients are. Gradient
// distances, the sampling variance's running mean (kept on the gradients' device) and per-sample
// gradient norms use the device's backend; only per-layer scalars (a distance, a sum, N
// per-sample norms, a pass-through tensor's per-group ranges) come to the host. The exported
// state is host tensors whatever the device (grad_mean copied from it); an imported mean moves
// to the gradients' device at the next observe_gradient.
//
// Trainer protocol (like GACT's controller.iterate):
//   GactPolicy policy(options);  PolicyScope scope(policy);
//   for each step: policy.begin_step(step);
//                  policy.gact().refresh(step, compute_param_grads);  // refreshes when due
//                  forward, backward as usual
//                  policy.gact().observe_gradients(grads)  // sampling variance, for the warning
//                  optimizer step
// compute_param_grads runs forward + backward on one fixed batch with the current policy and
// returns copies of the parameter gradients; it must not update the parameters (it may
// overwrite .grad). The policy resets the store's tensor counter before each call.
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "quant/group/group_store.h"

namespace packrat {

enum class GactEstimator : uint8_t { Measured, Analytic };

// The units the measured estimator weighs a gradient's noise in.
//  absolute (GACT): ||g0 - g_l||^2 over every parameter, the variance of an SGD update.
//  relative: per row of every parameter (its first dimension; a vector is one row),
//    ||g0_row - g_l_row||^2 / ||g0_row||^2, summed: the noise as an update that normalises each
//    parameter by its own gradient's scale (Adam, AdamW) sees it. In the absolute units a row with
//    small gradients weighs nothing, whatever its noise does to its update: bert_tiny's attention
//    v and output, whose noise reaches only the q and k rows of in_proj (small beside v's rows at
//    initialisation), were measured harmless, given 1 bit, and the encoder stopped learning.
//  auto: relative under an optimizer other than SGD, absolute under SGD (the trainer resolves it,
//    set_update_normalised; absolute until then).
enum class GactVariance : uint8_t { Auto, Absolute, Relative };

struct GactOptions {
  GroupStoreOptions store;          // group size, grouping, metadata, rounding, seed (bits: unused)
  double avg_bits = 4;              // budget, bits per element averaged over quantized elements (>= 1)
  int64_t adapt_interval = 1000;    // steps between refreshes of the sensitivities
  // Refreshes 1, 2, 4, ... steps apart after the first until the interval reaches adapt_interval.
  // GACT assumes the sensitivities stable along training (its paper fine-tunes pretrained
  // models); from a random initialisation they are not: bert_tiny's attention tensors grew a
  // million-fold in its first 200 steps, and their first-step 1-bit allocation stopped it learning.
  bool adapt_warmup = false;
  GactEstimator estimator = GactEstimator::Measured;
  GactVariance variance = GactVariance::Auto;
  int64_t tensors_per_refresh = 0;  // measured: tensors re-estimated per refresh, round-robin (0: all)
  std::vector<int> candidate_bits = {1, 2, 3, 4, 8, 32};  // 32: kept in FP32 (kPassThroughBits)
  int initial_bits = 0;             // bits before the first estimate (0: largest candidate <= avg_bits; 32: FP32)
  double warn_ratio = 0.1;          // warn when predicted variance > warn_ratio * sampling variance
  std::string log_path;             // CSV appended at every refresh ("" : none)
  void check(std::string_view where) const;
};

// The candidate that keeps a tensor unquantized, in FP32.
inline constexpr int kPassThroughBits = 32;

// S(b) = 1 / (2^b - 1)^2: variance of stochastic rounding per unit of R (GACT, A.4); ~0 at 32.
inline double quant_variance_factor(int bits) {
  const double levels = std::ldexp(1.0, bits) - 1.0;
  return 1.0 / (levels * levels);
}

// The analytic estimator's ||d(weight grad)/d x_j||^2 / ||grad_out_n||^2 for an input element
// x_j of sample n (grad_out: the consumer's output gradient):
//   linear, matmul: 1 / (rows of grad_out per sample)    (exact: x_j meets one row of grad_out)
//   conv2d:         kernel_elements / input_pixels       (the OH*OW output positions meet KH*KW
//                   input positions each, so x_j meets OH*OW*KH*KW/(H*W) of them on average, each
//                   carrying ||grad_out_n||^2 / (OH*OW): ActNN's num_locations / num_pixels)
//   otherwise:      1 / (grad_out elements per sample)   (elementwise and normalisation ops)
double analytic_jacobian_factor(std::string_view op, const Tensor& grad_out, int64_t kernel_elements,
                                int64_t input_pixels);

// Per-sample squared L2 norms of a gradient whose leading dimension is the batch (rank < 2: one
// sample), wherever it lives: a CPU tensor through per_sample_sq_norms (squares in double);
// another device's with its backend (the squares in f32, summed in double), only the N sums
// coming to the host.
std::vector<double> sample_sq_norms(const Tensor& t);

// KH*KW of every convolution of a model, by layer name ("layer1.0.conv1"), from its named
// parameters (a rank-4 "<layer>.weight").
std::map<std::string, int64_t> conv_kernel_elements(const std::vector<std::pair<std::string, Tensor>>& named_parameters);

// Greedy allocation: starting from the smallest candidate everywhere, repeatedly takes the
// upgrade with the largest variance reduction per added bit that still fits the budget
// sum_l b_l numel_l <= avg_bits * sum_l numel_l. Returns b_l per tensor.
std::vector<int> allocate_bits(const std::vector<double>& sensitivity, const std::vector<int64_t>& numel,
                               double avg_bits, const std::vector<int>& candidates);

struct TensorSensitivity {
  int64_t index = 0;
  std::string layer, op;
  int64_t numel = 0;
  double sensitivity = 0;  // c_l
  bool estimated = false;  // c_l measured at least once
  int bits = 0;            // assigned bits
  // 0: saved in the forward, held through the backward; k >= 1: saved again in the backward by the
  // k-th segment recomputed in a step, held for its backward only. Each has its own budget.
  int64_t recomputed_in = 0;
};

using GradFn = std::function<std::vector<Tensor>()>;

// A saved tensor named across configs of one model: its layer and op, and which of that layer's
// and op's tensors it is in a step's order (an op may save two).
struct TensorName {
  std::string layer, op;
  int64_t occurrence = 0;
  auto operator<=>(const TensorName&) const = default;
};
using KnownSensitivities = std::map<TensorName, double>;  // c_l by tensor

class GactStore : public GroupStore, private BitsProvider {
 public:
  explicit GactStore(GactOptions o);
  // Options: avg_bits, adapt_interval, adapt_warmup, estimator measured|analytic,
  // variance auto|absolute|relative, tensors_per_refresh,
  // initial_bits, max_bits (the widest candidate: 32 keeps a tensor in FP32, 8 never), warn_ratio,
  // log_path, plus the per-group store's group_size, grouping,
  // meta, rounding, seed. `base` supplies the defaults (a preset).
  static GactOptions parse_options(SchemeOptions& o, const GactOptions& base = {});

  // Quantizes at the tensor's assigned bits, or passes it through in FP32 at 32 bits.
  SavedHandle save(const Tensor& x, const SaveRequest& r) override;
  void release(const SavedHandle& h) override;
  void describe(std::vector<SavedRecord>& out) const override;
  size_t live_count() const override;
  void begin_step(int64_t step) override;
  // Analytic estimator: records the consumer's output-gradient norms per sample.
  void note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) override;
  // KH*KW per conv2d layer name (conv_kernel_elements); the analytic estimator needs the kernel
  // of every convolution whose input it quantizes (the trainer sets it from the model).
  void set_conv_kernels(std::map<std::string, int64_t> kernel_elements) { kernels_ = std::move(kernel_elements); }
  // The store contract's: the kernels of the model's convolutions (conv_kernel_elements), and
  // its parameter count, which an imported gradient mean must have.
  void observe_model(const std::vector<std::pair<std::string, Tensor>>& named_parameters) override;
  // The optimizer normalises each parameter's update (Adam, AdamW): `variance: auto` is relative.
  void set_update_normalised(bool normalised);
  bool relative_variance() const;  // the units in effect (GactVariance)

  // Refreshes sensitivities and bits when due (first call, then every adapt_interval steps, or
  // 1, 2, 4, ... steps apart up to that with adapt_warmup).
  // Returns true when it did. The measured estimator calls compute_param_grads; the analytic
  // one uses what the last training step left (compute_param_grads may be empty).
  bool refresh(int64_t step, const GradFn& compute_param_grads) override;
  void estimate_measured(const GradFn& compute_param_grads);
  // GACT's c_l is the gradient's sensitivity to noise in tensor l alone (its variance model sums
  // one term per tensor), whatever the other tensors' storage. So a first estimate of the same
  // model, weights and batch under another storage (the plan's options and probes: recomputed
  // segments, other bits) names most of a config's tensors: the next measured estimate of every
  // tensor takes c_l from `known` for the tensors it names and runs passes for the others only.
  // That estimate clears it; an estimate of some tensors a refresh (tensors_per_refresh) ignores it.
  void adopt_sensitivities(KnownSensitivities known) { adopted_ = std::move(known); }
  KnownSensitivities measured_sensitivities() const;  // the table's estimated tensors
  int64_t last_adopted() const { return last_adopted_; }  // tensors the last estimate took from `known`
  void estimate_analytic();
  void reallocate();

  // Running estimate of the gradient's sampling variance E||g - E g||^2 across steps.
  void observe_gradients(const std::vector<Tensor>& grads) override;
  double sampling_variance() const;         // NaN until two gradients were observed
  double predicted_variance() const;        // sum_l c_l S(b_l)
  bool warned() const { return warned_; }   // the last refresh warned (logged when it starts warning)

  const std::vector<TensorSensitivity>& tensors() const { return table_; }
  double average_bits() const;              // realised, weighted by numel
  int64_t refreshes() const { return refreshes_; }
  int64_t last_refresh_passes() const { return last_passes_; }    // gradient evaluations
  // "step,index,layer,op,numel,sensitivity,bits,recomputed_in" rows for the current table.
  void write_csv(const std::string& path, bool append = false) const;
  const GactOptions& gact_options() const { return gopts_; }
  // Where every refresh appends its rows, e.g. "<run dir>/gact_bits.csv" ("" : no log).
  void set_log_path(std::string path) { gopts_.log_path = std::move(path); }
  // The store contract's: <run_dir>/gact_bits.csv (index 0) or gact_bits_<index>.csv unless the
  // options name a file; no log when run_dir is "".
  void log_to(const std::string& run_dir, int index) override;

  // The adaptive state that influences later steps, as named plain tensors (for checkpoints;
  // a caller prefixes the names, e.g. "gact.0."):
  //   tensors i64 (1)                  L, the tensors in the table
  //   sensitivity f64 (L), bits i32 (L), numel i64 (L), estimated u8 (L)     when L > 0
  //   names u8 (bytes)                 "layer\top\n" per tensor, when L > 0
  //   recomputed_in i64 (L)            when L > 0 (optional on import: 0, one budget, before it)
  //   last_refresh_step, refreshes, round_robin, salt_counter, last_passes, warned: i64 (1)
  //   grad_count i64 (1), grad_m2 f64 (1), grad_mean f32 (P) when observed: sampling variance
  //   pending_analytic f64 (L') when the analytic estimator has a finished step's estimate
  // (what begin_step would harvest from the last step, so a resumed run refreshes as the
  // uninterrupted one would).
  std::string_view state_name() const override { return "gact"; }
  std::vector<std::pair<std::string, Tensor>> export_state() const override;
  // Replaces the adaptive state by an export_state() result (names without the prefix).
  // `where` starts every error (e.g. "<file>: gact store 0"); a missing, extra or malformed
  // entry, or bits that are not candidates of this store, is an error naming it. The restored
  // table is checked against the first step that quantizes tensors afterwards
  // (check_restored_step).
  void import_state(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& where,
                    const std::string& entry_prefix = "") override;
  // After import_state: once tensors have been quantized since the last begin_step, compares
  // them with the restored table (count, then layer and op of each) and throws naming the first
  // difference (the checkpoint belongs to a config that quantizes other tensors with gact).
  // A no-op before that and once checked.
  void check_restored_step() override;

 private:
  // The FP32 store of the tensors held at 32 bits: tells its owner about backward and release.
  class PassThrough : public Fp32Store {
   public:
    explicit PassThrough(GactStore& owner) : owner_(owner) {}
    void release(const SavedHandle& h) override;
    void note_backward(const SavedHandle& h, const std::vector<Tensor>& grad_outputs) override;

   private:
    GactStore& owner_;
  };
  // One adaptive tensor (a Value or Derivative request the per-group store would quantize) of
  // the current step, numbered l in order of first saving.
  struct StepTensor {
    int64_t group_index = -1;         // its index in step_tensors() when quantized, -1 when passed through
    std::string layer, op;
    int64_t numel = 0, samples = 1;
    int bits = 0;                     // as saved this step
    uint64_t recompute = 0;           // recompute_serial() at its first save (0: the forward)
    std::vector<double> range_sq;     // (samples,) passed-through tensors under the analytic estimator
    std::vector<double> grad_sq;      // (samples,) J_n summed over its consumers (analytic)
  };
  struct Consumer {  // a live handle to an adaptive tensor (analytic estimator)
    int64_t index = 0;                // l
    std::string op;
    int64_t kernel_elements = 0, input_pixels = 0;  // conv2d
  };
  using HandleKey = std::pair<const SavedTensorStore*, uint64_t>;

  int bits_for(int64_t index, const SaveRequest& r, const Tensor& x) override;
  // The analytic estimator reads the ranges of the step before a refresh; the measured one never.
  bool wants_ranges() const override { return gopts_.estimator == GactEstimator::Analytic; }
  int bits_to_save(int64_t l) const;  // assigned bits, 8 for a 32-bit tensor during measurement passes
  void note_consumer(const HandleKey& k, const std::vector<Tensor>& grad_outputs);
  void sync_table();  // layer/op/numel/bits/recomputed_in from the tensors of the current step
  std::vector<TensorName> table_names() const;  // by l
  void allocate_pool(const std::vector<size_t>& members);  // the greedy allocation within one budget
  std::vector<double> analytic_from_step() const;  // c_l per tensor of the current step, or empty
  void forget_step();  // the per-step records, at begin_step
  void check_state_sizes(const std::map<std::string, const Tensor*>& by_name, const std::string& where,
                         const std::string& entry_prefix) const;
  GactOptions gopts_;
  PassThrough passthrough_{*this};
  std::vector<StepTensor> step_;                   // this step's adaptive tensors, by l
  std::map<uint64_t, std::pair<int64_t, int64_t>> seen_;  // storage id -> (l, version) this step
  std::map<HandleKey, Consumer> consumers_;        // analytic: live handles to adaptive tensors
  std::map<std::string, int64_t> kernels_;         // conv2d layer -> KH*KW
  int64_t parameters_ = 0;                         // the model's parameter elements (observe_model; 0: unknown)
  std::string unknown_kernel_;                     // a conv2d layer whose kernel was not given
  int pending_bits_ = 0;                           // bits_for's answer for the save in progress
  bool measuring_ = false;                         // inside estimate_measured's passes
  bool update_normalised_ = false;                 // set_update_normalised: auto means relative
  int64_t exact_tensor_ = -1;                      // the tensor a measurement pass holds exact, or -1
  std::vector<TensorSensitivity> table_;
  std::vector<double> pending_analytic_;  // harvested at begin_step from the finished step
  int64_t last_refresh_step_ = 0, refreshes_ = 0, round_robin_ = 0, last_passes_ = 0, last_adopted_ = 0;
  KnownSensitivities adopted_;  // adopt_sensitivities' until the next estimate of every tensor
  uint64_t salt_counter_ = 0;
  bool warned_ = false;
  std::string restored_from_;  // import_state's `where` until check_restored_step has checked
  // Sampling variance (Welford over the flattened gradient).
  Tensor grad_mean_;  // (P,) f32, tagged OptimizerState
  int64_t grad_count_ = 0;
  double grad_m2_ = 0;
};

// The whole policy: every request goes to one GactStore.
class GactPolicy : public StorePolicy {
 public:
  explicit GactPolicy(GactOptions o) : store_(std::move(o)) {}
  SavedTensorStore& store_for(const SaveRequest&) override { return store_; }
  std::vector<SavedTensorStore*> stores() override { return {&store_}; }
  GactStore& gact() { return store_; }

 private:
  GactStore store_;
};

// Factory for the config (`{scheme: gact, avg_bits: 3, adapt_interval: 1000, estimator: measured}`).
std::unique_ptr<SavedTensorStore> make_gact_store(SchemeOptions& o);
// The GACT stores of a policy (e.g. a rule policy whose default or rules use gact).
std::vector<GactStore*> find_gact_stores(StorePolicy& p);

}  // namespace packrat
