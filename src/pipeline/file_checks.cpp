#include "pipeline/file_checks.h"

namespace hoist {

Status CheckFilesUnchanged(const std::vector<std::unique_ptr<File>>& files,
                           const std::string& during) {
  for (const auto& file : files) {
    HOIST_ASSIGN_OR_RETURN(const FileIdentity now, file->CurrentIdentity());
    if (const std::string change = DescribeFileChange(file->identity(), now); !change.empty()) {
      return Status::FileChanged(file->path() + ": " + change + " " + during);
    }
  }
  return Status::Ok();
}

}  // namespace hoist
