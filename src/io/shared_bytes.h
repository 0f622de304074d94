// Bytes in memory shared by whoever reads them (MemoryStorage's files, MemoryFile).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace hoist {

// Bytes in memory that stay unchanged while anyone holds them; `owner` keeps them alive (a
// vector hoist holds, or a caller's buffer the caller promised to keep).
struct SharedBytes {
  std::shared_ptr<const void> owner;
  const unsigned char* data = nullptr;
  size_t size = 0;

  static SharedBytes Own(std::vector<unsigned char> bytes) {
    auto held = std::make_shared<const std::vector<unsigned char>>(std::move(bytes));
    return {held, held->data(), held->size()};
  }
};

}  // namespace hoist
