#include "format/dtypes.h"

#include <array>
#include <numeric>

namespace hoist {
namespace {

// Block geometry from ggml-common.h (QK_K = 256). Ids 4, 5, 31-33 and 36-38 were removed
// upstream; files that use them are rejected as llama.cpp rejects them.
// One type per line, as ggml lists them.
// clang-format off
constexpr std::array<GgmlType, 35> kGgmlTypes = {{
    {0, "F32", 1, 4},
    {1, "F16", 1, 2},
    {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},
    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},
    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144},
    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},
    {15, "Q8_K", 256, 292},
    {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98},
    {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},
    {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136},
    {24, "I8", 1, 1},
    {25, "I16", 1, 2},
    {26, "I32", 1, 4},
    {27, "I64", 1, 8},
    {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},
    {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},
    {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
    {42, "Q2_0", 64, 18},
}};
// clang-format on

constexpr std::array<SafetensorsDtype, 22> kSafetensorsDtypes = {{
    {"BOOL", 8},        {"U8", 8},          {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8},     {"F4", 4},          {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16},
    {"U16", 16},        {"F16", 16},        {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},        {"F64", 64},        {"I64", 64},    {"U64", 64},    {"C64", 64},
    {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8},  // AMD's FP8 variants
}};

}  // namespace

std::span<const GgmlType> GgmlTypes() { return kGgmlTypes; }

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

const GgmlType* FindGgmlTypeByName(std::string_view name) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const SafetensorsDtype> SafetensorsDtypes() { return kSafetensorsDtypes; }

const SafetensorsDtype* FindSafetensorsDtype(std::string_view name) {
  for (const SafetensorsDtype& d : kSafetensorsDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::optional<DtypeBlock> BlockOf(std::string_view format, std::string_view dtype) {
  if (format == "gguf") {
    const GgmlType* type = FindGgmlTypeByName(dtype);
    if (type == nullptr) return std::nullopt;
    return DtypeBlock{type->block_size, type->block_bytes};
  }
  const SafetensorsDtype* type = FindSafetensorsDtype(dtype);
  if (type == nullptr || type->bits == 0) return std::nullopt;
  const uint32_t elements = 8 / std::gcd(type->bits, 8u);  // the fewest values filling whole bytes
  return DtypeBlock{elements, type->bits * elements / 8};
}

}  // namespace hoist
