#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "core/error.h"
#include "experiments/lib/checkpoint.h"
#include "experiments/lib/safetensors.h"
#include "experiments/lib/session.h"
#include "experiments/lib/train_loop.h"
#include "quant/group/gact_store.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;
using namespace packrat::testing;
namespace fs = std::filesystem;

namespace {
bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to_plain(), y = b.to_plain();
  return x.shape() == y.shape() && x.dtype() == y.dtype() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}
}  // namespace

TEST(Checkpoint, RoundTripsModelOptimizerAndPosition) {
  const auto dir = temp_dir("checkpoint");
  const Config c = tiny_config("/nonexistent", dir);
  Session a = make_session(c, synthetic_input_spec(c));
  SyntheticBatch b = synthetic_batch(4, a.input.channels, a.input.height, a.input.width, a.input.classes, 5);
  for (int64_t step = 0; step < 2; ++step) train_step(*a.model, *a.optimizer, *a.policy, b.images, b.labels, step, {});
  const std::string path = checkpoint_path(dir.string(), 3);
  save_checkpoint(path, *a.model, *a.optimizer, {3, 2, c.seed}, "resnet20");

  // PyTorch-style names.
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.find("model.layer1.0.conv1.weight"));
  EXPECT_TRUE(f.find("model.bn1.running_mean"));
  EXPECT_TRUE(f.find("optimizer.momentum_buffer.fc.weight"));
  EXPECT_TRUE(f.find("optimizer.step"));
  EXPECT_EQ(f.metadata.at("format"), "pt");

  const Config other = tiny_config("/nonexistent", dir, {"seed=99"});
  Session s = make_session(other, synthetic_input_spec(other));
  ASSERT_FALSE(same_bytes(s.model->named_parameters()[0].second, a.model->named_parameters()[0].second));
  const TrainingPosition pos = load_checkpoint(path, *s.model, *s.optimizer);
  EXPECT_EQ(pos.epoch, 3);
  EXPECT_EQ(pos.step, 2);
  EXPECT_EQ(pos.seed, c.seed);
  const auto pa = a.model->named_parameters(), ps = s.model->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bytes(pa[i].second, ps[i].second)) << pa[i].first;
  const auto ba = a.model->named_buffers(), bs = s.model->named_buffers();
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(same_bytes(ba[i].second, bs[i].second)) << ba[i].first;
  const auto oa = a.optimizer->state_dict(), os = s.optimizer->state_dict();
  ASSERT_EQ(oa.size(), os.size());
  for (size_t i = 0; i < oa.size(); ++i) EXPECT_TRUE(same_bytes(oa[i].second, os[i].second)) << oa[i].first;
  EXPECT_EQ(s.optimizer->steps(), 2);
}

