// What both format writers share: filling each tensor's bytes into the file.
#pragma once

#include "format/gguf.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

// Writes every tensor of dir through fill, in pieces of at most 16 MiB. A null fill writes
// nothing, leaving holes.
Status WriteTensorData(WritableFile& out, const TensorDirectory& dir, const TensorFill& fill);

}  // namespace hoist
