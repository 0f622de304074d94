// Whether the files a load or a verify reads are still the ones the model was opened from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

// OK, or kFileChanged when `opened` (by a load or a verify) is no longer the file that `parsed`
// describes: another file renamed over its name, or the same file written to since.
Status CheckOpenedAsParsed(const FileEntry& parsed, const File& opened);

// OK, or kFileChanged naming the first of `files` that was written to since it was opened
// (`during`: "while it was being loaded"). Asked through the open files: a rename over a
// name does not change what they read.
Status CheckFilesUnchanged(const std::vector<std::unique_ptr<File>>& files,
                           const std::string& during);

}  // namespace hoist
