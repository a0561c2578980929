#pragma once
// The kinds of op that save tensors for backward (SaveRequest::op), by the names a store rule's
// `ops` matches (`ops: [conv2d, linear]`). An op registers its kinds in its own file,
//   PACKRAT_SAVING_OP_KINDS("linear", "matmul");
// so that adding an op that saves tensors touches that op only.
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace packrat {

// Registers kinds (at static initialisation, from PACKRAT_SAVING_OP_KINDS); returns true.
bool register_saving_op_kinds(std::initializer_list<std::string_view> kinds);
// The registered kinds, sorted.
std::vector<std::string> registered_saving_op_kinds();

}  // namespace packrat

#define PACKRAT_SAVING_OP_KINDS(...)                                                               \
  namespace {                                                                                       \
  [[maybe_unused]] const bool packrat_saving_op_kinds_ = ::packrat::register_saving_op_kinds({__VA_ARGS__}); \
  }
