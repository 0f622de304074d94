// Packed models (format/packed.h): every shape of model packs, and loads on every kind of
// device as the original, byte for byte; a packed file's corruption is an error naming the
// tensor and the block (exit 2), never wrong bytes; a broken container names the rule broken.
#include "format/packed.h"

#include <gtest/gtest.h>
#if !defined(_WIN32)
#include <sys/stat.h>
#endif

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/units.h"
#include "format/model.h"
#include "format/packed_checks.h"
#include "format/sample_model.h"
#include "pack/exponent_code.h"
#include "pipeline/load_checks.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::FileBytes;
using testing::LoadedBytes;
using testing::MakeDevice;
using testing::ReadBytes;
using testing::RunHoist;
using testing::WriteBytes;

class PackedTest : public ::testing::Test {
 protected:
  TensorDirectory Sample(const std::string& name, SampleSpec spec) {
    auto written = WriteSampleModel(tmp_.File(name), spec);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
    auto opened = ReadModelDirectory(
        spec.format == "gguf" && spec.shards > 1 ? written->files[0].path : tmp_.File(name));
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return std::move(opened).value();
  }

  static nlohmann::json Header(const std::string& path) { return testing::PackedHeader(path); }

  testing::TempDir tmp_;
};

TEST_F(PackedTest, EveryShapeOfModelLoadsAsTheOriginalOnEveryDevice) {
  struct Case {
    std::string name;
    std::string format;
    std::vector<std::string> dtypes;
    int shards;
  };
  for (const Case& c : {Case{"a.safetensors", "safetensors", {"BF16", "F16", "F32"}, 1},
                        Case{"b.gguf", "gguf", {"F16", "Q8_0", "Q4_K", "F32"}, 1},
                        Case{"c/model.safetensors.index.json", "safetensors", {"BF16"}, 3},
                        Case{"d/m-00001-of-00002.gguf", "gguf", {"F16"}, 2}}) {
    SCOPED_TRACE(c.name);
    SampleSpec spec;
    spec.format = c.format;
    spec.dtypes = c.dtypes;
    spec.shards = c.shards;
    spec.target_bytes = 6 << 20;
    spec.normal_values = true;
    const TensorDirectory original = Sample(c.name, spec);
    const std::string out = tmp_.File(c.name.substr(0, 1) + ".hoistpack");
    auto report = WritePacked(original, out, 3);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_LT(report->stored, report->bytes);  // normal floats shrink
    size_t coded = 0;
    for (const PackReport::Tensor& t : report->tensors) coded += t.coded ? 1 : 0;
    EXPECT_GT(coded, 0u);

    auto packed = ReadModelDirectory(out);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_EQ(packed->format, kPackedFormat);
    ASSERT_EQ(packed->tensors.size(), original.tensors.size());
    EXPECT_EQ(packed->metadata.size(), original.metadata.size());
    for (const char* device : {"host", "sim"}) {
      SCOPED_TRACE(device);
      LoadOptions options;
      options.threads = 3;
      options.chunk_bytes = 1 << 20;
      options.checksum = true;
      auto model = Load(*packed, MakeDevice(device), options);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      for (size_t i = 0; i < original.tensors.size(); ++i) {
        const TensorEntry& o = original.tensors[i];
        ASSERT_EQ(packed->tensors[i].name, o.name);
        ASSERT_EQ(packed->tensors[i].dtype, o.dtype);
        ASSERT_EQ(packed->tensors[i].shape, o.shape);
        ASSERT_TRUE(LoadedBytes(**model, i, o.nbytes) == FileBytes(original, o)) << o.name;
      }
    }
  }
}

