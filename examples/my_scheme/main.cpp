// A storage scheme of your own, registered before the trainer reads its config: "bf16" keeps
// every saved f32 activation as bfloat16 (the upper 16 bits of the f32, rounded to nearest
// even): half the FP32 bytes, 8 bits of mantissa. Build: it is built with packrat
// (build/bin/my_scheme); run it exactly like the trainer:
//
//   build/bin/my_scheme --config configs/quickstart.yaml --set 'saved_tensors.default={scheme: bf16}'
//
// The store contract (autograd/saved_tensor_store.h): save() gets the tensor an op keeps for
// backward and what backward needs from it (SaveRequest::need); load() gives back that; the
// bytes held are packrat tensors allocated under TagScope(MemTag::Saved), so the allocator and
// the memory report count them; describe() reports one record per live handle.
#include <map>
#include <memory>

#include "autograd/fp32_store.h"
#include "core/error.h"
#include "experiments/lib/trainer_main.h"
#include "quant/group/group_quant.h"  // f32_to_bf16, bf16_to_f32
#include "quant/policy/rule_policy.h"

namespace {

using namespace packrat;

class Bf16Store : public SavedTensorStore {
 public:
  std::string_view scheme() const override { return "bf16"; }

  SavedHandle save(const Tensor& x, const SaveRequest& r) override {
    // Masks, indices, exact requests (batchnorm statistics) and non-f32 data stay exact: the
    // FP32 store keeps them, and its handles go straight back to it.
    const bool lossy = (r.need == Need::Value || r.need == Need::Derivative) && !r.exact && x.dtype() == DType::f32;
    if (!lossy) return exact_.save(x, r);
    // A buffer saved by two ops (a block input read by a conv and the shortcut) is held once.
    uint64_t held_id = 0;
    if (auto it = by_storage_.find(x.storage()->id); it != by_storage_.end() && held_.count(it->second) &&
                                                     held_.at(it->second).version == x.version())
      held_id = it->second;
    const bool shared = held_id != 0;
    if (!shared) {
      Held h;
      h.version = x.version();
      h.storage_id = x.storage()->id;
      {
        TagScope tag(MemTag::Saved);
        h.codes = Tensor::empty({2 * x.numel()}, DType::u8);  // (2 * numel,) bf16 codes
      }
      const float* src = x.data<float>();
      auto* dst = reinterpret_cast<uint16_t*>(h.codes.data<uint8_t>());
      for (int64_t i = 0; i < x.numel(); ++i) dst[i] = f32_to_bf16(src[i]);
      held_id = next_held_++;
      held_.emplace(held_id, std::move(h));
      by_storage_[x.storage()->id] = held_id;
    }
    ++held_.at(held_id).refs;
    const uint64_t id = next_id_++;
    entries_.emplace(id, Entry{held_id, r, x.shape(), x.layout(), shared, x.storage()->id});
    return {this, id};
  }

  Tensor load(const SavedHandle& h) override {
    auto it = entries_.find(h.id);
    PACKRAT_CHECK(it != entries_.end(), "bf16 store: saved tensor {} was already released", h.id);
    const Entry& e = it->second;
    TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op
    Tensor out = Tensor::empty(e.shape, DType::f32, e.layout);  // same shape and layout as saved
    const auto* src = reinterpret_cast<const uint16_t*>(held_.at(e.held).codes.data<uint8_t>());
    float* dst = out.data<float>();
    for (int64_t i = 0; i < out.numel(); ++i) dst[i] = bf16_to_f32(src[i]);
    // A derivative request: f' of the value (or of the output, where the op handed y over).
    return e.request.need == Need::Derivative ? pointwise_derivative(*e.request.fn, out) : out;
  }

  void release(const SavedHandle& h) override {
    auto it = entries_.find(h.id);
    if (it == entries_.end()) return;
    Held& held = held_.at(it->second.held);
    if (--held.refs == 0) {
      if (auto b = by_storage_.find(held.storage_id); b != by_storage_.end() && b->second == it->second.held)
        by_storage_.erase(b);
      held_.erase(it->second.held);
    }
    entries_.erase(it);
  }

  void describe(std::vector<SavedRecord>& out) const override {
    for (const auto& [id, e] : entries_) {
      SavedRecord rec;
      rec.layer = e.request.name;
      rec.op = std::string(e.request.op);
      rec.scheme = "bf16";
      rec.need = e.request.need;
      rec.bits = 16;
      rec.numel = e.shape.numel();
      rec.shared = e.shared;
      rec.fp32_key = e.fp32_key;
      rec.fp32_bytes = e.shared ? 0 : rec.numel * 4;
      rec.bytes = e.shared ? 0 : static_cast<int64_t>(held_.at(e.held).codes.storage()->allocation->bytes());
      out.push_back(std::move(rec));
    }
    exact_.describe(out);
  }

  size_t live_count() const override { return entries_.size() + exact_.live_count(); }

 private:
  struct Held {
    Tensor codes;  // u8 (2 * numel,), tagged Saved
    int64_t version = 0;
    uint64_t storage_id = 0;  // of the tensor saved
    int refs = 0;
  };
  struct Entry {
    uint64_t held;
    SaveRequest request;
    Shape shape;
    Layout layout;
    bool shared;
    uint64_t fp32_key;  // the storage FP32 would hold: shared saves count their FP32 bytes once
  };
  Fp32Store exact_;
  std::map<uint64_t, Held> held_;
  std::map<uint64_t, uint64_t> by_storage_;  // storage id -> held
  std::map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 1, next_held_ = 1;
};

// The factory reads the scheme's options from the config; this scheme has none, so any key
// written next to `scheme: bf16` is an error naming it (SchemeOptions::check_all_used).
std::unique_ptr<SavedTensorStore> make_bf16_store(SchemeOptions&) { return std::make_unique<Bf16Store>(); }

}  // namespace

int main(int argc, char** argv) {
  packrat::register_scheme("bf16", make_bf16_store);
  return packrat::run_trainer(argc, argv);
}
