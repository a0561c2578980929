// Exact packing of masks and indices on a GPU. Without one: the bodies its CUDA kernels run
// (quant/bits/bitpack_device.h), block by block on the host, write the CPU kernel's bytes for every
// width and integer type, on lengths with tails, note the first value that does not fit, and
// unpack to the CPU's values. The Tensor entry points: the CPU's codes and the unfit index. With a
// GPU: the CUDA kernels write the same bytes and find the same first unfit element.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "quant/bits/bitpack.h"
#include "quant/bits/bitpack_device.h"
#include "tests/support/errors.h"
#include "tests/support/gpu.h"
#include "tests/support/host_launch.h"

namespace packrat {
namespace {

template <typename T>
std::vector<T> codes_below(int64_t n, int bits, uint64_t seed) {
  PhiloxStream s(seed, 11);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& c : v) c = static_cast<T>(s.below(uint32_t{1} << bits));
  return v;
}

template <typename T>
Tensor tensor_of(const std::vector<T>& v, DType d) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, d);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}

// The values of v as a CPU tensor of dtype d (u8, i32 or i64).
Tensor integers(const std::vector<int64_t>& v, DType d) {
  switch (d) {
    case DType::u8: return tensor_of(std::vector<uint8_t>(v.begin(), v.end()), d);
    case DType::i32: return tensor_of(std::vector<int32_t>(v.begin(), v.end()), d);
    default: return tensor_of(v, d);
  }
}

template <typename T>
void check_type(DType dtype) {
  for (int bits = 1; bits <= 8; ++bits)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1003}}) {
      const std::string what = std::string(dtype_name(dtype)) + " bits " + std::to_string(bits) + " n " + std::to_string(n);
      const std::vector<T> v = codes_below<T>(n, bits, static_cast<uint64_t>(bits * 1000 + n));
      std::vector<uint8_t> c8(v.begin(), v.end());
      const int64_t bytes = packed_bytes(n, bits), blocks = (n + 7) / 8;
      std::vector<uint8_t> cpu(static_cast<size_t>(bytes)), body(static_cast<size_t>(bytes), 0xEE);
      pack_bits(c8.data(), n, bits, cpu.data());
      int64_t first = -1;
      testing::run_on_host(blocks, PackCodesBody<T, HostFirstUnfit>{v.data(), n, bits, body.data(), {&first}});
      ASSERT_EQ(body, cpu) << what;
      EXPECT_EQ(first, -1) << what;

      std::vector<T> back(static_cast<size_t>(n), T{99});
      testing::run_on_host(blocks, UnpackCodesBody<T>{cpu.data(), n, bits, back.data()});
      ASSERT_EQ(back, v) << what;

      // The entry points: the same bytes, the same values back.
      const Tensor src = tensor_of(v, dtype);
      const Tensor packed = Tensor::empty(Shape{bytes}, DType::u8);
      ASSERT_EQ(pack_codes(src, bits, packed), -1) << what;
      ASSERT_EQ(std::memcmp(packed.raw(), cpu.data(), static_cast<size_t>(bytes)), 0) << what;
      const Tensor out = Tensor::empty(Shape{n}, dtype);
      unpack_codes(packed, bits, out);
      ASSERT_EQ(std::memcmp(out.raw(), v.data(), v.size() * sizeof(T)), 0) << what;

      // Values that do not fit: the body notes the first, as the entry point reports it.
      if (bits == 8 && sizeof(T) == 1) continue;  // every u8 fits 8 bits
      std::vector<T> bad = v;
      const int64_t at = n / 2;
      bad[static_cast<size_t>(at)] = static_cast<T>(int64_t{1} << bits);
      if (at + 1 < n) bad[static_cast<size_t>(n - 1)] = static_cast<T>(int64_t{1} << bits);
      first = -1;
      testing::run_on_host(blocks, PackCodesBody<T, HostFirstUnfit>{bad.data(), n, bits, body.data(), {&first}});
      EXPECT_EQ(first, at) << what;
      EXPECT_EQ(pack_codes(tensor_of(bad, dtype), bits, packed), at) << what;
      if constexpr (sizeof(T) > 1) {
        bad[static_cast<size_t>(at)] = static_cast<T>(-1);  // negative
        EXPECT_EQ(pack_codes(tensor_of(bad, dtype), bits, packed), at) << what << " negative";
      }
    }
}

