// A TensorDirectory as JSON: the schema of `hoist inspect --json` (docs/CLI.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "format/tensor_directory.h"

namespace hoist {

nlohmann::ordered_json DirectoryToJson(const TensorDirectory& dir);
// Serialises JSON for output; invalid UTF-8 in model strings is replaced, never thrown on.
std::string DumpJson(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace hoist
