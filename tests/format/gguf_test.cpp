#include "format/gguf.h"

#include <gtest/gtest.h>

#include "base/units.h"
#include "format/dtypes.h"
#include "format/sample_model.h"
#include "io/file.h"
#include "io/memory_file.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::Bytes;

constexpr uint32_t kU32 = 4, kString = 8, kArray = 9, kBool = 7, kU8 = 0;

Bytes Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  Bytes b;
  b.Raw("GGUF").Put<uint32_t>(version).Put<uint64_t>(tensors).Put<uint64_t>(kvs);
  return b;
}

// A tensor info; dims given innermost first, as GGUF stores them.
void TensorInfo(Bytes& b, const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                uint64_t offset) {
  b.Str(name).Put<uint32_t>(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) b.Put<uint64_t>(d);
  b.Put<uint32_t>(type).Put<uint64_t>(offset);
}

Result<TensorDirectory> Parse(const Bytes& b) {
  MemoryFile file("bad.gguf", b.data);
  return ReadGguf(file);
}

void ExpectInvalid(const Bytes& b, const std::string& message) {
  auto dir = Parse(b);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), Code::kInvalidModel);
  EXPECT_EQ(dir.status().message(), "bad.gguf: " + message);
}

TEST(GgufReaderTest, ReadsMinimalFileWithOneTensor) {
  Bytes b = Header(1, 1);
  b.Str("general.architecture").Put<uint32_t>(kString).Str("llama");
  TensorInfo(b, "w", {4, 2}, 0, 0);
  b.AlignTo(32);
  const size_t data = b.size();
  b.Zeros(32);
  auto dir = Parse(b);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->version, 3u);
  ASSERT_EQ(dir->tensors.size(), 1u);
  EXPECT_EQ(dir->tensors[0].shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(dir->tensors[0].offset, data);
  EXPECT_EQ(dir->tensors[0].nbytes, 32u);
  EXPECT_EQ(dir->metadata[0].value, "llama");
}

TEST(GgufReaderTest, RejectsBadMagic) {
  Bytes b;
  b.Raw("GGUX").Put<uint32_t>(3).Put<uint64_t>(0).Put<uint64_t>(0);
  ExpectInvalid(b, "not a GGUF file: magic is 'GGUX', expected 'GGUF' at byte 0");
}

TEST(GgufReaderTest, RejectsVersionOne) {
  ExpectInvalid(Header(0, 0, 1),
                "GGUF version 1 is not supported (only versions 2 and 3) at byte 4");
}

TEST(GgufReaderTest, RejectsByteSwappedVersionAsBigEndian) {
  ExpectInvalid(Header(0, 0, 0x03000000),
                "GGUF version 50331648 is version 3 byte-swapped: the file is big-endian, which "
                "hoist does not read at byte 4");
}

TEST(GgufReaderTest, RejectsUnknownVersion) {
  ExpectInvalid(Header(0, 0, 4), "unsupported GGUF version 4 (only versions 2 and 3) at byte 4");
}

TEST(GgufReaderTest, AcceptsVersionTwo) {
  auto dir = Parse(Header(0, 0, 2));
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->version, 2u);
}

TEST(GgufReaderTest, RejectsTruncatedPreamble) {
  Bytes b;
  b.Raw("GGUF").Put<uint32_t>(3).Put<uint32_t>(0);
  ExpectInvalid(b, "file ends inside the tensor count (8 bytes needed, 4 left) at byte 8");
}

