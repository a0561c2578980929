#pragma once
// Loader for the PyTorch goldens of tests/golden/eltwise/ (made by
// tests/golden/make_eltwise_goldens.py): one tensor per line, `name rank d0 .. dk v0 v1 ...`.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace packrat::testing {

struct GoldenTensor {
  Shape shape;
  std::vector<double> values;
  Tensor f32() const { return Tensor::from_vector(shape, std::vector<float>(values.begin(), values.end())); }
  Tensor i64() const {
    Tensor t = Tensor::empty(shape, DType::i64);
    for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = static_cast<int64_t>(values[i]);
    return t;
  }
};

// `dir`: a folder under tests/golden/ in this format (eltwise, transformer).
inline std::map<std::string, GoldenTensor> load_golden(const std::string& file, const std::string& dir = "eltwise") {
  const std::string path = std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/" + dir + "/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  std::map<std::string, GoldenTensor> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    int64_t rank = 0;
    if (!(ls >> name >> rank)) continue;
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (auto& d : dims) ls >> d;
    GoldenTensor g{Shape(dims), {}};
    std::string tok;
    while (ls >> tok) g.values.push_back(std::stod(tok));
    if (static_cast<int64_t>(g.values.size()) != g.shape.numel())
      throw std::runtime_error("golden " + file + ": " + name + " has the wrong number of values");
    out.emplace(name, std::move(g));
  }
  return out;
}

// |got - want| <= atol + rtol |want| elementwise, with shapes equal.
inline void expect_close(const Tensor& got, const GoldenTensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape) << what;
  const std::vector<float> v = got.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_NEAR(v[i], want.values[i], atol + rtol * std::abs(want.values[i])) << what << " element " << i;
}

}  // namespace packrat::testing
