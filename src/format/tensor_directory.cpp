#include "format/tensor_directory.h"

namespace hoist {

uint64_t TensorDirectory::total_bytes() const {
  uint64_t total = 0;
  for (const TensorEntry& t : tensors) total += t.nbytes;
  return total;
}

void TensorDirectory::IndexNames() {
  by_name_.clear();
  by_name_.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) by_name_.emplace(tensors[i].name, i);
}

const TensorEntry* TensorDirectory::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors[it->second];
}

const MetadataEntry* TensorDirectory::FindMetadata(const std::string& key) const {
  for (const MetadataEntry& m : metadata) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

Status CheckOpenedAsParsed(const FileEntry& parsed, const File& opened) {
  if (const std::string change = DescribeFileChange(parsed.identity, opened.identity());
      !change.empty()) {
    return Status::FileChanged(parsed.path + ": " + change +
                               " since the model was opened; open the model again");
  }
  return Status::Ok();
}

Result<std::unique_ptr<File>> TensorDirectory::OpenAsParsed(uint32_t index,
                                                            const OpenOptions& options) const {
  if (index >= files.size()) {
    return Status::Internal("file " + std::to_string(index) + " of a model of " +
                            std::to_string(files.size()));
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, source().Open(files[index].path, options));
  HOIST_RETURN_IF_ERROR(CheckOpenedAsParsed(files[index], *file));
  return file;
}

}  // namespace hoist
