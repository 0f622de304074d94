// Every file of the shared corpus (written by other people's tools) read by hoist as the
// reference readers read it: names, dtypes, shapes, offsets, byte sizes, metadata keys and an
// XXH3-64 of every tensor's bytes (corpus/reference.json).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/checksum.h"
#include "format/model.h"
#include "io/file.h"
#include "test_util.h"

namespace hoist {
namespace {

nlohmann::json Reference() {
  std::ifstream in(testing::CorpusDir() + "/reference.json");
  return nlohmann::json::parse(in);
}

TEST(ConformanceTest, EveryCorpusFileMatchesTheReferenceReaders) {
  const nlohmann::json reference = Reference();
  ASSERT_GE(reference.size(), 8u);
  for (const auto& [relative, expected] : reference.items()) {
    SCOPED_TRACE(relative);
    const std::string path = testing::CorpusDir() + "/" + relative;
    auto model = ReadModelDirectory(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_TRUE(model->warnings.empty());
    if (expected.contains("version")) {
      EXPECT_EQ(model->version, expected["version"].get<uint32_t>());
    }
    if (expected.contains("metadata_keys")) {
      ASSERT_EQ(model->metadata.size(), expected["metadata_keys"].size());
      for (const auto& [key, info] : expected["metadata_keys"].items()) {
        const MetadataEntry* m = model->FindMetadata(key);
        ASSERT_NE(m, nullptr) << key;
        EXPECT_EQ(m->type, info["type"].get<std::string>()) << key;
        EXPECT_EQ(m->count, info["count"].get<uint64_t>()) << key;
      }
    }
    if (expected.contains("metadata")) {
      ASSERT_EQ(model->metadata.size(), expected["metadata"].size());
      for (const auto& [key, value] : expected["metadata"].items()) {
        const MetadataEntry* m = model->FindMetadata(key);
        ASSERT_NE(m, nullptr) << key;
        EXPECT_EQ(m->value, value) << key;
      }
    }
    ASSERT_EQ(model->tensors.size(), expected["tensors"].size());
    auto file = OpenFile(path);
    ASSERT_TRUE(file.ok());
    for (const auto& want : expected["tensors"]) {
      const std::string name = want["name"].get<std::string>();
      const TensorEntry* t = model->Find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->dtype, want["dtype"].get<std::string>()) << name;
      EXPECT_EQ(t->shape, want["shape"].get<std::vector<uint64_t>>()) << name;
      EXPECT_EQ(t->offset, want["offset"].get<uint64_t>()) << name;
      EXPECT_EQ(t->nbytes, want["nbytes"].get<uint64_t>()) << name;
      std::vector<unsigned char> bytes(t->nbytes);
      ASSERT_TRUE((*file)->ReadExact(t->offset, bytes.data(), bytes.size()).ok());
      EXPECT_EQ(HexDigest(Xxh3(bytes.data(), bytes.size())), want["xxh3"].get<std::string>())
          << name;
    }
  }
}

}  // namespace
}  // namespace hoist
