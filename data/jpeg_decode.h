#pragma once
// JPEG files through libjpeg-turbo (Debian's libjpeg62-turbo), the decoder made and fuzzed for
// them: stb_image's JPEG decoder reads out of range on a crafted Huffman table (found by
// image_folder_fuzz; tests/fuzz/crashers/image_folder/stb-huffman-*.jpg), so it never sees one.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace packrat::data {

// Whether the bytes start like a JPEG file (SOI marker, then another marker).
bool is_jpeg(const std::vector<uint8_t>& bytes);

// Decodes a JPEG to 8-bit pixels, (H, W, channels) with channels 1 (grey) or 3 (RGB), at most
// `max_pixels` of them; a corrupt or oversized file throws packrat::Error naming `file`.
std::vector<uint8_t> decode_jpeg(const std::filesystem::path& file, const std::vector<uint8_t>& bytes, int channels,
                                 int64_t max_pixels, int& width, int& height);

}  // namespace packrat::data
