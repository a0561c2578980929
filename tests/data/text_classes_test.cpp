// data.dataset: text_classes — fortune files as classes: the records, the split by record, the
// interleaved order, the tokens and the loader's batches; bad folders and records named; the real
// Debian fortunes when installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "data/loader.h"
#include "data/registry.h"
#include "data/text_classes.h"
#include "data/tokens.h"
#include "tests/data/fixtures.h"

using namespace packrat;
using namespace packrat::data;
using namespace packrat::data::testing;

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<std::string> record_texts(const std::string& file_text) {
  const std::vector<uint8_t> b = bytes_of(file_text);
  std::vector<std::string> out;
  for (const TextRecord& r : split_fortune_records(b, "f")) out.emplace_back(file_text.substr(r.offset, r.length));
  return out;
}

DatasetSpec classes_spec(const std::filesystem::path& root, int64_t seq_len, Split split = Split::Train) {
  DatasetSpec s;
  s.name = "text_classes";
  s.root = root.string();
  s.seq_len = seq_len;
  s.split = split;
  return s;
}

// Three classes: "art" with 12 records "art 0" .. "art 11", "food" with 3, "zoo" with 2.
void write_three_classes(const TempDir& d) {
  std::string art;
  for (int r = 0; r < 12; ++r) art += "art " + std::to_string(r) + "\n%\n";
  write_text(d / "art", art);
  write_text(d / "food", "%\nbread\nand butter\n%\n%\nsoup\n%\ncake");  // a leading and a doubled % line
  write_text(d / "zoo", "lion\n%\ntiger\n");
}

}  // namespace

TEST(TextClasses, RecordsAreSeparatedByPercentLinesAsStrfileReadsThem) {
  EXPECT_EQ(record_texts("one\n%\ntwo\nlines\n%\nthree\n"), (std::vector<std::string>{"one", "two\nlines", "three"}));
  // A trailing % line, a leading one, doubled ones separate nothing; "%\r" is a separator too,
  // a line that only starts with % is text.
  EXPECT_EQ(record_texts("%\n%\na\n%\n%\n%\nb\r\n%\r\n50% off\n%\n"), (std::vector<std::string>{"a", "b\r", "50% off"}));
  EXPECT_EQ(record_texts("no newline at the end"), (std::vector<std::string>{"no newline at the end"}));
  EXPECT_TRUE(record_texts("").empty());
  EXPECT_TRUE(record_texts("%\n%\n").empty());
  // Leading whitespace of a record is its text (ascii art).
  EXPECT_EQ(record_texts("  /\\_/\\\n ( o.o )\n%\n"), (std::vector<std::string>{"  /\\_/\\\n ( o.o )"}));
  // Where each record starts.
  const std::vector<TextRecord> r = split_fortune_records(bytes_of("%\na\nb\n%\nc\n"), "f");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].line, 2);
  EXPECT_EQ(r[1].line, 5);
}

TEST(TextClasses, AWhitespaceRecordIsAnErrorNamingTheFileAndLine) {
  const std::string m = message_of([] { split_fortune_records(bytes_of("a\n%\nb\n%\n  \n\t\n%\nc\n"), "/x/art"); });
  EXPECT_NE(m.find("/x/art line 5: record 3 is empty (it holds only whitespace)"), std::string::npos) << m;
  EXPECT_NE(message_of([] { split_fortune_records(bytes_of("a\n%\n\n%\nb\n"), "/x/art"); }).find("/x/art line 3"),
            std::string::npos);
}

TEST(TextClasses, EveryTenthRecordTestsAndASmallClassTestsItsLast) {
  std::vector<int64_t> test;
  for (int64_t r = 0; r < 25; ++r)
    if (is_test_record(r, 25)) test.push_back(r);
  EXPECT_EQ(test, (std::vector<int64_t>{9, 19}));
  EXPECT_TRUE(is_test_record(1, 2));
  EXPECT_FALSE(is_test_record(0, 2));
  EXPECT_TRUE(is_test_record(8, 9));
  EXPECT_TRUE(is_test_record(9, 10));  // r % 10 == 9
  EXPECT_FALSE(is_test_record(3, 10));
}

