// Loaders as other engines write them, reproduced on hoist's device interface so that
// `hoist bench` can time them beside hoist on the same file, device and run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/checked_device.h"
#include "format/tensor_directory.h"
#include "pipeline/loader.h"

namespace hoist {

enum class ReferenceStrategy : uint8_t {
  kMmapPageable,   // mmap the file; one synchronous copy per tensor from the mapping (llama.cpp,
                   // mmap on)
  kPinned4x1MiB,   // one thread, four 1 MiB pinned buffers, pread (llama.cpp, mmap off)
  kDirect4x64MiB,  // one thread, four 64 MiB pinned buffers, O_DIRECT (ds4's loader)
};

const char* ReferenceStrategyName(ReferenceStrategy strategy);
std::vector<ReferenceStrategy> AllReferenceStrategies();

// Loads every tensor of dir onto device the way the strategy does, into one allocation that
// the result owns. report.wall_s and report.tensor_bytes are filled; Verify() checks it. A copy
// that does not complete within stall_timeout_s is kStalled; a stop signal is kCancelled.
Result<std::unique_ptr<LoadedModel>> LoadWithReferenceStrategy(
    const TensorDirectory& dir, const std::shared_ptr<CheckedDevice>& device,
    ReferenceStrategy strategy, double stall_timeout_s);

}  // namespace hoist
