// The documentation against the code it describes, where a machine can tell: every hoist option
// the docs name exists, every fuzzer in fuzz/ is listed in docs/FUZZING.md, and every HOIST_
// name a public header's comment gives is one the headers define.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace hoist {
namespace {

using testing::RunHoist;

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
}

// Where the run of characters `in_word` accepts, starting at `from`, ends.
template <typename InWord>
size_t WordEnd(const std::string& text, size_t from, InWord in_word) {
  while (from < text.size() && in_word(static_cast<unsigned char>(text[from]))) ++from;
  return from;
}

// The long options ("--name") in text, each not part of a longer word.
std::set<std::string> LongOptions(const std::string& text) {
  std::set<std::string> found;
  for (size_t i = 0; i + 2 < text.size(); ++i) {
    if (text.compare(i, 2, "--") != 0 || (i > 0 && IsWordChar(text[i - 1])) ||
        std::islower(static_cast<unsigned char>(text[i + 2])) == 0) {
      continue;
    }
    const size_t end = WordEnd(text, i + 2, [](unsigned char c) {
      return std::islower(c) != 0 || std::isdigit(c) != 0 || c == '-';
    });
    found.insert(text.substr(i, end - i));
    i = end;
  }
  return found;
}

// Whether a piece of code in the docs is a hoist command line (or an option alone).
bool IsHoistCommand(const std::string& code) {
  if (code.rfind("--", 0) == 0) return true;
  for (size_t at = code.find("hoist"); at != std::string::npos; at = code.find("hoist", at + 1)) {
    const bool starts =
        at == 0 || code[at - 1] == ' ' || code[at - 1] == '/' || code[at - 1] == '$';
    const size_t after = at + 5 + (code.compare(at + 5, 4, ".exe") == 0 ? 4 : 0);
    if (starts && after < code.size() && code[after] == ' ') return true;
  }
  return false;
}

// The code a Markdown text shows: its `spans` and the lines of its fenced blocks.
std::vector<std::string> CodeIn(const std::string& markdown) {
  std::vector<std::string> code;
  std::istringstream lines(markdown);
  std::string line;
  bool fenced = false;
  while (std::getline(lines, line)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) {
      code.push_back(line);
      continue;
    }
    for (size_t open = line.find('`'); open != std::string::npos;) {
      const size_t close = line.find('`', open + 1);
      if (close == std::string::npos) break;
      code.push_back(line.substr(open + 1, close - open - 1));
      open = line.find('`', close + 1);
    }
  }
  return code;
}

std::filesystem::path SourceDir() { return HOIST_SOURCE_DIR; }

TEST(DocsMatchCodeTest, EveryHoistOptionTheDocsNameExists) {
  auto top = RunHoist({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  std::set<std::string> options = LongOptions(top.out);
  const size_t listed = top.out.find("Subcommands:");
  ASSERT_NE(listed, std::string::npos) << top.out;
  std::istringstream commands(top.out.substr(listed));
  std::string line;
  std::getline(commands, line);
  int command_count = 0;
  while (std::getline(commands, line) && line.rfind("  ", 0) == 0) {
    const std::string command = line.substr(2, line.find(' ', 2) - 2);
    auto help = RunHoist({command, "--help"});
    ASSERT_EQ(help.exit_code, 0) << command << ": " << help.err;
    const std::set<std::string> more = LongOptions(help.out);
    options.insert(more.begin(), more.end());
    ++command_count;
  }
  ASSERT_GE(command_count, 7) << top.out;
  // Options of other programs the docs name, each with the program.
  const std::map<std::string, std::string> others = {
      {"--devcie", "the typo docs/CLI.md shows hoist's suggestion for"},
      {"--no-build-isolation", "pip"},
      {"--system-site-packages", "python3 -m venv"},
      {"--split-mode", "llama.cpp"},
  };
  std::vector<std::filesystem::path> docs = {SourceDir() / "README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(SourceDir() / "docs")) {
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  }
  ASSERT_GE(docs.size(), 5u);
  for (const auto& doc : docs) {
    for (const std::string& code : CodeIn(ReadText(doc))) {
      if (!IsHoistCommand(code)) continue;
      for (const std::string& option : LongOptions(code)) {
        EXPECT_TRUE(options.count(option) != 0 || others.count(option) != 0)
            << doc.filename().string() << " names " << option << " in `" << code
            << "`, which no hoist command has";
      }
    }
  }
}

TEST(DocsMatchCodeTest, EveryFuzzerIsListedInFuzzingMd) {
  const std::string fuzzing = ReadText(SourceDir() / "docs" / "FUZZING.md");
  int fuzzers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(SourceDir() / "fuzz")) {
    const std::string name = entry.path().stem().string();
    if (entry.path().extension() != ".cpp" || name.size() < 7 ||
        name.compare(name.size() - 7, 7, "_fuzzer") != 0) {
      continue;
    }
    ++fuzzers;
    EXPECT_NE(fuzzing.find("| `" + name + "` |"), std::string::npos)
        << "docs/FUZZING.md's table does not list " << name;
  }
  EXPECT_GE(fuzzers, 6);
}

// Splits a C header into its comments and the rest.
void SplitComments(const std::string& text, std::string& comments, std::string& code) {
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "/*") == 0) {
      const size_t end = std::min(text.find("*/", i + 2), text.size());
      comments += text.substr(i, end - i) + "\n";
      i = end + 2;
    } else if (text.compare(i, 2, "//") == 0) {
      const size_t end = std::min(text.find('\n', i), text.size());
      comments += text.substr(i, end - i) + "\n";
      i = end;
    } else {
      code += text[i++];
    }
  }
}

std::set<std::string> HoistNames(const std::string& text) {
  std::set<std::string> names;
  for (size_t at = text.find("HOIST_"); at != std::string::npos; at = text.find("HOIST_", at)) {
    if (at > 0 && IsWordChar(text[at - 1])) {
      at += 6;
      continue;
    }
    const size_t end = WordEnd(text, at, [](unsigned char c) {
      return std::isupper(c) != 0 || std::isdigit(c) != 0 || c == '_';
    });
    names.insert(text.substr(at, end - at));
    at = end;
  }
  return names;
}

TEST(DocsMatchCodeTest, EveryHoistNameAHeaderCommentGivesIsDefined) {
  std::string comments;
  std::string code;
  int headers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(SourceDir() / "include" / "hoist")) {
    SplitComments(ReadText(entry.path()), comments, code);
    ++headers;
  }
  ASSERT_GE(headers, 2);
  std::set<std::string> defined = HoistNames(code);
  // The environment variables hoist reads (all in one place) are defined too.
  const std::set<std::string> variables =
      HoistNames(ReadText(SourceDir() / "src" / "api" / "settings.cpp"));
  ASSERT_EQ(variables.count("HOIST_PIN"), 1U);
  defined.insert(variables.begin(), variables.end());
  const std::set<std::string> named = HoistNames(comments);
  ASSERT_FALSE(named.empty());
  for (const std::string& name : named) {
    EXPECT_TRUE(defined.count(name) != 0)
        << "a comment in include/hoist names " << name << ", which the headers do not define";
  }
}

}  // namespace
}  // namespace hoist
