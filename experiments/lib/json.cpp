#include "experiments/lib/json.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace packrat {

namespace {
constexpr int kMaxDepth = 64;
}

Json parse_json(std::string_view text, std::string_view what) {
  // The callback sees every value's depth; refusing deep nesting bounds what a hostile file costs.
  // `depth` counts the containers around the value: 0 for the outermost.
  auto depth_limit = [&](int depth, Json::parse_event_t, Json&) {
    PACKRAT_CHECK(depth < kMaxDepth, "{}: invalid JSON: nesting deeper than {} levels", what, kMaxDepth);
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), depth_limit);
  } catch (const Json::parse_error& e) {
    fail("{}: invalid JSON at byte {}: {}", what, e.byte, e.what());
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    fail("{}: invalid JSON: {}", what, e.what());
  }
}

int64_t json_integer(const Json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    PACKRAT_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "json: integer {} is too large", v);
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    const double d = j.get<double>();
    PACKRAT_CHECK(std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18, "json: expected an integer, got {}", d);
    return static_cast<int64_t>(d);
  }
  fail("json: expected an integer, got {}", j.type_name());
}

}  // namespace packrat
