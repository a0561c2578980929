// memory.plan: auto (experiments/lib/memory_plan.h): in a budget that FP32 does not fit, the plan
// picks an option that does, its predicted peak within 5% of the allocator's peak at the batch;
// a budget that cannot hold the model names the bytes of each part; the budget key refuses a
// number without a unit and a negative one; --find-max-batch searches plan and batch together;
// offload is an option only where the device has a second memory, memory-efficient attention
// only for a Transformer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "experiments/lib/memory_plan.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/tiny_config.h"
#include "tests/support/emulated_gpu.h"
#include "tests/support/errors.h"

namespace packrat {
namespace {

using testing::message_of;
using testing::temp_dir;
using testing::tiny_config;

Config planned(int64_t budget, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"data.batch_size=64", "memory.plan=auto", "memory.budget=1G"};
  all.insert(all.end(), sets.begin(), sets.end());
  Config c = tiny_config("/nonexistent", temp_dir("memory_plan"), all);
  c.memory.budget_bytes = budget;
  c.memory.budget = std::to_string(std::max<int64_t>(1, budget / 1024)) + "K";
  return c;
}

std::vector<std::string> names(const std::vector<PlanOption>& options) {
  std::vector<std::string> n;
  for (const PlanOption& o : options) n.push_back(o.name);
  return n;
}

// A per-segment search half way: the budget between `base`'s peak (k = 0) and option(n)'s (every
// block), and the fewest k that fewest_blocks finds within it, named `prefix` k/n, some blocks
// left as `base` keeps them. The tests then check what it stores, and that the allocator agrees.
struct HalfWaySearch {
  std::function<int64_t(size_t)> peak;  // the allocator's, with k blocks
  int64_t budget = 0;
  size_t k = 0;
  std::pair<PlanOption, PlanMeasure> fewest;
};
void search_half_way(const PlanOption& base, const std::function<PlanOption(size_t)>& option, size_t n,
                     const std::string& prefix, HalfWaySearch& s,
                     const std::vector<std::string>& direct = {"conv_algorithm=direct"}) {
  const Config c = planned(1, direct);
  s.peak = [=](size_t k) { return benchmark(with_option(c, (k == 0 ? base : option(k)).overrides), 1).peak_bytes; };
  const int64_t none = s.peak(0), all = s.peak(n);
  ASSERT_LT(all, none);
  s.budget = (none + all) / 2;
  const BlockSearch search = fewest_blocks(planned(s.budget, direct), n, option);
  ASSERT_TRUE(search.fewest.has_value());
  s.fewest = *search.fewest;
  const std::string& name = s.fewest.first.name;
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  s.k = std::stoul(name.substr(prefix.size()));
  ASSERT_GE(s.k, 1u);
  ASSERT_LT(s.k, n) << "half way between none and all, some blocks must be left as the level keeps them";
  EXPECT_EQ(name, fmt::format("{}{}/{}", prefix, s.k, n));
}
// Whether `layer` belongs to the stem or to one of the first k blocks.
bool in_stem_or_first_blocks(const ModelBlocks& m, size_t k, const std::string& layer) {
  if (std::find(m.stem.begin(), m.stem.end(), layer) != m.stem.end()) return true;
  for (size_t i = 0; i < k; ++i)
    if (layer.starts_with(m.blocks[i] + ".")) return true;
  return false;
}
// k blocks fit (within the prediction's 5%), k - 1 do not.
void expect_the_allocator_agrees(const HalfWaySearch& s) {
  EXPECT_LE(static_cast<double>(s.peak(s.k)), 1.05 * static_cast<double>(s.budget)) << s.fewest.second.predicted_peak;
  EXPECT_GT(static_cast<double>(s.peak(s.k - 1)), 0.95 * static_cast<double>(s.budget));
}

TEST(MemoryPlan, InABudgetFp32DoesNotFitItPicksAnOptionThatDoesAsPredicted) {
  const Config fp32 = with_option(planned(1), plan_options(planned(1)).front().overrides);
  ASSERT_EQ(fp32.saved_tensors.default_scheme.scheme, "fp32");
  // FP32's peak with either kind of convolution kernel (oneDNN's Winograd Workspace varies by CPU).
  const int64_t fp32_peak = std::min(benchmark(fp32, 1).peak_bytes,
                                     benchmark(with_option(fp32, {"conv_algorithm=direct"}), 1).peak_bytes);
  // Half of that, or more where the leanest level needs it.
  const Config lean = with_option(planned(1), {"saved_tensors={default: actnn-L2, rules: []}", "conv_algorithm=direct"});
  const int64_t budget = std::max(fp32_peak / 2, benchmark(lean, 1).peak_bytes * 6 / 5);
  ASSERT_LT(budget, fp32_peak);
  const MemoryPlan p = plan_memory(planned(budget));
  EXPECT_NE(p.chosen, "L0");
  EXPECT_NE(p.chosen, "L0+direct");
  EXPECT_FALSE(p.options.front().fits) << "FP32 predicted at " << p.options.front().predicted_peak;
  EXPECT_LE(p.measured_peak, budget);
  // Within 5% of the prediction, or the check counted a re-plan (its measurement replaced the
  // prediction, and the option still fit: a partly compressed model's peak is less linear in the
  // batch, 8.01 MiB against 7.59 predicted in one run here).
  EXPECT_TRUE(std::abs(static_cast<double>(p.measured_peak - p.predicted_peak)) <= 0.05 * static_cast<double>(p.predicted_peak) ||
              p.replans > 0)
      << p.table();
  // What trains is the option: its storage, the plan cleared, the allocator agreeing with the check.
  const Config chosen = with_option(planned(budget), p.overrides);
  EXPECT_TRUE(chosen.memory.plan.empty());
  EXPECT_TRUE(chosen.saved_tensors.default_scheme.scheme != "fp32" || !chosen.saved_tensors.rules.empty())
      << "stores some tensors compressed";
  EXPECT_EQ(benchmark(chosen, kCheckSteps).peak_bytes, p.measured_peak);
  EXPECT_NE(p.table().find("<- chosen"), std::string::npos);
  EXPECT_EQ(p.json().at("chosen").get<std::string>(), p.chosen);

  // The race: the leader (the fastest in the profile of the options checked within the budget)
  // and the options the profile could not tell from it were timed at the batch, as many as
  // kRaceEntrants allows, and the chosen is the fastest of them there.
  const auto& o = p.options;
  const auto winner = std::find_if(o.begin(), o.end(), [&](const PlanMeasure& m) { return m.option == p.chosen; });
  ASSERT_NE(winner, o.end());
  std::optional<size_t> leader;
  for (size_t i = 0; i < o.size(); ++i)
    if (o[i].measured_peak > 0 && o[i].fits && (!leader || o[i].img_per_s > o[*leader].img_per_s)) leader = i;
  ASSERT_TRUE(leader.has_value());
  size_t raced = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (o[i].measured_peak == 0) continue;
    ASSERT_GT(o[i].checked_img_per_s, 0) << o[i].option;
    if (i != *leader && o[i].img_per_s <= o[*leader].img_per_s) ++raced;
    if (o[i].fits && !o[i].too_noisy) {
      EXPECT_LE(o[i].checked_img_per_s, winner->checked_img_per_s) << o[i].option;
    }
  }
  EXPECT_TRUE(race_entrants(o, *leader, budget).empty() || raced == kRaceEntrants - 1) << p.table();
}

