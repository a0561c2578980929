#include "quant/fp8/fp8_store.h"

#include "core/error.h"

namespace packrat {

struct Fp8Store::Codes : Encoded {
  Tensor codes;   // (numel,) u8: one fp8 code an element, in the saved buffer's order
  Tensor scales;  // (groups,) f32
  void payload(std::vector<PayloadSlot>& out) override {
    out.push_back({&codes});
    out.push_back({&scales});
  }
};

Fp8Store::Fp8Store(Fp8Config c) : CompressingStore(Rules{}), cfg_(c) {
  PACKRAT_CHECK(cfg_.group_size >= 1, "fp8 store: group_size must be at least 1, got {}", cfg_.group_size);
}

Fp8Config Fp8Store::parse_options(SchemeOptions& o) {
  Fp8Config c;
  c.format = o.get_string("format", "e4m3", {"e4m3", "e5m2"}) == "e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3;
  c.scale = o.get_string("scale", "per_group", {"per_tensor", "per_group"}) == "per_tensor" ? Fp8Scale::PerTensor
                                                                                          : Fp8Scale::PerGroup;
  PACKRAT_CHECK(c.scale == Fp8Scale::PerGroup || !o.has("group_size"),
                "{}: 'group_size' is for scale: per_group; scale: per_tensor keeps one scale for the whole tensor",
                o.where());
  c.group_size = o.get_int("group_size", c.group_size, 1, int64_t{1} << 30);
  return c;
}

std::unique_ptr<SavedTensorStore> make_fp8_store(SchemeOptions& o) {
  const Fp8Config c = Fp8Store::parse_options(o);
  o.check_all_used();
  return std::make_unique<Fp8Store>(c);
}

std::unique_ptr<CompressingStore::Encoded> Fp8Store::encode(const Tensor& x, const SaveRequest&) {
  const Fp8Geometry g = fp8_geometry(x.numel(), cfg_);
  auto c = std::make_unique<Codes>();
  c->bits = 8;
  c->codes = Tensor::empty({g.numel}, DType::u8, Layout::Plain, MemTag::Saved, x.device());     // (numel,)
  c->scales = Tensor::empty({g.groups()}, DType::f32, Layout::Plain, MemTag::Saved, x.device());  // (groups,)
  fp8_encode(x, cfg_, c->codes, c->scales);
  return c;
}

Tensor Fp8Store::values(const Encoded& enc, const Entry& e) {
  const auto& c = static_cast<const Codes&>(enc);
  TagScope tag(MemTag::Workspace);  // a transient copy for the backward of one op, freed after it
  Tensor out = Tensor::empty(e.shape, DType::f32, e.layout, MemTag::Workspace, c.codes.device());  // as saved
  fp8_decode(c.codes, c.scales, cfg_, out);
  return out;
}

}  // namespace packrat
