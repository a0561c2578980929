#include "experiments/lib/gradient_fidelity.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "experiments/lib/gnuplot.h"
#include "experiments/lib/output_dir.h"
#include "experiments/lib/safetensors.h"  // write_file_atomic
#include "experiments/lib/session.h"
#include "experiments/lib/text_task.h"
#include "experiments/lib/train_loop.h"  // model_device
#include "quant/policy/presets.h"
#include "quant/policy/rule_policy.h"

namespace packrat {

namespace {

using Grads = std::vector<Tensor>;  // one per parameter, plain, on the host; undefined without a gradient

// One forward + backward of the model under `policy` at quantization step `step`.
Grads gradients(Module& model, StorePolicy& policy, const Tensor& images, const Tensor& labels, int64_t step,
                double label_smoothing) {
  PolicyScope scope(policy);
  policy.begin_step(step);
  // Every call draws the same dropout and drop-path masks (their streams rewind afterwards): what
  // differs between the reference and the draws is the storage alone.
  const auto mask_streams = model.named_mask_streams();
  std::vector<MaskStream> rewind;
  for (const auto& [name, s] : mask_streams) rewind.push_back(*s);
  const std::vector<Tensor> params = model.parameters();
  for (Tensor p : params) p.zero_grad();
  {
    const Device device = model_device(model);
    TagScope tag(MemTag::Activation);
    // task_loss: a classifier's (N, C) logits, or a token model's (N, T, V) (masked positions only).
    Tensor loss = task_loss(model(images.to(device)), labels.to(device), static_cast<float>(label_smoothing));
    backward(loss);
  }
  for (size_t i = 0; i < mask_streams.size(); ++i) *mask_streams[i].second = rewind[i];
  Grads out;
  TagScope tag(MemTag::Workspace);
  for (Tensor p : params) {
    const Tensor g = p.grad().defined() ? p.grad().to_plain() : Tensor();
    out.push_back(!g.defined() ? Tensor() : g.is_cpu() ? g.clone() : g.to(Device::cpu()));  // compared on the host
    p.zero_grad();
  }
  return out;
}

// Running per-element mean and M2 (Welford) of one tensor's gradient draws, in double.
struct Accumulator {
  std::vector<double> mean, m2;
  double cos_sum = 0, cos_min = 1;
  // Adds draw d (0, 1, ...) of the gradient x (numel values).
  void add(const float* x, int64_t numel, int64_t d) {
    if (mean.empty()) mean.assign(static_cast<size_t>(numel), 0.0), m2.assign(static_cast<size_t>(numel), 0.0);
    for (size_t i = 0; i < mean.size(); ++i) {
      const double delta = x[i] - mean[i];
      mean[i] += delta / static_cast<double>(d + 1);
      m2[i] += delta * (x[i] - mean[i]);
    }
  }
};

// The model's buffers (batchnorm running statistics) as they were when it was made, put back when
// it goes: a measurement trains on no batch.
class KeptBuffers {
 public:
  explicit KeptBuffers(Module& model) {
    for (auto& [name, b] : model.named_buffers()) {
      TagScope tag(MemTag::Workspace);
      kept_.emplace_back(b, b.clone());
    }
  }
  ~KeptBuffers() {
    for (auto& [live, copy] : kept_) {
      backend_of(live).copy(copy, live);
      live.bump_version();
    }
  }
  KeptBuffers(const KeptBuffers&) = delete;
  KeptBuffers& operator=(const KeptBuffers&) = delete;

