#include "autograd/offload/offload_rule.h"

#include <algorithm>

#include "core/glob.h"

namespace packrat {

bool OffloadRule::matches(const SaveRequest& r) const {
  const bool op_ok = ops.empty() || std::find(ops.begin(), ops.end(), r.op) != ops.end() ||
                     (r.fn && std::find(ops.begin(), ops.end(), r.fn->name) != ops.end());  // an activation by name
  const bool layer_ok =
      layers.empty() || std::any_of(layers.begin(), layers.end(), [&](const std::string& g) { return glob_match(g, r.name); });
  return op_ok && layer_ok;
}

}  // namespace packrat
