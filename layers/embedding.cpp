#include "layers/embedding.h"

#include "autograd/ops.h"
#include "layers/init.h"

namespace packrat {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, uint64_t seed) : num_(num_embeddings), dim_(dim) {
  PACKRAT_CHECK(num_ > 0 && dim_ > 0, "Embedding: sizes must be positive, got num={} dim={}", num_, dim_);
  TagScope tag(MemTag::Parameter);
  PhiloxStream rng(seed, 0);
  Tensor w = Tensor::empty({num_, dim_});  // (num, dim)
  init::normal(w, 0.0f, 1.0f, rng);
  weight_ = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) {
  PACKRAT_CHECK(ids.defined() && ids.dtype() == DType::i64, "embedding {}: expects i64 ids, got {}",
                LayerScope::current(), ids.defined() ? ids.describe() : std::string("an undefined tensor"));
  return ops::embedding(ids, weight_);
}

Tensor position_ids(int64_t n, int64_t t, Device device) {
  TagScope tag(MemTag::Data);
  Tensor host = Tensor::empty(Shape{n, t}, DType::i64, Layout::Plain, MemTag::Data, Device::cpu());  // (n, t)
  int64_t* p = host.data<int64_t>();
  for (int64_t i = 0; i < n * t; ++i) p[i] = i % t;
  return host.to(device);
}

}  // namespace packrat
