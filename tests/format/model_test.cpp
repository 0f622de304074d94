#include "format/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "format/sample_model.h"
#include "test_util.h"

namespace hoist {
namespace {

namespace fs = std::filesystem;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Two shards: a.safetensors holds x, b.safetensors holds y.
void WriteTwoShards(const testing::TempDir& dir) {
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), {}, {{"x", "F32", {4}}}, nullptr).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), {}, {{"y", "F32", {2}}}, nullptr).ok());
}

TEST(ModelTest, OpensSafetensorsIndex) {
  testing::TempDir dir;
  WriteTwoShards(dir);
  WriteText(
      dir.File("model.safetensors.index.json"),
      R"({"metadata":{"total_size":24},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  for (const std::string& path : {dir.File("model.safetensors.index.json"), dir.path()}) {
    auto model = ReadModelDirectory(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(model->format, "safetensors");
    ASSERT_EQ(model->files.size(), 2u);
    ASSERT_NE(model->Find("y"), nullptr);
    EXPECT_EQ(model->Find("y")->file, 1u);
    EXPECT_EQ(model->total_bytes(), 24u);
  }
}

TEST(ModelTest, OpensDirectoryOfShardsWithoutIndex) {
  testing::TempDir dir;
  WriteTwoShards(dir);
  auto model = ReadModelDirectory(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->tensors.size(), 2u);
}

TEST(ModelTest, RejectsTensorInTwoShards) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), {}, {{"x", "F32", {4}}}, nullptr).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), {}, {{"x", "F32", {4}}}, nullptr).ok());
  auto model = ReadModelDirectory(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidModel);
  EXPECT_NE(model.status().message().find("tensor 'x' is also in " + dir.File("a.safetensors")),
            std::string::npos)
      << model.status().message();
}

TEST(ModelTest, RejectsTensorMissingFromItsShard) {
  testing::TempDir dir;
  WriteTwoShards(dir);
  const std::string index = dir.File("model.safetensors.index.json");
  const std::string text =
      R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}})";
  WriteText(index, text);
  auto model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(
      model.status().message(),
      index + ": tensor 'z' is listed for shard 'b.safetensors', which does not hold it at byte " +
          std::to_string(text.find("\"z\"")));
}

TEST(ModelTest, RejectsTensorInWrongShard) {
  testing::TempDir dir;
  WriteTwoShards(dir);
  const std::string index = dir.File("model.safetensors.index.json");
  WriteText(index, R"({"weight_map":{"x":"b.safetensors","y":"b.safetensors"}})");
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), {},
                               {{"y", "F32", {2}}, {"w", "F32", {1}}}, nullptr)
                  .ok());
  WriteText(index, R"({"weight_map":{"x":"b.safetensors","y":"a.safetensors"}})");
  auto model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidModel);
  EXPECT_NE(model.status().message().find("is listed in " + index + " for shard"),
            std::string::npos)
      << model.status().message();
}

TEST(ModelTest, RejectsShardNamesOutsideTheModelDirectory) {
  testing::TempDir outer;
  fs::create_directory(outer.File("model"));
  ASSERT_TRUE(
      WriteSafetensors(outer.File("secret.safetensors"), {}, {{"x", "F32", {4}}}, nullptr).ok());
  const std::string index = outer.File("model/model.safetensors.index.json");
  for (const std::string& name :
       {outer.File("secret.safetensors"), std::string("../secret.safetensors"),
        std::string("sub/x.safetensors"), std::string(".."),
        std::string("..\\\\secret.safetensors"), std::string("")}) {
    SCOPED_TRACE(name);
    WriteText(index, "{\"weight_map\":{\"x\":\"" + name + "\"}}");
    auto model = ReadModelDirectory(index);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kInvalidModel);
    EXPECT_NE(
        model.status().message().find("is not a plain file name inside the model's directory"),
        std::string::npos)
        << model.status().message();
  }
  std::error_code link_error;
  fs::create_symlink(outer.File("secret.safetensors"), outer.File("model/link.safetensors"),
                     link_error);
  if (link_error) GTEST_SKIP() << "symbolic links are not available here: " << link_error.message();
  WriteText(index, R"({"weight_map":{"x":"link.safetensors"}})");
  auto model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidModel);
  EXPECT_NE(model.status().message().find("is a link that leads outside the model's directory"),
            std::string::npos)
      << model.status().message();
}

