#include "io/storage.h"

#include <string>

namespace hoist {

Result<std::string> ReadSmallFile(Storage& storage, const std::string& name, uint64_t max_bytes) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, storage.Open(name, {}));
  if (file->size() > max_bytes) {
    return Status::IoError(name + ": " + std::to_string(file->size()) + " bytes, more than the " +
                           std::to_string(max_bytes) + " such a file may hold");
  }
  std::string text(file->size(), '\0');
  if (!text.empty()) HOIST_RETURN_IF_ERROR(file->ReadExact(0, text.data(), text.size()));
  return text;
}

}  // namespace hoist
