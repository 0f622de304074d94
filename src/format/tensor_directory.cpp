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

}  // namespace hoist
