// A packed model's stored form as its reader (packed.cpp) keeps it: where each tensor's coded
// parts lie in the file and its indexes, checked. The decoded view decodes from it on the CPU;
// a load that decodes on the device (pipeline/device_decode.h) streams the parts as stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pack/exponent_code.h"

namespace hoist {

struct PackedTensor {
  std::string name;
  uint64_t virtual_offset = 0;  // where its decoded bytes lie in the decoded view
  uint64_t nbytes = 0;
  bool coded = false;
  uint64_t data = 0;  // a stored tensor's first byte in the file
  // A coded one's parts: the indexes in memory, the streams' places in the file. The reader
  // has checked that every group's units lie inside the coded stream, short of its 8 closing
  // bytes.
  FloatSplit split;
  uint64_t values = 0;
  std::vector<uint8_t> code_lengths;
  std::vector<uint64_t> group_start_bits;
  std::vector<uint64_t> group_checksums;
  std::vector<uint16_t> unit_bits;
  std::vector<uint16_t> table;
  uint64_t coded_begin = 0;
  uint64_t coded_end = 0;
  uint64_t rest_begin = 0;
  uint64_t rest_end = 0;
};

struct PackedLayout {
  std::string path;
  uint64_t file_size = 0;  // the packed file's own bytes
  uint64_t decoded_size = 0;
  std::vector<PackedTensor> tensors;  // by virtual_offset, as the directory lists them
};

}  // namespace hoist
