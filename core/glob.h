#pragma once
// Shell-style name patterns, as the config writes them for layers and modules.
#include <string_view>

namespace packrat {

// '*' matches any run of characters (dots included), '?' one character, [..] a class.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace packrat
