// Storage: the memory-backed source behaves as the local one does, and a model opened from it
// loads byte-exact.
#include "io/storage.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "format/model.h"
#include "format/sample_model.h"
#include "pipeline/load_checks.h"
#include "pipeline/loader.h"
#include "test_util.h"

namespace hoist {
namespace {

TEST(MemoryStorageTest, NamesFilesAndDirectoriesAsTheLocalOneDoes) {
  MemoryStorage storage;
  storage.Add("m/a.safetensors", {1, 2, 3});
  storage.Add("m/sub/b.gguf", {4});
  storage.Add("top.gguf", {5});
  EXPECT_EQ(storage.Type("m/a.safetensors").value(), EntryType::kFile);
  EXPECT_EQ(storage.Type("m").value(), EntryType::kDirectory);
  EXPECT_EQ(storage.Type("m/").value(), EntryType::kDirectory);
  EXPECT_EQ(storage.Type("m/nothing").status().code(), Code::kNotFound);
  EXPECT_EQ(storage.ListFiles("m").value(), std::vector<std::string>{"m/a.safetensors"});
  EXPECT_EQ(storage.ListFiles(".").value(), std::vector<std::string>{"top.gguf"});
  EXPECT_EQ(storage.Parent("m/a.safetensors"), "m");
  EXPECT_EQ(storage.Parent("top.gguf"), ".");
  EXPECT_EQ(storage.Join(".", "top.gguf"), "top.gguf");
  EXPECT_EQ(storage.ResolveInside("m", "a.safetensors").value(), "m/a.safetensors");
  EXPECT_EQ(storage.ResolveInside("m", "b.gguf").status().code(), Code::kNotFound);

  auto file = storage.Open("m/a.safetensors", {});
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->size(), 3u);
  unsigned char got[2] = {};
  ASSERT_TRUE((*file)->ReadExact(1, got, 2).ok());
  EXPECT_EQ(got[0], 2);
  EXPECT_EQ(got[1], 3);
  EXPECT_EQ(storage.Open("m/none", {}).status().code(), Code::kNotFound);
  EXPECT_EQ(storage.Open("m/a.safetensors", OpenOptions{true}).status().code(), Code::kUnavailable);
}

// Copies every file of the directory at `from` into storage under `to`.
void CopyInto(MemoryStorage& storage, const std::string& from, const std::string& to) {
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    storage.Add(to + "/" + entry.path().filename().string(),
                testing::ReadBytes(entry.path().string()));
  }
}

TEST(MemoryStorageTest, AModelOpenedFromMemoryLoadsByteExact) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.format = "safetensors";
  spec.shards = 3;
  spec.target_bytes = 12 << 20;
  spec.dtypes = {"BF16", "F32", "F8_E4M3"};
  const TensorDirectory on_disk = testing::Sample(tmp, "model.safetensors.index.json", spec);
  auto memory = std::make_shared<MemoryStorage>();
  CopyInto(*memory, tmp.path(), "models/m");

  for (const std::string& name :
       {std::string("models/m"), std::string("models/m/model.safetensors.index.json")}) {
    SCOPED_TRACE(name);
    auto dir = ReadModelDirectory(memory, name);
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    ASSERT_EQ(dir->tensors.size(), on_disk.tensors.size());
    ASSERT_EQ(dir->files.size(), 3u);
    EXPECT_EQ(dir->files[0].path.rfind("models/m/", 0), 0u) << dir->files[0].path;
    for (size_t i = 0; i < dir->tensors.size(); ++i) {
      EXPECT_EQ(dir->tensors[i].name, on_disk.tensors[i].name);
      EXPECT_EQ(dir->tensors[i].offset, on_disk.tensors[i].offset);
    }
    LoadOptions o;
    o.checksum = true;
    o.io = IoMode::kDirect;  // memory has none: the load says so and reads anyway
    auto model = Load(*dir, testing::MakeDevice("sim"), o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_FALSE((*model)->report.fallbacks.empty());
    testing::ExpectByteExact(*dir, **model);
    auto mismatches = Verify(*dir, **model, 2, 10);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
    EXPECT_TRUE(mismatches->empty());
  }
}

TEST(MemoryStorageTest, GgufSplitsAndErrorsNameTheMemoryFiles) {
  testing::TempDir tmp;
  SampleSpec spec;
  spec.target_bytes = 4 << 20;
  spec.shards = 2;
  ASSERT_TRUE(WriteSampleModel(tmp.File("m.gguf"), spec).ok());
  auto memory = std::make_shared<MemoryStorage>();
  CopyInto(*memory, tmp.path(), "g");
  auto dir = ReadModelDirectory(memory, "g");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->files.size(), 2u);
  auto model = Load(*dir, testing::MakeDevice("host"), LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  testing::ExpectByteExact(*dir, **model);

  auto missing = ReadModelDirectory(memory, "g/none.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  memory->Add("bad/x.safetensors", {1, 2, 3});
  auto bad = ReadModelDirectory(memory, "bad/x.safetensors");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidModel);
  EXPECT_EQ(bad.status().message().rfind("bad/x.safetensors: ", 0), 0u) << bad.status().message();
}

}  // namespace
}  // namespace hoist
