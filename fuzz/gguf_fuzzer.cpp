// Feeds arbitrary bytes to the GGUF reader: it must return a directory or an error, never
// crash, read out of bounds, or allocate beyond what the input can justify.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"
#include "io/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hoist::MemoryFile file("fuzz.gguf", std::vector<unsigned char>(data, data + size));
  auto dir = hoist::ReadGguf(file);
  if (dir.ok()) {
    for (const auto& t : dir->tensors) {
      if (t.offset + t.nbytes > size) __builtin_trap();  // every tensor lies inside the file
    }
  }
  return 0;
}
