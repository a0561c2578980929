#pragma once
// The message of the packrat::Error a call throws (test support).
#include <functional>
#include <string>

#include "core/error.h"

namespace packrat::testing {

// e.what() of the packrat::Error fn throws, or "(no error)" when it returns normally.
inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace packrat::testing
