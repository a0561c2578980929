#pragma once
// Runs a gnuplot script (Debian gnuplot-nox). Throws packrat::Error naming `what` when gnuplot
// is missing or fails.
#include <string>

namespace packrat {

bool gnuplot_available();
void run_gnuplot(const std::string& script, const std::string& what);

// A string as a gnuplot single-quoted literal ('' doubles a quote).
std::string gnuplot_quote(const std::string& s);

}  // namespace packrat
