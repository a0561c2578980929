#include "experiments/lib/gnuplot.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace packrat {

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

void run_gnuplot(const std::string& script, const std::string& what) {
  PACKRAT_CHECK(gnuplot_available(), "{}: gnuplot not found (apt-get install gnuplot-nox)", what);
  FILE* p = ::popen("gnuplot", "w");
  PACKRAT_CHECK(p != nullptr, "{}: cannot start gnuplot", what);
  const size_t written = std::fwrite(script.data(), 1, script.size(), p);
  const int status = ::pclose(p);
  PACKRAT_CHECK(written == script.size() && status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "{}: gnuplot failed (exit status {}); its messages are above", what, status);
}

std::string gnuplot_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("''") : std::string(1, ch);
  return q + "'";
}

}  // namespace packrat
