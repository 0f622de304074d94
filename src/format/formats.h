// The model file formats hoist reads: one row per format, the only place that knows which
// formats there are. A new format is a reader (a file of this directory) and one row in
// formats.cpp; model.cpp opens single files through the table, and sharded sets (an index, GGUF
// splits) by each format's own rules.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

struct ModelFormat {
  const char* name;    // TensorDirectory::format ("gguf", "safetensors")
  const char* suffix;  // the file name's ending (".gguf")
  // Whether the file's first n bytes (n <= kSniffBytes) are this format's.
  bool (*sniff)(const unsigned char* head, size_t n);
  // A file whose name ends in the suffix is read as this format whatever its first bytes hold,
  // so that its reader says what is wrong with it.
  bool claims_suffix;
  Result<TensorDirectory> (*read)(File& file);
};

// The rows, in the order they are tried.
std::span<const ModelFormat> ModelFormats();

// The first row whose sniff accepts head; null for none.
const ModelFormat* SniffFormat(const unsigned char* head, size_t n);
// The first row that claims path's suffix; null for none. A file no sniff accepts is read as
// this format unless its bytes show it is another kind of file (foreign_formats.h).
const ModelFormat* FormatBySuffix(const std::string& path);

// The format whose reader explains a file no row recognises and no other format claims
// (safetensors: its header length says what is wrong).
const ModelFormat& FallbackFormat();

}  // namespace hoist
