#pragma once
// JSON through nlohmann-json (Debian nlohmann-json3-dev): packrat's Json is nlohmann's
// ordered_json, so object members keep their insertion order (memory_report.json, metrics.jsonl,
// the safetensors header). NaN and infinities are written as null (JSON has none).
// What this header adds to nlohmann: parsing that throws packrat::Error naming the document, and an
// exact integer read for untrusted files.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

namespace packrat {

using Json = nlohmann::ordered_json;

// Throws packrat::Error "<what>: invalid JSON at byte N: ..." on malformed text, and on nesting
// deeper than 64 levels.
Json parse_json(std::string_view text, std::string_view what = "json");

// An integer, or a number with an integral value, that fits in int64; anything else throws
// packrat::Error "json: expected an integer, got ...".
int64_t json_integer(const Json& j);

}  // namespace packrat