TEST_F(PackedTest, ACorruptedBlockIsAnErrorNamingTheTensorAndTheBlock) {
  SampleSpec spec{"safetensors", 4 << 20};
  spec.dtypes = {"BF16"};
  spec.normal_values = true;
  const TensorDirectory original = Sample("m.safetensors", spec);
  const std::string out = tmp_.File("m.hoistpack");
  ASSERT_TRUE(WritePacked(original, out, 1).ok());
  const testing::KeptByte kept = testing::KeptByteInBlockOne(out);
  ASSERT_FALSE(kept.tensor.empty());
  std::vector<unsigned char> bytes = ReadBytes(out);
  bytes[kept.at] ^= 0x20;
  WriteBytes(out, bytes);
  const auto r = RunHoist({"load", out, "--device", "host"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(out + ": tensor " + kept.tensor +
                       ", block 1 (values 32768-65535): its decoded "
                       "bytes do not match the recorded checksum (the packed file is "
                       "corrupt)"),
            std::string::npos)
      << r.err;
}

TEST_F(PackedTest, ABrokenContainerNamesTheFileTheByteAndTheRule) {
  SampleSpec spec{"safetensors", 1 << 20};
  spec.normal_values = true;
  const TensorDirectory original = Sample("m.safetensors", spec);
  const std::string out = tmp_.File("m.hoistpack");
  ASSERT_TRUE(WritePacked(original, out, 1).ok());
  const std::vector<unsigned char> good = ReadBytes(out);
  struct Case {
    std::string what;
    std::vector<unsigned char> bytes;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({"truncated",
                   {good.begin(), good.begin() + 20},
                   "x.hoistpack: a packed file starts with 24 bytes: magic, header offset and "
                   "length at byte 0"});
  std::vector<unsigned char> far = good;
  far[15] = 0x7f;  // the header's offset past the file
  cases.push_back({"header outside", far, "bytes or is larger than 512 MiB at byte 8"});
  uint64_t at = 0;
  std::memcpy(&at, good.data() + 8, 8);
  // The file with its header replaced by `header`.
  auto rewritten = [&](const nlohmann::json& header) {
    const std::string text = header.dump();
    std::vector<unsigned char> bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(at));
    bytes.insert(bytes.end(), text.begin(), text.end());
    const uint64_t length = text.size();
    std::memcpy(bytes.data() + 16, &length, 8);
    return bytes;
  };
  // The header with field `key` of the first tensor stored as `stored` set to `value`.
  auto with_field = [&](const char* stored, const char* key, const nlohmann::json& value) {
    nlohmann::json header = Header(out);
    for (auto& t : header["tensors"]) {
      if (t["stored"] == stored) {
        t[key] = value;
        break;
      }
    }
    return rewritten(header);
  };
  cases.push_back({"section", with_field("raw", "data", {16, 100}),  // inside the prologue
                   "lies outside the file's data (bytes 24 to"});
  // A field of another type than the format's (found by the packed fuzzer: nlohmann's value()
  // threw): named as a broken header, not a crash.
  nlohmann::json typed = Header(out);
  typed["version"] = nlohmann::json::array({1});
  cases.push_back({"typed", rewritten(typed), "the header is not hoist-packed version 1"});
  // A shape or dtype that contradicts the tensor's bytes, as a safetensors header is checked.
  cases.push_back({"empty shape", with_field("exponent-huffman", "shape", {0, 256}),
                   " by its nbytes but 0 by its dtype and shape"});
  const uint64_t huge = uint64_t{1} << 63;
  cases.push_back({"overflowing shape", with_field("raw", "shape", {huge, huge}),
                   "size of the shape overflows 64 bits"});
  cases.push_back({"unknown dtype", with_field("raw", "dtype", "BOGUS"), "unknown dtype 'BOGUS'"});
  cases.push_back({"stored tensor without checksum", with_field("raw", "xxh3", "12"),
                   "a stored tensor's xxh3 is not 16 hex digits"});
  nlohmann::json foreign = Header(out);
  foreign["source_format"] = "pickle";
  cases.push_back({"source format", rewritten(foreign),
                   "the header's source_format \"pickle\" is not \"gguf\" or \"safetensors\""});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    WriteBytes(tmp_.File("x.hoistpack"), c.bytes);
    const auto r = RunHoist({"inspect", tmp_.File("x.hoistpack")});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

#if !defined(_WIN32)
// pack's output is written beside the target under a fresh name (never through a planted link)
// and renamed over it only when whole; a target that is not a regular file is refused, and
// stays what it was.
TEST_F(PackedTest, PackWritesARegularFileWholeOrNotAtAll) {
  SampleSpec spec{"safetensors", 1 << 20};
  spec.normal_values = true;
  Sample("m.safetensors", spec);
  const std::string fifo = tmp_.File("fifo.hoistpack");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = RunHoist({"pack", tmp_.File("m.safetensors"), "-o", fifo});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "hoist: " + fifo +
                       ": is a FIFO; hoist writes its output to a regular file (name one)\n");
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
  // A link planted where an older hoist wrote its partial file leads nowhere now; a target
  // that is a link is replaced where it leads.
  const std::string victim = tmp_.File("victim");
  WriteBytes(victim, {'k', 'e', 'e', 'p'});
  const std::string out = tmp_.File("m.hoistpack");
  std::filesystem::create_symlink(victim, out + ".partial");
  const std::string real = tmp_.File("real.hoistpack");
  std::filesystem::create_symlink(real, tmp_.File("link.hoistpack"));
  for (const std::string& target : {out, tmp_.File("link.hoistpack")}) {
    r = RunHoist({"pack", tmp_.File("m.safetensors"), "-o", target});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(ReadBytes(victim), (std::vector<unsigned char>{'k', 'e', 'e', 'p'}));
  EXPECT_TRUE(std::filesystem::is_symlink(tmp_.File("link.hoistpack")));
  EXPECT_EQ(ReadBytes(real), ReadBytes(out));
  std::filesystem::remove(out + ".partial");
  for (const auto& entry : std::filesystem::directory_iterator(tmp_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".partial"), std::string::npos)
        << entry.path() << " left behind";
  }
}
#endif

TEST_F(PackedTest, TheCliPacksChecksInspectsAndVerifies) {
  SampleSpec spec{"safetensors", 2 << 20};
  spec.dtypes = {"BF16"};
  spec.normal_values = true;
  Sample("m.safetensors", spec);
  const std::string out = tmp_.File("m.hoistpack");
  auto r = RunHoist({"pack", tmp_.File("m.safetensors"), "-o", out, "--check"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("coded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check: every tensor of " + out + " decodes to "), std::string::npos);
  EXPECT_FALSE(std::ifstream(out + ".partial").good());
  r = RunHoist({"inspect", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json inspected = nlohmann::json::parse(r.out);
  EXPECT_EQ(inspected["format"], kPackedFormat);
  EXPECT_LT(inspected["stored_bytes"].get<uint64_t>(), inspected["total_bytes"].get<uint64_t>());
  r = RunHoist({"inspect", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("  [0] " + out + " (" + FormatBytes(inspected["total_bytes"].get<uint64_t>()) +
                 " as read, " + FormatBytes(std::filesystem::file_size(out)) + " on disk)\n"),
      std::string::npos)
      << r.out;
  r = RunHoist({"verify", out, "--device", "sim"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunHoist({"pack", out, "-o", tmp_.File("again.hoistpack")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + out + " is packed already\n");
}

// Values that coding cannot shrink (uniform bf16 bits): every tensor is stored as it is, and
// pack says why rather than leaving "0 coded" unexplained.
TEST_F(PackedTest, PackingWeightsThatDoNotShrinkSaysWhy) {
  SampleSpec spec{"safetensors", 1 << 20};
  spec.dtypes = {"BF16"};
  Sample("u.safetensors", spec);
  auto r = RunHoist({"pack", tmp_.File("u.safetensors"), "-o", tmp_.File("u.hoistpack")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" (0 coded, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nno tensor got smaller coded: packing codes the exponents of BF16, F16 "
                       "and F32 weights, which gains where they cluster (trained weights); these "
                       "are stored as they are, and the packed copy saves nothing\n"),
            std::string::npos)
      << r.out;
}

// verify --against: the loaded packed model, read back from the device, against the original's
// tensors of the same names, whatever their order or file.
TEST_F(PackedTest, VerifyComparesTheLoadedPackWithTheOriginal) {
  SampleSpec spec{"safetensors", 2 << 20};
  spec.dtypes = {"BF16", "F32"};
  spec.normal_values = true;
  const TensorDirectory original = Sample("m.safetensors", spec);
  const std::string out = tmp_.File("m.hoistpack");
  ASSERT_TRUE(WritePacked(original, out, 2).ok());
  for (const char* device : {"host", "sim", "sim:decode=0"}) {
    const auto r =
        RunHoist({"verify", out, "--device", device, "--against", tmp_.File("m.safetensors")});
    EXPECT_EQ(r.exit_code, 0) << device << ": " << r.err;
    EXPECT_NE(r.out.find("byte for byte against " + tmp_.File("m.safetensors")), std::string::npos)
        << r.out;
  }
  // An original that differs in one byte of its last tensor: that tensor is named.
  const TensorEntry& last = original.tensors.back();
  std::vector<unsigned char> changed = ReadBytes(tmp_.File("m.safetensors"));
  changed[last.offset + 7] ^= 1;
  WriteBytes(tmp_.File("changed.safetensors"), changed);
  auto r =
      RunHoist({"verify", out, "--device", "sim", "--against", tmp_.File("changed.safetensors")});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("differ from " + tmp_.File("changed.safetensors") + ":\n  " + last.name +
                       ": first difference at byte 7 of the tensor"),
            std::string::npos)
      << r.err;
  // Another model altogether: the first tensor it lacks is named.
  SampleSpec other{"gguf", 1 << 20};
  Sample("other.gguf", other);
  r = RunHoist({"verify", out, "--device", "host", "--against", tmp_.File("other.gguf")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(tmp_.File("other.gguf")), std::string::npos) << r.err;
  // An original behind a URL with a password (nothing listens there): named without it in
  // every line, the "verifying ... against" one included.
  r = RunHoist({"verify", out, "--device", "host", "--against",
                "http://user:hunter2@127.0.0.1:1/m.safetensors"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ((r.out + r.err).find("hunter2"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("***@127.0.0.1:1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hoist
