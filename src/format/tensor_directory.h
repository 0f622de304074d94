// The one description of a model that every format reader produces: which tensors exist,
// where their bytes lie in which file, and the model's metadata.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/storage.h"

namespace hoist {

struct PackedLayout;  // format/packed_layout.h

struct FileEntry {
  std::string path;
  uint64_t size = 0;      // bytes
  FileIdentity identity;  // as parsed: a load or verify refuses a file that is no longer it
};

// OK, or kFileChanged when `opened` is no longer the file that `parsed` describes: another file
// renamed over its name, another version of a remote object, or the same file written to since.
Status CheckOpenedAsParsed(const FileEntry& parsed, const File& opened);

struct MetadataEntry {
  std::string key;
  // GGUF value type name: "UINT8" ... "FLOAT64", "BOOL", "STRING", "ARRAY"; "STRING" for
  // safetensors' __metadata__ and index metadata.
  std::string type;
  std::string element_type;  // for "ARRAY": the elements' type name; else empty
  uint64_t count = 1;        // 1, or the array's length
  nlohmann::json value;      // numbers, strings, booleans, nested arrays
};

struct TensorEntry {
  std::string name;
  std::string dtype;            // "F32", "Q4_K", "F8_E4M3": the format's own spelling
  std::vector<uint64_t> shape;  // outermost dimension first (numpy order)
  uint32_t file = 0;            // index into TensorDirectory::files
  uint64_t offset = 0;          // absolute byte offset in that file
  uint64_t nbytes = 0;
  // What the file holds for it when that differs from nbytes (a packed model's coded tensor,
  // format/packed.h); 0: its nbytes as they are.
  uint64_t stored_bytes = 0;
  // XXH3-64 of its bytes as the file records it (a packed model's tensors stored as they are);
  // a load of the whole tensor checks it, and a difference is an invalid model.
  std::optional<uint64_t> recorded_xxh3;
};

struct TensorDirectory {
  std::string format;    // "gguf" or "safetensors"
  uint32_t version = 0;  // GGUF version; 0 for safetensors, which has none
  std::vector<FileEntry> files;
  std::vector<MetadataEntry> metadata;
  std::vector<TensorEntry> tensors;
  std::vector<std::string> warnings;  // rules bent but not broken (overlaps, stray tensors)
  // Where `files` are read from (set by ReadModelDirectory); null: the local file system.
  std::shared_ptr<Storage> storage;
  // Set by a reader whose files hold the tensors encoded (a packed model): makes, from the
  // source the files came from, the source that `storage` becomes, which serves `files` as
  // their decoded bytes.
  std::function<std::shared_ptr<Storage>(std::shared_ptr<Storage>)> decoded_view;
  // A packed model's stored form, for a device that decodes its coded tensors itself
  // (pipeline/device_decode.h), and the source its file is read from as stored; null for
  // every other model.
  std::shared_ptr<const PackedLayout> packed;
  std::shared_ptr<Storage> stored_storage;

  Storage& source() const { return storage ? *storage : *LocalStorage(); }
  // Opens files[index] through source() as it was parsed: kFileChanged when its name now leads
  // to another file or another version of a remote object, or it was written to since. Every
  // reader of a model's bytes opens them this way: a remote file refuses each later answer of
  // any version but the one it opened at, so no read mixes one version's header with
  // another's bytes.
  Result<std::unique_ptr<File>> OpenAsParsed(uint32_t index, const OpenOptions& options = {}) const;

  uint64_t total_bytes() const;
  // Builds the name index; call after the tensor list is final.
  void IndexNames();
  // nullptr when absent. REQUIRES: IndexNames() was called after the last change to tensors.
  const TensorEntry* Find(const std::string& name) const;
  const MetadataEntry* FindMetadata(const std::string& key) const;

 private:
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace hoist
