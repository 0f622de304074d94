// Feeds arbitrary bytes to the packed reader as a .hoistpack file, and reads every tensor of
// what it accepts through the decoding view: every read is bytes or an error, never a crash,
// and nothing is allocated beyond what the file's own sizes allow.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "format/model.h"
#include "io/storage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto storage = std::make_shared<hoist::MemoryStorage>();
  storage->Add("fuzz.hoistpack", std::vector<unsigned char>(data, data + size));
  auto dir = hoist::ReadModelDirectory(storage, "fuzz.hoistpack");
  if (!dir.ok()) return 0;
  auto file = dir->source().Open(dir->files[0].path, {});
  if (!file.ok()) return 0;
  std::vector<unsigned char> bytes;
  uint64_t budget = uint64_t{16} << 20;  // decoded bytes read per input
  for (const hoist::TensorEntry& t : dir->tensors) {
    if (t.nbytes > budget) break;
    budget -= t.nbytes;
    bytes.resize(t.nbytes);
    if (t.nbytes > 0 && !(*file)->ReadExact(t.offset, bytes.data(), bytes.size()).ok()) continue;
  }
  return 0;
}
