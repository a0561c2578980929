#include "data/jpeg_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on

#include <csetjmp>

#include "core/error.h"

namespace packrat::data {

namespace {

// libjpeg reports errors through error_exit, which must not return: it jumps back to the decode
// with the message. Between setjmp and the jump only C frames (libjpeg's) are left, so no C++
// destructor is skipped.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jump_out(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

void no_warnings(j_common_ptr, int) {}  // corrupt-data warnings: the pixels say enough

}  // namespace

bool is_jpeg(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

std::vector<uint8_t> decode_jpeg(const std::filesystem::path& file, const std::vector<uint8_t>& bytes, int channels,
                                 int64_t max_pixels, int& width, int& height) {
  std::vector<uint8_t> hwc;  // (H, W, channels)
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = jump_out;
  errors.manager.emit_message = no_warnings;
  errors.message[0] = '\0';
  int64_t refused = -1;  // the pixels a header promised when they are none or over max_pixels
  if (setjmp(errors.jump) == 0) {
    jpeg_create_decompress(&info);
    jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&info, TRUE);
    info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_calc_output_dimensions(&info);
    const int64_t pixels = int64_t{info.output_width} * info.output_height;
    if (pixels > max_pixels || pixels == 0) {
      refused = pixels;
    } else {
      jpeg_start_decompress(&info);
      width = static_cast<int>(info.output_width);
      height = static_cast<int>(info.output_height);
      hwc.resize(static_cast<size_t>(pixels) * static_cast<size_t>(channels));
      while (info.output_scanline < info.output_height) {
        JSAMPROW row = hwc.data() + static_cast<size_t>(info.output_scanline) * width * channels;
        jpeg_read_scanlines(&info, &row, 1);
      }
      jpeg_finish_decompress(&info);
    }
    jpeg_destroy_decompress(&info);
  } else {
    jpeg_destroy_decompress(&info);
    fail("image_folder: {} cannot be decoded: {}", file.string(), errors.message);
  }
  PACKRAT_CHECK(refused < 0, "image_folder: {} is corrupt or too large: its header promises {} pixels (at most {})",
                file.string(), refused, max_pixels);
  return hwc;
}

}  // namespace packrat::data
