// A held model's tensors copied, within the device, into memory the caller owns: what an engine
// that allocates its own buffers (llama.cpp through hoist_llama_load) takes from a holder
// (`hoist serve`) in place of reading the files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "format/tensor_directory.h"

namespace hoist {

// Where tensor `index` of the expected model goes on the device (room for its nbytes), or
// nullptr for a tensor not wanted from the holder.
using AttachDestination = std::function<void*(size_t index)>;

// Finds this user's holder of `expected`'s files on `device` (the absolute path of its first
// file, as `hoist serve` was given it) and copies each tensor `destination` places from the
// held memory; returns the bytes copied. kNotFound when no live holder holds those files whole
// on that device (the caller reads them instead); kFileChanged when the holder read files other
// than `expected`'s as they were opened (another file at the path, or written since), or its
// tensors differ; nothing is copied then. Blocks on the holder's answer up to timeout_s.
Result<uint64_t> AttachInto(const TensorDirectory& expected, const std::string& device,
                            const AttachDestination& destination, double timeout_s);

}  // namespace hoist
