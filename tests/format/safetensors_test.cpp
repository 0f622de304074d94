#include "format/safetensors.h"

#include <gtest/gtest.h>

#include "format/dtypes.h"
#include "format/sample_model.h"
#include "io/memory_file.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::Bytes;

// A file with the given header text and data_bytes bytes of data.
Bytes SafetensorsFile(const std::string& header, size_t data_bytes) {
  Bytes b;
  b.Put<uint64_t>(header.size()).Raw(header).Zeros(data_bytes);
  return b;
}

Result<TensorDirectory> ParseSafetensors(const Bytes& b) {
  MemoryFile file("bad.safetensors", b.data);
  return ReadSafetensors(file);
}

void ExpectInvalidSafetensors(const Bytes& b, const std::string& message) {
  auto dir = ParseSafetensors(b);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), Code::kInvalidModel);
  EXPECT_EQ(dir.status().message(), "bad.safetensors: " + message);
}

TEST(SafetensorsReaderTest, ReadsTensorsInDataOrderWithAbsoluteOffsets) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  auto dir = ParseSafetensors(SafetensorsFile(header, 8));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(dir->tensors.size(), 2u);
  EXPECT_EQ(dir->tensors[0].name, "a");
  EXPECT_EQ(dir->tensors[0].offset, 8 + header.size());
  EXPECT_EQ(dir->tensors[1].name, "b");
  EXPECT_EQ(dir->tensors[1].offset, 8 + header.size() + 4);
  ASSERT_EQ(dir->metadata.size(), 1u);
  EXPECT_EQ(dir->metadata[0].key, "format");
  EXPECT_EQ(dir->metadata[0].value, "pt");
}

TEST(SafetensorsReaderTest, AcceptsEmptyAndScalarTensors) {
  const std::string header = R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},)"
                             R"("s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})";
  auto dir = ParseSafetensors(SafetensorsFile(header, 8));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->tensors[0].nbytes, 0u);
  EXPECT_EQ(dir->tensors[1].nbytes, 8u);
}

TEST(SafetensorsReaderTest, RejectsShortFile) {
  Bytes b;
  b.Put<uint32_t>(5);
  ExpectInvalidSafetensors(b, "file is 4 bytes, shorter than the 8-byte header length at byte 0");
}

TEST(SafetensorsReaderTest, RejectsHeaderOverLimit) {
  Bytes b;
  b.Put<uint64_t>(100'000'001).Zeros(16);
  ExpectInvalidSafetensors(
      b, "header length 100000001 exceeds the limit of 100000000 bytes at byte 0");
}

TEST(SafetensorsReaderTest, RejectsHeaderPastEnd) {
  Bytes b;
  b.Put<uint64_t>(1000).Raw("{}");
  ExpectInvalidSafetensors(b,
                           "header length 1000 runs past the end of the file (10 bytes) at byte 0");
}

TEST(SafetensorsReaderTest, RejectsInvalidUtf8) {
  ExpectInvalidSafetensors(SafetensorsFile("{\"a\xff\":1}", 0),
                           "JSON is not valid UTF-8 at byte 11");
}

TEST(SafetensorsReaderTest, RejectsHeaderNotStartingWithBrace) {
  ExpectInvalidSafetensors(SafetensorsFile(" {}", 0), "header does not start with '{' at byte 8");
}

TEST(SafetensorsReaderTest, RejectsMalformedJson) {
  auto dir = ParseSafetensors(SafetensorsFile("{\"a\":", 0));
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), Code::kInvalidModel);
  EXPECT_NE(dir.status().message().find("JSON is malformed"), std::string::npos);
}

TEST(SafetensorsReaderTest, RejectsDeepNesting) {
  std::string deep = "{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}";
  ExpectInvalidSafetensors(SafetensorsFile(deep, 0), "JSON nested deeper than 64 levels at byte " +
                                                         std::to_string(8 + 5 + 63));
}

TEST(SafetensorsReaderTest, RejectsDuplicateTensor) {
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  ExpectInvalidSafetensors(
      SafetensorsFile(header, 2),
      "JSON object has the key 'a' twice at byte " + std::to_string(8 + header.rfind("\"a\"")));
}