TEST(Checkpoint, AnotherModelIsAnErrorNamingTheTensor) {
  const auto dir = temp_dir("checkpoint_other");
  const Config c = tiny_config("/nonexistent", dir);
  Session a = make_session(c, synthetic_input_spec(c));
  const std::string path = checkpoint_path(dir.string(), 1);
  save_checkpoint(path, *a.model, *a.optimizer, {1, 0, c.seed}, "resnet20");
  const Config deeper = tiny_config("/nonexistent", dir, {"model.arch=resnet32"});
  Session b = make_session(deeper, synthetic_input_spec(deeper));
  try {
    load_checkpoint(path, *b.model, *b.optimizer);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layer1.3"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, LatestIsTheHighestEpoch) {
  const auto dir = temp_dir("checkpoint_latest");
  EXPECT_FALSE(latest_checkpoint(dir.string()).has_value());
  const Config c = tiny_config("/nonexistent", dir);
  Session a = make_session(c, synthetic_input_spec(c));
  for (int64_t e : {2, 10, 9}) save_checkpoint(checkpoint_path(dir.string(), e), *a.model, *a.optimizer, {e, 0, 0}, "r");
  EXPECT_EQ(latest_checkpoint(dir.string()).value(), checkpoint_path(dir.string(), 10));
}

TEST(Checkpoint, GactStateIsSavedUnderItsOwnPrefixAndChecked) {
  const auto dir = temp_dir("checkpoint_gact");
  const std::vector<std::string> gact_sets = {"saved_tensors.rules=[]",
                                              "saved_tensors.default={scheme: gact, avg_bits: 3, tensors_per_refresh: 2}"};
  const Config c = tiny_config("/nonexistent", dir, gact_sets);
  Session a = make_session(c, synthetic_input_spec(c));
  SyntheticBatch b = synthetic_batch(4, a.input.channels, a.input.height, a.input.width, a.input.classes, 5);
  for (int64_t step = 0; step < 2; ++step) train_step(*a.model, *a.optimizer, *a.policy, b.images, b.labels, step, {});
  const auto ga = find_gact_stores(*a.policy);
  ASSERT_EQ(ga.size(), 1u);
  const std::string path = checkpoint_path(dir.string(), 1);
  save_checkpoint(path, *a.model, *a.optimizer, {1, 2, c.seed}, "resnet20", stateful_stores(*a.policy));
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.find("model.layer1.0.conv1.weight"));
  EXPECT_TRUE(f.find("optimizer.momentum_buffer.fc.weight"));
  ASSERT_TRUE(f.find("gact.stores"));
  const Tensor* c0 = f.find("gact.0.sensitivity");
  ASSERT_TRUE(c0);
  EXPECT_EQ(c0->dtype(), DType::f64);
  EXPECT_EQ(c0->numel(), static_cast<int64_t>(ga[0]->tensors().size()));
  EXPECT_EQ(f.find("gact.0.bits")->dtype(), DType::i32);
  EXPECT_EQ(f.find("gact.0.round_robin")->data<int64_t>()[0], 2);

  // Into the same config: the state comes back exactly.
  Session s = make_session(c, synthetic_input_spec(c));
  const auto gs = find_gact_stores(*s.policy);
  load_checkpoint(path, *s.model, *s.optimizer, stateful_stores(*s.policy));
  const auto ea = ga[0]->export_state(), es = gs[0]->export_state();
  ASSERT_EQ(ea.size(), es.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i].first, es[i].first);
    EXPECT_TRUE(same_bytes(ea[i].second, es[i].second)) << ea[i].first;
  }
  // Into a config without gact: an error naming both counts.
  const Config fp32 = tiny_config("/nonexistent", dir, {"saved_tensors.rules=[]"});
  Session p = make_session(fp32, synthetic_input_spec(fp32));
  try {
    load_checkpoint(path, *p.model, *p.optimizer, stateful_stores(*p.policy));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 GACT store(s), but this config uses 0"), std::string::npos) << e.what();
  }
  // A checkpoint without GACT state still loads, into either config.
  const std::string plain = checkpoint_path(dir.string(), 2);
  save_checkpoint(plain, *p.model, *p.optimizer, {2, 0, c.seed}, "resnet20", stateful_stores(*p.policy));
  EXPECT_FALSE(read_safetensors(plain).find("gact.stores"));
  EXPECT_NO_THROW(load_checkpoint(plain, *p.model, *p.optimizer, stateful_stores(*p.policy)));
  Session fresh = make_session(c, synthetic_input_spec(c));
  EXPECT_NO_THROW(load_checkpoint(plain, *fresh.model, *fresh.optimizer, stateful_stores(*fresh.policy)));
  EXPECT_EQ(find_gact_stores(*fresh.policy)[0]->refreshes(), 0);
}

