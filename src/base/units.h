// Byte sizes, rates and durations as people write and read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace hoist {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Parses "4096", "64KiB", "1.5GiB", "512MB", "2GB" (binary units for KiB/MiB/GiB/TiB, decimal
// for KB/MB/GB/TB, optional "B" suffix and spaces). Rejects negatives and overflow.
Result<uint64_t> ParseByteSize(std::string_view text);
// Parses a rate such as "5GB/s" or "800MiB/s" into bytes per second.
Result<double> ParseByteRate(std::string_view text);

// A size given in MiB as a number (a command-line flag, a Python argument) in bytes; an
// invalid-argument error naming `option` for NaN, infinities, negatives and sizes past 1 PiB.
Result<uint64_t> MebibytesToBytes(double mib, std::string_view option);

// `s` without the white space (std::isspace) at either end.
std::string_view Trim(std::string_view s);

// Whether a and b are the same ASCII text but for the case of their letters.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// "1.50 GiB", "512.0 MiB", "17 B".
std::string FormatBytes(uint64_t bytes);
// Decimal gigabytes per second with two decimals: "53.70 GB/s".
std::string FormatRate(double bytes_per_second);

// Rounds value up to a multiple of alignment. REQUIRES: alignment is a power of two and the
// result does not overflow.
constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}
constexpr bool IsPowerOfTwo(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

// Overflow-checked arithmetic; false when the result does not fit.
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

}  // namespace hoist
