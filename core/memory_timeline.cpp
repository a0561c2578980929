#include "core/memory_timeline.h"

#include <algorithm>

#include <fmt/format.h>

namespace packrat {

TimelineScope::TimelineScope(Allocator& allocator, MemoryTimeline* t) : allocator_(allocator), recording_(t != nullptr) {
  if (recording_) allocator_.set_timeline(t);
}

TimelineScope::~TimelineScope() {
  if (recording_) allocator_.set_timeline(nullptr);
}

MemoryTimeline::MemoryTimeline() : start_(std::chrono::steady_clock::now()) {}

namespace {
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

void MemoryTimeline::record(MemTag tag, const std::string& layer, int64_t delta,
                            const std::array<int64_t, kNumTags>& current, int64_t total) {
  std::lock_guard lock(mutex_);
  events_.push_back({ms_since(start_), tag, delta, layer, current, total});
}

void MemoryTimeline::mark(std::string_view name) {
  std::lock_guard lock(mutex_);
  marks_.push_back({events_.size(), ms_since(start_), std::string(name)});
}

std::vector<MemoryTimeline::Event> MemoryTimeline::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::vector<MemoryTimeline::Mark> MemoryTimeline::marks() const {
  std::lock_guard lock(mutex_);
  return marks_;
}

std::array<int64_t, kNumTags> MemoryTimeline::peaks() const {
  std::lock_guard lock(mutex_);
  std::array<int64_t, kNumTags> p{};
  for (const Event& e : events_)
    for (size_t i = 0; i < kNumTags; ++i) p[i] = std::max(p[i], e.current[i]);
  return p;
}

int64_t MemoryTimeline::total_peak() const {
  std::lock_guard lock(mutex_);
  int64_t p = 0;
  for (const Event& e : events_) p = std::max(p, e.total);
  return p;
}

std::string MemoryTimeline::csv() const {
  std::lock_guard lock(mutex_);
  std::string s = "event,t_ms,phase,tag,delta,layer";
  for (size_t i = 0; i < kNumTags; ++i) s += fmt::format(",{}", tag_name(static_cast<MemTag>(i)));
  s += ",total\n";
  size_t m = 0;
  std::string phase;
  for (size_t k = 0; k < events_.size(); ++k) {
    while (m < marks_.size() && marks_[m].event <= k) phase = marks_[m++].name;
    const Event& e = events_[k];
    s += fmt::format("{},{:.3f},{},{},{},\"{}\"", k, e.t_ms, phase, tag_name(e.tag), e.delta, e.layer);
    for (int64_t b : e.current) s += fmt::format(",{}", b);
    s += fmt::format(",{}\n", e.total);
  }
  return s;
}

}  // namespace packrat
