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

// One bit of a packed file to flip, and what a load must then name: the places a packed file can
// be damaged (bench/gpu/flip_packed_bit.py flips the same ones on the GPU machine).
struct Damage {
  std::string tensor;
  int64_t block = -1;  // -1: the error names no block
  uint64_t at = 0;
  unsigned char bit = 0;
};
inline Damage DamageAt(const std::string& path, const std::string& place) {
  const nlohmann::json header = PackedHeader(path);
  const std::vector<unsigned char> bytes = ReadBytes(path);
  auto u64 = [&](uint64_t at) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + at, 8);
    return v;
  };
  for (const auto& t : header["tensors"]) {
    if (place == "raw") {
      if (t["stored"] != "raw" || t["nbytes"].get<uint64_t>() == 0) continue;
      return {t["name"].get<std::string>(), -1,
              t["data"][0].get<uint64_t>() + t["nbytes"].get<uint64_t>() / 2, 0x04};
    }
    if (t["stored"] != "exponent-huffman" || t["values"].get<uint64_t>() <= 2 * kGroupValues) {
      continue;
    }
    const auto& s = t["sections"];
    const std::string name = t["name"].get<std::string>();
    const uint64_t values = t["values"].get<uint64_t>();
    const int64_t last = static_cast<int64_t>((values + kGroupValues - 1) / kGroupValues - 1);
    const uint64_t kept = t["value_bytes"].get<uint64_t>() - 1;
    const uint64_t starts = s["group_start_bits"][0].get<uint64_t>();
    auto block_start = [&](int64_t g) { return u64(starts + 8 * static_cast<uint64_t>(g)); };
    const uint64_t coded = s["coded"][0].get<uint64_t>();
    const uint64_t rest = s["rest"][0].get<uint64_t>();
    if (place == "coded-first") return {name, 0, coded + block_start(0) / 8 + 40, 0x10};
    if (place == "coded-last") return {name, last, coded + block_start(last) / 8 + 40, 0x10};
    if (place == "kept-first") return {name, 0, rest + 1001, 0x20};
    if (place == "kept-last") {
      return {name, last, rest + static_cast<uint64_t>(last) * kGroupValues * kept + 1001, 0x20};
    }
    if (place == "checksum-last") {
      return {name, last, s["group_checksums"][0].get<uint64_t>() + 8 * last + 3, 0x01};
    }
    if (place == "unit-bits") return {name, 1, s["unit_bits"][0].get<uint64_t>() + 2 * 65, 0x01};
    if (place == "group-start") return {name, 1, starts + 8, 0x08};
  }
  ADD_FAILURE() << path << " has no place " << place;
  return {};
}

}  // namespace hoist::testing
