// `hoist bench` and `hoist doctor` in their short mode on host and sim: every load verified
// byte-exact, the JSON complete. Correctness only; speed is the device scripts' business.
#include <gtest/gtest.h>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "format/sample_model.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::RunHoist;

class BenchCliTest : public testing::SampleModelTest<24 << 20> {};

// A packed model's ceilings are read over its file as stored, not through the CPU's decoding
// view of it (which made the "page-cache read" a decoder's rate and the load 1117% of it).
TEST_F(BenchCliTest, APackedModelsCeilingsReadItsStoredBytes) {
  // Weights drawn as an initialised LLM's, which packing codes smaller.
  auto r = RunHoist({"make-sample", tmp_.File("n.safetensors"), "--size", "16MiB", "--dtypes",
                     "BF16", "--normal"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string packed = tmp_.File("m.hoistpack");
  r = RunHoist({"pack", tmp_.File("n.safetensors"), "-o", packed});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json_path = tmp_.File("bench.json");
  r = RunHoist({"bench", packed, "--device", "host", "--repeat", "1", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const uint64_t stored = std::filesystem::file_size(packed);
  EXPECT_EQ(j["ceilings"]["read_bytes"].get<uint64_t>(), stored);
  EXPECT_LT(stored, j["model"]["bytes"].get<uint64_t>());
  bool noted = false;
  for (const auto& note : j["notes"]) {
    noted = noted || note.get<std::string>().rfind("a packed model: the read ceilings read its " +
                                                       std::to_string(stored) + " stored bytes",
                                                   0) == 0;
  }
  EXPECT_TRUE(noted) << j["notes"].dump();
  // Every load verified; the mapping of the coded file is not run, saying why.
  for (const auto& row : j["results"]) {
    if (row["strategy"] == "mmap-pageable") {
      EXPECT_EQ(row.value("note", ""),
                "not run: mmap-pageable: a packed model's file holds its tensors coded: a mapping "
                "of it is not their bytes");
      continue;
    }
    EXPECT_TRUE(row["verified"].get<bool>()) << row.dump();
  }
}

TEST_F(BenchCliTest, EveryStrategyVerifiesOnHostAndSim) {
  for (const char* device : {"host", "sim:bandwidth=8GB/s"}) {
    const std::string json_path = tmp_.File("bench.json");
    auto r = RunHoist(
        {"bench", model_, "--device", device, "--repeat", "2", "--cold", "--json", json_path});
    ASSERT_EQ(r.exit_code, 0) << device << ": " << r.err << r.out;
    EXPECT_NE(r.out.find("strategy         mode"), std::string::npos) << r.out;
    std::ifstream in(json_path);
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const char* key : {"h2d_pinned_gbps", "page_cache_read_gbps", "direct_read_gbps"}) {
      EXPECT_TRUE(j["ceilings"].contains(key)) << key;
    }
    EXPECT_GT(j["ceilings"]["h2d_pinned_gbps"].get<double>(), 0);
    EXPECT_GT(j["ceilings"]["page_cache_read_gbps"].get<double>(), 0);
    std::set<std::string> seen;
    for (const auto& row : j["results"]) {
      const std::string name =
          row["strategy"].get<std::string>() + "/" + row["mode"].get<std::string>();
      seen.insert(name);
      for (const char* key : {"gbps", "ratio_to_ceiling", "peak_host_bytes", "verified"}) {
        EXPECT_TRUE(row.contains(key)) << name << " " << key;
      }
      if (row.contains("note") && row["note"].get<std::string>().rfind("not run", 0) == 0) continue;
      EXPECT_TRUE(row["verified"].get<bool>()) << name;
      EXPECT_GT(row["gbps"].get<double>(), 0) << name;
      // Every timed load, in order; the median of their rates is the row's figure.
      const size_t runs = row["mode"] == "warm" ? 2 : 1;
      ASSERT_EQ(row["runs"].size(), runs) << name;
      std::vector<double> rates;
      for (const auto& run : row["runs"]) {
        EXPECT_GT(run["wall_s"].get<double>(), 0) << name;
        rates.push_back(run["gbps"].get<double>());
      }
      EXPECT_DOUBLE_EQ(row["gbps"].get<double>(), (rates.front() + rates.back()) / 2) << name;
      if (row["strategy"] == "hoist") {
        const auto& run = row["runs"][0];
        EXPECT_GE(run["allocate_s"].get<double>(),
                  run["allocate_device_s"].get<double>() + run["allocate_staging_s"].get<double>());
        EXPECT_GT(run["stream_s"].get<double>(), 0);
      }
    }
    EXPECT_EQ(j["settle_s"].get<double>(), 0) << "no pause on host and sim by default";
    for (const char* want :
         {"hoist/warm", "mmap-pageable/warm", "pinned-4x1MiB/warm", "direct-4x64MiB/warm",
          "hoist/cold", "hoist-buffered/cold", "mmap-pageable/cold"}) {
      EXPECT_EQ(seen.count(want), 1u) << device << " " << want;
    }
    EXPECT_TRUE(j["results"][0].contains("time_to_first_byte_s"));
    EXPECT_EQ(j["machine"]["device"], std::string(device).substr(0, std::string(device).find(':')));
  }
}

TEST_F(BenchCliTest, StrategiesNoneRunsHoistOnlyAndSettlePauses) {
  const std::string json_path = tmp_.File("bench.json");
  const auto start = std::chrono::steady_clock::now();
  auto r = RunHoist({"bench", model_, "--device", "host", "--repeat", "2", "--strategies", "none",
                     "--settle", "0.3", "--json", json_path});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["results"].size(), 1u) << j.dump();
  EXPECT_EQ(j["results"][0]["strategy"], "hoist");
  EXPECT_DOUBLE_EQ(j["settle_s"].get<double>(), 0.3);
  EXPECT_GE(seconds, 0.3) << "the second load waits --settle seconds";
  EXPECT_NE(r.out.find("began 0.3 s after the previous one freed"), std::string::npos) << r.out;
}

TEST_F(BenchCliTest, CorruptingDeviceFailsVerification) {
  // The sim counts every byte it copies: the h2d ceiling moves 128 MiB first (a warm-up and
  // the measured 64 MiB), so byte 136 MiB lands in hoist's own load (24 MiB).
  auto r = RunHoist({"bench", model_, "--device", "sim:corrupt_at=136MiB", "--repeat", "1",
                     "--strategies", "pinned-4x1MiB"});
  EXPECT_EQ(r.exit_code, 5) << r.err << r.out;
  EXPECT_NE(r.out.find("MISMATCH"), std::string::npos) << r.out;
}

TEST_F(BenchCliTest, DoctorMeasuresAndReportsSettings) {
  auto r = RunHoist({"doctor", model_, "--device", "sim", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stdout is one JSON document, nothing before or after it.
  EXPECT_EQ(r.out.find("settings hoist will use"), std::string::npos) << r.out;
  ASSERT_TRUE(nlohmann::json::accept(r.out)) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_GT(j["ceilings"]["h2d_pinned_64mib_gbps"].get<double>(), 0);
  EXPECT_GT(j["ceilings"]["page_cache_read_gbps"].get<double>(), 0);
  EXPECT_GT(j["ceilings"]["d2h_pinned_64mib_gbps"].get<double>(), 0);
  EXPECT_GT(j["ceilings"]["d2h_pageable_64mib_gbps"].get<double>(), 0);
  // Settings are numbers (bytes) where they are sizes or counts.
  EXPECT_GT(j["settings"]["threads"]["value"].get<int>(), 0);
  EXPECT_EQ(j["settings"]["chunk_bytes"]["value"], 4u << 20);
  EXPECT_GT(j["settings"]["staging_bytes"]["value"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["machine"].contains("memlock_limit_bytes"));
  EXPECT_TRUE(j["machine"].contains("file_system"));
}

#if defined(__linux__)
// The share of path's pages in the page cache (mincore over a read-only mapping).
double ResidentShare(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const auto size = static_cast<size_t>(::lseek(fd, 0, SEEK_END));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return -1;
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  const bool ok = ::mincore(map, size, resident.data()) == 0;
  ::munmap(map, size);
  if (!ok) return -1;
  size_t in = 0;
  for (unsigned char r : resident) in += r & 1u;
  return static_cast<double>(in) / static_cast<double>(resident.size());
}

TEST_F(BenchCliTest, DoctorDropsOnlyTheModelsPagesFromTheCache) {
  // As root hoist once emptied the machine's whole cache (drop_caches); another file's cached
  // pages must stay where they are.
  const std::string other = tmp_.File("other.bin");
  std::ofstream(other, std::ios::binary) << std::string(8u << 20, 'x');
  std::ifstream(other, std::ios::binary).ignore(std::numeric_limits<std::streamsize>::max());
  const double before = ResidentShare(other);
  if (before < 0.99) GTEST_SKIP() << "this file system does not keep the file cached";
  auto r = RunHoist({"doctor", model_, "--device", "sim", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(ResidentShare(other), 0.99);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ceilings"].contains("storage_read_buffered_cold_gbps")) << r.out;
}

TEST_F(BenchCliTest, DoctorFlagsTmpfs) {
  // /dev/shm is a tmpfs on Linux: direct I/O is refused there.
  if (!std::ifstream("/dev/shm/.").good() && !std::ifstream("/proc/mounts").good()) GTEST_SKIP();
  const std::string shm = "/dev/shm/hoist-doctor-test.gguf";
  {
    std::ifstream src(model_, std::ios::binary);
    std::ofstream dst(shm, std::ios::binary);
    if (!dst) GTEST_SKIP() << "no /dev/shm here";
    dst << src.rdbuf();
  }
  auto r = RunHoist({"doctor", shm, "--device", "host"});
  std::remove(shm.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("on tmpfs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("direct I/O is refused on tmpfs"), std::string::npos) << r.out;
}
#endif

}  // namespace
}  // namespace hoist
