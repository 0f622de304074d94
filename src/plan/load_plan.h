// Planning a load: where each tensor goes on the device, which file ranges to read
// (adjacent tensors coalesced into extents), and how the extents are cut into chunks.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"

namespace hoist {

inline constexpr uint64_t kDeviceAlignment = 256;
// Tensors closer than this in a file are read as one extent (reading a small gap costs less
// than another request).
inline constexpr uint64_t kCoalesceGap = 4096;

// The part of a chunk that belongs to one tensor.
struct Segment {
  uint32_t tensor = 0;         // index into TensorDirectory::tensors
  uint64_t chunk_offset = 0;   // where the segment starts inside the chunk
  uint64_t tensor_offset = 0;  // where it starts inside the tensor
  uint64_t length = 0;
};

// One read: a file range that lands in one staging buffer.
struct Chunk {
  uint32_t file = 0;
  uint64_t offset = 0;  // absolute, in the file
  uint64_t length = 0;
  std::vector<Segment> segments;  // in tensor-offset order for each tensor
};

struct LoadPlan {
  std::vector<uint32_t> tensors;        // the tensors loaded, in directory order
  std::vector<uint64_t> device_offset;  // per directory tensor: offset in the allocation
  uint64_t allocation_bytes = 0;        // one allocation per device, each tensor 256-aligned
  std::vector<Chunk> chunks;            // in (file, offset) order
  uint64_t tensor_bytes = 0;            // sum of the loaded tensors' sizes
  uint64_t read_bytes = 0;              // sum of chunk lengths (tensor bytes plus small gaps)
  uint64_t largest_tensor = 0;
};

// selected: which tensors to load (empty: all). chunk_bytes > 0.
Result<LoadPlan> PlanLoad(const TensorDirectory& dir, const std::vector<bool>& selected,
                          uint64_t chunk_bytes);

}  // namespace hoist