TEST(TextClasses, FilesAreClassesAndSamplesInterleaveTheClasses) {
  TempDir d;
  write_three_classes(d);
  write_bytes(d / "art.dat", {0, 0, 0, 2, 1});                              // binary: skipped
  std::filesystem::create_symlink(d / "art", d / "art.u8");                // a link: skipped
  std::filesystem::create_directories(d / "sub");
  write_text(d / "sub" / "deeper", "not a class\n%\nnor this\n");          // sub-folders are not read
  EXPECT_EQ(text_class_names(d.path(), "data.root"), (std::vector<std::string>{"art", "food", "zoo"}));

  auto train = open_dataset(classes_spec(d.path(), 8));
  auto test = open_dataset(classes_spec(d.path(), 8, Split::Test));
  EXPECT_EQ(train->class_names(), (std::vector<std::string>{"art", "food", "zoo"}));
  EXPECT_EQ(train->num_classes(), 3);
  EXPECT_EQ(train->image_shape(), (ImageShape{1, 1, 8}));
  // art (12 records): record 9 tests; food (3 after the empty ones, fewer than 10): its last; zoo: its last.
  ASSERT_EQ(test->size(), 3);
  ASSERT_EQ(train->size(), 11 + 2 + 1);
  auto text_of = [](const Dataset& ds, int64_t i) {
    std::vector<uint8_t> t(8);
    ds.get(i, t.data());
    EXPECT_EQ(t[0], kClsToken);
    std::string s;
    for (size_t j = 1; j < t.size() && t[j] != kPadToken; ++j) s += static_cast<char>(t[j]);
    return s;
  };
  // Interleaved: art 0, bread.., lion, art 1, soup, art 2, art 3, ...
  EXPECT_EQ(text_of(*train, 0), "art 0");
  EXPECT_EQ(train->label(0), 0);
  EXPECT_EQ(text_of(*train, 1), "bread\na");  // truncated to 8 tokens: the class token and 7 bytes
  EXPECT_EQ(train->label(1), 1);
  EXPECT_EQ(text_of(*train, 2), "lion");
  EXPECT_EQ(train->label(2), 2);
  EXPECT_EQ(text_of(*train, 3), "art 1");
  EXPECT_EQ(text_of(*train, 4), "soup");
  EXPECT_EQ(text_of(*train, 5), "art 2");
  EXPECT_EQ(text_of(*test, 0), "art 9");
  EXPECT_EQ(text_of(*test, 1), "cake");
  EXPECT_EQ(text_of(*test, 2), "tiger");
  // Padded: "lion" is 4 bytes, so tokens 5..7 are padding.
  std::vector<uint8_t> t(8);
  EXPECT_EQ(train->get(2, t.data()), 2);
  EXPECT_EQ(t, (std::vector<uint8_t>{kClsToken, 'l', 'i', 'o', 'n', kPadToken, kPadToken, kPadToken}));
}

TEST(TextClasses, ReservedBytesInARecordReadAsQuestionMarks) {
  TempDir d;
  write_text(d / "a", std::string("x\x01y\x02z\n%\nsecond\n"));
  write_text(d / "b", "one\n%\ntwo\n");
  auto train = open_dataset(classes_spec(d.path(), 7));
  std::vector<uint8_t> t(7);
  train->get(0, t.data());
  EXPECT_EQ(t, (std::vector<uint8_t>{kClsToken, 'x', '?', 'y', '?', 'z', kPadToken}));
}

