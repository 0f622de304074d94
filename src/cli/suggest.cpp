#include "cli/suggest.h"

#include <algorithm>

#include "base/nearest_name.h"

namespace hoist::cli {
namespace {

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

// An option the caller spelled with a word added or dropped (--chunk-size, --chunk-bytes for
// --chunk): the longest known one that is a whole-word prefix of the name, or has it as one.
// Edit distance alone finds none of these.
std::string WordPrefixOf(const std::string& name, const std::vector<std::string>& options) {
  std::string best;
  for (const std::string& o : options) {
    const bool longer = name.starts_with(o + "-");
    const bool shorter = o.starts_with(name + "-");
    if ((longer || shorter) && o.size() > best.size()) best = o;
  }
  return best;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string SuggestForParseError(const CLI::App& app, const std::vector<std::string>& args) {
  const std::vector<std::string> commands = CommandNames(app);
  if (args.empty()) return "hoist: a command is required (" + Join(commands) + "; --help)";
  if (args[0].starts_with("-")) return {};
  const auto command = std::find(commands.begin(), commands.end(), args[0]);
  if (command == commands.end()) {
    const std::string near = NearestName(args[0], commands);
    return "hoist: unknown command '" + args[0] + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?") +
           " (commands: " + Join(commands) + ")";
  }
  const CLI::App* sub = app.get_subcommand(args[0]);
  std::vector<std::string> options = OptionNames(*sub);
  const std::vector<std::string> common = OptionNames(app);  // --help, --version
  options.insert(options.end(), common.begin(), common.end());
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (!args[i].starts_with("--")) continue;
    const std::string name = args[i].substr(0, args[i].find('='));
    if (std::find(options.begin(), options.end(), name) != options.end()) continue;
    std::string near = NearestName(name, options);
    if (near.empty()) near = WordPrefixOf(name, options);
    return "hoist " + args[0] + ": unknown option '" + name + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?") + " (hoist " + args[0] +
           " --help lists them)";
  }
  return {};
}

}  // namespace hoist::cli
