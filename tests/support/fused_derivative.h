#pragma once
// What a store's fused activation backward promises on a device, for the stores that decode codes
// into grad * f'(x) in one pass (quant/codec/apply_derivative_sink.h): the CPU store's floats, and no
// Workspace tensor of the dequantized values (the two-pass path makes one as large as x).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autograd/pointwise.h"
#include "autograd/saved_tensor_store.h"
#include "core/allocator.h"
#include "tests/support/emulated_gpu.h"

namespace packrat::testing {

// A GELU's Derivative request, as the activation op makes it.
inline SaveRequest gelu_derivative_request() {
  SaveRequest r;
  r.need = Need::Derivative;
  r.op = "gelu";
  r.name = "act";
  r.fn = &pointwise_by_name("gelu");
  return r;
}

// Saves x in a store from make_store() on the CPU and on the emulated GPU (installed by the
// caller) and applies the derivative to grad on each: the same floats, and a Workspace peak on the
// device below one copy of x.
template <class MakeStore>
void expect_derivative_applied_without_workspace_copy(const MakeStore& make_store, const Tensor& x, const Tensor& grad,
                                                      const std::string& what) {
  const SaveRequest r = gelu_derivative_request();
  std::vector<std::vector<float>> results;
  for (const Device d : {Device::cpu(), EmulatedGpu::device()}) {
    DeviceScope on(d);
    auto store = make_store();
    store->begin_step(1);
    const SavedHandle h = store->save(x.to(d), r);
    Allocator& alloc = Allocator::of(d);
    alloc.reset_peak();
    const int64_t workspace_before = alloc.current(MemTag::Workspace);
    results.push_back(store->apply_derivative(h, grad.to(d)).to(Device::cpu()).to_vector());
    if (!d.is_cpu()) {
      EXPECT_LT(alloc.peak(MemTag::Workspace) - workspace_before, x.numel() * 4)
          << what << ": a Workspace copy of x was made";
    }
    store->release(h);
  }
  ASSERT_EQ(results[0].size(), results[1].size()) << what;
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)), 0)
      << what << ": the device's floats differ from the CPU's";
}

}  // namespace packrat::testing
