#include "experiments/lib/checkpoint.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "core/backend.h"
#include "experiments/lib/checkpoint_stores.h"
#include "experiments/lib/safetensors.h"

namespace packrat {

namespace {
Tensor scalar_i64(int64_t v) {  // on the host, whatever the run's device
  Tensor t = Tensor::empty(Shape{}, DType::i64, Layout::Plain, MemTag::Workspace, Device::cpu());
  t.data<int64_t>()[0] = v;
  return t;
}

int64_t read_i64(const SafetensorsFile& f, const std::string& name, const std::string& path) {
  const Tensor* t = f.find(name);
  PACKRAT_CHECK(t && t->dtype() == DType::i64 && t->numel() == 1, "{}: checkpoint has no i64 scalar '{}'", path, name);
  return t->data<int64_t>()[0];
}

// Every f32/f64 value of the file is finite: a NaN or inf weight, moment or sensitivity means
// the run had diverged when it was written (or the file is damaged) and would poison the resume.
void check_finite(const SafetensorsFile& f, const std::string& path) {
  for (const auto& [name, t] : f.tensors) {
    if (t.dtype() != DType::f32 && t.dtype() != DType::f64) continue;
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double v = t.dtype() == DType::f32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
      PACKRAT_CHECK(std::isfinite(v),
                    "{}: '{}' holds {} at element {}: the run had diverged when this checkpoint was written (or the "
                    "file is damaged); resume from an earlier checkpoint or start a fresh run",
                    path, name, v, i);
    }
  }
}

// The position must be one a run can have written: epochs within train.epochs' range, steps not
// negative, the file name's epoch and trainer.rng agreeing.
void check_position(const TrainingPosition& pos, const int64_t* rng, const std::string& path) {
  PACKRAT_CHECK(pos.epoch >= 0 && pos.epoch <= kMaxCheckpointEpoch,
                "{}: trainer.epoch is {}, outside [0, {}]: not a checkpoint this trainer wrote", path, pos.epoch,
                kMaxCheckpointEpoch);
  PACKRAT_CHECK(pos.step >= 0 && pos.step <= kMaxCheckpointStep,
                "{}: trainer.step is {}, outside [0, 2^53]: not a checkpoint this trainer wrote", path, pos.step);
  PACKRAT_CHECK(rng[1] == pos.epoch && rng[2] == pos.step,
                "{}: trainer.rng holds epoch {} step {} but trainer.epoch/step are {}/{}: the checkpoint is inconsistent",
                path, rng[1], rng[2], pos.epoch, pos.step);
  const auto named = checkpoint_epoch(std::filesystem::path(path).filename().string());
  PACKRAT_CHECK(!named || *named == pos.epoch,
                "{}: the file is named for epoch {} but holds epoch {}: rename it or resume from the right file", path,
                *named, pos.epoch);
}

constexpr const char* kMaskPrefix = "trainer.masks.";

// The mask streams in the file, checked against the model's (every one present, no other, values
// a run can have reached: index < 2^23, calls < 2^40), as (stream, saved value) to restore;
// empty when the file has none (an older checkpoint).
std::vector<std::pair<MaskStream*, MaskStream>> checked_mask_streams(const SafetensorsFile& f, Module& model,
                                                                     const std::string& path) {
  std::vector<std::pair<MaskStream*, MaskStream>> out;
  const auto streams = model.named_mask_streams();
  std::set<std::string> names;
  bool any = false;
  for (const auto& [n, t] : f.tensors) any = any || n.rfind(kMaskPrefix, 0) == 0;
  if (!any) {
    if (!streams.empty())
      spdlog::warn("{}: the checkpoint has no mask streams (trainer.masks.*; written before packrat saved them): "
                   "dropout and stochastic-depth masks start afresh, so this run does not continue bit-identically",
                   path);
    return out;
  }
  for (auto& [n, stream] : streams) {
    const std::string key = kMaskPrefix + n;
    names.insert(key);
    const Tensor* t = f.find(key);
    PACKRAT_CHECK(t != nullptr, "{}: checkpoint has no '{}' (a checkpoint of another model?)", path, key);
    PACKRAT_CHECK(t->dtype() == DType::i64 && t->numel() == 2, "{}: '{}' is {} {}, not (index, calls) as i64 (2)", path,
                  key, dtype_name(t->dtype()), t->shape().str());
    const int64_t index = t->data<int64_t>()[0], calls = t->data<int64_t>()[1];
    PACKRAT_CHECK(index >= 0 && index < (int64_t{1} << 23) && calls >= 0 && calls < (int64_t{1} << 40),
                  "{}: '{}' holds index {} and calls {}, outside [0, 2^23) and [0, 2^40): not a checkpoint this trainer "
                  "wrote",
                  path, key, index, calls);
    out.push_back({stream, MaskStream{static_cast<uint64_t>(index), static_cast<uint64_t>(calls)}});
  }
  for (const auto& [n, t] : f.tensors)
    PACKRAT_CHECK(n.rfind(kMaskPrefix, 0) != 0 || names.count(n), "{}: '{}' is not a mask stream of this model", path, n);
  return out;
}

// Copies src (plain, from the file, on the host) into dst in place, whatever dst's layout and device.
void copy_into(Tensor& dst, const Tensor& src, const std::string& name, const std::string& path) {
  PACKRAT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
                "{}: '{}' is {} {} in the checkpoint but {} {} in the model", path, name, src.shape().str(),
                dtype_name(src.dtype()), dst.shape().str(), dtype_name(dst.dtype()));
  const Tensor s = src.to(dst.device()).to_layout(dst.layout());
  backend_of(dst).copy(s, dst);
  dst.bump_version();
}
}  // namespace