// The race's rules on made-up profiles: who may join the leader's race, and who wins it.
TEST(MemoryPlan, TheRaceTimesTheOptionsTheProfileCannotTellFromTheLeaderAndTheFastestThereWins) {
  const int64_t budget = 1000;
  auto option = [](std::string name, double img_per_s, int64_t predicted) {
    PlanMeasure m;
    m.option = std::move(name);
    m.img_per_s = img_per_s;
    m.predicted_peak = predicted;
    return m;
  };
  std::vector<PlanMeasure> o = {option("leader", 100, 900),      option("close", 80, 1000),
                                option("closest", 95, 1040),     option("slow", 70, 500),
                                option("over the budget", 99, 1100), option("refused", 99, 0),
                                option("noisy", 99, 500),        option("over when checked", 90, 900)};
  o[5].refused = "cannot run here";
  o[6].too_noisy = true;
  o[7].measured_peak = 1200, o[7].fits = false;
  o[0].measured_peak = 950, o[0].fits = true, o[0].checked_img_per_s = 60;
  // Within kRaceBand of the leader's img/s and predicted within the budget's 5%, fastest first.
  EXPECT_EQ(race_entrants(o, 0, budget), (std::vector<size_t>{2, 1}));
  // L0 enters first, however slow its profile, where it may fit.
  o.push_back(option("L0", 40, 990));
  EXPECT_EQ(race_entrants(o, 0, budget), (std::vector<size_t>{8, 2, 1}));
  o.back().predicted_peak = 1100;
  EXPECT_EQ(race_entrants(o, 0, budget), (std::vector<size_t>{2, 1}));
  o.pop_back();
  // The winner is the fastest at the batch among the checked within the budget and the bound.
  EXPECT_EQ(race_winner(o, 0), 0u);
  o[1].measured_peak = 990, o[1].fits = true, o[1].checked_img_per_s = 75;
  o[2].measured_peak = 1010, o[2].fits = false, o[2].checked_img_per_s = 90;  // over the budget when checked
  o[7].checked_img_per_s = 200;
  EXPECT_EQ(race_winner(o, 0), 1u);
  o[1].too_noisy = true;
  EXPECT_EQ(race_winner(o, 0), 0u);
}

