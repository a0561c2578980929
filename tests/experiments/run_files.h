#pragma once
// What the trainer and sweep tests read and write around a run (test support): whole files as
// text, and run options that print nothing.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "experiments/lib/run.h"

namespace packrat::testing {

// The file's bytes ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// No progress line, no memory report on stdout.
inline RunOptions quiet() {
  RunOptions o;
  o.tty = 0;
  o.print_report = false;
  return o;
}

}  // namespace packrat::testing
