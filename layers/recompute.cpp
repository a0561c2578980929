#include "layers/recompute.h"

#include "core/error.h"
#include "core/glob.h"

namespace packrat {

std::vector<std::string> apply_recompute(Module& model, const std::vector<std::string>& globs, const std::string& key) {
  const auto modules = model.named_modules();  // parents before children
  std::vector<bool> used(globs.size(), false);
  std::vector<std::string> marked;
  for (const auto& [name, m] : modules) {
    m->set_recompute(false);
    bool below_marked = false;
    for (const std::string& outer : marked) below_marked = below_marked || name.starts_with(outer + ".");
    for (size_t g = 0; g < globs.size(); ++g) {
      if (globs[g] == "blocks" ? !m->is_block() : !glob_match(globs[g], name)) continue;
      used[g] = true;
      if (below_marked || m->recompute()) continue;
      m->set_recompute(true);
      marked.push_back(name);
    }
  }
  for (size_t g = 0; g < globs.size(); ++g) {
    if (used[g]) continue;
    std::string top;
    for (const auto& [name, m] : modules)
      if (name.find('.') == std::string::npos) top += (top.empty() ? "" : ", ") + name;
    fail("{}: '{}' matches no module of the model; its top-level modules are {} (names are dotted: "
         "'layer1.0', 'features.3.*'; `blocks` names every residual or transformer block)",
         key, globs[g], top.empty() ? std::string("none") : top);
  }
  return marked;
}

std::vector<std::string> recomputed_modules(Module& model) {
  std::vector<std::string> out;
  for (const auto& [name, m] : model.named_modules())
    if (m->recompute()) out.push_back(name);
  return out;
}

}  // namespace packrat