// Per segment: FP32 in a budget between its peak and its peak with every block recomputed
// recomputes the fewest blocks (the first k, in forward order) that fit, and no fewer would.
TEST(MemoryPlan, ALevelOverTheBudgetRecomputesTheFewestBlocksThatBringItWithin) {
  const Config c = planned(1, {"conv_algorithm=direct"});
  const PlanOption fp32 = plan_options(c).front();
  ASSERT_EQ(fp32.name, "L0");
  const std::vector<std::string> blocks = model_blocks(c).blocks;
  ASSERT_EQ(blocks.size(), 9u);  // ResNet-20: three stages of three residual blocks
  EXPECT_EQ(blocks.front(), "layer1.0");
  HalfWaySearch s;
  ASSERT_NO_FATAL_FAILURE(search_half_way(
      fp32, [&](size_t k) { return with_recomputed_blocks(fp32, blocks, k); }, blocks.size(), "L0+recompute ", s));
  // What it recomputes: the first k blocks, its storage FP32's.
  const Config chosen = with_option(c, s.fewest.first.overrides);
  EXPECT_EQ(chosen.memory.recompute, std::vector<std::string>(blocks.begin(), blocks.begin() + static_cast<long>(s.k)));
  EXPECT_EQ(chosen.saved_tensors.default_scheme.scheme, "fp32");
  expect_the_allocator_agrees(s);
}

// Per segment, the other way: FP32 in a budget between its peak and its peak with every block
// stored as actnn-L2 stores the stem and the fewest blocks (the first k) that fit as actnn-L2,
// keeping the rest FP32, and no fewer would.
TEST(MemoryPlan, AStorageLevelOverTheBudgetCompressesTheFewestBlocksThatBringItWithin) {
  const Config c = planned(1, {"conv_algorithm=direct"});
  const std::vector<PlanOption> levels = plan_options(c);
  const PlanOption& fp32 = levels.front();
  const auto actnn = std::find_if(levels.begin(), levels.end(), [](const PlanOption& o) { return o.name == "actnn-L2"; });
  ASSERT_NE(actnn, levels.end());
  const ModelBlocks m = model_blocks(c);
  EXPECT_EQ(m.stem, (std::vector<std::string>{"conv1", "bn1", "act"}));
  ASSERT_EQ(m.blocks.size(), 9u);
  HalfWaySearch s;
  ASSERT_NO_FATAL_FAILURE(search_half_way(
      fp32, [&](size_t k) { return with_stored_blocks(fp32, *actnn, m, k); }, m.blocks.size(), "L0+actnn-L2 on ", s));
  // What it stores: the stem's and the first k blocks' tensors as actnn, every other one FP32.
  const MemoryReport r = memory_report_only(with_option(c, s.fewest.first.overrides));
  int64_t as_actnn = 0;
  for (const SavedRecord& t : r.tensors) {
    if (t.statistics) continue;  // batchnorm's mean and variance: FP32 in every store
    EXPECT_EQ(t.scheme, in_stem_or_first_blocks(m, s.k, t.layer) ? "actnn" : "fp32") << t.layer << " " << t.op;
    as_actnn += t.scheme == "actnn";
  }
  EXPECT_GE(as_actnn, 3 + 6 * static_cast<int64_t>(s.k));  // the stem's three, each block's six
  expect_the_allocator_agrees(s);
}

