// Reading a model's tensor directory by name, whatever the model's shape: one GGUF or
// safetensors file, a safetensors index (model.safetensors.index.json), a directory of shards,
// or the first of a set of GGUF split files (NAME-00001-of-0000N.gguf).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/storage.h"

namespace hoist {

// One directory of every tensor across the model's files. Shard names from an index must be
// plain file names in the model's directory: absolute paths, ".." and links that lead outside
// it are rejected. A tensor held by two files, or missing from the file named for it, is an
// invalid-model error. The directory remembers storage: loads and verifies read through it.
Result<TensorDirectory> ReadModelDirectory(const std::shared_ptr<Storage>& storage,
                                           const std::string& path);
// From where the name says (LocateModel: a local path, a URL, s3://, hf://); stall_timeout_s
// as LocateModel's.
Result<TensorDirectory> ReadModelDirectory(const std::string& path, double stall_timeout_s = 0);

}  // namespace hoist
