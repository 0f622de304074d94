// JSON text from model files (safetensors headers, shard indexes), parsed defensively: valid
// UTF-8, bounded nesting, no key twice in one object.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace hoist {

inline constexpr int kMaxJsonDepth = 64;

// The index where nesting first exceeds max_depth, or npos; brackets inside strings do not
// count. Linear, with no recursion: for text no parser should see until it is known shallow.
size_t FindExcessNesting(const std::string& s, int max_depth);

// Parses text, which starts at byte base_offset of path; errors name that file and the byte.
Result<nlohmann::json> ParseModelJson(const std::string& text, const std::string& path,
                                      uint64_t base_offset);

}  // namespace hoist
