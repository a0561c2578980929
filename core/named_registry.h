#pragma once
// Kinds registered by name (optimizers, LR schedules): thread-safe, in registration order (the
// order messages list the names in); registering a name again replaces its kind. Kinds live in a
// deque, so a pointer find() returns stays valid while others are added.
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace packrat {

template <typename Kind>
class NamedRegistry {
 public:
  explicit NamedRegistry(std::vector<std::pair<std::string, Kind>> builtin) {
    for (auto& [name, kind] : builtin) kinds_.emplace_back(std::move(name), std::move(kind));
  }
  void add(const std::string& name, Kind kind) {
    std::lock_guard lock(mutex_);
    for (auto& [n, k] : kinds_)
      if (n == name) {
        k = std::move(kind);
        return;
      }
    kinds_.emplace_back(name, std::move(kind));
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [n, k] : kinds_) out.push_back(n);
    return out;
  }
  // "sgd, adamw"
  std::string joined_names() const {
    std::string out;
    for (const std::string& n : names()) out += (out.empty() ? "" : ", ") + n;
    return out;
  }
  const Kind* find(std::string_view name) const {
    std::lock_guard lock(mutex_);
    for (const auto& [n, k] : kinds_)
      if (n == name) return &k;
    return nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::deque<std::pair<std::string, Kind>> kinds_;
};

}  // namespace packrat
