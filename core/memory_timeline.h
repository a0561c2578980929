#pragma once
// A record of one allocator's events over a stretch of time (trainer --memory-timeline): every
// allocation, free and retag, with the bytes held per tag right after it, and named marks between
// them (the step's phases: forward, backward, update). Its running values are the allocator's own:
// the highest bytes per tag over the events are the allocator's peaks over the same stretch.
//
//   MemoryTimeline t;
//   { TimelineScope record(allocator, &t);  ... the step ... }
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/allocator.h"

namespace packrat {

// Records `allocator`'s events into a timeline for a scope (none when `t` is null).
class TimelineScope {
 public:
  TimelineScope(Allocator& allocator, MemoryTimeline* t);
  ~TimelineScope();
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  Allocator& allocator_;
  bool recording_;
};

class MemoryTimeline {
 public:
  struct Event {
    double t_ms = 0;                       // since the timeline began
    MemTag tag = MemTag::Activation;
    int64_t delta = 0;                     // bytes: + allocated (or retagged to), - freed (or retagged from)
    std::string layer;                     // the allocation's layer scope ("" outside any)
    std::array<int64_t, kNumTags> current{};  // bytes held per tag after it
    int64_t total = 0;                     // ... and in all
  };
  struct Mark {
    size_t event = 0;  // events before it
    double t_ms = 0;
    std::string name;
  };

  MemoryTimeline();
  // Called by the allocator, under its lock, with its counters after the event.
  void record(MemTag tag, const std::string& layer, int64_t delta, const std::array<int64_t, kNumTags>& current,
              int64_t total);
  void mark(std::string_view name);

  std::vector<Event> events() const;
  std::vector<Mark> marks() const;
  // The highest bytes per tag, and in all, over the events (the allocator's peaks since reset).
  std::array<int64_t, kNumTags> peaks() const;
  int64_t total_peak() const;

  // CSV: event,t_ms,phase,tag,delta,layer,<one column per tag>,total (phase: the last mark's name).
  std::string csv() const;

 private:
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<Mark> marks_;
};

}  // namespace packrat
