#include "format/model.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "format/foreign_formats.h"
#include "format/formats.h"
#include "format/gguf_split_name.h"
#include "format/json_text.h"
#include "io/file.h"
#include "io/hub.h"

namespace hoist {
namespace {

constexpr uint64_t kMaxIndexBytes = 100'000'000;

Result<TensorDirectory> ReadOneFile(Storage& storage, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, storage.Open(path, {}));
  unsigned char head[kSniffBytes] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(file->size(), kSniffBytes));
  if (n > 0) HOIST_RETURN_IF_ERROR(file->ReadExact(0, head, n));
  if (const ModelFormat* format = SniffFormat(head, n); format != nullptr) {
    return format->read(*file);
  }
  // Another kind of file under a model's name (a pickle or an index named .safetensors) is
  // named for what it is, not read as what its name says.
  if (const ForeignFormat foreign = DescribeForeignFile(head, n, path); !foreign.what.empty()) {
    return Status(
        Code::kInvalidModel,
        Status::InvalidModel(path, 0, "not safetensors or GGUF but " + foreign.what).message() +
            "; " + foreign.next);
  }
  if (const ModelFormat* format = FormatBySuffix(path); format != nullptr) {
    return format->read(*file);
  }
  return FallbackFormat().read(*file);
}

// Appends part's files and tensors to whole, renumbering file indexes. A tensor name seen
// before is an error naming both files.
Status Merge(TensorDirectory& whole, TensorDirectory part,
             std::unordered_map<std::string, uint32_t>& owner) {
  const auto base = static_cast<uint32_t>(whole.files.size());
  for (FileEntry& f : part.files) whole.files.push_back(std::move(f));
  for (TensorEntry& t : part.tensors) {
    t.file += base;
    auto [it, inserted] = owner.emplace(t.name, t.file);
    if (!inserted) {
      return Status::InvalidModel(
          whole.files[t.file].path, t.offset,
          "tensor '" + t.name + "' is also in " + whole.files[it->second].path);
    }
    whole.tensors.push_back(std::move(t));
  }
  for (std::string& w : part.warnings) whole.warnings.push_back(std::move(w));
  return Status::Ok();
}

// Resolves a shard name from an index to a path inside dir, or explains why not.
Result<std::string> ResolveShard(Storage& storage, const std::string& dir, const std::string& name,
                                 const std::string& index_path, uint64_t at) {
  const bool plain = !name.empty() && name != "." && name != ".." &&
                     name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
                     name.find(':') == std::string::npos && name.find('\0') == std::string::npos;
  if (!plain) {
    return Status::InvalidModel(
        index_path, at,
        "shard name '" + name + "' is not a plain file name inside the model's directory");
  }
  auto resolved = storage.ResolveInside(dir, name);
  if (resolved.ok()) return resolved;
  if (resolved.status().code() == Code::kNotFound) {
    return Status::NotFound(resolved.status().message() + " (shard named in " + index_path + ")");
  }
  if (resolved.status().code() == Code::kInvalidArgument) {
    return Status::InvalidModel(index_path, at, "shard " + resolved.status().message());
  }
  return resolved.status();
}

// A safetensors index as read: its text (for the byte offsets errors name) and its JSON.
struct IndexText {
  std::string text;
  nlohmann::json root;
  uint64_t PositionOf(const std::string& s) const {
    const size_t at = text.find("\"" + s + "\"");
    return at == std::string::npos ? 0 : at;
  }
};