namespace {
// A copy of checkpoint `from` at `to` with `edit` applied to its tensors.
void rewrite(const std::string& from, const std::string& to, const std::function<void(NamedTensors&)>& edit) {
  SafetensorsFile f = read_safetensors(from);
  edit(f.tensors);
  write_safetensors(to, f.tensors, f.metadata);
}
Tensor& entry(NamedTensors& all, const std::string& name) {
  for (auto& [n, t] : all)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}
std::string load_error(const std::string& path, const std::vector<std::string>& sets = {}) {
  const Config c = tiny_config("/nonexistent", "/tmp/unused", sets);
  Session s = make_session(c, synthetic_input_spec(c));
  try {
    load_checkpoint(path, *s.model, *s.optimizer, stateful_stores(*s.policy));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

// A checkpoint a diverged run wrote, or one with implausible values, is refused on resume with
// the file and the entry named (NaN weights were restored, a negative step accepted, an absurd
// GACT tensor count ended in std::length_error).
TEST(Checkpoint, NonFiniteAndImplausibleValuesAreRefused) {
  const auto dir = temp_dir("checkpoint_hostile");
  const Config c = tiny_config("/nonexistent", dir);
  Session a = make_session(c, synthetic_input_spec(c));
  SyntheticBatch x = synthetic_batch(4, a.input.channels, a.input.height, a.input.width, a.input.classes, 5);
  train_step(*a.model, *a.optimizer, *a.policy, x.images, x.labels, 0, {});  // optimizer state to corrupt
  const std::string good = checkpoint_path(dir.string(), 2), bad = checkpoint_path(dir.string(), 3);
  save_checkpoint(good, *a.model, *a.optimizer, {2, 6, c.seed}, "resnet20");
  ASSERT_EQ(load_error(good), "(no error)");
  auto set_position = [](NamedTensors& t, int64_t epoch, int64_t step) {
    entry(t, "trainer.epoch").data<int64_t>()[0] = epoch;
    entry(t, "trainer.step").data<int64_t>()[0] = step;
    entry(t, "trainer.rng").data<int64_t>()[1] = epoch;
    entry(t, "trainer.rng").data<int64_t>()[2] = step;
  };

  rewrite(good, bad, [&](NamedTensors& t) {
    set_position(t, 3, 9);
    entry(t, "model.fc.weight").data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  });
  std::string m = load_error(bad);
  EXPECT_NE(m.find(bad + ": 'model.fc.weight' holds nan at element 5"), std::string::npos) << m;
  rewrite(good, bad, [&](NamedTensors& t) {
    set_position(t, 3, 9);
    entry(t, "optimizer.momentum_buffer.fc.weight").data<float>()[0] = std::numeric_limits<float>::infinity();
  });
  m = load_error(bad);
  EXPECT_NE(m.find("'optimizer.momentum_buffer.fc.weight' holds inf"), std::string::npos) << m;

  rewrite(good, bad, [&](NamedTensors& t) { set_position(t, 3, -5); });
  m = load_error(bad);
  EXPECT_NE(m.find("trainer.step is -5"), std::string::npos) << m;
  const std::string far = checkpoint_path(dir.string(), 999999999);
  rewrite(good, far, [&](NamedTensors& t) { set_position(t, 999999999, 10); });
  m = load_error(far);
  EXPECT_NE(m.find("trainer.epoch is 999999999, outside [0, 100000]"), std::string::npos) << m;
  fs::remove(far);
  rewrite(good, bad, [&](NamedTensors& t) {
    set_position(t, 3, 9);
    entry(t, "trainer.rng").data<int64_t>()[2] = 4;
  });
  m = load_error(bad);
  EXPECT_NE(m.find("trainer.rng holds epoch 3 step 4"), std::string::npos) << m;
  rewrite(good, bad, [](NamedTensors&) {});  // epoch 2's content under epoch 3's name
  m = load_error(bad);
  EXPECT_NE(m.find("named for epoch 3 but holds epoch 2"), std::string::npos) << m;

  // GACT sizes.
  const std::vector<std::string> gact = {"saved_tensors.rules=[]",
                                         "saved_tensors.default={scheme: gact, avg_bits: 3, tensors_per_refresh: 2}"};
  const Config g = tiny_config("/nonexistent", dir, gact);
  Session gs = make_session(g, synthetic_input_spec(g));
  SyntheticBatch b = synthetic_batch(4, gs.input.channels, gs.input.height, gs.input.width, gs.input.classes, 5);
  train_step(*gs.model, *gs.optimizer, *gs.policy, b.images, b.labels, 0, {});
  save_checkpoint(good, *gs.model, *gs.optimizer, {2, 1, g.seed}, "resnet20", stateful_stores(*gs.policy));
  ASSERT_EQ(load_error(good, gact), "(no error)");
  rewrite(good, checkpoint_path(dir.string(), 2),
          [](NamedTensors& t) { entry(t, "gact.0.tensors").data<int64_t>()[0] = int64_t{1} << 60; });
  m = load_error(good, gact);
  EXPECT_NE(m.find("'gact.0.tensors' is 1152921504606846976 but 'gact.0.sensitivity' has"), std::string::npos) << m;
  save_checkpoint(good, *gs.model, *gs.optimizer, {2, 1, g.seed}, "resnet20", stateful_stores(*gs.policy));
  rewrite(good, good, [](NamedTensors& t) { entry(t, "gact.0.numel").data<int64_t>()[0] = -7; });
  m = load_error(good, gact);
  EXPECT_NE(m.find("'gact.0.numel' entry 0 is -7"), std::string::npos) << m;
}
