// How the command-line tool shows a model as text (JSON: format/directory_json.h).
#pragma once

#include <string>

#include "format/tensor_directory.h"

namespace hoist::cli {

std::string DirectoryToText(const TensorDirectory& dir);

}  // namespace hoist::cli
