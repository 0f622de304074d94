// A File over bytes in memory: for fuzzers, tests and MemoryStorage, which need no disk.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/file.h"
#include "io/shared_bytes.h"

namespace hoist {

class MemoryFile final : public File {
 public:
  MemoryFile(std::string path, std::vector<unsigned char> bytes)
      : MemoryFile(std::move(path), SharedBytes::Own(std::move(bytes))) {}
  MemoryFile(std::string path, SharedBytes bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return bytes_.size; }
  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override {
    if (offset >= bytes_.size) return RawRead{0, false};
    const size_t got = std::min<uint64_t>(n, bytes_.size - offset);
    std::memcpy(dst, bytes_.data + offset, got);
    return RawRead{got, false};
  }
  Status Advise(AccessHint /*hint*/, uint64_t /*offset*/, uint64_t /*length*/) override {
    return Status::Ok();
  }
  bool GatherCachedRows(uint64_t offset, uint64_t width, uint64_t pitch, uint64_t rows,
                        unsigned char* dst) override {
    if (!RowsInside(bytes_.size, offset, width, pitch, rows)) return false;
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * width, bytes_.data + offset + r * pitch, width);
    }
    return true;
  }

 private:
  std::string path_;
  SharedBytes bytes_;
};

}  // namespace hoist
