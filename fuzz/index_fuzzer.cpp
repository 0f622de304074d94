// Feeds arbitrary bytes to the JSON parser that shard indexes and safetensors headers share.
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = hoist::ParseModelJson(text, "fuzz.json", 0);
  (void)parsed;
  return 0;
}
