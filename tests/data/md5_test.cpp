#include <gtest/gtest.h>

#include "core/error.h"
#include "data/md5.h"
#include "tests/data/fixtures.h"

using namespace packrat::data;
using namespace packrat::data::testing;

// RFC 1321, appendix A.5.
TEST(DataMd5, Rfc1321TestSuite) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5_hex("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(md5_hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(md5_hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
}

TEST(DataMd5, StreamingInOddPiecesEqualsOneShotAndFilesHash) {
  std::string s;
  for (int i = 0; i < 10000; ++i) s += static_cast<char>(i * 31 % 256);
  Md5 m;
  for (size_t pos = 0, step = 1; pos < s.size(); pos += step, step = step * 3 % 127 + 1)
    m.update(s.data() + pos, std::min(step, s.size() - pos));
  const std::string whole = md5_hex(s);
  EXPECT_EQ(m.hex_digest(), whole);
  TempDir t;
  write_text(t / "f", s);
  EXPECT_EQ(md5_file(t / "f"), whole);
  EXPECT_THROW(md5_file(t / "missing"), packrat::Error);
}