TEST(GgufReaderTest, RejectsBillionsOfTensorsBeforeAllocating) {
  ExpectInvalid(Header(3'000'000'000ull, 0),
                "tensor count 3000000000 cannot fit in the 0 bytes left in the file at byte 8");
}

TEST(GgufReaderTest, RejectsHugeMetadataCount) {
  Bytes b = Header(0, UINT64_MAX);
  b.Zeros(100);
  ExpectInvalid(b,
                "metadata count 18446744073709551615 cannot fit in the bytes left in the file "
                "at byte 16");
}

TEST(GgufReaderTest, RejectsStringLengthPastEnd) {
  Bytes b = Header(0, 1);
  b.Put<uint64_t>(1ull << 40).Zeros(20);
  ExpectInvalid(b, "a metadata key length 1099511627776 runs past the end of the file at byte 24");
}

TEST(GgufReaderTest, RejectsDuplicateKeys) {
  Bytes b = Header(0, 2);
  b.Str("a").Put<uint32_t>(kU8).Put<uint8_t>(1);
  const size_t second = b.size();
  b.Str("a").Put<uint32_t>(kU8).Put<uint8_t>(2);
  ExpectInvalid(b, "duplicate metadata key 'a' at byte " + std::to_string(second));
}

TEST(GgufReaderTest, RejectsUnknownValueType) {
  Bytes b = Header(0, 1);
  b.Str("k");
  const size_t at = b.size();
  b.Put<uint32_t>(13).Zeros(8);
  ExpectInvalid(b, "unknown metadata value type 13 for key 'k' at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsArrayLengthPastEnd) {
  Bytes b = Header(0, 1);
  b.Str("k").Put<uint32_t>(kArray);
  const size_t at = b.size();
  b.Put<uint32_t>(kU32).Put<uint64_t>(1000).Zeros(12);
  ExpectInvalid(b, "array length 1000 cannot fit in the 12 bytes left in the file at byte " +
                       std::to_string(at + 4));
}

TEST(GgufReaderTest, ReadsStringArraysAndNestedArrays) {
  Bytes b = Header(0, 2);
  b.Str("s").Put<uint32_t>(kArray).Put<uint32_t>(kString).Put<uint64_t>(2).Str("x").Str("yz");
  b.Str("n").Put<uint32_t>(kArray).Put<uint32_t>(kArray).Put<uint64_t>(2);
  b.Put<uint32_t>(kU8).Put<uint64_t>(1).Put<uint8_t>(5);
  b.Put<uint32_t>(kU8).Put<uint64_t>(0);
  auto dir = Parse(b);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->metadata[0].value, nlohmann::json({"x", "yz"}));
  EXPECT_EQ(dir->metadata[0].element_type, "STRING");
  EXPECT_EQ(dir->metadata[0].count, 2u);
  EXPECT_EQ(dir->metadata[1].value, nlohmann::json::parse("[[5],[]]"));
  EXPECT_EQ(dir->metadata[1].element_type, "ARRAY");
}

TEST(GgufReaderTest, RejectsArraysNestedTooDeep) {
  Bytes b = Header(0, 1);
  b.Str("k").Put<uint32_t>(kArray);
  size_t deepest = 0;
  for (int i = 0; i < 40; ++i) {
    if (i == kGgufMaxArrayNesting) deepest = b.size();
    b.Put<uint32_t>(kArray).Put<uint64_t>(1);
  }
  b.Zeros(64);
  ExpectInvalid(b, "arrays nested deeper than 16 levels at byte " + std::to_string(deepest));
}

TEST(GgufReaderTest, RejectsBoolOtherThanZeroOrOne) {
  Bytes b = Header(0, 1);
  b.Str("k").Put<uint32_t>(kBool);
  const size_t at = b.size();
  b.Put<uint8_t>(2);
  ExpectInvalid(b, "boolean value 2 is not 0 or 1 at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsAlignmentOfWrongType) {
  Bytes b = Header(0, 1);
  b.Str("general.alignment");
  const size_t at = b.size();
  b.Put<uint32_t>(kU8).Put<uint8_t>(32);
  ExpectInvalid(b, "general.alignment must be a UINT32, not UINT8 at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsAlignmentNotPowerOfTwo) {
  for (uint32_t bad : {0u, 48u}) {
    Bytes b = Header(0, 1);
    b.Str("general.alignment").Put<uint32_t>(kU32);
    const size_t at = b.size();
    b.Put<uint32_t>(bad);
    ExpectInvalid(b, "general.alignment " + std::to_string(bad) +
                         " is not a non-zero power of two at byte " + std::to_string(at));
  }
}

TEST(GgufReaderTest, HonoursCustomAlignment) {
  Bytes b = Header(1, 1);
  b.Str("general.alignment").Put<uint32_t>(kU32).Put<uint32_t>(64);
  TensorInfo(b, "w", {16}, 0, 0);
  b.AlignTo(64);
  const size_t data = b.size();
  b.Zeros(64);
  auto dir = Parse(b);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->tensors[0].offset, data);
}

TEST(GgufReaderTest, RejectsLongTensorName) {
  Bytes b = Header(1, 0);
  const size_t at = b.size();
  TensorInfo(b, std::string(65, 'n'), {4}, 0, 0);
  ExpectInvalid(b, "tensor name '" + std::string(32, 'n') +
                       "...' is 65 bytes, more than 64 at byte " + std::to_string(at));
}

TEST(GgufReaderTest, AcceptsNameOfExactly64Bytes) {
  Bytes b = Header(1, 0);
  TensorInfo(b, std::string(64, 'n'), {8}, 0, 0);
  b.AlignTo(32).Zeros(32);
  EXPECT_TRUE(Parse(b).ok());
}

TEST(GgufReaderTest, RejectsDuplicateTensorNames) {
  Bytes b = Header(2, 0);
  TensorInfo(b, "w", {8}, 0, 0);
  const size_t at = b.size();
  TensorInfo(b, "w", {8}, 0, 32);
  b.AlignTo(32).Zeros(64);
  ExpectInvalid(b, "duplicate tensor name 'w' at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsTooManyDimensions) {
  Bytes b = Header(1, 0);
  b.Str("w");
  const size_t at = b.size();
  b.Put<uint32_t>(5).Zeros(64);
  ExpectInvalid(b, "tensor 'w' has 5 dimensions, more than 4 at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsNegativeDimension) {
  Bytes b = Header(1, 0);
  b.Str("w");
  const size_t dims_at = b.size();
  b.Put<uint32_t>(2).Put<uint64_t>(4).Put<int64_t>(-1).Put<uint32_t>(0).Put<uint64_t>(0);
  ExpectInvalid(b, "tensor 'w' dimension 1 is negative at byte " + std::to_string(dims_at + 12));
}

TEST(GgufReaderTest, RejectsUnknownGgmlType) {
  for (uint32_t type : {4u, 31u, 36u, 43u, 1000u}) {
    Bytes b = Header(1, 0);
    b.Str("w").Put<uint32_t>(1).Put<uint64_t>(32);
    const size_t at = b.size();
    b.Put<uint32_t>(type).Put<uint64_t>(0).Zeros(64);
    ExpectInvalid(b, "tensor 'w' has unknown ggml type " + std::to_string(type) + " at byte " +
                         std::to_string(at));
  }
}

TEST(GgufReaderTest, RejectsRowNotMultipleOfBlock) {
  Bytes b = Header(1, 0);
  b.Str("w");
  const size_t at = b.size();
  b.Put<uint32_t>(2).Put<uint64_t>(100).Put<uint64_t>(2).Put<uint32_t>(12).Put<uint64_t>(0);
  b.AlignTo(32).Zeros(1024);
  ExpectInvalid(b,
                "tensor 'w': row length 100 is not a multiple of the block size 256 of Q4_K "
                "at byte " +
                    std::to_string(at));
}

TEST(GgufReaderTest, RejectsElementCountOverflow) {
  Bytes b = Header(1, 0);
  b.Str("w");
  const size_t at = b.size();
  b.Put<uint32_t>(3).Put<uint64_t>(1ull << 31).Put<uint64_t>(1ull << 31).Put<uint64_t>(1ull << 31);
  b.Put<uint32_t>(0).Put<uint64_t>(0).Zeros(64);
  ExpectInvalid(b, "tensor 'w': element count overflows 63 bits at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsMisalignedOffset) {
  Bytes b = Header(1, 0);
  b.Str("w").Put<uint32_t>(1).Put<uint64_t>(8).Put<uint32_t>(0);
  const size_t at = b.size();
  b.Put<uint64_t>(16).AlignTo(32).Zeros(64);
  ExpectInvalid(b, "tensor 'w' data offset 16 is not a multiple of the alignment 32 at byte " +
                       std::to_string(at));
}

TEST(GgufReaderTest, RejectsTensorPastEndOfFile) {
  Bytes b = Header(1, 0);
  b.Str("w").Put<uint32_t>(1).Put<uint64_t>(64).Put<uint32_t>(0);
  const size_t at = b.size();
  b.Put<uint64_t>(0).AlignTo(32).Zeros(255);
  ExpectInvalid(b, "tensor 'w' (256 bytes at data offset 0) extends past the end of the file (" +
                       std::to_string(b.size()) + " bytes) at byte " + std::to_string(at));
}

TEST(GgufReaderTest, RejectsOffsetThatOverflows) {
  Bytes b = Header(1, 0);
  b.Str("w").Put<uint32_t>(1).Put<uint64_t>(8).Put<uint32_t>(0);
  const size_t at = b.size();
  b.Put<uint64_t>(UINT64_MAX - 31).AlignTo(32).Zeros(64);
  ExpectInvalid(b,
                "tensor 'w' (32 bytes at data offset 18446744073709551584) extends past the "
                "end of the file (" +
                    std::to_string(b.size()) + " bytes) at byte " + std::to_string(at));
}

TEST(GgufReaderTest, AllowsGapsAndWarnsOnOverlap) {
  Bytes b = Header(3, 0);
  TensorInfo(b, "a", {16}, 0, 0);
  TensorInfo(b, "b", {16}, 0, 256);  // a gap of 192 bytes after a
  TensorInfo(b, "c", {16}, 0, 32);   // overlaps a (a is 64 bytes)
  b.AlignTo(32).Zeros(512);
  auto dir = Parse(b);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(dir->warnings.size(), 1u);
  EXPECT_NE(dir->warnings[0].find("tensor 'c'"), std::string::npos);
  EXPECT_NE(dir->warnings[0].find("overlaps tensor 'a'"), std::string::npos);
}

TEST(GgufReaderTest, ScalarTensorHasEmptyShape) {
  Bytes b = Header(1, 0);
  TensorInfo(b, "s", {}, 0, 0);
  b.AlignTo(32).Zeros(32);
  auto dir = Parse(b);
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->tensors[0].shape.empty());
  EXPECT_EQ(dir->tensors[0].nbytes, 4u);
}

TEST(GgmlTypesTest, BlockGeometryMatchesGgml) {
  struct Expect {
    const char* name;
    uint32_t id, block, bytes;
  };
  const Expect expected[] = {
      {"F32", 0, 1, 4},         {"F16", 1, 1, 2},         {"Q4_0", 2, 32, 18},
      {"Q4_1", 3, 32, 20},      {"Q5_0", 6, 32, 22},      {"Q5_1", 7, 32, 24},
      {"Q8_0", 8, 32, 34},      {"Q8_1", 9, 32, 36},      {"Q2_K", 10, 256, 84},
      {"Q3_K", 11, 256, 110},   {"Q4_K", 12, 256, 144},   {"Q5_K", 13, 256, 176},
      {"Q6_K", 14, 256, 210},   {"Q8_K", 15, 256, 292},   {"IQ2_XXS", 16, 256, 66},
      {"IQ2_XS", 17, 256, 74},  {"IQ3_XXS", 18, 256, 98}, {"IQ1_S", 19, 256, 50},
      {"IQ4_NL", 20, 32, 18},   {"IQ3_S", 21, 256, 110},  {"IQ2_S", 22, 256, 82},
      {"IQ4_XS", 23, 256, 136}, {"I8", 24, 1, 1},         {"I16", 25, 1, 2},
      {"I32", 26, 1, 4},        {"I64", 27, 1, 8},        {"F64", 28, 1, 8},
      {"IQ1_M", 29, 256, 56},   {"BF16", 30, 1, 2},       {"TQ1_0", 34, 256, 54},
      {"TQ2_0", 35, 256, 66},   {"MXFP4", 39, 32, 17},    {"NVFP4", 40, 64, 36},
      {"Q1_0", 41, 128, 18},    {"Q2_0", 42, 64, 18},
  };
  EXPECT_EQ(GgmlTypes().size(), std::size(expected));
  for (const Expect& e : expected) {
    const GgmlType* t = FindGgmlType(e.id);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->block_size, e.block);
    EXPECT_EQ(t->block_bytes, e.bytes);
  }
}

TEST(GgufWriterTest, RoundTripsEveryTypeAndMetadataKind) {
  testing::TempDir dir;
  std::vector<MetadataEntry> meta = {
      {"general.alignment", "UINT32", "", 1, 64},
      {"u8", "UINT8", "", 1, 200},
      {"i64", "INT64", "", 1, -5},
      {"f64", "FLOAT64", "", 1, 2.5},
      {"b", "BOOL", "", 1, true},
      {"s", "STRING", "", 1, "text"},
      {"arr", "ARRAY", "INT16", 3, {1, -2, 3}},
      {"strs", "ARRAY", "STRING", 2, {"a", "bc"}},
  };
  std::vector<GgufTensorSpec> specs;
  for (const GgmlType& t : GgmlTypes()) {
    specs.push_back({"t." + std::string(t.name), std::string(t.name), {3, 256}, 0});
  }
  specs.push_back({"gap", "F32", {4}, 4096});
  auto fill = [](size_t i, uint64_t off, std::span<unsigned char> out) {
    FillSampleBytes(9, i, off, out);
    return true;
  };
  auto written = WriteGguf(dir.File("all.gguf"), meta, specs, fill);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  auto file = OpenFile(dir.File("all.gguf"));
  ASSERT_TRUE(file.ok());
  auto read = ReadGguf(**file);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->tensors.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorEntry& r = read->tensors[i];
    const TensorEntry& w = written->tensors[i];
    EXPECT_EQ(r.name, w.name);
    EXPECT_EQ(r.dtype, specs[i].dtype);
    EXPECT_EQ(r.shape, specs[i].shape);
    EXPECT_EQ(r.offset, w.offset);
    EXPECT_EQ(r.nbytes, w.nbytes);
    EXPECT_EQ(r.offset % 64, 0u);
    std::vector<unsigned char> got(r.nbytes), want(r.nbytes);
    ASSERT_TRUE((*file)->ReadExact(r.offset, got.data(), got.size()).ok());
    FillSampleBytes(9, i, 0, want);
    EXPECT_EQ(got, want) << r.name;
  }
  ASSERT_EQ(read->metadata.size(), meta.size());
  for (size_t i = 0; i < meta.size(); ++i) {
    EXPECT_EQ(read->metadata[i].key, meta[i].key);
    EXPECT_EQ(read->metadata[i].type, meta[i].type);
    EXPECT_EQ(read->metadata[i].value, meta[i].value) << meta[i].key;
  }
  EXPECT_EQ(read->tensors.back().offset - read->tensors[read->tensors.size() - 2].offset,
            AlignUp(read->tensors[read->tensors.size() - 2].nbytes, 64) + 4096);
}

}  // namespace
}  // namespace hoist
