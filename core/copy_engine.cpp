#include "core/copy_engine.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace packrat {

PinnedWithFallback::PinnedWithFallback(std::unique_ptr<MemorySource> pinned, std::string what)
    : pinned_(std::move(pinned)), what_(std::move(what)) {}

PinnedWithFallback::~PinnedWithFallback() = default;

void* PinnedWithFallback::allocate(size_t bytes) {
  if (void* p = pinned_->allocate(bytes)) return p;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) return nullptr;
  std::lock_guard lock(mutex_);
  pageable_.emplace(p, bytes);
  pageable_bytes_ += static_cast<int64_t>(bytes);
  spdlog::warn("{}: page-locked host memory refused {} bytes; they come from the ordinary heap instead (copies to and "
               "from them run slower, without overlapping compute)",
               what_, bytes);
  return p;
}

void PinnedWithFallback::release(void* p, size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    auto it = pageable_.find(p);
    if (it != pageable_.end()) {
      pageable_bytes_ -= static_cast<int64_t>(it->second);
      pageable_.erase(it);
      std::free(p);
      return;
    }
  }
  pinned_->release(p, bytes);
}

int64_t PinnedWithFallback::pageable_bytes() const {
  std::lock_guard lock(mutex_);
  return pageable_bytes_;
}

}  // namespace packrat
