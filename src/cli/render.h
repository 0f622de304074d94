// How the command-line tool shows a model: as JSON (the schema in docs/CLI.md) or as text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "format/tensor_directory.h"

namespace hoist::cli {

nlohmann::ordered_json DirectoryToJson(const TensorDirectory& dir);
std::string DirectoryToText(const TensorDirectory& dir);
// Serialises JSON for output; invalid UTF-8 in model strings is replaced, never thrown on.
std::string DumpJson(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace hoist::cli
