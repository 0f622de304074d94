// "Did you mean ...?" for a mistyped command or option: the nearest name by edit distance.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace hoist::cli {

// The message for a command line CLI11 refused, with a suggestion where a command or option
// name was mistyped ("unknown command 'lod'; did you mean 'load'?"); empty when there is none
// to make (CLI11's own message then stands). args: as typed, without the program's name.
std::string SuggestForParseError(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace hoist::cli
