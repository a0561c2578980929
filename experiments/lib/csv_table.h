#pragma once
// A small CSV table (RFC 4180 quoting: a field with a comma, quote or newline is double-quoted,
// quotes doubled) for the sweep's results.csv and the run directories' metrics.csv.
#include <string>
#include <vector>

namespace packrat {

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  // Index of a column; throws naming `what` and the column when absent.
  size_t column(const std::string& name, const std::string& what) const;
  bool has(const std::string& name) const;
};

std::string csv_field(const std::string& s);
std::string csv_line(const std::vector<std::string>& fields);
// Throws packrat::Error naming `what` (the file) and the line for a row of the wrong width.
CsvTable parse_csv(const std::string& text, const std::string& what);
CsvTable read_csv(const std::string& path);

// Numbers in packrat's CSV files: "nan" (or empty), "inf", "-inf" and %.6g values.
double csv_number(const std::string& s);        // unparsable text reads as NaN
std::string csv_number_text(double v);

}  // namespace packrat