TEST(TextClasses, LoaderGivesTokensAndClassLabels) {
  TempDir d;
  write_three_classes(d);
  auto train = open_dataset(classes_spec(d.path(), 6));
  Loader loader(train, Pipeline{}, {.batch_size = 5, .shuffle = true, .seed = 4});
  loader.start_epoch(0);
  std::multiset<int64_t> seen;
  for (Batch b; loader.next(b);) {
    ASSERT_EQ(b.images.dtype(), DType::i64);
    ASSERT_EQ(b.images.rank(), 2);
    ASSERT_EQ(b.images.dim(1), 6);
    ASSERT_EQ(b.labels.shape(), (Shape{b.images.dim(0)}));
    for (int64_t n = 0; n < b.images.dim(0); ++n) {
      std::vector<uint8_t> want(6);
      EXPECT_EQ(b.labels.data<int64_t>()[n], train->get(b.indices[n], want.data()));
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(b.images.data<int64_t>()[n * 6 + j], want[j]);
      seen.insert(b.indices[n]);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), train->size());
  // No transforms for tokens.
  EXPECT_NE(message_of([&] { Loader(train, parse_pipeline({"hflip"}), {}); }).find("takes no transforms"),
            std::string::npos);
}

TEST(TextClasses, BadFoldersAndClassesAreNamed) {
  TempDir d;
  write_text(d / "only", "a\n%\nb\n");
  write_bytes(d / "only.dat", {0, 1});
  std::string m = message_of([&] { open_dataset(classes_spec(d.path(), 8)); });
  EXPECT_NE(m.find("data.root '" + d.path().string() + "' holds 1 class file(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("at least 2 classes"), std::string::npos) << m;
  write_text(d / "single", "just one record\n");
  m = message_of([&] { open_dataset(classes_spec(d.path(), 8)); });
  EXPECT_NE(m.find((d / "single").string() + " holds 1 record(s)"), std::string::npos) << m;
  write_text(d / "single", "one\n%\n \n%\ntwo\n");
  m = message_of([&] { open_dataset(classes_spec(d.path(), 8)); });
  EXPECT_NE(m.find((d / "single").string() + " line 3: record 2 is empty"), std::string::npos) << m;
  write_text(d / "single", "one\n%\ntwo\n");
  m = message_of([&] { open_dataset(classes_spec(d.path(), 1)); });
  EXPECT_NE(m.find("data.seq_len is 1"), std::string::npos) << m;
  m = message_of([&] { open_dataset(classes_spec(d / "missing", 8)); });
  EXPECT_NE(m.find("data.root '" + (d / "missing").string() + "' does not exist"), std::string::npos) << m;
  m = message_of([&] { open_dataset(classes_spec(d / "only", 8)); });
  EXPECT_NE(m.find("is not a folder"), std::string::npos) << m;
}

// The Debian packages fortunes + fortunes-min (the default data.root).
TEST(TextClasses, TheDebianFortunesLoad) {
  if (!std::filesystem::is_directory(kFortunesRoot)) GTEST_SKIP() << kFortunesRoot << " is absent (apt-get install fortunes)";
  DatasetSpec spec = classes_spec("", 128);  // "": the default root
  auto train = open_dataset(spec);
  spec.split = Split::Test;
  auto test = open_dataset(spec);
  const std::vector<std::string>& names = train->class_names();
  EXPECT_GE(names.size(), 10u);
  EXPECT_EQ(test->class_names(), names);
  for (const char* want : {"art", "computers", "food", "fortunes", "science"})
    EXPECT_TRUE(std::find(names.begin(), names.end(), want) != names.end()) << want;
  for (const std::string& n : names) EXPECT_EQ(n.find(".dat"), std::string::npos) << n;
  // Every class in both splits; about a tenth of the records test.
  std::set<int64_t> train_classes, test_classes;
  for (int64_t i = 0; i < train->size(); ++i) train_classes.insert(train->label(i));
  for (int64_t i = 0; i < test->size(); ++i) test_classes.insert(test->label(i));
  EXPECT_EQ(train_classes.size(), names.size());
  EXPECT_EQ(test_classes.size(), names.size());
  const double test_fraction = static_cast<double>(test->size()) / static_cast<double>(train->size() + test->size());
  EXPECT_GT(test_fraction, 0.09);
  EXPECT_LT(test_fraction, 0.12);
}
