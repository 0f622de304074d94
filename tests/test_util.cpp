#include "test_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace hoist::testing {

std::string CorpusDir() { return HOIST_CORPUS_DIR; }

double TimeBound(double seconds) {
  const char* scale = std::getenv("HOIST_TEST_TIME_SCALE");
  return scale != nullptr ? seconds * std::strtod(scale, nullptr) : seconds;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "hoist-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<unsigned char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

namespace {
std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

CommandResult RunHoist(const std::vector<std::string>& args) {
  TempDir dir;
  std::string command = Quote(HOIST_CLI);
  for (const std::string& a : args) command += " " + Quote(a);
  command += " >" + Quote(dir.File("out")) + " 2>" + Quote(dir.File("err")) + " </dev/null";
  const int status = std::system(command.c_str());  // NOLINT(cert-env33-c)
  CommandResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  result.out = Slurp(dir.File("out"));
  result.err = Slurp(dir.File("err"));
  return result;
}

}  // namespace hoist::testing
