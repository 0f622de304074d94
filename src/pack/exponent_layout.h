// The packed form's unit and group sizes and its codes' length limit, which the CPU coder
// (exponent_code.h) and the GPU decoder (exponent_decode.cu) share.
#pragma once

#include <cstdint>

namespace hoist {

inline constexpr uint32_t kUnitValues = 512;  // one decoder thread's values
inline constexpr uint32_t kGroupUnits = 64;   // one thread block's units, under one checksum
inline constexpr uint32_t kGroupValues = kUnitValues * kGroupUnits;
inline constexpr int kMaxCodeBits = 12;  // a 4096-entry decoding table

}  // namespace hoist
