#pragma once
// The small Vision Transformer of the ViT tests: the shape tests/golden/make_transformer_goldens.py
// builds in torchvision (image 8, patch 4 -> 4 patches + class token, 2 blocks, width 16, 2 heads).
#include "models/vit.h"

namespace packrat::testing {

inline VitConfig small_vit_config() {
  VitConfig c;
  c.image_size = 8;
  c.patch_size = 4;
  c.num_layers = 2;
  c.num_heads = 2;
  c.hidden_dim = 16;
  c.mlp_dim = 32;
  c.num_classes = 10;
  return c;
}

}  // namespace packrat::testing
