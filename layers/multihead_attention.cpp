#include "layers/multihead_attention.h"

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "layers/init.h"

namespace packrat {

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& o)
    : o_(o), attn_dropout_(o.dropout) {
  use_memory_efficient(o.attention, Device::cpu(), 0);  // an unknown algorithm fails here, naming the key
  PACKRAT_CHECK(o.embed_dim > 0 && o.num_heads > 0 && o.embed_dim % o.num_heads == 0,
                "MultiheadAttention: embed_dim {} must be a positive multiple of num_heads {}", o.embed_dim,
                o.num_heads);
  const int64_t D = o.embed_dim;
  TagScope tag(MemTag::Parameter);
  PhiloxStream rng(o.seed, 0);
  Tensor w = Tensor::empty({3 * D, D});  // (3D, D): q, k, v projections stacked
  const float bound = std::sqrt(6.0f / static_cast<float>(D + 3 * D));  // xavier_uniform_
  init::uniform(w, -bound, bound, rng);
  in_proj_weight_ = register_parameter("in_proj_weight", w);
  in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * D}));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(D, D, true, init::SeedSequence(o.seed).next()));
  init::constant(out_proj_->bias(), 0.0f);
}

bool use_memory_efficient(const std::string& attention, Device device, int64_t keys) {
  if (attention == "memory_efficient") return true;
  if (attention == "standard") return false;
  PACKRAT_CHECK(attention.empty(), "model.attention: unknown algorithm '{}' (standard, memory_efficient)", attention);
  return device.is_cpu() && keys >= kAutoMemoryEfficientFrom;
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  const int64_t D = o_.embed_dim, H = o_.num_heads, hd = D / H;
  PACKRAT_CHECK(x.defined() && x.rank() == 3 && x.dim(2) == D, "multihead_attention {}: expects an input (N, T, {}), got {}",
                LayerScope::current(), D, x.defined() ? x.describe() : std::string("an undefined tensor"));
  const int64_t N = x.dim(0), T = x.dim(1);
  const Tensor qkv = ops::linear(x, in_proj_weight_, in_proj_bias_);  // (N, T, 3D)
  // (N, T, 3, H, hd) -> (3, N, H, T, hd), then q, k, v (N, H, T, hd) each
  const std::vector<int64_t> to_heads{2, 0, 3, 1, 4};
  const Tensor heads = ops::permute(ops::reshape(qkv, Shape{N, T, 3, H, hd}), to_heads);
  std::vector<Tensor> parts = ops::split(heads, {1, 1, 1}, 0);
  for (Tensor& p : parts) p = ops::reshape(p, Shape{N, H, T, hd});
  ops::AttentionOptions ao;
  ao.causal = o_.causal;
  ao.dropout_p = o_.dropout;
  ao.training = training();
  ao.memory_efficient = use_memory_efficient(o_.attention, x.device(), T);
  ao.key_lengths = key_lengths_;
  if (training() && o_.dropout > 0.0f) {
    ao.seed = dropout_seed();
    ao.stream = attn_dropout_.next_stream();
  }
  const Tensor y = ops::scaled_dot_product_attention(parts[0], parts[1], parts[2], ao);  // (N, H, T, hd)
  const std::vector<int64_t> from_heads{0, 2, 1, 3};
  const Tensor merged = ops::reshape(ops::permute(y, from_heads), Shape{N, T, D});  // (N, T, D)
  return (*out_proj_)(merged);
}

}  // namespace packrat
