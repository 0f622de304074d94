#include "format/gguf_split_name.h"

#include <cstdio>

namespace hoist {
namespace {

// Five ASCII digits, as %05d writes them; -1 for anything else.
int FiveDigits(std::string_view text) {
  if (text.size() != 5) return -1;
  int value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::optional<GgufSplitName> ParseGgufSplitName(std::string_view path) {
  constexpr std::string_view kExtension = ".gguf";
  constexpr size_t kNumbers = 15;  // "-NNNNN-of-MMMMM"
  if (!path.ends_with(kExtension) || path.size() < kNumbers + kExtension.size()) {
    return std::nullopt;
  }
  const size_t at = path.size() - kExtension.size() - kNumbers;
  const std::string_view numbers = path.substr(at, kNumbers);
  const int number = FiveDigits(numbers.substr(1, 5));
  const int count = FiveDigits(numbers.substr(10, 5));
  if (numbers[0] != '-' || numbers.substr(6, 4) != "-of-" || number < 0 || count < 0) {
    return std::nullopt;
  }
  return GgufSplitName{std::string(path.substr(0, at)), number, count};
}

std::string GgufSplitPath(std::string_view prefix, int number, int count) {
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", number, count);
  return std::string(prefix) + suffix;
}

}  // namespace hoist
