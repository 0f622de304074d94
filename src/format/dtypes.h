// The element types of both formats: ggml's tensor types (GGUF) with their block geometry,
// and safetensors' dtypes with their bit widths.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace hoist {

struct GgmlType {
  uint32_t id;            // the value stored in a GGUF tensor info
  std::string_view name;  // upper case, as hoist reports it: "F32", "Q4_K", "IQ2_XXS"
  uint32_t block_size;    // elements per block
  uint32_t block_bytes;   // bytes per block
};

// Every ggml type current in llama.cpp; ids that were removed upstream are absent.
std::span<const GgmlType> GgmlTypes();
const GgmlType* FindGgmlType(uint32_t id);
const GgmlType* FindGgmlTypeByName(std::string_view name);

struct SafetensorsDtype {
  std::string_view name;  // spelled as the format spells it: "BF16", "F8_E4M3"
  uint32_t bits;          // bits per element
};

std::span<const SafetensorsDtype> SafetensorsDtypes();
const SafetensorsDtype* FindSafetensorsDtype(std::string_view name);

// A dtype as its smallest whole unit: `elements` values in `bytes` bytes (F32: 1 in 4; Q4_0:
// 32 in 18; F4: 2 in 1; F6_E2M3: 4 in 3).
struct DtypeBlock {
  uint32_t elements;
  uint32_t bytes;
};

// The block of `dtype` as `format` ("gguf" or "safetensors") spells it; nullopt if unknown.
std::optional<DtypeBlock> BlockOf(std::string_view format, std::string_view dtype);

}  // namespace hoist