TEST(SafetensorsReaderTest, RejectsTensorRules) {
  struct Case {
    std::string header;
    size_t data;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"a":5})", 0, "tensor 'a' is not a JSON object"},
      {R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1, "tensor 'a' has no string 'dtype'"},
      {R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1, "tensor 'a' has no array 'shape'"},
      {R"({"a":{"dtype":"U8","shape":[1]}})", 1, "tensor 'a' has no 'data_offsets' pair"},
      {R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1,
       "tensor 'a': unknown dtype 'Q4'"},
      {R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 'a': unknown dtype 'f32'"},
      {R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1,
       "tensor 'a' has a shape entry that is not a non-negative integer"},
      {R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1,
       "tensor 'a' has a shape entry that is not a non-negative integer"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", 1,
       "tensor 'a' data_offsets [1, 0] end before they begin"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", 1,
       "tensor 'a' has a data offset that is not a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4,
       "tensor 'a' is 4 bytes by its data_offsets but 8 by its dtype and shape"},
      {R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
       "tensor 'a': the F4 elements fill 12 bits, not a whole number of bytes"},
      {R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
       "tensor 'a': size of the shape overflows 64 bits"},
      {R"({"__metadata__":{"k":1}})", 0, "__metadata__ value of 'k' is not a string"},
      {R"({"__metadata__":[]})", 0, "__metadata__ is not a JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    ExpectInvalidSafetensors(SafetensorsFile(c.header, c.data), c.message + " at byte 8");
  }
}

TEST(SafetensorsReaderTest, AcceptsSubByteDtypesThatFillWholeBytes) {
  auto dir = ParseSafetensors(
      SafetensorsFile(R"({"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},)"
                      R"("b":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]}})",
                      6));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
}

TEST(SafetensorsReaderTest, RejectsLayoutHolesOverlapsAndTrailingBytes) {
  const std::string two_with_hole =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  ExpectInvalidSafetensors(
      SafetensorsFile(two_with_hole, 5),
      "tensor 'b' starts at data offset 3 but the previous tensor ends at 2 (a hole) at "
      "byte " +
          std::to_string(8 + two_with_hole.size() + 2));
  const std::string overlap =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})";
  ExpectInvalidSafetensors(
      SafetensorsFile(overlap, 3),
      "tensor 'b' starts at data offset 1 but the previous tensor ends at 2 (an overlap) "
      "at byte " +
          std::to_string(8 + overlap.size() + 1));
  const std::string not_at_zero = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})";
  ExpectInvalidSafetensors(
      SafetensorsFile(not_at_zero, 3),
      "tensor 'a' starts at data offset 1 but the previous tensor ends at 0 (a hole) at "
      "byte " +
          std::to_string(8 + not_at_zero.size()));
  const std::string one = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  ExpectInvalidSafetensors(SafetensorsFile(one, 3),
                           "tensor data ends at data offset 2 but the file holds 3 data bytes "
                           "at byte " +
                               std::to_string(8 + one.size() + 2));
  ExpectInvalidSafetensors(SafetensorsFile(one, 1),
                           "tensor data ends at data offset 2 but the file holds 1 data bytes "
                           "at byte " +
                               std::to_string(8 + one.size() + 1));
}

TEST(SafetensorsWriterTest, RoundTripsEveryDtype) {
  testing::TempDir dir;
  std::vector<SafetensorsTensorSpec> specs;
  for (const SafetensorsDtype& d : SafetensorsDtypes()) {
    specs.push_back({"t." + std::string(d.name), std::string(d.name), {4, 8}});
  }
  auto fill = [](size_t i, uint64_t off, std::span<unsigned char> out) {
    FillSampleBytes(3, i, off, out);
    return true;
  };
  auto written = WriteSafetensors(dir.File("x.safetensors"), {{"format", "pt"}}, specs, fill);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  auto file = OpenFile(dir.File("x.safetensors"));
  ASSERT_TRUE(file.ok());
  auto read = ReadSafetensors(**file);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->tensors.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorEntry* r = read->Find(specs[i].name);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->dtype, specs[i].dtype);
    EXPECT_EQ(r->shape, specs[i].shape);
    EXPECT_EQ(r->offset, written->tensors[i].offset);
    std::vector<unsigned char> got(r->nbytes), want(r->nbytes);
    ASSERT_TRUE((*file)->ReadExact(r->offset, got.data(), got.size()).ok());
    FillSampleBytes(3, i, 0, want);
    EXPECT_EQ(got, want);
  }
  // The data starts 8-byte aligned, as the official writer leaves it.
  EXPECT_EQ(read->tensors[0].offset % 8, 0u);
}

}  // namespace
}  // namespace hoist