 private:
  std::vector<std::pair<Tensor, Tensor>> kept_;  // (live buffer, copy)
};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TensorFidelity summarize(const std::string& name, const std::vector<const float*>& ref, const std::vector<int64_t>& sizes,
                         const std::vector<const Accumulator*>& acc, int64_t draws, double cos_sum, double cos_min) {
  TensorFidelity f;
  f.name = name;
  double ref_sq = 0, bias_sq = 0, var_sum = 0, var_sq_sum = 0;
  for (size_t t = 0; t < ref.size(); ++t) {
    f.numel += sizes[t];
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const double g = ref[t][i], d = acc[t]->mean[static_cast<size_t>(i)] - g;
      const double var = acc[t]->m2[static_cast<size_t>(i)] / static_cast<double>(draws - 1);
      ref_sq += g * g;
      bias_sq += d * d;
      var_sum += var;
      var_sq_sum += var * var;
    }
  }
  const auto n = static_cast<double>(draws);
  f.grad_norm = std::sqrt(ref_sq);
  f.cosine = cos_sum / n;
  f.cosine_min = cos_min;
  f.rel_bias = ref_sq > 0 ? std::sqrt(bias_sq / ref_sq) : 0.0;
  f.rel_variance = ref_sq > 0 ? var_sum / ref_sq : 0.0;
  const double sd = std::sqrt(2 * var_sq_sum) / n;
  if (sd > 0) f.bias_z = (bias_sq - var_sum / n) / sd;
  else f.bias_z = bias_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return f;
}

Json fidelity_json(const TensorFidelity& f) {
  Json j = Json::object();
  j["name"] = Json(f.name);
  j["numel"] = Json(f.numel);
  j["grad_norm"] = Json(f.grad_norm);
  j["cosine"] = Json(f.cosine);
  j["cosine_min"] = Json(f.cosine_min);
  j["rel_bias"] = Json(f.rel_bias);
  j["rel_variance"] = Json(f.rel_variance);
  // JSON has no infinity: a deterministic scheme's certain bias is written as a string.
  j["bias_z"] = std::isinf(f.bias_z) ? Json(f.bias_z > 0 ? "inf" : "-inf") : Json(f.bias_z);
  return j;
}

std::string scheme_words(const StorePolicySpec& s) {
  std::string w = s.default_scheme.scheme;
  if (!s.default_scheme.options.empty()) {
    w += " {";
    bool first = true;
    for (const auto& [k, v] : s.default_scheme.options) {
      if (k == "seed") continue;
      w += (first ? "" : ", ") + k + ": " + v;
      first = false;
    }
    w += "}";
  }
  if (!s.rules.empty()) w += fmt::format(" + {} rule{}", s.rules.size(), s.rules.size() == 1 ? "" : "s");
  return w;
}

}  // namespace

FidelityReport measure_gradient_fidelity(Module& model, StorePolicy& reference, StorePolicy& scheme,
                                         const Tensor& images, const Tensor& labels, int64_t draws,
                                         int64_t first_step, double label_smoothing,
                                         const LabelledBatch* estimate_on) {
  PACKRAT_CHECK(draws >= 2, "--gradient-fidelity: needs at least 2 draws to estimate a variance, got {}", draws);
  std::optional<KeptBuffers> buffers(std::in_place, model);  // put back before the report
  model.train();
  const auto names = model.named_parameters();
  const Grads ref = gradients(model, reference, images, labels, first_step, label_smoothing);
  // GACT allocates its bits from measured sensitivities: let it do so on this batch (or the one
  // given) first.
  const Tensor& est_images = estimate_on ? estimate_on->images : images;
  const Tensor& est_labels = estimate_on ? estimate_on->labels : labels;
  for (SavedTensorStore* s : stateful_stores(scheme))
    s->refresh(first_step,
               [&] { return gradients(model, scheme, est_images, est_labels, first_step, label_smoothing); });

  std::vector<Accumulator> acc(ref.size());
  double total_cos_sum = 0, total_cos_min = 1;
  for (int64_t d = 0; d < draws; ++d) {
    const Grads g = gradients(model, scheme, images, labels, first_step + 1 + d, label_smoothing);
    double all_dot = 0, all_g = 0, all_r = 0;
    for (size_t t = 0; t < ref.size(); ++t) {
      if (!ref[t].defined()) continue;
      PACKRAT_CHECK(g[t].defined(), "gradient fidelity: {} has an FP32 gradient but none under the scheme",
                    names[t].first);
      const float* x = g[t].data<float>();
      const float* r = ref[t].data<float>();
      const int64_t n = ref[t].numel();
      Accumulator& a = acc[t];
      a.add(x, n, d);
      const double xr = dot(x, r, n), xx = dot(x, x, n), rr = dot(r, r, n);
      const double cos = xx > 0 && rr > 0 ? xr / std::sqrt(xx * rr) : (xx == rr ? 1.0 : 0.0);
      a.cos_sum += cos;
      a.cos_min = std::min(a.cos_min, cos);
      all_dot += xr, all_g += xx, all_r += rr;
    }
    const double cos = all_g > 0 && all_r > 0 ? all_dot / std::sqrt(all_g * all_r) : 1.0;
    total_cos_sum += cos;
    total_cos_min = std::min(total_cos_min, cos);
  }
  buffers.reset();

  FidelityReport report;
  report.draws = draws;
  report.batch_size = images.dim(0);
  std::vector<const float*> all_ref;
  std::vector<int64_t> all_sizes;
  std::vector<const Accumulator*> all_acc;
  for (size_t t = 0; t < ref.size(); ++t) {
    if (!ref[t].defined()) continue;
    const float* r = ref[t].data<float>();
    report.tensors.push_back(
        summarize(names[t].first, {r}, {ref[t].numel()}, {&acc[t]}, draws, acc[t].cos_sum, acc[t].cos_min));
    all_ref.push_back(r);
    all_sizes.push_back(ref[t].numel());
    all_acc.push_back(&acc[t]);
  }
  report.total = summarize("total", all_ref, all_sizes, all_acc, draws, total_cos_sum, total_cos_min);
  return report;
}