Result<IndexText> ReadIndex(Storage& storage, const std::string& index_path) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, storage.Open(index_path, {}));
  if (file->size() > kMaxIndexBytes) {
    return Status::InvalidModel(index_path, 0,
                                "index is " + std::to_string(file->size()) +
                                    " bytes, more than the limit of " +
                                    std::to_string(kMaxIndexBytes));
  }
  IndexText index;
  index.text.assign(file->size(), '\0');
  HOIST_RETURN_IF_ERROR(file->ReadExact(0, index.text.data(), index.text.size()));
  HOIST_ASSIGN_OR_RETURN(index.root, ParseModelJson(index.text, index_path, 0));
  if (!index.root.is_object() || !index.root.contains("weight_map") ||
      !index.root["weight_map"].is_object()) {
    return Status::InvalidModel(index_path, 0, "index has no 'weight_map' object");
  }
  return index;
}

// The index's weight map: *shards in order of first mention, *expected tensor → shard name.
Status ReadWeightMap(const IndexText& index, const std::string& index_path,
                     std::vector<std::string>* shards,
                     std::map<std::string, std::string>* expected) {
  for (const auto& [tensor, shard] : index.root["weight_map"].items()) {
    if (!shard.is_string()) {
      return Status::InvalidModel(index_path, index.PositionOf(tensor),
                                  "weight_map entry for '" + tensor + "' is not a file name");
    }
    const std::string name = shard.get<std::string>();
    if (std::find(shards->begin(), shards->end(), name) == shards->end()) shards->push_back(name);
    (*expected)[tensor] = name;
  }
  return Status::Ok();
}

// Shard `name` at `path`, checked against what the index expects of it; unlisted tensors are
// warned of in whole.
Status CheckShard(const TensorDirectory& part, const std::string& path, const std::string& name,
                  const std::string& index_path, const std::map<std::string, std::string>& expected,
                  TensorDirectory* whole) {
  if (part.format != "safetensors") {
    return Status::InvalidModel(path, 0, "shard named in a safetensors index is not safetensors");
  }
  for (const TensorEntry& t : part.tensors) {
    auto it = expected.find(t.name);
    if (it == expected.end()) {
      whole->warnings.push_back(path + ": tensor '" + t.name + "' is not listed in " + index_path +
                                "; loaded anyway");
    } else if (it->second != name) {
      return Status::InvalidModel(path, t.offset,
                                  "tensor '" + t.name + "' is listed in " + index_path +
                                      " for shard '" + it->second + "', not this one");
    }
  }
  return Status::Ok();
}

// Each tensor the index lists is held by the shard it names (`owner`: tensor -> file).
Status CheckEveryListedTensorHeld(const IndexText& index, const std::string& index_path,
                                  const std::map<std::string, std::string>& expected,
                                  const std::unordered_map<std::string, uint32_t>& owner) {
  for (const auto& [tensor, shard] : expected) {
    if (owner.find(tensor) == owner.end()) {
      return Status::InvalidModel(
          index_path, index.PositionOf(tensor),
          "tensor '" + tensor + "' is listed for shard '" + shard + "', which does not hold it");
    }
  }
  return Status::Ok();
}

Result<TensorDirectory> OpenSafetensorsIndex(Storage& storage, const std::string& index_path) {
  HOIST_ASSIGN_OR_RETURN(const IndexText index, ReadIndex(storage, index_path));
  const std::string dir = storage.Parent(index_path);
  std::vector<std::string> shards;
  std::map<std::string, std::string> expected;
  HOIST_RETURN_IF_ERROR(ReadWeightMap(index, index_path, &shards, &expected));
  TensorDirectory whole;
  whole.format = "safetensors";
  std::unordered_map<std::string, uint32_t> owner;
  for (const std::string& name : shards) {
    HOIST_ASSIGN_OR_RETURN(std::string path,
                           ResolveShard(storage, dir, name, index_path, index.PositionOf(name)));
    HOIST_ASSIGN_OR_RETURN(TensorDirectory part, ReadOneFile(storage, path));
    HOIST_RETURN_IF_ERROR(CheckShard(part, path, name, index_path, expected, &whole));
    if (whole.files.empty()) whole.metadata = part.metadata;
    HOIST_RETURN_IF_ERROR(Merge(whole, std::move(part), owner));
  }
  HOIST_RETURN_IF_ERROR(CheckEveryListedTensorHeld(index, index_path, expected, owner));
  if (index.root.contains("metadata") && index.root["metadata"].is_object()) {
    for (const auto& [k, v] : index.root["metadata"].items()) {
      whole.metadata.push_back({k, v.is_string() ? "STRING" : "JSON", "", 1, v});
    }
  }
  whole.IndexNames();
  return whole;
}

