// Lossless compression of floating-point weights: each value's 8-bit exponent field (the
// part of a trained weight that carries little information, about 3 bits in bf16) is
// Huffman-coded, and the rest of its bits (sign and mantissa) are kept as they are. The coded
// stream is cut into units of kUnitValues values, each decodable on its own from its starting
// bit (one GPU thread's work), grouped kGroupUnits at a time under one 64-bit start and one
// XXH3-64 of the group's decoded bytes, so a corrupted group is an error, never wrong bytes.
// docs/FORMATS.md ("hoist-packed") describes the bytes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pack/exponent_layout.h"

namespace hoist {

// Where a dtype's exponent lies: each value is value_bytes little-endian bytes; bits
// [shift, shift + 8) are the coded symbol, the bits below and above it (value_bytes - 1 bytes
// together) the kept rest. bf16: (2, 7); f16: (2, 8), its sign, exponent and top two mantissa
// bits; f32: (4, 23).
struct FloatSplit {
  int value_bytes = 0;
  int shift = 0;
};

// The split of a dtype ("BF16", "F16", "F32", as safetensors and GGUF spell them), or nullopt
// for one that is not coded (integers, quantized blocks, fp8).
std::optional<FloatSplit> SplitOf(std::string_view dtype);

// One tensor's coded form. Sizes: groups = ceil(values / kGroupValues), units =
// ceil(values / kUnitValues).
struct ExponentCoded {
  FloatSplit split;
  uint64_t values = 0;
  std::array<uint8_t, 256> code_lengths{};  // 0: the symbol does not occur
  std::vector<uint64_t> group_start_bits;   // where each group's first unit starts in `coded`
  std::vector<uint64_t> group_checksums;    // XXH3-64 of each group's decoded bytes
  std::vector<uint16_t> unit_bits;          // each unit's coded length in bits
  std::vector<uint8_t> coded;               // the units back to back, then 8 zero bytes
  std::vector<uint8_t> rest;                // values * (value_bytes - 1) bytes

  uint64_t bytes() const;  // what the coded form takes, tables and indexes included
};

// Codes `values` values of `split` at `data`, the groups shared among `threads` threads (the
// calling one among them). Each group's units start at a whole byte.
ExponentCoded EncodeExponents(const uint8_t* data, uint64_t values, FloatSplit split,
                              int threads = 1);

// The parts a decoder reads, wherever they are held (a file's bytes, device memory).
struct ExponentView {
  FloatSplit split;
  uint64_t values = 0;
  std::span<const uint8_t> code_lengths;       // 256
  std::span<const uint64_t> group_start_bits;  // one per group
  std::span<const uint64_t> group_checksums;   // one per group
  std::span<const uint16_t> unit_bits;         // one per unit
  // The coded stream and the rest, or a part of them: coded[0] is the stream's byte
  // coded_base, rest[0] its byte rest_base (a reader of a few groups holds only theirs).
  std::span<const uint8_t> coded;
  std::span<const uint8_t> rest;
  uint64_t coded_base = 0;
  uint64_t rest_base = 0;
};
ExponentView ViewOf(const ExponentCoded& coded);

// The 4096-entry decoding table of a set of code lengths: entry = symbol | bits << 8 for the
// code whose (least significant first) bits begin the index; bits 0 for no code. kInvalidModel
// (with `what` in the message) when the lengths are not a prefix code of at most
// kMaxCodeBits bits.
Result<std::vector<uint16_t>> DecodingTable(std::span<const uint8_t> code_lengths,
                                            const std::string& what);

// Decodes groups [first, last) into out (the values of those groups, value_bytes each),
// checking every unit's length and every group's checksum. `what` names the tensor in errors:
// "FILE: tensor NAME".
Status DecodeGroups(const ExponentView& view, std::span<const uint16_t> table, uint64_t first,
                    uint64_t last, uint8_t* out, const std::string& what);

}  // namespace hoist
