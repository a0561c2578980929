#include "layers/module.h"

#include "autograd/checkpoint.h"
#include "autograd/tape.h"
#include "core/allocator.h"

namespace packrat {

Tensor Module::operator()(const Tensor& x) {
  LayerScope scope(name_);
  if (recompute_ && recording()) return forward_as_segment(x);
  return forward(x);
}

Tensor Module::forward_as_segment(const Tensor& x) {
  // The mask streams' counters before the forward: the recompute draws the same masks from them,
  // then leaves the counters where the first forward left them.
  std::vector<std::pair<std::string, MaskStream*>> streams = named_mask_streams();
  std::vector<MaskStream> before;  // (streams)
  for (auto& [n, s] : streams) before.push_back(*s);
  return checkpoint(
      [this, streams, before](const Tensor& in) {
        if (!recomputing()) return forward(in);
        std::vector<MaskStream> after;  // (streams)
        for (size_t i = 0; i < streams.size(); ++i) {
          after.push_back(*streams[i].second);
          *streams[i].second = before[i];
        }
        Tensor y = forward(in);
        for (size_t i = 0; i < streams.size(); ++i) *streams[i].second = after[i];
        return y;
      },
      x);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& [n, child] : children_) {
    out.emplace_back(n, child.get());
    for (const auto& [below, m] : child->named_modules()) out.emplace_back(n + "." + below, m);
  }
  return out;
}

Tensor& Module::register_parameter(std::string name, Tensor t) {
  t.storage()->allocation->retag(MemTag::Parameter);
  t.set_requires_grad(true);
  params_.emplace_back(std::move(name), t);
  return params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor t) {
  t.storage()->allocation->retag(MemTag::Parameter);
  buffers_.emplace_back(std::move(name), t);
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", buffers, out);
}

std::vector<std::string> Module::module_names() const {
  std::vector<std::string> out;
  for (const auto& [n, child] : children_) {
    out.push_back(n);
    for (const std::string& below : child->module_names()) out.push_back(n + "." + below);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

void Module::collect_mask_streams(const std::string& path, std::vector<std::pair<std::string, MaskStream*>>& out) {
  for (auto& [n, stream] : own_mask_streams()) out.emplace_back(n.empty() ? path : path.empty() ? n : path + "." + n, stream);
  for (const auto& [n, child] : children_) child->collect_mask_streams(path.empty() ? n : path + "." + n, out);
}

std::vector<std::pair<std::string, MaskStream*>> Module::named_mask_streams() {
  std::vector<std::pair<std::string, MaskStream*>> out;
  collect_mask_streams("", out);
  return out;
}

std::vector<std::pair<std::string, MaskStream>> Module::named_mask_streams() const {
  std::vector<std::pair<std::string, MaskStream>> out;
  // Only read: the walk is the non-const one's.
  for (const auto& [n, stream] : const_cast<Module*>(this)->named_mask_streams()) out.emplace_back(n, *stream);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

}  // namespace packrat