// On a device with a second memory, a fourth: FP32 in a budget between its peak and its peak
// with every saved tensor on the host moves what the stem and the fewest first blocks save to the
// host, keeping the rest on the device, and no fewer would (the emulated GPU: its copies are real).
TEST(MemoryPlan, OnADeviceWithASecondMemoryAStorageLevelOffloadsTheFewestBlocks) {
  testing::EmulatedGpu gpu;
  const std::vector<std::string> on_gpu = {"device=" + testing::EmulatedGpu::device().str()};
  const Config c = planned(1, on_gpu);
  const std::vector<PlanOption> levels = plan_options(c);
  const PlanOption& fp32 = levels.front();
  const ModelBlocks m = model_blocks(c);
  ASSERT_EQ(m.blocks.size(), 9u);
  EXPECT_EQ(with_offloaded_blocks(fp32, m, 9).overrides.back(), "memory.offload={}") << "the `offload` level's form";
  HalfWaySearch s;
  ASSERT_NO_FATAL_FAILURE(search_half_way(
      fp32, [&](size_t k) { return with_offloaded_blocks(fp32, m, k); }, m.blocks.size(), "L0+offload ", s, on_gpu));
  // What moves: every tensor the stem and the first k blocks save, none of the others'.
  const MemoryReport r = memory_report_only(with_option(c, s.fewest.first.overrides));
  ASSERT_TRUE(r.offload.on);
  for (const auto& [layer, bytes] : r.offload.host_by_layer)
    EXPECT_TRUE(bytes == 0 || in_stem_or_first_blocks(m, s.k, layer)) << layer << " moved to the host";
  for (const auto& [layer, bytes] : r.offload.device_by_layer)
    EXPECT_TRUE(bytes == 0 || !in_stem_or_first_blocks(m, s.k, layer)) << layer << " stayed on the device";
  EXPECT_GE(r.offload.host_by_layer.size(), 3 + s.k);
  expect_the_allocator_agrees(s);
  // The plan searches it from a level that stores, where there is a second memory (whether it
  // does in a plan depends on the profile's speeds: a level faster than every one that fits).
  auto level = [&](const std::vector<PlanOption>& in, const std::string& name) {
    return *std::find_if(in.begin(), in.end(), [&](const PlanOption& o) { return o.name == name; });
  };
  EXPECT_TRUE(offloads_segments(c, fp32));
  EXPECT_TRUE(offloads_segments(c, level(levels, "actnn-L2")));
  EXPECT_FALSE(offloads_segments(c, level(levels, "gact-L2"))) << "the preset moves every tensor itself";
  EXPECT_FALSE(offloads_segments(c, level(levels, "offload")));
  EXPECT_FALSE(offloads_segments(c, level(levels, "recompute")));
  const Config cpu = planned(1);
  EXPECT_FALSE(offloads_segments(cpu, plan_options(cpu).front())) << "no second memory";
}

