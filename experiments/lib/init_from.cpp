#include "experiments/lib/init_from.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/backend.h"
#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/safetensors.h"

namespace packrat {

namespace {

constexpr size_t kNamesShown = 12;  // names listed in the summary; the rest are counted

std::string names(const std::vector<std::string>& v) {
  if (v.size() <= kNamesShown) return fmt::format("{}", fmt::join(v, ", "));
  return fmt::format("{}, and {} more", fmt::join(v.begin(), v.begin() + kNamesShown, ", "), v.size() - kNamesShown);
}

// The checkpoint file `source` names: itself, or a run directory's latest checkpoint.
std::string checkpoint_file(const std::string& source, const std::string& key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(source, ec);
  PACKRAT_CHECK(!ec && fs::exists(st), "{} '{}': no such file (a checkpoint, RUN/checkpoints/epoch_NNNN.safetensors, "
                "or a run directory)", key, source);
  if (!fs::is_directory(st)) return source;
  const auto latest = latest_checkpoint(source);
  PACKRAT_CHECK(latest.has_value(), "{} '{}': a directory without checkpoints ({}/checkpoints/epoch_NNNN.safetensors)",
                key, source, source);
  return *latest;
}

bool finite(const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) return true;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.dtype() == DType::f32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i]))
      return false;
  return true;
}

}  // namespace

std::string InitFromResult::summary() const {
  std::string s = fmt::format("init_from {}: loaded {} of {} parameters", path, loaded_params, params);
  if (!skipped.empty()) s += fmt::format(" (skipped: {})", names(skipped));
  if (buffers > 0) s += fmt::format(", {} of {} buffers", loaded_buffers, buffers);
  if (!unused.empty()) s += fmt::format("; not in the model: {}", names(unused));
  return s;
}

InitFromResult init_from_checkpoint(const std::string& source, Module& model, const std::string& key) {
  InitFromResult r;
  r.path = checkpoint_file(source, key);
  SafetensorsFile f;
  try {
    f = read_safetensors(r.path);
  } catch (const Error& e) {
    fail("{}: {}", key, e.what());  // the reason names the file
  }
  std::set<std::string> in_file;
  for (const auto& [n, t] : f.tensors)
    if (n.rfind("model.", 0) == 0) in_file.insert(n);
  PACKRAT_CHECK(!in_file.empty(), "{} '{}': the file holds no model tensors (model.*): not a checkpoint of the trainer",
                key, r.path);
  // Every check first, then the copies: a refused file leaves the model as it was.
  struct Copy {
    Tensor dst;
    const Tensor* src;
  };
  std::vector<Copy> copies;
  std::set<std::string> used;
  auto match = [&](const std::vector<std::pair<std::string, Tensor>>& named, int64_t& total, int64_t& loaded) {
    for (const auto& [n, t] : named) {
      ++total;
      const std::string name = "model." + n;
      const Tensor* src = f.find(name);
      if (src == nullptr) {
        r.skipped.push_back(n);
        continue;
      }
      PACKRAT_CHECK(src->shape() == t.shape() && src->dtype() == t.dtype(),
                    "{} '{}': '{}' is {} {} in the checkpoint but {} {} in the model (model.arch or model.* differs "
                    "there: only tensors of the same shape load)",
                    key, r.path, n, src->shape().str(), dtype_name(src->dtype()), t.shape().str(),
                    dtype_name(t.dtype()));
      PACKRAT_CHECK(finite(*src), "{} '{}': '{}' holds a value that is not finite (the run had diverged, or the file is "
                    "damaged)", key, r.path, n);
      copies.push_back({t, src});
      used.insert(name);
      ++loaded;
    }
  };
  match(model.named_parameters(), r.params, r.loaded_params);
  match(model.named_buffers(), r.buffers, r.loaded_buffers);
  PACKRAT_CHECK(r.loaded_params > 0,
                "{} '{}': none of the model's {} parameters is in the checkpoint (by name: {} ...; the checkpoint has "
                "{} ...): a checkpoint of another model",
                key, r.path, r.params, r.skipped.empty() ? std::string() : r.skipped.front(),
                in_file.empty() ? std::string() : in_file.begin()->substr(6));
  for (const std::string& n : in_file)
    if (!used.count(n)) r.unused.push_back(n.substr(6));
  for (Copy& c : copies) {
    const Tensor s = c.src->to(c.dst.device()).to_layout(c.dst.layout());
    backend_of(c.dst).copy(s, c.dst);
    c.dst.bump_version();
  }
  return r;
}

}  // namespace packrat
