// trainer --memory-timeline: the allocator's every event over the report's step, with the step's
// phases marked. Its values are the allocator's: each event moves its tag by its delta and nothing
// else, the highest bytes per tag over the step are the report's peaks, and everything the step
// held (activations, saved tensors, gradients of activations, workspace) is back to zero by its end.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/memory_timeline.h"
#include "experiments/lib/gnuplot.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/fixture.h"
#include "tests/experiments/run_files.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {

size_t mark_event(const MemoryTimeline& t, const std::string& name) {
  for (const auto& m : t.marks())
    if (m.name == name) return m.event;
  ADD_FAILURE() << "no mark " << name;
  return 0;
}

}  // namespace

TEST(MemoryTimeline, ItsEventsAreTheAllocatorsAndItsPeaksTheReports) {
  static const fs::path data = make_idx_dataset("idx_timeline", 48, 32);
  for (const std::string scheme : {"fp32", "{scheme: actnn, bits: 2}"}) {
    SCOPED_TRACE(scheme);
    const fs::path out = temp_dir("timeline");
    const Config c = tiny_config(data, out, {"saved_tensors.rules=[]", "saved_tensors.default=" + scheme});
    MemoryTimeline t;
    const MemoryReport r = memory_report_only(c, &t);
    const auto events = t.events();
    ASSERT_GT(events.size(), 50u);
    // Each event moves its own tag by its delta; the total follows.
    for (size_t k = 1; k < events.size(); ++k) {
      for (size_t i = 0; i < kNumTags; ++i) {
        const int64_t moved = static_cast<MemTag>(i) == events[k].tag ? events[k].delta : 0;
        ASSERT_EQ(events[k].current[i], events[k - 1].current[i] + moved) << "event " << k << " tag " << i;
      }
      ASSERT_EQ(events[k].total, events[k - 1].total + events[k].delta) << "event " << k;
    }
    // The phases, in order; from the forward on, the highest bytes per tag are the report's peaks.
    const size_t forward = mark_event(t, "forward"), backward = mark_event(t, "backward"), update = mark_event(t, "update");
    ASSERT_LT(forward, backward);
    ASSERT_LT(backward, update);
    std::array<int64_t, kNumTags> peak{};
    int64_t total_peak = 0;
    for (size_t k = forward; k < events.size(); ++k) {
      for (size_t i = 0; i < kNumTags; ++i) peak[i] = std::max(peak[i], events[k].current[i]);
      total_peak = std::max(total_peak, events[k].total);
    }
    for (size_t i = 0; i < kNumTags; ++i) EXPECT_EQ(peak[i], r.step.peak[i]) << tag_name(static_cast<MemTag>(i));
    EXPECT_EQ(total_peak, r.step.total_peak);
    // Saved bytes rise through the forward to what the report counts, and fall to zero in the backward.
    const auto saved = static_cast<size_t>(MemTag::Saved);
    EXPECT_EQ(events[backward - 1].current[saved], r.allocator_saved_bytes);
    EXPECT_EQ(events[update - 1].current[saved], 0);
    EXPECT_EQ(events.back().current[static_cast<size_t>(MemTag::Activation)], 0);
    // The files.
    const std::string csv = read_text(out / "memory_timeline.csv");
    EXPECT_EQ(csv.rfind("event,t_ms,phase,tag,delta,layer,Parameter,Gradient,OptimizerState,Activation,Saved,"
                        "Workspace,Data,total\n", 0), 0u);
    EXPECT_NE(csv.find(",backward,"), std::string::npos);
    if (gnuplot_available()) {
      EXPECT_GT(fs::file_size(out / "memory_timeline.png"), 10000u);
    }
  }
}