// The third way: `recompute` (every block recomputed from its exact input) over the budget
// stores the stem and the inputs of its fewest first blocks compressed; the blocks' own tensors,
// saved again while each is recomputed, stay exact.
TEST(MemoryPlan, RecomputeOverTheBudgetCompressesTheInputsOfTheFewestBlocks) {
  const Config c = planned(1, {"conv_algorithm=direct"});
  const std::vector<PlanOption> levels = plan_options(c);
  auto level = [&](const std::string& name) {
    const auto it = std::find_if(levels.begin(), levels.end(), [&](const PlanOption& o) { return o.name == name; });
    EXPECT_NE(it, levels.end()) << name;
    return *it;
  };
  const PlanOption recompute = level("recompute"), actnn = level("actnn-L2");
  const ModelBlocks m = model_blocks(c);
  ASSERT_EQ(m.blocks.size(), 9u);
  auto option = [&](size_t k) { return with_stored_blocks(recompute, actnn, m, k); };
  EXPECT_EQ(option(3).name, "recompute+actnn-L2 on 3/9");
  HalfWaySearch s;
  ASSERT_NO_FATAL_FAILURE(search_half_way(recompute, option, m.blocks.size(), "recompute+actnn-L2 on ", s));
  // What the forward keeps: the stem's tensors and the first k blocks' inputs as actnn, the other
  // blocks' inputs and the head FP32, nothing else of the blocks (they are recomputed).
  const MemoryReport r = memory_report_only(with_option(c, s.fewest.first.overrides));
  int64_t inputs = 0, stem = 0;
  for (const SavedRecord& t : r.tensors) {
    if (t.statistics) continue;  // batchnorm's mean and variance: FP32 in every store
    const auto block = std::find(m.blocks.begin(), m.blocks.end(), t.layer);
    if (block != m.blocks.end()) {
      ASSERT_EQ(t.op, "checkpoint") << t.layer;
      EXPECT_EQ(t.scheme, static_cast<size_t>(block - m.blocks.begin()) < s.k ? "actnn" : "fp32") << t.layer;
      ++inputs;
    } else if (std::find(m.stem.begin(), m.stem.end(), t.layer) != m.stem.end()) {
      EXPECT_EQ(t.scheme, "actnn") << t.layer << " " << t.op;
      ++stem;
    } else {  // the head after the blocks (pool, fc): kept as the level keeps it
      EXPECT_TRUE(std::none_of(m.blocks.begin(), m.blocks.end(), [&](const std::string& b) { return t.layer.starts_with(b + "."); }))
          << "the forward kept " << t.layer << " " << t.op << ", which is recomputed";
      EXPECT_EQ(t.scheme, "fp32") << t.layer << " " << t.op;
    }
  }
  EXPECT_EQ(inputs, 9);
  EXPECT_GE(stem, 2);
  expect_the_allocator_agrees(s);
}

// GACT's criterion: the variance an option's compression adds, over the gradient's sampling
// variance, grows as its bits fall (2-bit actnn-L3 above 4-bit actnn-L2); an exact option has
// none to measure; and in a budget that only compressing options hold, a bound they all exceed
// leaves no option, which the error says.
TEST(MemoryPlan, OptionsOverTheVarianceBoundAreNotChosen) {
  const Config c = planned(1, {"conv_algorithm=direct"});
  const std::vector<PlanOption> levels = plan_options(c);
  auto level = [&](const std::string& name) {
    return *std::find_if(levels.begin(), levels.end(), [&](const PlanOption& o) { return o.name == name; });
  };
  const VarianceCheck check(c, 16);
  EXPECT_GT(check.sampling_variance(), 0);
  EXPECT_NE(check.inputs().find("synthetic"), std::string::npos) << check.inputs();  // no dataset in the test
  EXPECT_TRUE(std::isnan(check.ratio(level("L0"))));
  EXPECT_TRUE(std::isnan(check.ratio(level("recompute"))));
  const double four = check.ratio(level("actnn-L2")), two = check.ratio(level("actnn-L3"));
  EXPECT_GT(four, 0);
  EXPECT_GT(two, 2 * four) << "2 bits against 4";

  // Between the leanest compressing level's peak and every exact option's, with a bound below
  // every compressing option's variance: nothing may be chosen, and the error says why.
  const Config fp32 = with_option(c, level("L0").overrides);
  const int64_t exact = std::min(benchmark(fp32, 1).peak_bytes, benchmark(with_option(c, level("recompute").overrides), 1).peak_bytes);
  const int64_t lean = benchmark(with_option(c, level("actnn-L2").overrides), 1).peak_bytes;
  ASSERT_LT(lean * 11 / 10, exact * 9 / 10);
  Config bounded = planned((lean * 11 / 10 + exact * 9 / 10) / 2, {"conv_algorithm=direct"});
  bounded.memory.max_variance_ratio = four / 100;
  const std::string refused = message_of([&] { plan_memory(bounded); });
  EXPECT_NE(refused.find("add more gradient variance than memory.max_variance_ratio"), std::string::npos) << refused;
  // Without the bound the same budget is planned.
  bounded.memory.max_variance_ratio = 0;
  EXPECT_FALSE(plan_memory(bounded).chosen.empty());
}

