#include "base/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace hoist {
namespace {

// A number as people write it: "-1", "0.5", "1e+30".
std::string FormatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

Result<double> UnitMultiplier(std::string_view unit) {
  struct Unit {
    std::string_view name;
    double multiplier;
  };
  static constexpr Unit kUnits[] = {
      {"", 1.0},
      {"B", 1.0},
      {"K", 1024.0},
      {"KIB", 1024.0},
      {"KB", 1e3},
      {"M", 1048576.0},
      {"MIB", 1048576.0},
      {"MB", 1e6},
      {"G", 1073741824.0},
      {"GIB", 1073741824.0},
      {"GB", 1e9},
      {"T", 1099511627776.0},
      {"TIB", 1099511627776.0},
      {"TB", 1e12},
  };
  for (const Unit& u : kUnits) {
    if (EqualsIgnoreCase(unit, u.name)) return u.multiplier;
  }
  return Status::InvalidArgument("unknown size unit '" + std::string(unit) + "'");
}

Result<double> ParseScaled(std::string_view text) {
  std::string_view s = Trim(text);
  size_t digits = 0;
  while (digits < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[digits])) != 0 || s[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return Status::InvalidArgument("not a size: '" + std::string(text) + "'");
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(std::string(s.substr(0, digits)), &used);
    if (used != digits) throw std::invalid_argument("two decimal points");
  } catch (...) {
    return Status::InvalidArgument("not a size: '" + std::string(text) + "'");
  }
  auto multiplier = UnitMultiplier(Trim(s.substr(digits)));
  if (!multiplier.ok()) {
    return Status::InvalidArgument("not a size: '" + std::string(text) + "' (" +
                                   multiplier.status().message() + ")");
  }
  return number * multiplier.value();
}

}  // namespace

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  HOIST_ASSIGN_OR_RETURN(double bytes, ParseScaled(text));
  // Below 2^63: llround's result must fit a signed 64-bit integer.
  if (!(bytes >= 0) || bytes >= 9223372036854775808.0) {
    return Status::InvalidArgument("size out of range: '" + std::string(text) + "'");
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

Result<double> ParseByteRate(std::string_view text) {
  std::string_view s = Trim(text);
  // A bare number would be bytes a second, which nobody means ("bandwidth=5" crawled until the
  // stall timeout): a rate says its unit.
  if (s.find_first_of("BbKkMmGgTt") == std::string_view::npos) {
    return Status::InvalidArgument("rate '" + std::string(text) +
                                   "' needs a unit, such as 5GB/s, 800MiB/s or 100B/s");
  }
  if (s.size() > 2 && EqualsIgnoreCase(s.substr(s.size() - 2), "/s")) s.remove_suffix(2);
  HOIST_ASSIGN_OR_RETURN(double rate, ParseScaled(s));
  // At least a byte a second: durations computed from a rate stay within 64-bit nanoseconds.
  if (!(rate >= 1))
    return Status::InvalidArgument("rate must be at least 1 B/s: '" + std::string(text) + "'");
  return rate;
}

Result<uint64_t> MebibytesToBytes(double mib, std::string_view option) {
  constexpr double kMaxMib = 1024.0 * 1024 * 1024;  // 1 PiB
  if (!(mib >= 0 && mib <= kMaxMib)) {              // false for NaN too
    return Status::InvalidArgument(std::string(option) + " takes a number of MiB from 0 to " +
                                   std::to_string(static_cast<uint64_t>(kMaxMib)) + ", not " +
                                   FormatNumber(mib));
  }
  return static_cast<uint64_t>(std::llround(mib * static_cast<double>(kMiB)));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kNames[unit]);
  return buf;
}

std::string FormatRate(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  return buf;
}

}  // namespace hoist
