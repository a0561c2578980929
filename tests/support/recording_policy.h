#pragma once
// An FP32 policy that remembers every request it served (test support): what an op saves.
#include <vector>

#include "autograd/fp32_store.h"

namespace packrat::testing {

class RecordingPolicy : public StorePolicy {
 public:
  class Store : public Fp32Store {
   public:
    SavedHandle save(const Tensor& x, const SaveRequest& r) override {
      requests.push_back(r);
      dtypes.push_back(x.dtype());
      return Fp32Store::save(x, r);
    }
    std::vector<SaveRequest> requests;
    std::vector<DType> dtypes;
  };
  SavedTensorStore& store_for(const SaveRequest&) override { return store; }
  std::vector<SavedTensorStore*> stores() override { return {&store}; }
  Store store;
};

}  // namespace packrat::testing
