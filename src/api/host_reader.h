// The consumer-ordered reader of a model's whole tensors into host memory that the caller keeps
// (pipeline/read_ahead.h), its batches loaded through Load() on the host and its memory from
// the process's slab pools: what safe_open(device="cpu") and the CPU paths of the front ends
// read through.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "api/request.h"
#include "base/status.h"
#include "pipeline/read_ahead.h"

namespace hoist {

struct HostReaderRequest {
  LoadRequest load;             // threads, chunk, staging, stall timeout, I/O; device unused
  std::vector<size_t> indices;  // the directory tensors it serves; empty: all
  enum class Pin : uint8_t { kSettings, kOn, kOff } pin = Pin::kSettings;
  uint64_t ahead_bytes = 0;  // 0: the settings' (HOIST_AHEAD_MIB)
};

// REQUIRES: dir outlives the reader.
Result<std::unique_ptr<ReadAhead>> OpenHostReader(const TensorDirectory& dir,
                                                  const HostReaderRequest& request);

// Runs `settle` before pinned memory that a caller freed is handed out again (PinnedMemorySource's
// settle); empty: nothing runs. Process-wide.
void SetHostMemoryReuseHook(std::function<void()> settle);

// Unpins and frees the slabs that no tensor handed out uses (part of ReleaseCachedMemory's work
// for the C API).
void ReleaseHostSlabs();

}  // namespace hoist
