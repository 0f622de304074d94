// Feeds arbitrary bytes to the safetensors reader (see gguf_fuzzer.cpp).
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"
#include "io/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hoist::MemoryFile file("fuzz.safetensors", std::vector<unsigned char>(data, data + size));
  auto dir = hoist::ReadSafetensors(file);
  if (dir.ok()) {
    uint64_t end = 0;
    for (const auto& t : dir->tensors) {
      if (t.offset + t.nbytes > size) __builtin_trap();
      end = t.offset + t.nbytes > end ? t.offset + t.nbytes : end;
    }
    if (!dir->tensors.empty() && end != size) __builtin_trap();  // data ends at the file's end
  }
  return 0;
}
