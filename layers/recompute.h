#pragma once
// memory.recompute: which modules of a model run as checkpoint segments (autograd/checkpoint.h).
#include <string>
#include <vector>

#include "layers/module.h"

namespace packrat {

// Marks every module whose dotted name matches one of `globs` (core/glob.h: '*' crosses dots)
// for recomputation (the word `blocks` matches every module whose is_block() is true), the outermost match winning (a module below a marked one is not marked),
// and returns the marked names in model order. `globs` empty: nothing changes. A glob that
// matches no module is an error naming `key` and listing the model's top-level modules.
std::vector<std::string> apply_recompute(Module& model, const std::vector<std::string>& globs,
                                         const std::string& key = "memory.recompute");

// The names of the marked modules, in model order.
std::vector<std::string> recomputed_modules(Module& model);

}  // namespace packrat
