// The fewbit executable's tables of errors, as a user reads them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

std::string output_of(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string fewbit() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "fewbit").string();
}

// Few-Bit Backward's Table 1 lists ReLU at 1 bit with error 0: the relu family's rows are their
// exact masks, integrated against f' like the tables (so a wrong mask would show an error).
TEST(FewbitTool, ErrorsListTheReluFamilysExactOneBitRows) {
  const std::string out = output_of(fewbit() + " errors");
  EXPECT_EQ(out.rfind("fn,bits,error,max_abs_error,shipped_error\n", 0), 0u) << out;
  for (const char* row : {"\nrelu,1,0,0,0\n", "\nleaky_relu,1,0,0,0\n", "\nrelu6,1,0,0,0\n"})
    EXPECT_NE(out.find(row), std::string::npos) << row << " in\n" << out;
  EXPECT_NE(out.find("\ngelu,4,"), std::string::npos) << out;
  EXPECT_EQ(output_of(fewbit() + " errors --fn relu"), "fn,bits,error,max_abs_error,shipped_error\nrelu,1,0,0,0\n");
}

}  // namespace