// "NAME-00001-of-00003.gguf" → ("NAME", 1, 3), numbered within 1..count.
std::optional<GgufSplitName> ParseSplitName(const std::string& path) {
  std::optional<GgufSplitName> split = ParseGgufSplitName(path);
  if (!split || split->count < 1 || split->number < 1 || split->number > split->count) {
    return std::nullopt;
  }
  return split;
}

Result<uint64_t> SplitKey(const TensorDirectory& part, const char* key) {
  const MetadataEntry* m = part.FindMetadata(key);
  if (m == nullptr || !m->value.is_number_integer()) {
    return Status::InvalidModel(part.files[0].path, 0,
                                std::string("GGUF split file has no integer '") + key + "' key");
  }
  return m->value.get<uint64_t>();
}

Result<TensorDirectory> OpenGgufSplits(Storage& storage, const std::string& first,
                                       const GgufSplitName& split) {
  TensorDirectory whole;
  std::unordered_map<std::string, uint32_t> owner;
  uint64_t declared_tensors = 0;
  for (int i = 1; i <= split.count; ++i) {
    const std::string path = GgufSplitPath(split.prefix, i, split.count);
    HOIST_ASSIGN_OR_RETURN(TensorDirectory part, ReadOneFile(storage, path));
    if (part.format != "gguf") return Status::InvalidModel(path, 0, "split file is not GGUF");
    HOIST_ASSIGN_OR_RETURN(uint64_t no, SplitKey(part, "split.no"));
    HOIST_ASSIGN_OR_RETURN(uint64_t count, SplitKey(part, "split.count"));
    if (no != static_cast<uint64_t>(i - 1) || count != static_cast<uint64_t>(split.count)) {
      return Status::InvalidModel(path, 0,
                                  "split.no " + std::to_string(no) + " / split.count " +
                                      std::to_string(count) + " do not match the file name");
    }
    if (i == 1) {
      HOIST_ASSIGN_OR_RETURN(declared_tensors, SplitKey(part, "split.tensors.count"));
      whole.format = "gguf";
      whole.version = part.version;
      whole.metadata = part.metadata;
    }
    HOIST_RETURN_IF_ERROR(Merge(whole, std::move(part), owner));
  }
  if (whole.tensors.size() != declared_tensors) {
    return Status::InvalidModel(first, 0,
                                "split.tensors.count says " + std::to_string(declared_tensors) +
                                    " tensors but the splits hold " +
                                    std::to_string(whole.tensors.size()));
  }
  whole.IndexNames();
  return whole;
}

Result<TensorDirectory> ReadAnyShape(Storage& storage, const std::string& path);

// The .safetensors files of a directory with no index, as one model (the first file's metadata).
Result<TensorDirectory> MergeSafetensorsFiles(Storage& storage,
                                              const std::vector<std::string>& files) {
  TensorDirectory whole;
  whole.format = "safetensors";
  std::unordered_map<std::string, uint32_t> owner;
  for (const std::string& p : files) {
    HOIST_ASSIGN_OR_RETURN(TensorDirectory part, ReadOneFile(storage, p));
    if (whole.files.empty()) whole.metadata = part.metadata;
    HOIST_RETURN_IF_ERROR(Merge(whole, std::move(part), owner));
  }
  whole.IndexNames();
  return whole;
}

