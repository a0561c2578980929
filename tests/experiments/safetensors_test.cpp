#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "experiments/lib/json.h"
#include "experiments/lib/safetensors.h"
#include "tests/support/errors.h"

using namespace packrat;
using packrat::testing::message_of;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("packrat_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::string error_reading(const fs::path& p) {
  try {
    read_safetensors(p.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A file with the given header text and data bytes.
std::string make_file(const std::string& header, size_t data_bytes) {
  std::string b;
  for (int i = 0; i < 8; ++i) b += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return b + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  Tensor f = Tensor::from_vector({2, 3}, std::vector<float>{1, -2, 3.5f, 4, 5, 6});
  Tensor d = Tensor::from_vector({2}, std::vector<double>{1e-300, -7});
  Tensor i64 = Tensor::empty({3}, DType::i64);
  i64.data<int64_t>()[0] = -1;
  i64.data<int64_t>()[1] = int64_t{1} << 60;
  i64.data<int64_t>()[2] = 5;
  Tensor u8 = Tensor::empty({4}, DType::u8);
  for (int k = 0; k < 4; ++k) u8.data<uint8_t>()[k] = static_cast<uint8_t>(250 + k);
  Tensor i32 = Tensor::empty({1}, DType::i32);
  i32.data<int32_t>()[0] = -123456;
  const fs::path p = temp_path("a.safetensors");
  write_safetensors(p.string(), {{"layer1.0.conv1.weight", f}, {"d", d}, {"step", i64}, {"mask", u8}, {"n", i32}},
                    {{"format", "pt"}, {"epoch", "3"}});
  SafetensorsFile r = read_safetensors(p.string());
  EXPECT_EQ(r.metadata.at("format"), "pt");
  EXPECT_EQ(r.metadata.at("epoch"), "3");
  ASSERT_EQ(r.tensors.size(), 5u);
  EXPECT_EQ(r.tensors[0].first, "layer1.0.conv1.weight");
  EXPECT_EQ(r.find("layer1.0.conv1.weight")->to_vector(), f.to_vector());
  EXPECT_EQ(r.find("layer1.0.conv1.weight")->shape(), Shape({2, 3}));
  EXPECT_EQ(r.find("d")->to_vector(), d.to_vector());
  EXPECT_EQ(r.find("step")->data<int64_t>()[1], int64_t{1} << 60);
  EXPECT_EQ(r.find("mask")->data<uint8_t>()[3], 253);
  EXPECT_EQ(r.find("n")->data<int32_t>()[0], -123456);
}

// 16-bit floats keep their dtype and bits under safetensors' names (BF16, F16), as torch writes them.
TEST(Safetensors, RoundTripsSixteenBitFloats) {
  const Tensor f = Tensor::from_vector({2, 2}, std::vector<float>{1.0f, -2.5f, 0.15625f, 3e4f});
  const Tensor b = f.to(DType::bf16), h = f.to(DType::f16);
  const fs::path p = temp_path("half.safetensors");
  write_safetensors(p.string(), {{"b", b}, {"h", h}}, {});
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"dtype\":\"BF16\""), std::string::npos);
  EXPECT_NE(bytes.find("\"dtype\":\"F16\""), std::string::npos);
  SafetensorsFile r = read_safetensors(p.string());
  ASSERT_EQ(r.find("b")->dtype(), DType::bf16);
  ASSERT_EQ(r.find("h")->dtype(), DType::f16);
  EXPECT_EQ(std::memcmp(r.find("b")->data<bf16_t>(), b.data<bf16_t>(), 8), 0);
  EXPECT_EQ(std::memcmp(r.find("h")->data<f16_t>(), h.data<f16_t>(), 8), 0);
}

TEST(Safetensors, LayoutIsStandard) {
  // 8-byte little-endian header length, JSON header padded to 8 bytes, then the data.
  const fs::path p = temp_path("b.safetensors");
  write_safetensors(p.string(), {{"w", Tensor::from_vector({2}, std::vector<float>{1.0f, 2.0f})}});
  const std::string b = read_bytes(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(b[static_cast<size_t>(i)])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(b.size(), 8 + n + 8);
  Json h = parse_json(b.substr(8, n));
  EXPECT_EQ(h.at("w").at("dtype").get<std::string>(), "F32");
  EXPECT_EQ(json_integer(h.at("w").at("data_offsets")[1]), 8);
  float v[2];
  std::memcpy(v, b.data() + 8 + n, 8);
  EXPECT_EQ(v[1], 2.0f);
}

TEST(Safetensors, BlockedTensorsAreWrittenInLogicalOrder) {
  std::vector<float> v(1 * 16 * 2 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor blocked = Tensor::from_vector({1, 16, 2, 2}, v).to_layout(Layout::nChw16c);
  const fs::path p = temp_path("c.safetensors");
  write_safetensors(p.string(), {{"x", blocked}});
  EXPECT_EQ(read_safetensors(p.string()).find("x")->to_vector(), v);
}

TEST(Safetensors, AtomicWriteLeavesNoTemporaryAndReplaces) {
  const fs::path p = temp_path("d.safetensors");
  write_safetensors(p.string(), {{"a", Tensor::full({3}, 1.0f)}});
  write_safetensors(p.string(), {{"a", Tensor::full({3}, 2.0f)}});
  EXPECT_EQ(read_safetensors(p.string()).find("a")->to_vector(), (std::vector<float>{2, 2, 2}));
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Safetensors, CorruptFilesGiveClearErrors) {
  const fs::path p = temp_path("bad.safetensors");
  write_bytes(p, "abc");
  EXPECT_NE(error_reading(p).find("shorter than the 8-byte header length"), std::string::npos);
  write_bytes(p, make_file("{}", 0).substr(0, 9));
  EXPECT_NE(error_reading(p).find("header length"), std::string::npos) << error_reading(p);
  write_bytes(p, make_file("{\"a\": {\"dtype\": \"F32\"", 0));
  EXPECT_NE(error_reading(p).find("invalid JSON"), std::string::npos) << error_reading(p);
  write_bytes(p, make_file(R"({"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2));
  EXPECT_NE(error_reading(p).find("unsupported dtype 'F8_E4M3'"), std::string::npos) << error_reading(p);
  write_bytes(p, make_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4));
  EXPECT_NE(error_reading(p).find("outside the 4 data bytes"), std::string::npos) << error_reading(p);
  write_bytes(p, make_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8));
  EXPECT_NE(error_reading(p).find("tensor 'a'"), std::string::npos) << error_reading(p);
  write_bytes(p, make_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12));
  EXPECT_NE(error_reading(p).find("12 data bytes"), std::string::npos) << error_reading(p);
  EXPECT_NE(error_reading(temp_path("missing.safetensors")).find("cannot open"), std::string::npos);
}