std::string checkpoint_path(const std::string& run_dir, int64_t epoch) {
  return (std::filesystem::path(run_dir) / "checkpoints" / fmt::format("epoch_{:04}.safetensors", epoch)).string();
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& opt, const TrainingPosition& pos,
                     const std::string& arch, const std::vector<SavedTensorStore*>& stores, const GradScaler* scaler) {
  NamedTensors all;
  for (auto& [n, t] : model.named_parameters()) all.emplace_back("model." + n, t);
  for (auto& [n, t] : model.named_buffers()) all.emplace_back("model." + n, t);
  for (auto& [n, t] : opt.state_dict()) all.emplace_back("optimizer." + n, t);
  all.emplace_back("trainer.epoch", scalar_i64(pos.epoch));
  all.emplace_back("trainer.step", scalar_i64(pos.step));
  Tensor rng = Tensor::empty(Shape{3}, DType::i64, Layout::Plain, MemTag::Workspace, Device::cpu());
  rng.data<int64_t>()[0] = static_cast<int64_t>(pos.seed);
  rng.data<int64_t>()[1] = pos.epoch;
  rng.data<int64_t>()[2] = pos.step;
  all.emplace_back("trainer.rng", rng);
  for (const auto& [n, stream] : model.named_mask_streams()) {
    Tensor t = Tensor::empty(Shape{2}, DType::i64, Layout::Plain, MemTag::Workspace, Device::cpu());  // (index, calls)
    t.data<int64_t>()[0] = static_cast<int64_t>(stream.index);
    t.data<int64_t>()[1] = static_cast<int64_t>(stream.calls);
    all.emplace_back(kMaskPrefix + n, t);
  }
  append_store_state(all, stores);
  if (scaler) {
    Tensor scale = Tensor::empty(Shape{1}, DType::f64, Layout::Plain, MemTag::Workspace, Device::cpu());  // (scale)
    scale.data<double>()[0] = scaler->scale();
    Tensor steps = Tensor::empty(Shape{2}, DType::i64, Layout::Plain, MemTag::Workspace, Device::cpu());  // (good, skipped)
    steps.data<int64_t>()[0] = scaler->growth_tracker();
    steps.data<int64_t>()[1] = scaler->skipped();
    all.emplace_back("trainer.loss_scale", scale);
    all.emplace_back("trainer.loss_scale_steps", steps);
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_safetensors(path, all,
                    {{"format", "pt"},
                     {"arch", arch},
                     {"epoch", std::to_string(pos.epoch)},
                     {"step", std::to_string(pos.step)},
                     {"writer", "packrat trainer"}});
}

TrainingPosition load_checkpoint(const std::string& path, Module& model, Optimizer& opt,
                                 const std::vector<SavedTensorStore*>& stores, GradScaler* scaler) {
  const SafetensorsFile f = read_safetensors(path);
  // The position and the values are checked before anything is restored.
  TrainingPosition pos;
  pos.epoch = read_i64(f, "trainer.epoch", path);
  pos.step = read_i64(f, "trainer.step", path);
  const Tensor* rng = f.find("trainer.rng");
  PACKRAT_CHECK(rng && rng->dtype() == DType::i64 && rng->numel() == 3, "{}: checkpoint has no trainer.rng", path);
  pos.seed = static_cast<uint64_t>(rng->data<int64_t>()[0]);
  check_position(pos, rng->data<int64_t>(), path);
  check_finite(f, path);
  const Tensor* scale = f.find("trainer.loss_scale");
  const Tensor* scale_steps = f.find("trainer.loss_scale_steps");
  PACKRAT_CHECK((scale != nullptr) == (scaler != nullptr),
                "{}: {}", path,
                scaler ? "the run scales its loss (precision: fp16) but the checkpoint has no trainer.loss_scale: it "
                         "was written by a run of another precision"
                       : "the checkpoint has a loss scale (trainer.loss_scale) of an fp16 run, this run is not fp16");
  if (scaler) {
    PACKRAT_CHECK(scale->dtype() == DType::f64 && scale->numel() == 1 && scale_steps &&
                      scale_steps->dtype() == DType::i64 && scale_steps->numel() == 2,
                  "{}: trainer.loss_scale must be (1) f64 and trainer.loss_scale_steps (2) i64", path);
    try {
      scaler->restore(scale->data<double>()[0], scale_steps->data<int64_t>()[0], scale_steps->data<int64_t>()[1]);
    } catch (const Error& e) {
      fail("{}: {}", path, e.what());
    }
  }
  const auto masks = checked_mask_streams(f, model, path);
  std::set<std::string> used;
  auto restore = [&](const std::vector<std::pair<std::string, Tensor>>& named) {
    for (auto [n, t] : named) {
      const std::string key = "model." + n;
      const Tensor* src = f.find(key);
      PACKRAT_CHECK(src != nullptr, "{}: checkpoint has no '{}' (a checkpoint of another model?)", path, key);
      copy_into(t, *src, key, path);
      used.insert(key);
    }
  };
  restore(model.named_parameters());
  restore(model.named_buffers());
  for (const auto& [stream, saved] : masks) *stream = saved;
  NamedTensors state;
  for (const auto& [n, t] : f.tensors) {
    if (n.rfind("optimizer.", 0) == 0) {
      state.emplace_back(n.substr(10), t);
      used.insert(n);
    } else if (n.rfind("model.", 0) == 0) {
      PACKRAT_CHECK(used.count(n), "{}: '{}' is not a tensor of this model", path, n);
    }
  }
  try {
    opt.load_state_dict(state);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());  // which checkpoint the optimizer state does not fit
  }
  restore_store_state(f, stores, path);
  return pos;
}

std::optional<int64_t> checkpoint_epoch(const std::string& filename) {
  static const std::regex name(R"(epoch_(\d{1,9})\.safetensors)");
  std::smatch m;
  if (!std::regex_match(filename, m, name)) return std::nullopt;
  return std::stoll(m[1]);
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return std::nullopt;
  int64_t best = -1;
  std::string best_path;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto epoch = checkpoint_epoch(e.path().filename().string());
    if (epoch && *epoch > best) {
      best = *epoch;
      best_path = e.path().string();
    }
  }
  if (best < 0) return std::nullopt;
  return best_path;
}

}  // namespace packrat
