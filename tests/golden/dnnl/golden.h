#pragma once
// Reader for the PyTorch golden files written by tests/golden/make_dnnl_goldens.py
// (format described there). Test support for the oneDNN op tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace packrat::testing {

inline std::map<std::string, Tensor> load_dnnl_golden(const std::string& file) {
  const std::string path = std::string(PACKRAT_SOURCE_DIR) + "/tests/golden/dnnl/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("golden file {} cannot be opened (run /usr/bin/python3 tests/golden/make_dnnl_goldens.py)", path);
  auto read = [&](void* p, size_t n) {
    in.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (!in) fail("golden file {} is truncated", path);
  };
  char magic[4];
  read(magic, 4);
  PACKRAT_CHECK(std::memcmp(magic, "PRGD", 4) == 0, "golden file {}: bad magic", path);
  uint32_t count = 0;
  read(&count, 4);
  std::map<std::string, Tensor> out;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0, rank = 0;
    read(&len, 4);
    std::string name(len, '\0');
    read(name.data(), len);
    read(&rank, 4);
    std::vector<int64_t> dims(rank);
    read(dims.data(), rank * sizeof(int64_t));
    Tensor t = Tensor::empty(Shape(dims));
    read(t.raw(), t.nbytes());
    out.emplace(name, t);
  }
  return out;
}

// Golden tensor by name, failing the test (by exception) when missing.
inline const Tensor& golden(const std::map<std::string, Tensor>& g, const std::string& name) {
  auto it = g.find(name);
  if (it == g.end()) fail("golden tensor '{}' is missing", name);
  return it->second;
}

// A fresh leaf copy of a golden input that requires grad, in the given layout.
inline Tensor golden_leaf(const std::map<std::string, Tensor>& g, const std::string& name,
                          Layout layout = Layout::Plain) {
  Tensor t = golden(g, name).to_layout(layout).clone();
  t.set_requires_grad(true);
  return t;
}

inline void expect_matches_golden(const Tensor& actual, const Tensor& expected, const std::string& what,
                                  float atol = 1e-4f, float rtol = 1e-4f) {
  ASSERT_TRUE(actual.defined()) << what << " is undefined";
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto a = actual.to_vector(), e = expected.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << what << " element " << i;
}

}  // namespace packrat::testing