// The model of a directory whose files (each as storage.Join(dir, name)) are `names`: its
// safetensors index, else every .safetensors file, else its one .gguf file or GGUF split set.
// The one rule for every source: a local directory, a cached hub snapshot, the hub's listing.
Result<TensorDirectory> OpenDirectory(Storage& storage, const std::string& dir,
                                      const std::vector<std::string>& names) {
  const std::string index = storage.Join(dir, "model.safetensors.index.json");
  if (std::find(names.begin(), names.end(), index) != names.end()) {
    return OpenSafetensorsIndex(storage, index);
  }
  std::vector<std::string> safetensors;
  std::vector<std::string> gguf;
  for (const std::string& p : names) {
    if (p.ends_with(".safetensors")) safetensors.push_back(p);
    if (p.ends_with(".gguf")) gguf.push_back(p);
  }
  std::sort(safetensors.begin(), safetensors.end());
  std::sort(gguf.begin(), gguf.end());
  if (!safetensors.empty()) return MergeSafetensorsFiles(storage, safetensors);
  if (gguf.size() == 1) return ReadAnyShape(storage, gguf[0]);
  const std::optional<GgufSplitName> split = gguf.empty() ? std::nullopt : ParseSplitName(gguf[0]);
  if (split && split->number == 1 && gguf.size() == static_cast<size_t>(split->count)) {
    return OpenGgufSplits(storage, gguf[0], *split);
  }
  if (gguf.empty()) {
    const std::string instead = DescribeForeignDirectory(names);
    return Status::NotFound(dir + ": no .safetensors or .gguf files in the directory" +
                            (instead.empty() ? "" : "; " + instead));
  }
  return Status::InvalidArgument(dir + ": holds " + std::to_string(gguf.size()) +
                                 " GGUF files that are not one split set; name one");
}

// The directory of whatever `path` names, read through storage.
Result<TensorDirectory> ReadAnyShape(Storage& storage, const std::string& path) {
  auto type_or = storage.Type(path);
  if (!type_or.ok()) {
    // A URL or a repo id is no file name on any system; some say "not found", some "invalid".
    const std::string hint = DescribeMissingModel(storage, path);
    return hint.empty() ? type_or.status()
                        : Status(type_or.status().code(), type_or.status().message() + "; " + hint);
  }
  const EntryType type = *type_or;
  if (type == EntryType::kDirectory) {
    HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> names, storage.ListFiles(path));
    return OpenDirectory(storage, path, names);
  }
  if (path.ends_with(".json")) return OpenSafetensorsIndex(storage, path);
  if (const std::optional<GgufSplitName> split = ParseSplitName(path)) {
    if (split->number != 1) {
      return Status::InvalidArgument(path + ": name the first split (" +
                                     GgufSplitPath(split->prefix, 1, split->count) + ")");
    }
    if (split->count > 1) return OpenGgufSplits(storage, path, *split);
  }
  return ReadOneFile(storage, path);
}

// A directory read from storage: where its bytes come from.
TensorDirectory WithStorage(TensorDirectory dir, const std::shared_ptr<Storage>& storage) {
  dir.storage = storage;
  if (dir.decoded_view) {
    dir.stored_storage = storage;
    dir.storage = dir.decoded_view(storage);
  }
  return dir;
}

}  // namespace

Result<TensorDirectory> ReadModelDirectory(const std::shared_ptr<Storage>& storage,
                                           const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(TensorDirectory dir, ReadAnyShape(*storage, path));
  return WithStorage(std::move(dir), storage);
}

Result<TensorDirectory> ReadModelDirectory(const std::string& path, double stall_timeout_s) {
  HOIST_ASSIGN_OR_RETURN(const ModelLocation where, LocateModel(path, stall_timeout_s));
  if (!where.listing) return ReadModelDirectory(where.storage, where.path);
  HOIST_ASSIGN_OR_RETURN(TensorDirectory dir,
                         OpenDirectory(*where.storage, where.path, *where.listing));
  return WithStorage(std::move(dir), where.storage);
}

}  // namespace hoist
