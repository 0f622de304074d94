// What both format writers share: filling each tensor's bytes into the file.
#pragma once

#include "format/gguf.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

// Writes a model file: `header` at byte 0, then every tensor of dir (absolute offsets) through
// fill, in pieces of at most 16 MiB (a null fill leaves holes), the file being file_size bytes.
// Records the file in dir and indexes its names.
Status WriteModelFile(const std::string& path, const std::string& header, uint64_t file_size,
                      TensorDirectory& dir, const TensorFill& fill);

}  // namespace hoist
