#pragma once
// Reader for the golden files of tests/golden/models (made by tests/golden/make_model_goldens.py).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <cstring>
#include <set>

#include "core/tensor.h"
#include "experiments/lib/safetensors.h"
#include "layers/module.h"

namespace packrat::testing {

inline std::string golden_path(const std::string& file) {
  return std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/models/" + file;
}

// Lines "<key> <count> <values...>".
inline std::map<std::string, std::vector<float>> read_golden_values(const std::string& file) {
  std::ifstream in(golden_path(file));
  EXPECT_TRUE(in.good()) << "cannot open " << golden_path(file);
  std::map<std::string, std::vector<float>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    size_t n = 0;
    if (!(s >> key >> n)) continue;
    std::vector<float> v(n);
    for (auto& x : v) s >> x;
    out[key] = v;
  }
  return out;
}

inline const std::vector<float>& golden_at(const std::map<std::string, std::vector<float>>& g, const std::string& key) {
  auto it = g.find(key);
  if (it == g.end()) throw std::runtime_error("golden key missing: " + key);
  return it->second;
}

// The golden tensor `key` with the given shape.
inline Tensor golden_tensor(const std::map<std::string, std::vector<float>>& g, const std::string& key,
                            const Shape& shape) {
  return Tensor::from_vector(shape, golden_at(g, key));
}

// Lines "param|buffer <name> <dims...>": a torchvision state_dict's keys and shapes.
struct KeyLine {
  std::string kind, name;
  Shape shape;
};

inline std::vector<KeyLine> read_keys(const std::string& file) {
  std::ifstream in(golden_path(file));
  EXPECT_TRUE(in.good()) << "cannot open " << golden_path(file);
  std::vector<KeyLine> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    KeyLine k;
    if (!(s >> k.kind >> k.name)) continue;
    std::vector<int64_t> dims;
    int64_t d;
    while (s >> d) dims.push_back(d);
    k.shape = Shape(dims);
    out.push_back(k);
  }
  return out;
}

// The model's parameters (names, order, shapes) and buffers (names, shapes) equal those a
// torchvision state_dict lists in the keys file: a state dict loads both ways with strict=True.
inline void expect_torchvision_keys(Module& model, const std::string& keys_file) {
  const auto keys = read_keys(keys_file);
  ASSERT_FALSE(keys.empty());
  std::vector<std::pair<std::string, Shape>> want_params;
  std::map<std::string, Shape> want_buffers;
  for (const auto& k : keys) {
    if (k.kind == "param")
      want_params.emplace_back(k.name, k.shape);
    else
      want_buffers[k.name] = k.shape;
  }
  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), want_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].first, want_params[i].first) << "parameter " << i;  // same order as torch
    EXPECT_EQ(params[i].second.shape(), want_params[i].second) << params[i].first;
  }
  std::map<std::string, Shape> buffers;
  for (const auto& [n, t] : model.named_buffers()) buffers[n] = t.shape();
  EXPECT_EQ(buffers, want_buffers);
}

// In an unnamed namespace: tests/core/backend_test_support.h has an expect_close with the same
// signature and the tolerances the other way round; as two inline definitions of one function
// the linker kept one of them for every test (an ODR violation), so these goldens were checked
// with swapped tolerances.
namespace {
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " element " << i;
}
inline void expect_close(const Tensor& got, const Tensor& want, float atol, float rtol, const std::string& what) {
  expect_close(got.to_vector(), want.to_vector(), atol, rtol, what);
}
}  // namespace

// A safetensors golden of tests/golden/models (make_gpt_golden.py, make_bert_golden.py): copies
// every "param.<name>" into the model's parameter of that name and shape, and expects the two
// sets of names to be the same (PyTorch lists a tied weight once, as packrat does).
inline void load_golden_parameters(Module& model, const SafetensorsFile& f) {
  std::set<std::string> ours, theirs;
  for (auto& [name, p] : model.named_parameters()) {
    ours.insert(name);
    const Tensor* w = f.find("param." + name);
    ASSERT_NE(w, nullptr) << "no golden parameter " << name;
    ASSERT_EQ(w->shape(), p.shape()) << name;
    std::memcpy(p.raw(), w->raw(), p.nbytes());
    p.bump_version();
  }
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("param.", 0) == 0) theirs.insert(name.substr(6));
  EXPECT_EQ(ours, theirs);
}

}  // namespace packrat::testing
