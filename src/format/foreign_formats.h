// What a file, a directory or a name is when it is not a model hoist reads, said with the next
// step to take: a PyTorch checkpoint to convert, a legacy GGML file, a repo id to download.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "io/storage.h"

namespace hoist {

// The bytes a file's sniffing needs from its start.
inline constexpr size_t kSniffBytes = 16;

// Another format's file: what it is ("a zip archive, as PyTorch's torch.save writes ...") and
// the next step ("convert it to safetensors first, e.g. ...").
struct ForeignFormat {
  std::string what;
  std::string next;
};

// The format whose file starts with the n bytes at head (n <= kSniffBytes), for the file at
// path; `what` is empty when none is recognised. A safetensors header (its ninth byte '{') is
// never taken for another format.
ForeignFormat DescribeForeignFile(const unsigned char* head, size_t n, const std::string& path);

// What a directory holding no .safetensors or .gguf file holds instead (PyTorch checkpoints,
// ONNX, Keras), with the next step; empty when none of those.
std::string DescribeForeignDirectory(const std::vector<std::string>& files);

// For a model name that does not exist: what it looks like (a URL, a Hugging Face repo id) and
// what to do, naming the snapshot in the local Hugging Face cache when there is one; else empty.
std::string DescribeMissingModel(Storage& storage, const std::string& name);

}  // namespace hoist
