// JSON text from model files (safetensors headers, shard indexes), parsed defensively: valid
// UTF-8, bounded nesting, no key twice in one object.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace hoist {

inline constexpr int kMaxJsonDepth = 64;

// Fields of a stranger's JSON (a header, a request, an answer), read without nlohmann's value(),
// which throws when a key holds another type: a field of another type reads as absent, and the
// caller's check names it. An unsigned field is only an integer the parser kept as one (a number
// past 2^64-1, which it keeps as a float, is absent).
std::string StringField(const nlohmann::json& j, const char* key);
std::optional<uint64_t> UnsignedField(const nlohmann::json& j, const char* key);

// The index where nesting first exceeds max_depth, or npos; brackets inside strings do not
// count. Linear, with no recursion: for text no parser should see until it is known shallow.
size_t FindExcessNesting(const std::string& s, int max_depth);

// Parses text, which starts at byte base_offset of path; errors name that file and the byte.
Result<nlohmann::json> ParseModelJson(const std::string& text, const std::string& path,
                                      uint64_t base_offset);

}  // namespace hoist
