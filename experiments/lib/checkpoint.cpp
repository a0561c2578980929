#include "experiments/lib/checkpoint.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "experiments/lib/safetensors.h"

namespace packrat {

namespace {
Tensor scalar_i64(int64_t v) {
  Tensor t = Tensor::empty(Shape{}, DType::i64, Layout::Plain, MemTag::Workspace);
  t.data<int64_t>()[0] = v;
  return t;
}

int64_t read_i64(const SafetensorsFile& f, const std::string& name, const std::string& path) {
  const Tensor* t = f.find(name);
  PACKRAT_CHECK(t && t->dtype() == DType::i64 && t->numel() == 1, "{}: checkpoint has no i64 scalar '{}'", path, name);
  return t->data<int64_t>()[0];
}

// Copies src (plain, from the file) into dst in place, whatever dst's layout.
void copy_into(Tensor& dst, const Tensor& src, const std::string& name, const std::string& path) {
  PACKRAT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
                "{}: '{}' is {} {} in the checkpoint but {} {} in the model", path, name, src.shape().str(),
                dtype_name(src.dtype()), dst.shape().str(), dtype_name(dst.dtype()));
  const Tensor s = src.to_layout(dst.layout());
  std::memcpy(dst.raw(), s.raw(), dst.nbytes());
  dst.bump_version();
}
}  // namespace

std::string checkpoint_path(const std::string& run_dir, int64_t epoch) {
  return (std::filesystem::path(run_dir) / "checkpoints" / fmt::format("epoch_{:04}.safetensors", epoch)).string();
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& opt, const TrainingPosition& pos,
                     const std::string& arch, const std::vector<GactStore*>& gact) {
  NamedTensors all;
  for (auto& [n, t] : model.named_parameters()) all.emplace_back("model." + n, t);
  for (auto& [n, t] : model.named_buffers()) all.emplace_back("model." + n, t);
  for (auto& [n, t] : opt.state_dict()) all.emplace_back("optimizer." + n, t);
  all.emplace_back("trainer.epoch", scalar_i64(pos.epoch));
  all.emplace_back("trainer.step", scalar_i64(pos.step));
  Tensor rng = Tensor::empty(Shape{3}, DType::i64, Layout::Plain, MemTag::Workspace);
  rng.data<int64_t>()[0] = static_cast<int64_t>(pos.seed);
  rng.data<int64_t>()[1] = pos.epoch;
  rng.data<int64_t>()[2] = pos.step;
  all.emplace_back("trainer.rng", rng);
  if (!gact.empty()) {
    all.emplace_back("gact.stores", scalar_i64(static_cast<int64_t>(gact.size())));
    for (size_t i = 0; i < gact.size(); ++i)
      for (auto& [n, t] : gact[i]->export_state()) all.emplace_back(fmt::format("gact.{}.{}", i, n), t);
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
                                 const std::vector<GactStore*>& gact) {
  const SafetensorsFile f = read_safetensors(path);
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
  NamedTensors state;
  for (const auto& [n, t] : f.tensors) {
    if (n.rfind("optimizer.", 0) == 0) {
      state.emplace_back(n.substr(10), t);
      used.insert(n);
    } else if (n.rfind("model.", 0) == 0) {
      PACKRAT_CHECK(used.count(n), "{}: '{}' is not a tensor of this model", path, n);
    }
  }
  opt.load_state_dict(state);
  // GACT state: "gact.stores", then "gact.<i>.<entry>" per store.
  std::vector<std::vector<std::pair<std::string, Tensor>>> gact_state;
  bool has_gact = false;
  for (const auto& [n, t] : f.tensors) has_gact = has_gact || n.rfind("gact.", 0) == 0;
  if (has_gact) {
    const int64_t stores = read_i64(f, "gact.stores", path);
    PACKRAT_CHECK(stores == static_cast<int64_t>(gact.size()),
                  "{}: the checkpoint holds the adaptive state of {} GACT store(s), but this config uses {} (the "
                  "saved_tensors config differs from the checkpointed run's)",
                  path, stores, gact.size());
    gact_state.resize(gact.size());
    for (const auto& [n, t] : f.tensors) {
      if (n.rfind("gact.", 0) != 0 || n == "gact.stores") continue;
      const size_t dot = n.find('.', 5);
      size_t i = gact.size();
      try {
        if (dot != std::string::npos && dot > 5) i = std::stoul(n.substr(5, dot - 5));
      } catch (const std::exception&) {
      }
      PACKRAT_CHECK(i < gact.size(), "{}: '{}' is not the state of one of its {} GACT store(s)", path, n, gact.size());
      gact_state[i].emplace_back(n.substr(dot + 1), t);
    }
    for (size_t i = 0; i < gact.size(); ++i) gact[i]->import_state(gact_state[i], fmt::format("{}: gact store {}", path, i));
  } else if (!gact.empty()) {
    spdlog::warn("{}: the checkpoint has no GACT state (a run without gact, or an older checkpoint): the adaptive bit "
                 "allocation starts afresh, so this run does not continue bit-identically", path);
  }
  TrainingPosition pos;
  pos.epoch = read_i64(f, "trainer.epoch", path);
  pos.step = read_i64(f, "trainer.step", path);
  const Tensor* rng = f.find("trainer.rng");
  PACKRAT_CHECK(rng && rng->dtype() == DType::i64 && rng->numel() == 3, "{}: checkpoint has no trainer.rng", path);
  pos.seed = static_cast<uint64_t>(rng->data<int64_t>()[0]);
  return pos;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return std::nullopt;
  static const std::regex name(R"(epoch_(\d+)\.safetensors)");
  int64_t best = -1;
  std::string best_path;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string fn = e.path().filename().string();
    if (std::regex_match(fn, m, name) && std::stoll(m[1]) > best) {
      best = std::stoll(m[1]);
      best_path = e.path().string();
    }
  }
  if (best < 0) return std::nullopt;
  return best_path;
}

}  // namespace packrat
