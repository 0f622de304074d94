// What the packed form's tests share: a packed file's JSON header, and a byte of its kept bits
// to corrupt.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pack/exponent_layout.h"
#include "test_util.h"

namespace hoist::testing {

// The packed file's JSON header.
inline nlohmann::json PackedHeader(const std::string& path) {
  const std::vector<unsigned char> bytes = ReadBytes(path);
  uint64_t at = 0;
  uint64_t length = 0;
  std::memcpy(&at, bytes.data() + 8, 8);
  std::memcpy(&length, bytes.data() + 16, 8);
  return nlohmann::json::parse(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                               bytes.begin() + static_cast<std::ptrdiff_t>(at + length));
}

// A coded tensor of more than two blocks, and the file byte of one of its kept bytes in block 1.
struct KeptByte {
  std::string tensor;
  uint64_t at = 0;
};
inline KeptByte KeptByteInBlockOne(const std::string& path) {
  const nlohmann::json header = PackedHeader(path);
  for (const auto& t : header["tensors"]) {
    if (t["stored"] == "exponent-huffman" && t["values"].get<uint64_t>() > 2 * kGroupValues) {
      return {t["name"].get<std::string>(),
              t["sections"]["rest"][0].get<uint64_t>() + kGroupValues + 5};
    }
  }
  ADD_FAILURE() << path << " has no coded tensor of more than two blocks";
  return {};
}

}  // namespace hoist::testing
