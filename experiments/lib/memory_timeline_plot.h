#pragma once
// trainer --memory-timeline's files: the device allocator's events over the report's step
// (core/memory_timeline.h) as memory_timeline.csv, and memory_timeline.png: bytes held by tag
// against the event's place in the step, stacked, with the phases (forward, backward, update) marked.
#include <string>

#include "core/memory_timeline.h"
#include "experiments/lib/memory_report.h"

namespace packrat {

// Writes both into dir (the CSV atomically; the PNG only when gnuplot is installed, else a warning).
void write_memory_timeline(const MemoryTimeline& t, const MemoryReport& report, const std::string& dir);

}  // namespace packrat