Json FidelityReport::json() const {
  Json j = Json::object();
  j["draws"] = Json(draws);
  j["batch_size"] = Json(batch_size);
  j["scheme"] = Json(scheme);
  j["total"] = fidelity_json(total);
  Json arr = Json::array();
  for (const auto& t : tensors) arr.push_back(fidelity_json(t));
  j["tensors"] = arr;
  return j;
}

std::string FidelityReport::table() const {
  std::string s = fmt::format("gradient fidelity: {} draws of '{}' against FP32, batch {}\n", draws, scheme, batch_size);
  s += fmt::format("{:<40} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9}\n", "parameter", "numel", "cosine", "cos min",
                   "rel bias", "rel var", "bias z");
  auto row = [&](const TensorFidelity& f) {
    s += fmt::format("{:<40} {:>10} {:>10.6f} {:>10.6f} {:>10.3e} {:>12.3e} {:>9.2f}\n", f.name, f.numel, f.cosine,
                     f.cosine_min, f.rel_bias, f.rel_variance, f.bias_z);
  };
  for (const auto& t : tensors) row(t);
  row(total);
  return s;
}

void plot_gradient_fidelity(const FidelityReport& r, const std::string& png) {
  std::string data;  // index, name, cosine, cosine_min, rel_bias, rel_std
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const auto& t = r.tensors[i];
    data += fmt::format("{} {} {:.9g} {:.9g} {:.9g} {:.9g}\n", i, t.name, t.cosine, t.cosine_min, t.rel_bias,
                        std::sqrt(t.rel_variance));
  }
  const double height = 360 + 12.0 * static_cast<double>(r.tensors.size());
  std::string gp = fmt::format("set terminal pngcairo size 1200,{} font ',9' noenhanced\nset output {}\n",
                               static_cast<int>(std::min(1600.0, height)), gnuplot_quote(png));
  gp += "$d << EOD\n" + data + "EOD\n";
  gp += fmt::format("set multiplot layout 1,2 title {}\n",
                    gnuplot_quote(fmt::format("gradient fidelity of '{}' vs FP32, {} draws, batch {}", r.scheme,
                                              r.draws, r.batch_size)));
  gp += "set ytics nomirror font ',7'\nset yrange [-1:" + std::to_string(r.tensors.size()) + "] reverse\nset grid x\n";
  gp += "set title 'cosine to the FP32 gradient (bar: mean, point: worst draw)'\nset xlabel 'cosine'\n"
        "set style fill solid 0.6\nset xrange [*:1.001]\n"
        "plot $d using (($3+$4)/2):1:($4):($3):($1-0.35):($1+0.35):ytic(2) with boxxyerror notitle, "
        "$d using 4:1 with points pt 7 ps 0.5 notitle\n";
  gp += "set title 'relative bias and noise (std) per tensor'\nset xlabel '||.|| / ||g_fp32|| (log; below 1e-6 drawn at 1e-6)'\nset logscale x\n"
        // Short labels, one a decade: the default "1x10^{-7}" overlapped its neighbours.
        "set format x '1e%T'\nset xtics 10\nset mxtics 10\nset format y ''\nset xrange [1e-7:*]\n"
        "plot $d using ($5 > 1e-6 ? $5 : 1e-6):1 with points pt 5 ps 0.8 title 'bias', "
        "$d using ($6 > 1e-6 ? $6 : 1e-6):1 with points pt 9 ps 0.8 title 'std'\n";
  gp += "unset multiplot\n";
  run_gnuplot(gp, "gradient fidelity plot " + png);
}