// A directory whose model file is a link to itself, or to nothing, says so: it once said the
// directory held no model files.
TEST(ModelTest, AModelFileThatIsABrokenLinkIsNamed) {
  testing::TempDir dir;
  std::error_code link_error;
  fs::create_symlink("loop.safetensors", dir.File("loop.safetensors"), link_error);
  if (link_error) GTEST_SKIP() << "symbolic links are not available here: " << link_error.message();
  auto model = ReadModelDirectory(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kIoError);
  EXPECT_EQ(model.status().message().find(fs::path(dir.File("loop.safetensors")).generic_string() +
                                          ": cannot be followed: "),
            0u)
      << model.status().message();
  fs::remove(dir.File("loop.safetensors"));
  fs::create_symlink("gone.gguf", dir.File("m.gguf"));
  model = ReadModelDirectory(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message().find(fs::path(dir.File("m.gguf")).generic_string() + ": "), 0u)
      << model.status().message();
}

TEST(ModelTest, RejectsHostileIndexQuickly) {
  testing::TempDir dir;
  const std::string index = dir.File("model.safetensors.index.json");
  WriteText(index, std::string(1'000'000, '[') + std::string(1'000'000, ']'));
  auto model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), index + ": JSON nested deeper than 64 levels at byte 64");
  WriteText(index, R"({"weight_map":{"x":5}})");
  model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("weight_map entry for 'x' is not a file name"),
            std::string::npos);
  WriteText(index, R"({"metadata":{}})");
  model = ReadModelDirectory(index);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), index + ": index has no 'weight_map' object at byte 0");
}

TEST(ModelTest, OpensGgufSplits) {
  testing::TempDir dir;
  SampleSpec spec;
  spec.target_bytes = 4 << 20;
  spec.shards = 3;
  auto written = WriteSampleModel(dir.File("m.gguf"), spec);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const std::string first = dir.File("m-00001-of-00003.gguf");
  for (const std::string& path : {first, dir.path()}) {
    auto model = ReadModelDirectory(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(model->files.size(), 3u);
    EXPECT_EQ(model->tensors.size(), written->tensors.size());
    for (size_t i = 0; i < written->tensors.size(); ++i) {
      EXPECT_EQ(model->tensors[i].name, written->tensors[i].name);
      EXPECT_EQ(model->tensors[i].file, written->tensors[i].file);
      EXPECT_EQ(model->tensors[i].offset, written->tensors[i].offset);
    }
  }
  auto second = ReadModelDirectory(dir.File("m-00002-of-00003.gguf"));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("name the first split"), std::string::npos);
  fs::remove(dir.File("m-00003-of-00003.gguf"));
  auto missing = ReadModelDirectory(first);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST(ModelTest, RejectsSplitWhoseKeysDisagreeWithItsName) {
  testing::TempDir dir;
  SampleSpec spec;
  spec.target_bytes = 2 << 20;
  spec.shards = 2;
  ASSERT_TRUE(WriteSampleModel(dir.File("m.gguf"), spec).ok());
  fs::rename(dir.File("m-00002-of-00002.gguf"), dir.File("x.gguf"));
  fs::copy_file(dir.File("m-00001-of-00002.gguf"), dir.File("m-00002-of-00002.gguf"));
  auto model = ReadModelDirectory(dir.File("m-00001-of-00002.gguf"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kInvalidModel);
  EXPECT_NE(model.status().message().find("split.no 0 / split.count 2 do not match the file name"),
            std::string::npos)
      << model.status().message();
}

TEST(ModelTest, MissingPathIsNotFound) {
  auto model = ReadModelDirectory("/nonexistent/model.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace hoist
