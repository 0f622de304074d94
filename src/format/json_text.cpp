#include "format/json_text.h"

#include <optional>
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

// A SAX pass that remembers the first key seen twice in one object, and where. Linear in the
// text (nlohmann's DOM callback parser rescans objects and is quadratic).
struct DuplicateKeyFinder : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::unordered_set<std::string>> open_objects;
  std::optional<std::string> duplicate;

  bool null() override { return true; }
  bool boolean(bool /*val*/) override { return true; }
  bool number_integer(number_integer_t /*val*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*val*/) override { return true; }
  bool number_float(number_float_t /*val*/, const string_t& /*s*/) override { return true; }
  bool string(string_t& /*val*/) override { return true; }
  bool binary(binary_t& /*val*/) override { return true; }
  bool start_object(std::size_t /*elements*/) override {
    open_objects.emplace_back();
    return true;
  }
  bool key(string_t& val) override {
    if (!duplicate && !open_objects.back().insert(val).second) duplicate = val;
    return true;
  }
  bool end_object() override {
    open_objects.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& /*ex*/) override {
    return false;  // the DOM parse that follows reports it
  }
};

std::string ShortJsonError(const std::string& what) {
  // nlohmann's messages start with "[json.exception.parse_error.101] parse error at ...".
  const size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

}  // namespace

std::string StringField(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<uint64_t> UnsignedField(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

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

Result<nlohmann::json> ParseModelJson(const std::string& text, const std::string& path,
                                      uint64_t base_offset) {
  if (size_t bad = FindInvalidUtf8(text); bad != std::string::npos) {
    return Status::InvalidModel(path, base_offset + bad, "JSON is not valid UTF-8");
  }
  if (size_t deep = FindExcessNesting(text, kMaxJsonDepth); deep != std::string::npos) {
    return Status::InvalidModel(
        path, base_offset + deep,
        "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  DuplicateKeyFinder finder;
  nlohmann::json root;
  try {
    nlohmann::json::sax_parse(text, &finder);
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::InvalidModel(path, base_offset + (e.byte > 0 ? e.byte - 1 : 0),
                                "JSON is malformed: " + ShortJsonError(e.what()));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidModel(path, base_offset,
                                "JSON is malformed: " + ShortJsonError(e.what()));
  }
  if (finder.duplicate) {
    const std::string quoted = "\"" + *finder.duplicate + "\"";
    const size_t second = text.find(quoted, text.find(quoted) + 1);
    return Status::InvalidModel(path, base_offset + (second == std::string::npos ? 0 : second),
                                "JSON object has the key '" + *finder.duplicate + "' twice");
  }
  return root;
}

}  // namespace hoist