// A model without residual or transformer blocks has none to recompute: the plan chooses among
// the levels that run on it (session 47's first block search refused such a model).
TEST(MemoryPlan, AModelWithoutBlocksIsPlannedWithoutThem) {
  const Config c = planned(64 << 20, {"model.arch=sequential", "model.layers=[conv2d(8, 3, padding=1), relu, flatten, linear(10)]",
                                      "saved_tensors.rules=[]"});
  EXPECT_TRUE(model_blocks(c).blocks.empty());
  const MemoryPlan p = plan_memory(c);
  EXPECT_FALSE(p.chosen.empty());
  EXPECT_LE(p.measured_peak, 64 << 20);
  EXPECT_EQ(p.table().find("+recompute "), std::string::npos) << p.table();
}

TEST(MemoryPlan, ABudgetThatCannotHoldTheModelNamesTheBytesOfEachPart) {
  const std::string msg = message_of([] { plan_memory(planned(64 * 1024)); });
  EXPECT_NE(msg.find("cannot hold a training step of this model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("its parameters take"), std::string::npos) << msg;
  EXPECT_NE(msg.find("their gradients"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the optimizer state"), std::string::npos) << msg;
}

TEST(MemoryPlan, TheBudgetKeyWantsAUnitAndAPositiveSizeAndPlanAutoWantsABudget) {
  auto refused = [](const std::vector<std::string>& sets) {
    return message_of([&] { tiny_config("/nonexistent", temp_dir("memory_plan_keys"), sets); });
  };
  EXPECT_NE(refused({"memory.budget=1000"}).find("memory.budget: is '1000': give bytes with a unit"), std::string::npos);
  EXPECT_NE(refused({"memory.budget=-5M"}).find("memory.budget: is '-5M': a budget cannot be negative"), std::string::npos);
  EXPECT_NE(refused({"memory.plan=auto"}).find("memory.plan is auto, which needs memory.budget"), std::string::npos);
  EXPECT_NE(refused({"memory.plan=manual"}).find("memory.plan"), std::string::npos);
  EXPECT_EQ(tiny_config("/nonexistent", temp_dir("memory_plan_keys"), {"memory.budget=384M"}).memory.budget_bytes,
            int64_t{384} << 20);
}

TEST(MemoryPlan, FindMaxBatchSearchesTheOptionsAndTakesTheLargest) {
  const Config fp32 = with_option(planned(1), plan_options(planned(1)).front().overrides);
  const int64_t limit = benchmark(fp32, 1).peak_bytes;  // FP32 at batch 64: compression fits more
  const PlannedMaxBatch r = plan_max_batch(planned(limit), limit);
  ASSERT_EQ(r.per_option.size(), plan_options(planned(limit)).size());
  int64_t best = 0;
  for (const auto& [option, batch] : r.per_option) best = std::max(best, batch);
  EXPECT_EQ(r.batch_size, best);
  EXPECT_GT(r.batch_size, r.per_option.front().second) << "a compressed option fits more than FP32";
  EXPECT_NE(r.chosen, "L0");
  // The largest batch is one the plan trains at: its peak is that of plan_memory's check there.
  Config at = planned(limit);
  at.data.batch_size = r.batch_size;
  const auto options = plan_options(at);
  const auto chosen = std::find_if(options.begin(), options.end(), [&](const PlanOption& o) { return o.name == r.chosen; });
  ASSERT_NE(chosen, options.end());
  EXPECT_EQ(r.peak_bytes, benchmark(with_option(at, chosen->overrides), 1).peak_bytes);
  EXPECT_LE(r.peak_bytes, limit);
}

TEST(MemoryPlan, FindMaxBatchConfirmsTheLargestByThePlansCheckAndLowersItUntilItHolds) {
  std::vector<std::pair<size_t, int64_t>> checks;
  // Option 1's check is 60 bytes over its search's line (25 bytes a sample): lowered from 40 by the
  // excess over 26 bytes a sample (1060 / 40), to 37, where it holds; option 3's 35 is never checked.
  std::vector<int64_t> batches = {10, 40, -1, 35};
  auto over_by = [&](int64_t extra) {
    return [&, extra](size_t i, int64_t batch) {
      checks.emplace_back(i, batch);
      return 25 * batch + (i == 1 ? extra : 0);
    };
  };
  std::optional<ConfirmedBatch> r = confirm_largest(batches, 1000, over_by(60));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->option, 1u);
  EXPECT_EQ(r->batch, 37);
  EXPECT_EQ(r->peak, 985);
  EXPECT_EQ(checks, (std::vector<std::pair<size_t, int64_t>>{{1, 40}, {1, 37}}));
  // 200 over: lowered by 7 (1200 / 40 = 30 bytes a sample) to 33, below option 3's 35, which is
  // checked next and holds.
  batches = {10, 40, -1, 35};
  checks.clear();
  r = confirm_largest(batches, 1000, over_by(200));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->option, 3u);
  EXPECT_EQ(r->batch, 35);
  EXPECT_EQ(batches[1], 33);
  EXPECT_EQ(checks, (std::vector<std::pair<size_t, int64_t>>{{1, 40}, {3, 35}}));
  // A check over the limit at every batch: none.
  batches = {3, 2};
  EXPECT_FALSE(confirm_largest(batches, 1000, [](size_t, int64_t) { return int64_t{1001}; }).has_value());
  EXPECT_EQ(batches, (std::vector<int64_t>{0, 0}));
}

TEST(MemoryPlan, OffloadWhereTheDeviceHasASecondMemoryEfficientAttentionForATransformer) {
  const auto cpu = names(plan_options(planned(1)));
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "offload"), 0);
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "gact-L2"), 0);
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "gact-CB2"), 0) << "ResNet-20 has no attention";
  const auto gpu = names(plan_options(planned(1, {"device=cuda:0"})));
  EXPECT_EQ(std::count(gpu.begin(), gpu.end(), "offload"), 1);
  EXPECT_EQ(std::count(gpu.begin(), gpu.end(), "gact-L2"), 1);
  const auto vit = names(plan_options(planned(1, {"model.arch=vit_tiny_cifar", "data.train_transforms=[]"})));
  EXPECT_EQ(std::count(vit.begin(), vit.end(), "gact-CB2"), 1);
  EXPECT_EQ(std::count(vit.begin(), vit.end(), "L0+direct"), 0) << "no convolution Winograd may take: no twins";
  // On the CPU under conv_algorithm auto, every level again with direct convolutions (less Workspace).
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "actnn-L2+direct"), 1);
  EXPECT_EQ(std::count(cpu.begin(), cpu.end(), "L0+direct"), 1);
  EXPECT_EQ(std::count(gpu.begin(), gpu.end(), "L0+direct"), 0);
  const auto direct = names(plan_options(planned(1, {"conv_algorithm=direct"})));
  EXPECT_EQ(std::count(direct.begin(), direct.end(), "L0+direct"), 0) << "already direct";
}

}  // namespace
}  // namespace packrat