TEST(Safetensors, JsonParsesAndDumpsExactly) {
  Json j = parse_json(R"({"a": [1, -2.5, "x\"\u00e9"], "b": {"c": null, "d": true}, "big": 9007199254740993})");
  EXPECT_EQ(json_integer(j.at("a")[0]), 1);
  EXPECT_EQ(j.at("a")[1].get<double>(), -2.5);
  EXPECT_EQ(j.at("a")[2].get<std::string>(), "x\"\xc3\xa9");
  EXPECT_EQ(json_integer(j.at("big")), 9007199254740993);
  EXPECT_TRUE(j.at("b").at("c").is_null());
  EXPECT_EQ(parse_json(j.dump()).dump(), j.dump());
  EXPECT_EQ(parse_json(j.dump(2)).dump(), j.dump());
  EXPECT_EQ(j.dump().substr(0, 6), R"({"a":[)");  // members keep their order
  EXPECT_THROW(parse_json("{\"a\": 1,}"), Error);
  EXPECT_THROW(parse_json("[1] x"), Error);
  const std::string m = message_of([] { parse_json("[1] x", "h.json"); });
  EXPECT_NE(m.find("h.json: invalid JSON at byte 5"), std::string::npos) << m;
  EXPECT_NE(message_of([] { parse_json(std::string(65, '[') + std::string(65, ']'), "deep"); }).find("deeper than 64"),
            std::string::npos);
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']')));
  // Found by safetensors_fuzz: a number past double's range is nlohmann's out_of_range, not a parse_error.
  EXPECT_NE(message_of([] { parse_json("[995E07382263761063757596]", "big.json"); }).find("big.json: invalid JSON"),
            std::string::npos);
  EXPECT_THROW(json_integer(Json(2.5)), Error);
  EXPECT_THROW(json_integer(parse_json("18446744073709551615")), Error);
  EXPECT_THROW(json_integer(Json("3")), Error);
  EXPECT_EQ(json_integer(Json(3.0)), 3);
}
