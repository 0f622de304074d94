#include "cli/suggest.h"

#include <algorithm>

namespace hoist::cli {
namespace {

// Optimal string alignment distance: Levenshtein's, with a swap of neighbours as one edit.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

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

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string NearestName(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(typed, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  const size_t limit = std::max<size_t>(2, std::max(typed.size(), best.size()) / 3);
  return best_distance <= limit ? best : std::string();
}

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
    const std::string near = NearestName(name, options);
    return "hoist " + args[0] + ": unknown option '" + name + "'" +
           (near.empty() ? "" : "; did you mean '" + near + "'?") + " (hoist " + args[0] +
           " --help lists them)";
  }
  return {};
}

}  // namespace hoist::cli
