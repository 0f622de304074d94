#include <algorithm>
#include <string>
#include <utility>

#include "io/memory_file.h"
#include "io/storage.h"

namespace hoist {
namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// "a/b/" for "a/b" and "a/b/"; "" for "." and "" (the top).
std::string DirectoryPrefix(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "./") return "";
  return dir.back() == '/' ? dir : dir + "/";
}

}  // namespace

void MemoryStorage::Add(const std::string& name, std::vector<unsigned char> bytes) {
  Add(name, SharedBytes::Own(std::move(bytes)));
}

void MemoryStorage::Add(const std::string& name, SharedBytes bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  files_[name] = std::move(bytes);
}

Result<SharedBytes> MemoryStorage::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = files_.find(name);
  if (it == files_.end()) return Status::NotFound(name + ": no such file in memory storage");
  return it->second;
}

Result<std::unique_ptr<File>> MemoryStorage::Open(const std::string& name,
                                                  const OpenOptions& options) {
  HOIST_ASSIGN_OR_RETURN(SharedBytes bytes, Find(name));
  if (options.direct) {
    return Status::Unavailable(name + ": memory storage has no direct I/O");
  }
  return std::unique_ptr<File>(std::make_unique<MemoryFile>(name, std::move(bytes)));
}

Result<EntryType> MemoryStorage::Type(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (files_.count(name) != 0) return EntryType::kFile;
  const std::string prefix = DirectoryPrefix(name);
  const auto it = files_.lower_bound(prefix);
  if (it != files_.end() && StartsWith(it->first, prefix)) return EntryType::kDirectory;
  return Status::NotFound(name + ": no such file or directory in memory storage");
}

Result<std::vector<std::string>> MemoryStorage::ListFiles(const std::string& dir) {
  const std::string prefix = DirectoryPrefix(dir);
  std::vector<std::string> names;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);
       ++it) {
    if (it->first.find('/', prefix.size()) == std::string::npos) names.push_back(it->first);
  }
  return names;  // the map keeps them sorted
}

Result<std::string> MemoryStorage::ResolveInside(const std::string& dir, const std::string& file) {
  const std::string name = Join(dir, file);
  if (auto found = Find(name); !found.ok()) return found.status();
  return name;
}

std::string MemoryStorage::Parent(const std::string& name) const {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? "." : name.substr(0, slash);
}

std::string MemoryStorage::Join(const std::string& dir, const std::string& file) const {
  return DirectoryPrefix(dir) + file;
}

}  // namespace hoist
