// Tensors beyond 2 GiB and 4 GiB in the file: the classic failure of a 64-bit offset squeezed
// through 32 bits. The files are sparse, so they cost no disk.
#include <gtest/gtest.h>

#include "base/units.h"
#include "format/gguf.h"
#include "format/model.h"
#include "format/safetensors.h"
#include "format/sample_model.h"
#include "io/file.h"
#include "test_util.h"

namespace hoist {
namespace {

void ExpectBytes(const std::string& path, const TensorEntry& t, uint64_t seed, size_t index) {
  auto file = OpenFile(path);
  ASSERT_TRUE(file.ok());
  std::vector<unsigned char> got(t.nbytes), want(t.nbytes);
  ASSERT_TRUE((*file)->ReadExact(t.offset, got.data(), got.size()).ok());
  FillSampleBytes(seed, index, 0, want);
  EXPECT_EQ(got, want) << t.name;
}

TEST(LargeOffsetTest, SparseGgufWithTensorsBeyondTwoAndFourGiB) {
  testing::TempDir dir;
  const std::string path = dir.File("far.gguf");
  ASSERT_TRUE(testing::WriteFarGguf(path, 5));
  auto model = ReadModelDirectory(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ(model->tensors.size(), 3u);
  EXPECT_EQ(model->tensors[0].nbytes, 64u);
  EXPECT_EQ(model->tensors[1].nbytes, 272u);
  EXPECT_EQ(model->tensors[2].nbytes, 8192u);
  EXPECT_GT(model->tensors[1].offset, 2 * kGiB);
  EXPECT_GT(model->tensors[2].offset, 4 * kGiB);
  for (size_t i = 0; i < 3; ++i) ExpectBytes(path, model->tensors[i], 5, i);
}

TEST(LargeOffsetTest, SparseSafetensorsWithTensorBeyondFourGiB) {
  testing::TempDir dir;
  const std::string path = dir.File("far.safetensors");
  std::vector<SafetensorsTensorSpec> specs = {
      {"hole", "U8", {5 * kGiB}},
      {"past_4g", "BF16", {3, 1000}},
  };
  auto fill = [](size_t i, uint64_t off, std::span<unsigned char> out) {
    if (i == 0) return false;  // leave the 5 GiB tensor a hole
    FillSampleBytes(6, i, off, out);
    return true;
  };
  ASSERT_TRUE(WriteSafetensors(path, {}, specs, fill).ok());
  auto model = ReadModelDirectory(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const TensorEntry* far = model->Find("past_4g");
  ASSERT_NE(far, nullptr);
  EXPECT_GT(far->offset, 5 * kGiB);
  ExpectBytes(path, *far, 6, 1);
}

}  // namespace
}  // namespace hoist
