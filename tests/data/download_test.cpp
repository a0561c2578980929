#include <gtest/gtest.h>

#include "core/error.h"
#include "data/download.h"
#include "data/md5.h"
#include "data/registry.h"
#include "data/tar.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// A miniature cifar-10-binary.tar.gz: 2 records per train batch, 3 in the test batch.
fs::path make_cifar10_archive(const fs::path& dir) {
  std::vector<TarInput> e = {{"cifar-10-batches-bin/", ""}};
  for (int b = 1; b <= 5; ++b)
    e.push_back({"cifar-10-batches-bin/data_batch_" + std::to_string(b) + ".bin",
                 as_string(cifar_records({{static_cast<uint8_t>(b)}, {0}}, 2 * (b - 1)))});
  e.push_back({"cifar-10-batches-bin/test_batch.bin", as_string(cifar_records({{1}, {2}, {3}}))});
  e.push_back({"cifar-10-batches-bin/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"});
  const fs::path archive = dir / "cifar-10-binary.tar.gz";
  write_gz(archive, tar_bytes(e));
  return archive;
}

}  // namespace

TEST(DataTar, ExtractsFilesFoldersAndLongNames) {
  TempDir t;
  const std::string long_name = "top/" + std::string(120, 'd') + "/file.txt";
  write_gz(t / "a.tar.gz", tar_bytes({{"top/", ""}, {"top/x.bin", std::string(1000, 'x')}, {"top/empty", ""},
                                      {long_name, "long"}, {"top/link", "", '2'}}));
  const auto entries = extract_tar_gz(t / "a.tar.gz", t / "out");
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_TRUE(entries[0].directory);
  EXPECT_EQ(entries[1].path, "top/x.bin");
  EXPECT_EQ(entries[1].size, 1000);
  EXPECT_EQ(read_bytes(t / "out" / "top/x.bin"), std::vector<uint8_t>(1000, 'x'));
  EXPECT_TRUE(fs::exists(t / "out" / "top/empty"));
  EXPECT_EQ(as_string(read_bytes(t / "out" / long_name)), "long");
  EXPECT_FALSE(fs::exists(t / "out" / "top/link"));
}