bool keeps_every_tensor_exact(const StorePolicySpec& s) {
  auto exact = [](const SchemeSpec& spec) {
    const StoragePreset* p = find_storage_preset(spec.scheme);
    return spec.scheme == "fp32" || (p && p->scheme == "fp32");
  };
  return exact(s.default_scheme) &&
         std::all_of(s.rules.begin(), s.rules.end(), [&](const StoreRule& r) { return exact(r.spec); });
}

void check_fidelity_compares_a_scheme(const Config& c) {
  PACKRAT_CHECK(!keeps_every_tensor_exact(c.saved_tensors),
                "{}: --gradient-fidelity compares a compressing scheme's gradient with the FP32 gradient, but "
                "saved_tensors keeps every saved tensor in FP32 ('{}'): there is nothing to compare. Give a scheme, e.g. "
                "--set 'saved_tensors.default={{scheme: actnn, bits: 2}}'",
                c.source, scheme_words(c.saved_tensors));
}

double gradient_sampling_variance(Module& model, StorePolicy& reference, const std::vector<LabelledBatch>& batches,
                                  double label_smoothing) {
  PACKRAT_CHECK(batches.size() >= 2, "gradient_sampling_variance: needs at least 2 batches, got {}", batches.size());
  KeptBuffers buffers(model);
  model.train();
  std::vector<Accumulator> acc;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Grads g = gradients(model, reference, batches[b].images, batches[b].labels, 0, label_smoothing);
    acc.resize(g.size());
    for (size_t t = 0; t < g.size(); ++t)
      if (g[t].defined()) acc[t].add(g[t].data<float>(), g[t].numel(), static_cast<int64_t>(b));
  }
  double variance = 0;
  for (const Accumulator& a : acc)
    for (const double m2 : a.m2) variance += m2 / static_cast<double>(batches.size() - 1);
  return variance;
}

TrainingBatches training_batches(const Config& c, int64_t batch, int64_t count, std::string_view who) {
  auto train_ds = data::open_dataset(dataset_spec(c, data::Split::Train));
  data::LoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = true;
  lo.seed = c.seed;
  lo.limit = c.data.limit_train;
  lo.prefetch = 1;
  lo.masked_lm = is_masked_lm(c);
  data::Loader loader(train_ds, data::parse_pipeline(c.data.train_transforms), lo);
  loader.start_epoch(0);
  TrainingBatches r;
  for (int64_t i = 0; i < count; ++i) {
    data::Batch b;
    PACKRAT_CHECK(loader.next(b), "{}: the training set of {} holds fewer than {} batches of {}", who, c.data.dataset,
                  count, batch);
    r.batches.push_back({b.images, b.labels});
  }
  const data::ImageShape shape = loader.image_shape();
  check_in_channels(c, shape.c);
  check_classes(c, train_ds->num_classes());
  r.input = InputSpec{shape.c, shape.h, shape.w, c.model.num_classes > 0 ? c.model.num_classes : train_ds->num_classes()};
  return r;
}

FidelityReport gradient_fidelity_mode(const Config& c, int64_t draws) {
  namespace fs = std::filesystem;
  make_writable_directory(c.output.dir, "output.dir");
  apply_process_settings(c);
  const RunDevice on(c);
  const TrainingBatches data = training_batches(c, c.data.batch_size, 1, "--gradient-fidelity");
  const LabelledBatch& b = data.batches.front();
  Session s = make_session(c, data.input);
  StorePolicySpec fp32;
  fp32.seed = c.seed;
  RulePolicy reference(fp32);
  FidelityReport r = measure_gradient_fidelity(*s.model, reference, *s.policy, b.images, b.labels, draws, 0,
                                               c.train.label_smoothing);
  r.scheme = scheme_words(c.saved_tensors);
  write_file_atomic((fs::path(c.output.dir) / "gradient_fidelity.json").string(), r.json().dump(2) + "\n");
  if (gnuplot_available()) plot_gradient_fidelity(r, (fs::path(c.output.dir) / "gradient_fidelity.png").string());
  else {
    // A plot of an earlier measurement beside this one's JSON would be read as this one's.
    std::error_code ec;
    fs::remove(fs::path(c.output.dir) / "gradient_fidelity.png", ec);
    spdlog::warn("gnuplot not found: no gradient_fidelity.png (apt-get install gnuplot-nox)");
  }
  return r;
}

}  // namespace packrat
