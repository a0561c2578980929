#include "core/cpu/dnnl_context.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/cpu/layout.h"
#include "core/cpu/loops.h"

namespace packrat::cpu {

using dnnl::memory;

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool avx512_kernels() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

bool bf16_kernels() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

bool amx_kernels() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

namespace {
ActivationLayout activation_layout_from_environment() {
  const char* v = std::getenv("PACKRAT_CPU_ACTIVATIONS");
  if (v == nullptr || *v == '\0') return ActivationLayout::Auto;
  const std::string_view s(v);
  if (s == "blocked") return ActivationLayout::Blocked;
  if (s == "channels_last") return ActivationLayout::ChannelsLast;
  fail("PACKRAT_CPU_ACTIVATIONS: unknown value '{}' (blocked or channels_last)", s);
}
std::atomic<ActivationLayout>& activation_layout_setting() {
  static std::atomic<ActivationLayout> setting{activation_layout_from_environment()};
  return setting;
}
}  // namespace

void set_activation_layout(ActivationLayout l) { activation_layout_setting() = l; }
ActivationLayout activation_layout() { return activation_layout_setting().load(); }

bool channels_last_convolutions(DType dtype) {
  switch (activation_layout()) {
    case ActivationLayout::Blocked: return false;
    case ActivationLayout::ChannelsLast: return true;
    default: return is_half(dtype) && amx_kernels();
  }
}

Layout native_blocked_layout() {
  static const Layout native = avx512_kernels() ? Layout::nChw16c : Layout::nChw8c;
  return native;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::primitive_attr dnnl_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  return attr;
}

memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::f32: return memory::data_type::f32;
    case DType::u8: return memory::data_type::u8;
    case DType::i32: return memory::data_type::s32;
    case DType::bf16: return memory::data_type::bf16;
    case DType::f16: return memory::data_type::f16;
    default: fail("oneDNN: dtype {} is not supported by the CPU kernels (use f32)", dtype_name(t));
  }
}

memory::desc desc_for(const Shape& shape, DType dtype, Layout layout) {
  const memory::dims dims = dims_of(shape);
  if (layout == Layout::nChw16c) return memory::desc(dims, dnnl_type(dtype), memory::format_tag::nChw16c);
  if (layout == Layout::nChw8c) return memory::desc(dims, dnnl_type(dtype), memory::format_tag::nChw8c);
  if (layout == Layout::NHWC) return memory::desc(dims, dnnl_type(dtype), memory::format_tag::nhwc);
  memory::dims strides(dims.size());
  memory::dim s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return memory::desc(dims, dnnl_type(dtype), strides);
}

memory memory_of(const Tensor& t) { return memory_of(t, desc_of(t)); }

memory memory_of(const Tensor& t, const memory::desc& d) { return memory(d, dnnl_engine(), t.raw()); }

std::optional<Layout> layout_of(const memory::desc& d) {
  if (d.dims().size() != 4) return std::nullopt;
  const Shape s(std::vector<int64_t>(d.dims().begin(), d.dims().end()));
  const DType dt = d.data_type() == memory::data_type::f32    ? DType::f32
                   : d.data_type() == memory::data_type::u8   ? DType::u8
                   : d.data_type() == memory::data_type::bf16 ? DType::bf16
                   : d.data_type() == memory::data_type::f16  ? DType::f16
                                                              : DType::i32;
  if (d == desc_for(s, dt, Layout::Plain)) return Layout::Plain;
  for (Layout blocked : {Layout::nChw16c, Layout::nChw8c})
    if (s[1] % channel_block(blocked) == 0 && d == desc_for(s, dt, blocked)) return blocked;
  if (d == desc_for(s, dt, Layout::NHWC)) return Layout::NHWC;
  return std::nullopt;
}

namespace {
// Whether a 4-d tensor's buffer is the same bytes in both layouts: a layout orders channels and
// pixels, so with one pixel a plane (H W = 1) every layout lies (N, C) where whole channel blocks
// cover C, and with one channel NHWC lies as plain.
bool same_bytes(const Tensor& t, Layout a, Layout b) {
  auto unpadded = [&](Layout l) { return channel_block(l) == 0 || t.dim(1) % channel_block(l) == 0; };
  if (!unpadded(a) || !unpadded(b)) return false;
  const bool unblocked = channel_block(a) == 0 && channel_block(b) == 0;
  return t.dim(2) * t.dim(3) == 1 || (t.dim(1) == 1 && unblocked);
}
}  // namespace

Tensor to_layout(const Tensor& t, Layout layout) {
  if (t.layout() == layout) return t;
  if (t.rank() != 4 || t.dtype() == DType::f64 || t.dtype() == DType::i64) return reorder_loop(t, layout);
  Tensor out = empty_cpu(t.shape(), t.dtype(), layout);  // (N, C, H, W) in `layout`
  if (same_bytes(t, t.layout(), layout)) {
    // Squeeze-and-excitation's (N, C, 1, 1) scales: oneDNN 2.6 reorders a bf16 one on AVX2 with its
    // reference kernel, 5 ms for (32, 1280, 1, 1) (125 ns a value), 16 times an EfficientNet-B0 step.
    std::memcpy(out.raw(), t.raw(), t.nbytes());
    return out;
  }
  reorder(memory_of(t), memory_of(out));
  return out;
}

Tensor reorder_into_buffer(const Tensor& src, const memory::desc& src_desc, const memory::desc& want, MemTag tag) {
  Tensor out = Tensor::empty(Shape{static_cast<int64_t>((want.get_size() + 3) / 4)}, DType::f32, Layout::Plain, tag,
                             Device::cpu());
  reorder(memory_of(src, src_desc), memory(want, dnnl_engine(), out.raw()));
  return out;
}

void reorder_from_buffer(const Tensor& buffer, const memory::desc& from_desc, Tensor& dst) {
  reorder(memory(from_desc, dnnl_engine(), buffer.raw()), memory_of(dst));
}

void reorder(const memory& from, const memory& to) {
  // Small copies (weights) run on the calling thread: waking the OpenMP team costs more than
  // the copy, and far more when other processes share the cores. The thread count is set
  // before the primitive is created (oneDNN keys its primitive cache on it).
  const bool small = from.get_desc().get_size() < (size_t{4} << 20);
  const int threads = omp_get_max_threads();
  if (small) omp_set_num_threads(1);
  try {
    const dnnl::reorder::primitive_desc pd(dnnl_engine(), from.get_desc(), dnnl_engine(), to.get_desc(), dnnl_attr());
    execute(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  } catch (...) {
    if (small) omp_set_num_threads(threads);
    throw;
  }
  if (small) omp_set_num_threads(threads);
}

void execute(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, std::unordered_map<int, memory> args) {
  const memory::desc sd = pd.scratchpad_desc();
  Tensor scratch;  // (bytes,) u8, alive until the primitive has run
  if (sd.get_size() > 0) {
    scratch = Tensor::empty(Shape{static_cast<int64_t>(sd.get_size())}, DType::u8, Layout::Plain, MemTag::Workspace,
                            Device::cpu());
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(sd, dnnl_engine(), scratch.raw()));
  }
  p.execute(dnnl_stream(), args);
  dnnl_stream().wait();
}


}  // namespace packrat::cpu
