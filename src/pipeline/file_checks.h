// Whether the files a load or a verify reads are still the ones the model was opened from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/file.h"

namespace hoist {

// OK, or kFileChanged naming the first of `files` that was written to since it was opened
// (`during`: "while it was being loaded"). Asked through the open files: a rename over a
// name does not change what they read.
Status CheckFilesUnchanged(const std::vector<std::unique_ptr<File>>& files,
                           const std::string& during);

}  // namespace hoist
