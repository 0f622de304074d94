// The layers of src/ (docs/ARCHITECTURE.md) as the includes draw them: each layer includes
// only itself and the layers beneath it, so that an arrow running back up (io/ reaching into
// format/ to pick a model's file, once) fails here rather than in a review.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace hoist {
namespace {

// Per layer, the layers its files may include. pack/ (codecs) sits under format/ and device/:
// the GPU decode kernels are built with the device backends.
const std::map<std::string, std::set<std::string>>& AllowedIncludes() {
  static const auto* allowed = new std::map<std::string, std::set<std::string>>{
      {"base", {"base"}},
      {"io", {"base", "io"}},
      {"pack", {"base", "pack"}},
      {"format", {"base", "io", "pack", "format"}},
      {"device", {"base", "pack", "device"}},
      {"plan", {"base", "format", "plan"}},
      {"pipeline", {"base", "io", "pack", "format", "device", "plan", "pipeline"}},
      {"api", {"base", "io", "pack", "format", "device", "plan", "pipeline", "api"}},
      {"measure", {"base", "io", "pack", "format", "device", "plan", "pipeline", "measure"}},
      {"cli",
       {"base", "io", "pack", "format", "device", "plan", "pipeline", "api", "measure", "cli"}},
  };
  return *allowed;
}

// The hoist layers a file includes ("format" for #include "format/model.h"), with the line.
std::vector<std::pair<std::string, std::string>> IncludedLayers(const std::filesystem::path& file) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const std::string prefix = "#include \"";
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t slash = line.find('/', prefix.size());
    if (slash == std::string::npos) continue;
    out.emplace_back(line.substr(prefix.size(), slash - prefix.size()), line);
  }
  return out;
}

TEST(LayersTest, EachLayerIncludesOnlyItselfAndTheLayersBeneath) {
  const std::filesystem::path src = std::filesystem::path(HOIST_SOURCE_DIR) / "src";
  std::set<std::string> seen;
  std::vector<std::string> broken;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".cu") continue;
    const std::string layer = entry.path().lexically_relative(src).begin()->string();
    seen.insert(layer);
    const auto allowed = AllowedIncludes().find(layer);
    if (allowed == AllowedIncludes().end()) {
      broken.push_back(entry.path().string() + ": in a layer the table does not know");
      continue;
    }
    for (const auto& [included, line] : IncludedLayers(entry.path())) {
      if (AllowedIncludes().count(included) == 0) continue;  // "hoist/hoist.h", "test_util.h"
      if (allowed->second.count(included) == 0) {
        broken.push_back(entry.path().lexically_relative(src).generic_string() + ": " + line);
      }
    }
  }
  EXPECT_EQ(broken, std::vector<std::string>{});
  for (const auto& [layer, _] : AllowedIncludes()) EXPECT_EQ(seen.count(layer), 1u) << layer;
}

// The public header is the C API's: only api/ may include it, so
// that the core defines its own codes and the C API maps them.
TEST(LayersTest, OnlyTheCApiIncludesThePublicHeader) {
  const std::filesystem::path src = std::filesystem::path(HOIST_SOURCE_DIR) / "src";
  std::vector<std::string> including;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("#include \"hoist/", 0) == 0) {
        including.push_back(entry.path().lexically_relative(src).generic_string());
        break;
      }
    }
  }
  for (const std::string& file : including) {
    EXPECT_TRUE(file.rfind("api/", 0) == 0) << file << " includes the public header";
  }
}

// The C++ wrapper (hoist.hpp) and src/ share namespace hoist: a type of one name in both is two
// definitions of one class, and a program linking libhoist.a may call the wrong one's inline
// members (an internal `Plan` once ran hoist.hpp's ~Plan and crashed). Types at namespace scope
// are written at the first column.
TEST(LayersTest, NoTypeOfTheCppWrapperIsNamedAgainInSrc) {
  const std::filesystem::path root(HOIST_SOURCE_DIR);
  const std::regex declared(R"(^(?:class|struct|enum class|using)\s+([A-Za-z_]\w*))");
  std::set<std::string> wrapper;
  {
    std::ifstream in(root / "include" / "hoist" / "hoist.hpp");
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, declared)) wrapper.insert(m[1]);
    }
  }
  ASSERT_TRUE(wrapper.count("Model") != 0 && wrapper.count("Plan") != 0);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root / "src")) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    for (int number = 1; std::getline(in, line); ++number) {
      if (!std::regex_search(line, m, declared) || line.find(';') != std::string::npos) continue;
      EXPECT_EQ(wrapper.count(m[1]), 0U)
          << entry.path().lexically_relative(root).generic_string() << ":" << number << " declares "
          << m[1] << ", a type of hoist.hpp";
    }
  }
}

}  // namespace
}  // namespace hoist
