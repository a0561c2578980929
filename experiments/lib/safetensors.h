#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
// "__metadata__": {"k": "v"}}, then the tensors' bytes. Tensors are written in logical
// (plain, row-major) order, so PyTorch's safetensors.torch.load_file reads them as they are.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace packrat {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes atomically: a temporary file beside `path`, fsync, then rename over `path`.
// Supported dtypes: f32 (F32), f64 (F64), i64 (I64), i32 (I32), u8 (U8).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  NamedTensors tensors;  // in file order (by data offset), plain layout, tagged `tag`
  const Tensor* find(const std::string& name) const;
};

// Throws packrat::Error naming the file and what is wrong (truncated, bad header, offsets
// outside the data, size not matching dtype x shape, unknown dtype) on a corrupt file.
SafetensorsFile read_safetensors(const std::string& path, MemTag tag = MemTag::Workspace);

// Writes bytes to path atomically (temp file in the same directory, fsync, rename, fsync dir).
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace packrat
