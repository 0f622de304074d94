// The exponent coder against corruption: the input's first bytes are a tensor's values (bf16,
// f16 or f32 by its first byte), coded and then damaged where the rest of the input says
// (bytes of the coded stream, the kept bits, the unit lengths, the group starts). Decoding the
// damaged form must be an error or give back exactly the original bytes: never wrong bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pack/exponent_code.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  static constexpr const char* kDtypes[] = {"BF16", "F16", "F32"};
  const hoist::FloatSplit split = *hoist::SplitOf(kDtypes[data[0] % 3]);
  const size_t damage = data[1];  // how many of the last bytes are damage instructions (x4)
  const size_t tail = std::min(size - 2, damage * 4);
  const size_t body = size - 2 - tail;
  const uint64_t values = body / static_cast<size_t>(split.value_bytes);
  if (values == 0) return 0;
  // Repeated so the tensor spans two groups (the second partial) while the input stays small.
  std::vector<uint8_t> original;
  const size_t repeat = 1 + (hoist::kGroupValues + hoist::kUnitValues) / values;
  for (size_t r = 0; r < repeat; ++r) {
    original.insert(original.end(), data + 2, data + 2 + values * split.value_bytes);
  }
  const uint64_t n = values * repeat;
  hoist::ExponentCoded coded = hoist::EncodeExponents(original.data(), n, split, 1);
  const uint8_t* instruction = data + 2 + body;
  for (size_t i = 0; i + 4 <= tail; i += 4) {
    const uint8_t* d = instruction + i;
    const uint32_t where = static_cast<uint32_t>(d[1]) | static_cast<uint32_t>(d[2]) << 8;
    switch (d[0] % 4) {
      case 0:
        coded.coded[where % coded.coded.size()] ^= d[3];
        break;
      case 1:
        if (!coded.rest.empty()) coded.rest[where % coded.rest.size()] ^= d[3];
        break;
      case 2:
        coded.unit_bits[where % coded.unit_bits.size()] ^= d[3];
        break;
      default:
        coded.group_start_bits[where % coded.group_start_bits.size()] ^= d[3];
        break;
    }
  }
  auto table = hoist::DecodingTable(coded.code_lengths, "fuzz");
  if (!table.ok()) __builtin_trap();  // the encoder's own lengths are always a code
  std::vector<uint8_t> decoded(original.size());
  const hoist::Status s = hoist::DecodeGroups(
      hoist::ViewOf(coded), *table, 0, coded.group_start_bits.size(), decoded.data(), "fuzz");
  if (s.ok() && std::memcmp(decoded.data(), original.data(), original.size()) != 0) {
    __builtin_trap();  // wrong bytes passed every check
  }
  return 0;
}
