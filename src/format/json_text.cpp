#include "format/json_text.h"

#include <unordered_set>
#include <vector>

namespace hoist {
namespace {

// Returns the index of the first byte that is not valid UTF-8, or npos.
size_t FindInvalidUtf8(const std::string& s) {
  static constexpr uint32_t kMinCodePoint[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + extra >= s.size()) return i;
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < kMinCodePoint[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += extra + 1;
  }
  return std::string::npos;
}

// Returns the index where nesting first exceeds max_depth, or npos. Brackets inside strings
// do not count.
size_t FindExcessNesting(const std::string& s, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return std::string::npos;
}

std::string ShortJsonError(const std::string& what) {
  // nlohmann's messages start with "[json.exception.parse_error.101] parse error at ...".
  const size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

}  // namespace

Result<nlohmann::json> ParseModelJson(const std::string& text, const std::string& path,
                                      uint64_t base_offset) {
  if (size_t bad = FindInvalidUtf8(text); bad != std::string::npos) {
    return Status::InvalidModel(path, base_offset + bad, "JSON is not valid UTF-8");
  }
  if (size_t deep = FindExcessNesting(text, kMaxJsonDepth); deep != std::string::npos) {
    return Status::InvalidModel(path, base_offset + deep,
                                "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                    " levels");
  }
  std::vector<std::unordered_set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty() && duplicate.empty()) {
      if (!open_objects.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::InvalidModel(path, base_offset + (e.byte > 0 ? e.byte - 1 : 0),
                                "JSON is malformed: " + ShortJsonError(e.what()));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidModel(path, base_offset, "JSON is malformed: " + ShortJsonError(e.what()));
  }
  if (!duplicate.empty()) {
    const size_t at = text.find("\"" + duplicate + "\"", text.find("\"" + duplicate + "\"") + 1);
    return Status::InvalidModel(path, base_offset + (at == std::string::npos ? 0 : at),
                                "JSON object has the key '" + duplicate + "' twice");
  }
  return root;
}

}  // namespace hoist