TEST(BitpackDevice, TheKernelBodiesWriteTheCpuKernelsBytesAndFindTheFirstUnfitValue) {
  check_type<uint8_t>(DType::u8);
  check_type<int32_t>(DType::i32);
  check_type<int64_t>(DType::i64);
}

// A mask large enough to be checked in parallel blocks: the unfit value reported is the first of
// the tensor, whichever thread's block holds it, and a later one in the same block does not hide it.
TEST(BitpackDevice, TheFirstUnfitValueOfALargeTensorIsTheFirstAcrossBlocksAndThreads) {
  const int64_t n = 300001;
  const Tensor packed = Tensor::empty(Shape{packed_bytes(n, 1)}, DType::u8);
  for (const std::vector<int64_t>& unfit : std::vector<std::vector<int64_t>>{
           {299999}, {4095, 4096}, {4097, 8190}, {150001, 290000}, {17, 150001}, {n - 1}}) {
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mask[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 3 == 0);
    for (const int64_t at : unfit) mask[static_cast<size_t>(at)] = 2;
    EXPECT_EQ(pack_codes(tensor_of(mask, DType::u8), 1, packed), unfit.front()) << unfit.front();
    std::vector<int32_t> wide(mask.begin(), mask.end());
    wide[static_cast<size_t>(unfit.front())] = -1;
    EXPECT_EQ(pack_codes(tensor_of(wide, DType::i32), 1, packed), unfit.front()) << unfit.front() << " negative";
  }
  std::vector<uint8_t> fits(static_cast<size_t>(n), 1);
  EXPECT_EQ(pack_codes(tensor_of(fits, DType::u8), 1, packed), -1);
}

TEST(BitpackDevice, EntryPointsCheckTheirOperands) {
  const Tensor f = Tensor::empty(Shape{9});
  const Tensor packed = Tensor::empty(Shape{2}, DType::u8);
  EXPECT_EQ(testing::message_of([&] { pack_codes(f, 1, packed); }), "pack_codes: codes must be integers (u8, i32, i64), got f32");
  const Tensor m = Tensor::empty(Shape{9}, DType::u8);
  EXPECT_EQ(testing::message_of([&] { pack_codes(m, 9, packed); }), "pack_codes: bits must be in [1, 8], got 9");
  EXPECT_EQ(testing::message_of([&] { unpack_codes(packed, 2, m); }),
            "unpack_codes: 9 codes of 2 bits need 3 packed bytes, 2 given");
}

TEST(BitpackDevice, CudaKernelsWriteTheCpuBytes) {
  PACKRAT_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::u8, DType::i32, DType::i64})
    for (int bits : {1, 2, 3, 4, 5, 8}) {
      const int64_t n = 100003;
      const std::vector<int64_t> v = codes_below<int64_t>(n, bits, static_cast<uint64_t>(bits));
      const Tensor src = integers(v, dtype);
      const int64_t bytes = packed_bytes(n, bits);
      const Tensor packed = Tensor::empty(Shape{bytes}, DType::u8);
      const Tensor gpacked = Tensor::empty(Shape{bytes}, DType::u8, Layout::Plain, MemTag::Saved, gpu);
      const std::string what = std::string(dtype_name(dtype)) + " bits " + std::to_string(bits);
      ASSERT_EQ(pack_codes(src, bits, packed), -1) << what;
      ASSERT_EQ(pack_codes(src.to(gpu), bits, gpacked), -1) << what;
      const Tensor back = gpacked.to(Device::cpu());
      ASSERT_EQ(std::memcmp(back.raw(), packed.raw(), static_cast<size_t>(bytes)), 0) << what;
      const Tensor gout = Tensor::empty(Shape{n}, dtype, Layout::Plain, MemTag::Workspace, gpu);
      unpack_codes(gpacked, bits, gout);
      const Tensor out = gout.to(Device::cpu());
      ASSERT_EQ(std::memcmp(out.raw(), src.raw(), src.nbytes()), 0) << what;
      if (bits == 8 && dtype == DType::u8) continue;
      std::vector<int64_t> bad = v;
      bad[70001] = int64_t{1} << bits;
      bad[90001] = int64_t{1} << bits;
      EXPECT_EQ(pack_codes(integers(bad, dtype).to(gpu), bits, gpacked), 70001) << what;
    }
}

}  // namespace
}  // namespace packrat