// Archives written by the system's GNU tar in its own formats: gnu ('L' long names) and pax ('x').
TEST(DataTar, ReadsArchivesMadeByGnuTar) {
  if (std::system("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tar on this machine";
  TempDir t;
  const std::string deep = "cifar-10-batches-bin/" + std::string(110, 'n') + "/deep.bin";
  write_bytes(t / "src" / "cifar-10-batches-bin" / "data_batch_1.bin", cifar_records({{3}, {4}}));
  write_text(t / "src" / deep, "deep file");
  for (const char* format : {"gnu", "pax", "ustar"}) {
    if (std::string(format) == "ustar") fs::remove_all(t / "src" / "cifar-10-batches-bin" / std::string(110, 'n'));
    const fs::path archive = t / (std::string(format) + ".tar.gz");
    const std::string cmd = "tar --format=" + std::string(format) + " -czf " + archive.string() + " -C " +
                            (t / "src").string() + " cifar-10-batches-bin";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const fs::path out = t / (std::string("out-") + format);
    extract_tar_gz(archive, out);
    EXPECT_EQ(read_bytes(out / "cifar-10-batches-bin" / "data_batch_1.bin"), cifar_records({{3}, {4}})) << format;
    if (std::string(format) != "ustar") {
      EXPECT_EQ(as_string(read_bytes(out / deep)), "deep file") << format;
    }
  }
}

TEST(DataTar, TruncatedCorruptAndEscapingArchivesAreErrors) {
  TempDir t;
  std::vector<uint8_t> tar = tar_bytes({{"f.bin", std::string(3000, 'y')}});
  std::vector<uint8_t> cut(tar.begin(), tar.begin() + 2000);
  write_gz(t / "cut.tar.gz", cut);
  std::string m = message_of([&] { extract_tar_gz(t / "cut.tar.gz", t / "o1"); });
  EXPECT_NE(m.find((t / "cut.tar.gz").string() + " is truncated: entry 'f.bin' should have 3000 bytes"), std::string::npos) << m;

  std::vector<uint8_t> bad = tar;
  bad[10] ^= 1;  // inside the name: the checksum no longer matches
  write_gz(t / "bad.tar.gz", bad);
  m = message_of([&] { extract_tar_gz(t / "bad.tar.gz", t / "o2"); });
  EXPECT_NE(m.find("bad.tar.gz is corrupt: the header at byte 0"), std::string::npos) << m;

  write_gz(t / "evil.tar.gz", tar_bytes({{"../evil", "x"}}));
  m = message_of([&] { extract_tar_gz(t / "evil.tar.gz", t / "o3"); });
  EXPECT_NE(m.find("climbs out"), std::string::npos) << m;
  EXPECT_NE(m.find((t / "evil.tar.gz").string() + " holds a path '../evil'"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(t / "evil"));

  write_gz(t / "good.tar.gz", tar);
  std::vector<uint8_t> gz = read_bytes(t / "good.tar.gz");
  gz.resize(gz.size() / 2);
  write_bytes(t / "halfgz.tar.gz", gz);
  m = message_of([&] { extract_tar_gz(t / "halfgz.tar.gz", t / "o4"); });
  EXPECT_NE(m.find("halfgz.tar.gz is truncated"), std::string::npos) << m;
}

// Path traversal: an absolute member, a member below "..", and a member that would be written
// through a symbolic link already in the destination are all refused, naming archive and member.
TEST(DataTar, MembersThatEscapeTheDestinationAreRefused) {
  TempDir t;
  write_gz(t / "abs.tar.gz", tar_bytes({{(t / "abs-target").string(), "x"}}));
  std::string m = message_of([&] { extract_tar_gz(t / "abs.tar.gz", t / "o1"); });
  EXPECT_NE(m.find((t / "abs.tar.gz").string() + " holds an absolute path '" + (t / "abs-target").string() + "'"),
            std::string::npos) << m;
  EXPECT_FALSE(fs::exists(t / "abs-target"));

  write_gz(t / "deep.tar.gz", tar_bytes({{"ok/", ""}, {"ok/../../evil", "x"}}));
  m = message_of([&] { extract_tar_gz(t / "deep.tar.gz", t / "o2"); });
  EXPECT_NE(m.find("deep.tar.gz holds a path 'ok/../../evil' that climbs out"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(t / "evil"));

  // dest/top is a symbolic link to a folder outside: libarchive's secure extraction refuses.
  fs::create_directories(t / "outside");
  fs::create_directories(t / "o3");
  fs::create_directory_symlink(t / "outside", t / "o3" / "top");
  write_gz(t / "link.tar.gz", tar_bytes({{"top/planted", "x"}}));
  m = message_of([&] { extract_tar_gz(t / "link.tar.gz", t / "o3"); });
  EXPECT_NE(m.find("cannot unpack member 'top/planted' of " + (t / "link.tar.gz").string()), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(t / "outside" / "planted"));

  // A destination reached through a symbolic link is fine: only links under it are refused.
  fs::create_directory_symlink(t / "outside", t / "via-link");
  write_gz(t / "fine.tar.gz", tar_bytes({{"a/b.bin", "bb"}}));
  extract_tar_gz(t / "fine.tar.gz", t / "via-link");
  EXPECT_EQ(as_string(read_bytes(t / "outside" / "a" / "b.bin")), "bb");
}

TEST(DataDownload, FetchesAFileUrlChecksItsMd5AndUnpacksAtomically) {
  TempDir t;
  const fs::path archive = make_cifar10_archive(t / "server");
  ArchiveSource src{file_url(archive), md5_file(archive), "cifar-10-batches-bin"};
  const fs::path root = t / "data" / "cifar10";
  const fs::path dir = fetch_archive(src, root);
  EXPECT_EQ(dir, root / "cifar-10-batches-bin");
  EXPECT_TRUE(fs::exists(dir / "data_batch_5.bin"));
  EXPECT_TRUE(fs::exists(root / "cifar-10-binary.tar.gz"));  // kept for a re-unpack
  for (const auto& e : fs::directory_iterator(root)) {  // no temporary folder or partial download left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);
    EXPECT_EQ(e.path().filename().string().find(".part"), std::string::npos);
  }
  // Present now: no second download (the source may even be gone).
  fs::remove(archive);
  EXPECT_EQ(fetch_archive(src, root), dir);
}

TEST(DataDownload, BadMd5DeletesTheFileAndLeavesNoDataset) {
  TempDir t;
  const fs::path archive = make_cifar10_archive(t / "server");
  const std::string good = md5_file(archive);
  ArchiveSource src{file_url(archive), "0123456789abcdef0123456789abcdef", "cifar-10-batches-bin"};
  const fs::path root = t / "data";
  const std::string m = message_of([&] { fetch_archive(src, root); });
  EXPECT_NE(m.find("has MD5 " + good + ", expected 0123456789abcdef0123456789abcdef"), std::string::npos) << m;
  EXPECT_NE(m.find(src.url), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(root / "cifar-10-binary.tar.gz"));
  EXPECT_FALSE(fs::exists(root / "cifar-10-batches-bin"));
}

TEST(DataDownload, MissingUrlAndArchiveWithoutTheExpectedFolderAreErrors) {
  TempDir t;
  std::string m = message_of([&] { download_file(file_url(t / "nope.tar.gz"), t / "x"); });
  EXPECT_NE(m.find("fetching " + file_url(t / "nope.tar.gz") + " failed"), std::string::npos) << m;
  for (const auto& e : fs::directory_iterator(t.path())) EXPECT_EQ(e.path().filename().string().find("x.part"), std::string::npos);
  write_gz(t / "other.tar.gz", tar_bytes({{"something-else/a.bin", "a"}}));
  m = message_of([&] { fetch_archive({file_url(t / "other.tar.gz"), md5_file(t / "other.tar.gz"), "cifar-10-batches-bin"}, t / "r"); });
  EXPECT_NE(m.find("does not contain the folder cifar-10-batches-bin/"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(t / "r" / "cifar-10-batches-bin"));
}

TEST(DataRegistry, Cifar10DownloadThroughTheRegistryAndTheErrorWithoutIt) {
  TempDir t;
  const fs::path archive = make_cifar10_archive(t / "server");
  DatasetSpec spec{.name = "cifar10", .root = (t / "cifar10").string()};
  const std::string m = message_of([&] { open_dataset(spec); });
  EXPECT_NE(m.find("cifar10: dataset not found: looked for " + (t / "cifar10" / "cifar-10-batches-bin" / "data_batch_1.bin").string()),
            std::string::npos) << m;
  EXPECT_NE(m.find("set data.download: true"), std::string::npos) << m;
  EXPECT_NE(m.find("cifar-10-batches-bin/ is under " + (t / "cifar10").string()), std::string::npos) << m;

  spec.download = true;
  spec.url = file_url(archive);
  spec.md5 = md5_file(archive);
  auto train = open_dataset(spec);
  EXPECT_EQ(train->size(), 10);
  EXPECT_EQ(train->label(0), 1);
  EXPECT_EQ(train->label(8), 5);
  EXPECT_EQ(train->class_names()[2], "c");
  spec.split = Split::Test;
  spec.download = false;
  EXPECT_EQ(open_dataset(spec)->size(), 3);
}

TEST(DataRegistry, Cifar100DownloadUnpacksCifar100Binary) {
  TempDir t;
  std::string coarse_names;
  for (int i = 0; i < 20; ++i) coarse_names += "superclass" + std::to_string(i) + "\n";
  const fs::path archive = t / "server" / "cifar-100-binary.tar.gz";
  write_gz(archive, tar_bytes({{"cifar-100-binary/", ""},
                               {"cifar-100-binary/train.bin", as_string(cifar_records({{1, 11}, {2, 22}, {3, 33}}))},
                               {"cifar-100-binary/test.bin", as_string(cifar_records({{4, 44}}))},
                               {"cifar-100-binary/coarse_label_names.txt", coarse_names}}));
  DatasetSpec spec{.name = "cifar100", .root = (t / "c100").string(), .split = Split::Test, .download = true,
                   .label = "coarse", .url = file_url(archive), .md5 = md5_file(archive)};
  auto test = open_dataset(spec);
  ASSERT_EQ(test->size(), 1);
  EXPECT_EQ(test->label(0), 4);
  EXPECT_EQ(test->class_names()[4], "superclass4");
  spec.split = Split::Train;
  spec.label = "fine";
  auto train = open_dataset(spec);
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(train->label(2), 33);
  EXPECT_EQ(cifar100_source().top_dir, "cifar-100-binary");
  EXPECT_EQ(cifar10_source().md5, "c32a1d4ab5d03f1284b67883e8d87530");
}
