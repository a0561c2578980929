#include "core/glob.h"

#include <fnmatch.h>

#include <string>

namespace packrat {

bool glob_match(std::string_view pattern, std::string_view text) {
  const std::string p(pattern), t(text);
  return ::fnmatch(p.c_str(), t.c_str(), 0) == 0;
}

}  // namespace packrat
