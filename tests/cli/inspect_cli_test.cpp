#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace hoist {
namespace {

using testing::RunHoist;

TEST(InspectCliTest, JsonMatchesReferenceForEveryCorpusFile) {
  std::ifstream in(testing::CorpusDir() + "/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  for (const auto& [relative, expected] : reference.items()) {
    SCOPED_TRACE(relative);
    const std::string path = testing::CorpusDir() + "/" + relative;
    auto result = RunHoist({"inspect", "--json", path});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const nlohmann::json got = nlohmann::json::parse(result.out);
    EXPECT_EQ(got["format"], relative.rfind("gguf/", 0) == 0 ? "gguf" : "safetensors");
    ASSERT_EQ(got["files"].size(), 1u);
    EXPECT_EQ(got["files"][0]["path"], path);
    ASSERT_EQ(got["tensors"].size(), expected["tensors"].size());
    std::map<std::string, nlohmann::json> by_name;
    uint64_t total = 0;
    for (const auto& t : got["tensors"]) {
      by_name[t["name"].get<std::string>()] = t;
      total += t["nbytes"].get<uint64_t>();
    }
    EXPECT_EQ(got["total_bytes"].get<uint64_t>(), total);
    for (const auto& want : expected["tensors"]) {
      const auto& t = by_name.at(want["name"].get<std::string>());
      EXPECT_EQ(t["dtype"], want["dtype"]);
      EXPECT_EQ(t["shape"], want["shape"]);
      EXPECT_EQ(t["offset"], want["offset"]);
      EXPECT_EQ(t["nbytes"], want["nbytes"]);
      EXPECT_EQ(t["file"], 0);
    }
    if (expected.contains("metadata_keys")) {
      for (const auto& [key, info] : expected["metadata_keys"].items()) {
        ASSERT_TRUE(got["metadata"].contains(key)) << key;
        EXPECT_EQ(got["metadata"][key]["type"], info["type"]) << key;
        EXPECT_EQ(got["metadata"][key]["count"], info["count"]) << key;
      }
    }
  }
}

TEST(InspectCliTest, TextOutputShowsTableAndTotals) {
  auto result = RunHoist({"inspect", testing::CorpusDir() + "/gguf/llama-2-tiny-random.gguf"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("format    gguf v3"), std::string::npos);
  EXPECT_NE(result.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(result.out.find("F16: 9 tensors"), std::string::npos);
  EXPECT_NE(result.out.find("[STRING x 32000]"), std::string::npos);
  EXPECT_NE(result.out.find("total     1002.09 KiB (1026144 bytes)"), std::string::npos);
}

TEST(InspectCliTest, InvalidModelExitsTwoWithOneLine) {
  testing::TempDir dir;
  testing::Bytes b;
  b.Raw("GGUF").Put<uint32_t>(1).Put<uint64_t>(0).Put<uint64_t>(0);
  testing::WriteBytes(dir.File("v1.gguf"), b.data);
  auto result = RunHoist({"inspect", dir.File("v1.gguf")});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err,
            "hoist: " + dir.File("v1.gguf") +
                ": GGUF version 1 is not supported (only versions 2 and 3) at byte 4\n");
  EXPECT_EQ(result.out, "");
}

TEST(InspectCliTest, MissingFileExitsOne) {
  auto result = RunHoist({"inspect", "/nonexistent/x.gguf"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "hoist: /nonexistent/x.gguf: No such file or directory\n");
}

TEST(InspectCliTest, UnknownSubcommandOrMissingArgumentExitsOne) {
  EXPECT_EQ(RunHoist({"inspect"}).exit_code, 1);
  EXPECT_EQ(RunHoist({"frobnicate"}).exit_code, 1);
  auto help = RunHoist({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("inspect"), std::string::npos);
}

}  // namespace
}  // namespace hoist
