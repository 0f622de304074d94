#include <gtest/gtest.h>
#ifndef _WIN32
#include <signal.h>
#endif

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "base/checksum.h"
#include "base/units.h"
#include "format/gguf.h"
#include "format/sample_model.h"
#include "test_util.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RunHoist;

class LoadCliTest : public testing::SampleModelTest<16 << 20> {};

TEST_F(LoadCliTest, JsonSummaryWithChecksumsMatchesTheReference) {
  std::ifstream in(testing::CorpusDir() + "/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(in);
  const std::string relative = "gguf/llama-2-tiny-random.gguf";
  auto r = RunHoist(
      {"load", testing::CorpusDir() + "/" + relative, "--device", "sim", "--checksum", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "sim");
  EXPECT_EQ(j["tensor_count"], 12);
  for (const char* key :
       {"bytes", "wall_s", "gbps", "phases", "staging", "peak_rss_bytes", "fallbacks"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* phase : {"open_parse_s", "plan_s", "allocate_s", "stream_s", "teardown_s"}) {
    EXPECT_TRUE(j["phases"].contains(phase)) << phase;
  }
  std::map<std::string, std::string> xxh3;
  for (const auto& t : j["tensors"]) {
    EXPECT_EQ(t["device"], "sim");
    xxh3[t["name"]] = t["xxh3"];
  }
  for (const auto& t : reference[relative]["tensors"]) EXPECT_EQ(xxh3.at(t["name"]), t["xxh3"]);
}

TEST_F(LoadCliTest, DeviceNamesAsTorchUsersWriteThem) {
  // "cpu" is the host; "cuda" without an index its first GPU (none here: said plainly).
  auto cpu = RunHoist({"load", model_, "--device", "cpu", "--json", "--quiet"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(nlohmann::json::parse(cpu.out)["device"], "host");
  auto bad = RunHoist({"load", model_, "--device", "tpu:0", "--quiet"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("expected auto, host (or cpu), sim[:options], gpu[:N] or cuda[:N]"),
            std::string::npos)
      << bad.err;
}

TEST_F(LoadCliTest, MakeSampleWritesTheFormatItsPathNames) {
  const std::string st = tmp_.File("sample.safetensors");
  auto made = RunHoist({"make-sample", st, "--size", "1MiB"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto inspected = RunHoist({"inspect", st, "--json"});
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  EXPECT_EQ(nlohmann::json::parse(inspected.out)["format"], "safetensors");
  auto clash = RunHoist({"make-sample", tmp_.File("other.safetensors"), "--format", "gguf"});
  EXPECT_EQ(clash.exit_code, 1);
  EXPECT_NE(clash.err.find("other.safetensors names a safetensors file but --format is gguf"),
            std::string::npos)
      << clash.err;
}

TEST_F(LoadCliTest, HumanSummaryNamesPhasesAndStaging) {
  auto r = RunHoist({"load", model_, "--device", "host", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loaded "), std::string::npos);
  EXPECT_NE(r.out.find("phases: open+parse"), std::string::npos);
  EXPECT_NE(r.out.find(" x 4.00 MiB pinned"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak RSS"), std::string::npos);
}

TEST_F(LoadCliTest, ProgressLinesOffATerminal) {
  auto r = RunHoist({"load", model_, "--device", "sim:bandwidth=4MB/s", "--stall-timeout", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("hoist: "), std::string::npos);
  EXPECT_NE(r.err.find("GB/s, ETA"), std::string::npos);
}

TEST_F(LoadCliTest, VerifyPassesAndCatchesCorruption) {
  auto ok = RunHoist({"verify", model_, "--device", "sim", "--quiet"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("all match"), std::string::npos);
  auto bad = RunHoist({"verify", model_, "--device", "sim:corrupt_at=5000000", "--quiet"});
  EXPECT_EQ(bad.exit_code, 5);
  EXPECT_NE(bad.err.find("verify failed"), std::string::npos);
  EXPECT_NE(bad.err.find("first difference at byte"), std::string::npos);
}

TEST_F(LoadCliTest, StallExitsThreeWithinTheTimeoutNamingTheStage) {
  const auto start = Clock::now();
  auto r = RunHoist(
      {"load", model_, "--device", "sim:stall_after=2MiB", "--stall-timeout", "1", "--quiet"});
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("device copy stage on sim: chunk " + model_ + " at byte"), std::string::npos)
      << r.err;
  EXPECT_LT(s, testing::TimeBound(1 + 2.0));
}

TEST_F(LoadCliTest, DeviceCopyFailureExitsFour) {
  auto r = RunHoist({"load", model_, "--device", "sim:fail_copy_after=3MiB", "--quiet"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("fail_copy_after"), std::string::npos) << r.err;
}

TEST_F(LoadCliTest, NoPinnedMemoryWarnsAndCompletes) {
  auto r =
      RunHoist({"verify", model_, "--device", "sim:pinned_limit=0,reject_pageable=1", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: no pinned memory"), std::string::npos) << r.err;
}

TEST_F(LoadCliTest, BadInputsExitWithTheirCodes) {
  EXPECT_EQ(RunHoist({"load", "/nonexistent.gguf", "--device", "host"}).exit_code, 1);
  EXPECT_EQ(RunHoist({"load", model_, "--device", "tpu:0"}).exit_code, 1);
  EXPECT_EQ(RunHoist({"load", model_, "--device", "sim:warp=9"}).exit_code, 1);
  testing::Bytes b;
  b.Raw("GGUF").Put<uint32_t>(9).Put<uint64_t>(0).Put<uint64_t>(0);
  testing::WriteBytes(tmp_.File("bad.gguf"), b.data);
  auto bad = RunHoist({"load", tmp_.File("bad.gguf"), "--device", "host"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "hoist: " + tmp_.File("bad.gguf") +
                         ": unsupported GGUF version 9 (only versions 2 and 3) at byte 4\n");
}

// The classic Windows failure: a 64-bit offset through a 32-bit off_t fails at 2.00 GiB.
// A sparse file with tensors past 2 GiB and 4 GiB, loaded and verified through the CLI in
// both reading modes, checksums against the bytes written.
TEST_F(LoadCliTest, TensorsBeyondFourGiBLoadByteExact) {
  const std::string path = tmp_.File("far.gguf");
  ASSERT_TRUE(testing::WriteFarGguf(path, 7));
  std::map<std::string, std::string> want;
  const std::pair<const char*, size_t> tensors[] = {
      {"near", 64}, {"past_2g", 272}, {"past_4g", 8192}};
  for (size_t i = 0; i < 3; ++i) {
    std::vector<unsigned char> bytes(tensors[i].second);
    FillSampleBytes(7, i, 0, bytes);
    want[tensors[i].first] = HexDigest(Xxh3(bytes.data(), bytes.size()));
  }
  for (const char* io : {"buffered", "direct"}) {
    auto r = RunHoist({"load", path, "--device", "host", "--checksum", "--json", "--io", io});
    ASSERT_EQ(r.exit_code, 0) << io << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["tensors"].size(), 3u);
    for (const auto& t : j["tensors"])
      EXPECT_EQ(t["xxh3"], want.at(t["name"])) << io << " " << t["name"];
    auto v = RunHoist({"verify", path, "--device", "host", "--io", io, "--quiet"});
    EXPECT_EQ(v.exit_code, 0) << io << ": " << v.err;
    EXPECT_NE(v.out.find("all match"), std::string::npos) << v.out;
  }
}

// The model of the ROCm SDMA hang: an engine that never completes a copy from pageable
// memory. With no pinned memory at all, hoist must still load (through its pageable
// fallback, which the sim accepts only in small pieces) in every reading mode, byte-exact,
// a model larger than the staging budget.
TEST_F(LoadCliTest, PageableRejectingEngineLoadsInEveryReadingMode) {
  for (const char* io : {"buffered", "direct"}) {
    auto r = RunHoist({"verify", model_, "--device", "sim:pinned_limit=0,reject_pageable=1", "--io",
                       io, "--staging", "4", "--stall-timeout", "20", "--quiet"});
    EXPECT_EQ(r.exit_code, 0) << io << ": " << r.err;
    EXPECT_NE(r.out.find("all match"), std::string::npos) << io << ": " << r.out;
  }
}

#ifndef _WIN32
// SIGTERM once the load holds the model open (parsed, streaming at 5 MB/s for seconds) ends it
// with 143 within 2 s.
TEST_F(LoadCliTest, SigtermEndsALoadWithin2Seconds) {
  testing::HoistProcess p({"load", model_, "--device", "sim:bandwidth=5MB/s", "--quiet"});
  ASSERT_TRUE(p.WaitUntil([&] { return p.HasOpen(model_); }, testing::TimeBound(10))) << p.Err();
  const auto start = Clock::now();
  p.Signal(SIGTERM);
  const int code = p.Wait(10);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(code, 143) << p.Err();
  EXPECT_LT(s, testing::TimeBound(2.0));
}
#endif

}  // namespace
}  // namespace hoist
