#pragma once
// Exceptions with context. Executables catch `packrat::Error` and exit with code 2.
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace packrat {

// Bad input (shape mismatch, wrong dtype, malformed config, corrupt file): a user error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Memory ran out: the device (or the host) refused an allocation, or the allocator's byte limit
// was reached (LimitExceeded).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// The allocator's byte limit (Allocator::set_limit) would be exceeded: what `--find-max-batch`
// takes for "does not fit", unlike the device refusing memory below the limit.
class LimitExceeded : public OutOfMemory {
 public:
  using OutOfMemory::OutOfMemory;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define PACKRAT_CHECK(cond, ...)                 \
  do {                                           \
    if (!(cond)) ::packrat::fail(__VA_ARGS__);   \
  } while (0)

}  // namespace packrat
