#include "format/formats.h"

#include <cstring>

#include "format/gguf.h"
#include "format/packed.h"
#include "format/safetensors.h"

namespace hoist {
namespace {

bool SniffGguf(const unsigned char* head, size_t n) {
  return n >= 4 && std::memcmp(head, "GGUF", 4) == 0;
}

// Eight bytes of header length, then the header's JSON object.
bool SniffSafetensors(const unsigned char* head, size_t n) { return n >= 9 && head[8] == '{'; }

constexpr ModelFormat kFormats[] = {
    {"gguf", ".gguf", SniffGguf, true, ReadGguf},
    {"safetensors", ".safetensors", SniffSafetensors, false, ReadSafetensors},
    {kPackedFormat, ".hoistpack", SniffPacked, true, ReadPacked},
};

}  // namespace

std::span<const ModelFormat> ModelFormats() { return kFormats; }

const ModelFormat* SniffFormat(const unsigned char* head, size_t n) {
  for (const ModelFormat& f : kFormats) {
    if (f.sniff(head, n)) return &f;
  }
  return nullptr;
}

const ModelFormat* FormatBySuffix(const std::string& path) {
  for (const ModelFormat& f : kFormats) {
    if (f.claims_suffix && path.ends_with(f.suffix)) return &f;
  }
  return nullptr;
}

const ModelFormat& FallbackFormat() { return kFormats[1]; }

}  // namespace hoist
