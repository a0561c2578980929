#include "experiments/lib/csv_table.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace packrat {

size_t CsvTable::column(const std::string& name, const std::string& what) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  fail("{}: no column '{}'", what, name);
}

bool CsvTable::has(const std::string& name) const {
  for (const auto& h : header)
    if (h == name) return true;
  return false;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string l;
  for (size_t i = 0; i < fields.size(); ++i) l += (i ? "," : "") + csv_field(fields[i]);
  return l;
}

CsvTable parse_csv(const std::string& text, const std::string& what) {
  CsvTable t;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  int64_t line = 1;
  auto end_row = [&] {
    row.push_back(field);
    field.clear();
    if (t.header.empty()) t.header = row;
    else {
      PACKRAT_CHECK(row.size() == t.header.size(), "{}: line {} has {} fields, the header {}", what, line, row.size(),
                    t.header.size());
      t.rows.push_back(row);
    }
    row.clear();
    any = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (ch == '"') quoted = false;
      else field += ch;
      if (ch == '\n') ++line;
    } else if (ch == '"') {
      quoted = any = true;
    } else if (ch == ',') {
      row.push_back(field);
      field.clear();
      any = true;
    } else if (ch == '\n') {
      if (any || !field.empty()) end_row();
      ++line;
    } else if (ch != '\r') {
      field += ch;
      any = true;
    }
  }
  PACKRAT_CHECK(!quoted, "{}: a quoted field is not closed", what);
  if (any || !field.empty()) end_row();
  return t;
}

CsvTable read_csv(const std::string& path) {
  std::ifstream in(path);
  PACKRAT_CHECK(in.good(), "{}: cannot read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_csv(ss.str(), path);
}

double csv_number(const std::string& s) {
  if (s.empty() || s == "nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    return used == s.size() ? v : std::nan("");
  } catch (const std::exception&) {
    return std::nan("");
  }
}

std::string csv_number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

}  // namespace packrat
