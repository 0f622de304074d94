// hoist-packed: a lossless packed copy of a model (safetensors or GGUF, one file or a sharded
// set), its float tensors' exponents entropy-coded (pack/exponent_code.h), every other tensor
// stored as it is; one file. Its layout is in docs/FORMATS.md: "HOISTPK1", the JSON header's
// place, the sections, the JSON header last, so it is written in one pass.
//
// Read, it is the decoded model: its directory lists the original tensors (dtype, shape,
// bytes) in a virtual file of the decoded bytes, which the directory's source decodes as it is
// read, so every loader, verify and front end loads a packed model as any other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

inline constexpr char kPackedFormat[] = "hoist-packed";

struct PackReport {
  struct Tensor {
    std::string name;
    std::string dtype;
    uint64_t bytes = 0;   // the original's
    uint64_t stored = 0;  // in the packed file
    bool coded = false;
  };
  std::vector<Tensor> tensors;
  uint64_t bytes = 0;
  uint64_t stored = 0;
};

// Packs `dir`'s tensors, read through dir.source() as it was parsed, into a new file `out`.
// threads: encoder threads per tensor. `check`, when given, is called with the written file's
// temporary name before it takes `out`'s: its error fails the pack.
// Written whole or not at all (CreateFileBeside, ReplaceWith): a stopped, failed or refused
// pack leaves no file that looks finished, and never writes through a planted link or over a
// device node.
Result<PackReport> WritePacked(const TensorDirectory& dir, const std::string& out, int threads,
                               const std::function<Status(const std::string&)>& check = {});

// The format table's row.
bool SniffPacked(const unsigned char* head, size_t n);
Result<TensorDirectory> ReadPacked(File& file);

}  // namespace hoist
