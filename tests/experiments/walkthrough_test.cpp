// docs/walkthrough.md's table of bytes kept per op under fp32, fewbit 3, actnn 2 and mixed is what
// one step of configs/walkthrough.yaml keeps: the guide's numbers are checked against a run, so a
// change that moves them fails here until `scripts/walkthrough.sh` regenerates the table.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "experiments/lib/config.h"
#include "experiments/lib/tools.h"
#include "tests/experiments/tiny_config.h"

using namespace packrat;

namespace {

// The rows of the table between the walkthrough-bytes markers: op -> bytes per column.
std::map<std::string, std::vector<int64_t>> guide_table() {
  std::ifstream in(std::string(PACKRAT_SOURCE_DIR) + "/docs/walkthrough.md");
  std::map<std::string, std::vector<int64_t>> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("<!-- walkthrough-bytes", 0) == 0) inside = true;
    else if (line.rfind("<!-- /walkthrough-bytes", 0) == 0) inside = false;
    else if (inside && line.rfind("| ", 0) == 0 && line.find("---") == std::string::npos && line.find(" op ") == std::string::npos) {
      std::stringstream cells(line.substr(2));
      std::string op, cell;
      std::getline(cells, op, '|');
      op.erase(op.find_last_not_of(' ') + 1);
      while (std::getline(cells, cell, '|'))
        if (cell.find_first_not_of(' ') != std::string::npos) rows[op].push_back(std::stoll(cell));
    }
  }
  return rows;
}

}  // namespace

TEST(Walkthrough, TheGuidesBytesAreWhatAStepKeeps) {
  const auto rows = guide_table();
  ASSERT_EQ(rows.size(), 7u) << "six ops and the total";
  const std::vector<std::string> schemes{"fp32", "{scheme: fewbit, bits: 3}", "{scheme: actnn, bits: 2}", "{scheme: mixed}"};
  for (size_t i = 0; i < schemes.size(); ++i) {
    SCOPED_TRACE(schemes[i]);
    const Config c = load_config(std::string(PACKRAT_SOURCE_DIR) + "/configs/walkthrough.yaml",
                                 {"saved_tensors.default=" + schemes[i],
                                  "output.dir=" + packrat::testing::temp_dir("walkthrough").string()});
    const MemoryReport r = memory_report_only(c);
    std::map<std::string, int64_t> by_op;
    for (const LayerTotals& t : r.per_op()) by_op[t.layer] = t.bytes;
    EXPECT_EQ(by_op.size(), 6u);
    for (const auto& [op, bytes] : by_op) {
      ASSERT_TRUE(rows.contains(op)) << op;
      EXPECT_EQ(rows.at(op).at(i), bytes) << op;
    }
    EXPECT_EQ(rows.at("total").at(i), r.saved_bytes);
    EXPECT_EQ(r.allocator_saved_bytes, r.saved_bytes) << "the allocator agrees";
  }
}
