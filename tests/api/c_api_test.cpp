// These tests keep the entries deprecated for the plan ones working for their last release.
#include "hoist/hoist.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "format/sample_model.h"
#include "hoist/hoist.hpp"
#include "test_util.h"

// Pushed here and popped at the end so that, in a unity build, the files bundled with this
// one keep their deprecation warnings (a HOIST_NO_DEPRECATED_WARNINGS define would come
// after hoist.h was already read for an earlier file of the bundle).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

std::string Corpus(const char* relative) { return hoist::testing::CorpusDir() + "/" + relative; }

TEST(CApiTest, OpensListsLoadsAndVerifies) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  EXPECT_STREQ(hoist_model_format(model), "gguf");
  ASSERT_EQ(hoist_model_tensor_count(model), 10u);
  hoist_tensor_info info{};
  ASSERT_EQ(hoist_model_tensor(model, 0, &info), HOIST_OK);
  EXPECT_STREQ(info.name, "tensor_0");
  EXPECT_STREQ(info.dtype, "F32");
  ASSERT_EQ(info.ndim, 4u);
  EXPECT_EQ(info.shape[0], 4u);
  EXPECT_EQ(info.nbytes, 5376u);
  EXPECT_NE(std::strstr(hoist_model_metadata_json(model), "some.parameter.uint8"), nullptr);

  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim";
  options.checksum = 1;
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  uint64_t xxh3 = 0;
  ASSERT_EQ(hoist_loaded_checksum(loaded, 0, &xxh3), HOIST_OK);
  EXPECT_EQ(xxh3, 0x4722a534a9254fcaull);  // corpus/reference.json
  EXPECT_NE(hoist_loaded_tensor(loaded, 9), nullptr);
  size_t mismatches = 99;
  EXPECT_EQ(hoist_loaded_verify(loaded, &mismatches), HOIST_OK);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_NE(std::strstr(hoist_loaded_report_json(loaded), "\"device\":\"sim\""), nullptr);
  hoist_loaded_free(loaded);
  hoist_model_close(model);
}

// Each thread keeps its own last message, a thread that failed can exit (MinGW once crashed
// there, destroying a thread_local), and a message past the buffer is cut, not overrun.
TEST(CApiTest, LastErrorIsPerThreadAndBounded) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open("/nonexistent-main.gguf", &model), HOIST_NOT_FOUND);
  std::string from_thread;
  std::thread other([&] {
    hoist_model* m = nullptr;
    EXPECT_EQ(hoist_model_open("/nonexistent-thread.gguf", &m), HOIST_NOT_FOUND);
    from_thread = hoist_last_error();
  });
  other.join();
  EXPECT_NE(from_thread.find("/nonexistent-thread.gguf"), std::string::npos) << from_thread;
  EXPECT_NE(std::strstr(hoist_last_error(), "/nonexistent-main.gguf"), nullptr);

  const std::string long_path = "/nonexistent-" + std::string(6000, 'x') + ".gguf";
  EXPECT_NE(hoist_model_open(long_path.c_str(), &model), HOIST_OK);
  const std::string cut = hoist_last_error();
  EXPECT_EQ(cut.size(), 4095u);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  EXPECT_NE(cut.find("/nonexistent-xxx"), std::string::npos) << cut.substr(0, 200);
}

TEST(CApiTest, ErrorsCarryCodesAndMessages) {
  hoist_model* model = nullptr;
  EXPECT_EQ(hoist_model_open("/nonexistent.gguf", &model), HOIST_NOT_FOUND);
  EXPECT_NE(std::strstr(hoist_last_error(), "/nonexistent.gguf"), nullptr);
  EXPECT_EQ(hoist_model_open(nullptr, &model), HOIST_INVALID_ARGUMENT);
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  size_t index = 0;
  EXPECT_EQ(hoist_model_find(model, "nope", &index), HOIST_NOT_FOUND);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim:fail_copy_after=100";
  hoist_loaded* loaded = nullptr;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_DEVICE_ERROR);
  EXPECT_EQ(loaded, nullptr);
  options.device = "sim:bandwidth=20KB/s";
  options.progress = [](void*, uint64_t, uint64_t) { return 1; };
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_CANCELLED);
  hoist_model_close(model);
}

TEST(CApiTest, LoadIntoCallerBuffers) {
  hoist::Model model(Corpus("safetensors/hadamards.safetensors"));
  std::vector<std::vector<unsigned char>> buffers(model.tensor_count());
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  hoist::Loaded loaded =
      model.load_into(options, [&](size_t i, const hoist_tensor_info& t) -> void* {
        buffers[i].resize(t.nbytes);
        return buffers[i].data();
      });
  EXPECT_EQ(loaded.tensor(0), buffers[0].data());
  EXPECT_EQ(loaded.verify(), 0u);
  const size_t first = model.find("1");
  EXPECT_EQ(buffers[first].size(), 1u);
}

// A stream through the C API: destinations handed out as the readers ask for them, each tensor
// reported once after it landed (checked on the reporting thread), nothing asked for twice.
TEST(CApiTest, DestinationsWhenNeededAndTensorsReportedAsTheyLand) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  struct Stream {
    hoist_model* model;
    std::vector<std::vector<unsigned char>> memory;
    std::vector<int> asked, reported, whole;  // per tensor (not vector<bool>: threads write)
  } stream{model, {}, {}, {}, {}};
  const size_t n = hoist_model_tensor_count(model);
  stream.memory.resize(n);
  stream.asked.assign(n, 0);
  stream.reported.assign(n, 0);
  stream.whole.assign(n, 0);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  options.threads = 3;
  options.chunk_bytes = 4096;
  options.destinations_when_needed = 1;
  options.tensor_loaded_user = &stream;
  options.tensor_loaded = [](void* user, size_t index) {
    auto* s = static_cast<Stream*>(user);
    hoist_tensor_info t{};
    (void)hoist_model_tensor(s->model, index, &t);
    std::ifstream in(Corpus("gguf/dummy-10-tensors.gguf"), std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t.offset));
    std::vector<unsigned char> want(t.nbytes);
    in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(t.nbytes));
    s->whole[index] =
        s->memory[index] == want ? 1 : 0;  // one report per tensor: no race on [index]
    ++s->reported[index];
  };
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load_into(
                model, &options,
                [](void* user, size_t index, const hoist_tensor_info* t) -> void* {
                  auto* s = static_cast<Stream*>(user);
                  ++s->asked[index];
                  s->memory[index].resize(t->nbytes);
                  return s->memory[index].data();
                },
                &stream, &loaded),
            HOIST_OK)
      << hoist_last_error();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(stream.asked[i], 1) << i;
    EXPECT_EQ(stream.reported[i], 1) << i;
    EXPECT_EQ(stream.whole[i], 1) << i;
    EXPECT_EQ(hoist_loaded_tensor(loaded, i), stream.memory[i].data());
  }
  size_t mismatches = 99;
  EXPECT_EQ(hoist_loaded_verify(loaded, &mismatches), HOIST_OK);
  EXPECT_EQ(mismatches, 0u);
  hoist_loaded_free(loaded);

  // Only hoist_load_into takes destinations.
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  hoist_model_close(model);
}

// destination_at_once through the C API: asked once per tensor before the callback that may
// wait, which is then asked only for the tensors it gave NULL; refused without
// destinations_when_needed; ignored past an older caller's struct_size.
TEST(CApiTest, DestinationsGivenAtOnceAreAskedFirst) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  struct Asks {
    std::mutex mutex;
    std::vector<std::vector<unsigned char>> memory;
    std::vector<int> at_once, waiting;
    void* Give(size_t index, const hoist_tensor_info* t) {
      memory[index].resize(t->nbytes);
      return memory[index].data();
    }
  } asks;
  const size_t n = hoist_model_tensor_count(model);
  auto at_once = [](void* user, size_t index, const hoist_tensor_info* t) -> void* {
    auto* a = static_cast<Asks*>(user);
    const std::lock_guard<std::mutex> lock(a->mutex);
    ++a->at_once[index];
    return index % 2 == 0 ? a->Give(index, t) : nullptr;
  };
  auto waiting = [](void* user, size_t index, const hoist_tensor_info* t) -> void* {
    auto* a = static_cast<Asks*>(user);
    const std::lock_guard<std::mutex> lock(a->mutex);
    ++a->waiting[index];
    return a->Give(index, t);
  };
  for (const bool older_caller : {false, true}) {
    SCOPED_TRACE(older_caller ? "struct_size without the third group" : "the whole struct");
    asks.memory.assign(n, {});
    asks.at_once.assign(n, 0);
    asks.waiting.assign(n, 0);
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = "host";
    options.threads = 3;
    options.chunk_bytes = 4096;
    options.destinations_when_needed = 1;
    options.destination_at_once = at_once;
    options.destination_at_once_user = &asks;
    if (older_caller) options.struct_size = offsetof(hoist_load_options, destination_at_once);
    hoist_loaded* loaded = nullptr;
    ASSERT_EQ(hoist_load_into(model, &options, waiting, &asks, &loaded), HOIST_OK)
        << hoist_last_error();
    for (size_t i = 0; i < n; ++i) {
      hoist_tensor_info t{};
      ASSERT_EQ(hoist_model_tensor(model, i, &t), HOIST_OK);
      const int asked = t.nbytes > 0 ? 1 : 0;
      EXPECT_EQ(asks.at_once[i], older_caller ? 0 : asked) << i;
      EXPECT_EQ(asks.waiting[i], older_caller || i % 2 == 1 ? asked : 0) << i;
    }
    size_t mismatches = 99;
    EXPECT_EQ(hoist_loaded_verify(loaded, &mismatches), HOIST_OK);
    EXPECT_EQ(mismatches, 0u);
    hoist_loaded_free(loaded);
  }
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  options.destination_at_once = at_once;
  options.destination_at_once_user = &asks;
  hoist_loaded* loaded = nullptr;
  EXPECT_EQ(hoist_load_into(model, &options, waiting, &asks, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(hoist_last_error(), "destination_at_once is for destinations_when_needed"),
            nullptr)
      << hoist_last_error();
  hoist_model_close(model);
}

// Slices through the C API: rows [1, 3) and the second half of the columns of every row of a
// corpus tensor, compared with the file's bytes; verify refuses a load of regions.
TEST(CApiTest, RegionsOfATensorLoadAsAskedAndVerifyRefusesThem) {
  const std::string path = Corpus("gguf/dummy-10-tensors.gguf");
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK);
  hoist_tensor_info t{};
  ASSERT_EQ(hoist_model_tensor(model, 0, &t), HOIST_OK);
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.offset));
  std::vector<unsigned char> whole(t.nbytes);
  in.read(reinterpret_cast<char*>(whole.data()), static_cast<std::streamsize>(t.nbytes));
  const uint64_t row = t.nbytes / t.shape[0];
  std::vector<unsigned char> rows(2 * row), right(t.shape[0] * (row / 2));
  const hoist_region regions[] = {{0, row, 1, 3, 0, row, rows.data()},
                                  {0, row, 0, t.shape[0], row / 2, row, right.data()}};
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  options.chunk_bytes = 4096;
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load_regions(model, &options, regions, 2, &loaded), HOIST_OK)
      << hoist_last_error();
  EXPECT_EQ(hoist_loaded_tensor(loaded, 1), right.data());
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), whole.begin() + static_cast<long>(row)));
  for (uint64_t r = 0; r < t.shape[0]; ++r) {
    EXPECT_TRUE(std::equal(right.begin() + static_cast<long>(r * (row / 2)),
                           right.begin() + static_cast<long>((r + 1) * (row / 2)),
                           whole.begin() + static_cast<long>(r * row + row / 2)))
        << "row " << r;
  }
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_INVALID_ARGUMENT);
  hoist_loaded_free(loaded);
  const hoist_region outside = {0, row, 0, t.shape[0] + 1, 0, row, rows.data()};
  EXPECT_EQ(hoist_load_regions(model, &options, &outside, 1, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(hoist_last_error(), "are not a range of its"), nullptr);
  hoist_model_close(model);
}

// Several devices through the C API: a layer split by shares (hoist_model_place says it before
// the load does it), and an explicit placement; each tensor on its device, verified.
TEST(CApiTest, SeveralDevicesByLayersOrByAnExplicitPlacement) {
  hoist::testing::TempDir tmp;
  hoist::SampleSpec spec;
  spec.format = "safetensors";
  spec.target_bytes = 4 << 20;
  ASSERT_TRUE(hoist::WriteSampleModel(tmp.File("m.safetensors"), spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp.File("m.safetensors").c_str(), &model), HOIST_OK);
  const size_t n = hoist_model_tensor_count(model);
  const double shares[] = {1, 1};
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim,host";
  options.split_shares = shares;
  options.split_share_count = 2;
  std::vector<uint32_t> planned(n, 9);
  ASSERT_EQ(hoist_model_place(model, &options, planned.data(), n), HOIST_OK) << hoist_last_error();
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  size_t on[2] = {0, 0};
  for (size_t i = 0; i < n; ++i) {
    const int d = hoist_loaded_tensor_device(loaded, i);
    ASSERT_TRUE(d == 0 || d == 1) << i;
    EXPECT_EQ(static_cast<uint32_t>(d), planned[i]) << i;
    ++on[d];
  }
  EXPECT_GT(on[0], 0u);
  EXPECT_GT(on[1], 0u);
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  EXPECT_NE(std::strstr(hoist_loaded_report_json(loaded), "\"device\":\"sim, host\""), nullptr);
  hoist_loaded_free(loaded);

  std::vector<uint32_t> alternate(n);
  for (size_t i = 0; i < n; ++i) alternate[i] = static_cast<uint32_t>(i % 2);
  options.placement = alternate.data();
  options.placement_count = n;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(hoist_loaded_tensor_device(loaded, i), static_cast<int>(i % 2));
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);

  options.placement_count = n - 1;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(hoist_last_error(), "the placement has 20 entries; the model has 21"),
            nullptr)
      << hoist_last_error();
  options.placement_count = 0;  // a pointer without its count
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "placement and placement_count go together");
  options.placement = nullptr;
  const double three[] = {1, 1, 1};
  options.split_shares = three;
  options.split_share_count = 3;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "split_shares gives 3 shares for 2 devices");
  options.device = "sim:bandwidth=1GB/s,,host";
  options.split_shares = shares;
  options.split_share_count = 2;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "device names an empty device");
  hoist_model_close(model);
}

TEST(CApiTest, ATensorSplitOrReplicasAsPartsLoadedByHoistOrIntoTheCallersMemory) {
  hoist::testing::TempDir tmp;
  hoist::SampleSpec spec;
  spec.format = "safetensors";
  spec.target_bytes = 4 << 20;
  ASSERT_TRUE(hoist::WriteSampleModel(tmp.File("m.safetensors"), spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp.File("m.safetensors").c_str(), &model), HOIST_OK);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim,sim";
  for (const char* split : {"tensor", "replicate"}) {
    SCOPED_TRACE(split);
    size_t count = 0;
    ASSERT_EQ(hoist_model_split(model, &options, split, nullptr, 0, &count), HOIST_OK)
        << hoist_last_error();
    ASSERT_GT(count, hoist_model_tensor_count(model));
    std::vector<hoist_part> parts(count);
    ASSERT_EQ(hoist_model_split(model, &options, split, parts.data(), parts.size(), &count),
              HOIST_OK);
    hoist_loaded* loaded = nullptr;
    ASSERT_EQ(hoist_load_parts(model, &options, parts.data(), parts.size(), &loaded), HOIST_OK)
        << hoist_last_error();
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(hoist_loaded_tensor_device(loaded, i), static_cast<int>(parts[i].device));
      EXPECT_NE(hoist_loaded_tensor(loaded, i), nullptr);
    }
    EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
    hoist_loaded_free(loaded);
  }
  // Into the caller's memory: host memory for a "host,host" pair of devices, compared with the
  // file's bytes of each part.
  options.device = "host,host";
  size_t count = 0;
  ASSERT_EQ(hoist_model_split(model, &options, "tensor", nullptr, 0, &count), HOIST_OK);
  std::vector<hoist_part> parts(count);
  ASSERT_EQ(hoist_model_split(model, &options, "tensor", parts.data(), count, &count), HOIST_OK);
  std::vector<std::vector<unsigned char>> memory;
  for (hoist_part& p : parts) {
    memory.emplace_back((p.row_end - p.row_begin) * (p.column_end - p.column_begin));
    p.destination = memory.back().data();
  }
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load_parts(model, &options, parts.data(), parts.size(), &loaded), HOIST_OK)
      << hoist_last_error();
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);
  std::ifstream file(tmp.File("m.safetensors"), std::ios::binary);
  for (size_t i = 0; i < parts.size(); ++i) {
    hoist_tensor_info t{};
    ASSERT_EQ(hoist_model_tensor(model, parts[i].tensor, &t), HOIST_OK);
    const hoist_part& p = parts[i];
    const uint64_t width = p.column_end - p.column_begin;
    std::vector<unsigned char> row(width);
    for (uint64_t r = p.row_begin; r < p.row_end; ++r) {
      file.seekg(static_cast<std::streamoff>(t.offset + r * p.row_bytes + p.column_begin));
      file.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(width));
      ASSERT_EQ(std::memcmp(row.data(), memory[i].data() + (r - p.row_begin) * width, width), 0)
          << t.name << " part " << i << " row " << r;
    }
  }
  // A split that is neither, a part for a device the options do not name.
  EXPECT_EQ(hoist_model_split(model, &options, "diagonal", nullptr, 0, &count),
            HOIST_INVALID_ARGUMENT);
  // The built-in splits first; a test that registers a policy adds it after them.
  EXPECT_EQ(std::string(hoist_last_error())
                .rfind("split 'diagonal' is not a split: layer, tensor, replicate", 0),
            0u)
      << hoist_last_error();
  parts[0].device = 2;
  EXPECT_EQ(hoist_load_parts(model, &options, parts.data(), parts.size(), &loaded),
            HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "region 0 is for device 2; the load has 2");
  hoist_model_close(model);
}

// Ranks of one job as threads, each with its own host device; their all-gather copies the
// other ranks' chunks out of their blocks (what ncclAllGather does between GPUs).
class ThreadAllGather {
 public:
  explicit ThreadAllGather(uint32_t world) : blocks_(world, nullptr) {}

  // Registers rank's block, waits for every rank's, copies theirs in, waits until all have.
  int Gather(uint32_t rank, void* block, uint64_t chunk) {
    std::unique_lock<std::mutex> lock(mutex_);
    blocks_[rank] = static_cast<unsigned char*>(block);
    Arrive(lock);
    for (uint32_t r = 0; r < blocks_.size(); ++r) {
      if (r != rank) std::memcpy(blocks_[rank] + r * chunk, blocks_[r] + r * chunk, chunk);
    }
    Arrive(lock);  // nobody frees its block while another still reads it
    return 0;
  }

 private:
  void Arrive(std::unique_lock<std::mutex>& lock) {
    const uint64_t round = round_;
    if (++arrived_ == blocks_.size()) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<unsigned char*> blocks_;
  size_t arrived_ = 0;
  uint64_t round_ = 0;
};

TEST(CApiTest, RankModeLoadsEachRanksSlicesAndGathersTheWholeTensors) {
  hoist::testing::TempDir tmp;
  hoist::SampleSpec spec;
  spec.format = "gguf";
  spec.target_bytes = 4 << 20;
  ASSERT_TRUE(hoist::WriteSampleModel(tmp.File("m.gguf"), spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp.File("m.gguf").c_str(), &model), HOIST_OK);
  for (const char* split : {"tensor", "replicate"}) {
    SCOPED_TRACE(split);
    constexpr uint32_t kWorld = 3;
    size_t count = 0;
    ASSERT_EQ(hoist_model_cut(model, split, kWorld, nullptr, 0, nullptr, 0, &count), HOIST_OK);
    std::vector<hoist_part> cut(count);
    ASSERT_EQ(hoist_model_cut(model, split, kWorld, nullptr, 0, cut.data(), count, &count),
              HOIST_OK);
    ThreadAllGather exchange(kWorld);
    struct Rank {
      ThreadAllGather* exchange;
      uint32_t rank;
    };
    std::vector<std::thread> ranks;
    std::vector<std::string> failures(kWorld);
    for (uint32_t rank = 0; rank < kWorld; ++rank) {
      ranks.emplace_back([&, rank] {
        hoist_load_options options;
        hoist_load_options_init(&options);
        options.device = "host";
        Rank me{&exchange, rank};
        auto gather = [](void* user, void* block, uint64_t chunk) {
          auto* r = static_cast<Rank*>(user);
          return r->exchange->Gather(r->rank, block, chunk);
        };
        hoist_loaded* loaded = nullptr;
        if (hoist_load_rank(model, &options, split, rank, kWorld, gather, &me, &loaded) !=
            HOIST_OK) {
          failures[rank] = hoist_last_error();
          return;
        }
        // This rank's parts, in the cut's order, each equal to the file's bytes.
        size_t i = 0;
        for (const hoist_part& p : cut) {
          if (p.device != rank) continue;
          if (hoist_loaded_tensor(loaded, i) == nullptr) failures[rank] += "missing part ";
          ++i;
        }
        if (hoist_loaded_verify(loaded, nullptr) != HOIST_OK) failures[rank] += hoist_last_error();
        hoist_loaded_free(loaded);
      });
    }
    for (std::thread& t : ranks) t.join();
    for (uint32_t rank = 0; rank < kWorld; ++rank) EXPECT_EQ(failures[rank], "") << rank;
  }
  // A failing exchange fails the load, and the rank's block is freed (ASan would say).
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  hoist_loaded* loaded = nullptr;
  auto refuse = [](void*, void*, uint64_t) { return 1; };
  EXPECT_EQ(hoist_load_rank(model, &options, "replicate", 0, 2, refuse, nullptr, &loaded),
            HOIST_DEVICE_ERROR);
  EXPECT_NE(std::strstr(hoist_last_error(), "the all-gather callback failed"), nullptr)
      << hoist_last_error();
  EXPECT_EQ(hoist_load_rank(model, &options, "tensor", 2, 2, refuse, nullptr, &loaded),
            HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "rank 2 of 2 is not a rank of the job");
  // A polled exchange: waited for until poll says it finished. (A poll that fails, a stall and
  // a cancel leave the block allocated: FaultTest.APolledRankExchange* checks them.)
  int polls_left = 3;
  hoist_all_gather polled{[](void*, void*, uint64_t) { return 0; },
                          [](void* user) { return --*static_cast<int*>(user) == 0 ? 1 : 0; },
                          &polls_left};
  ASSERT_EQ(hoist_load_rank_ex(model, &options, "replicate", 0, 1, &polled, &loaded), HOIST_OK)
      << hoist_last_error();
  EXPECT_EQ(polls_left, 0);
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);
  polled.start = nullptr;
  EXPECT_EQ(hoist_load_rank_ex(model, &options, "replicate", 0, 1, &polled, &loaded),
            HOIST_INVALID_ARGUMENT);
  hoist_model_close(model);
}

// Ranks over the C API whose exchange fails, aborts or whose options differ: every rank ends
// with an error (HOIST_OK only with every part equal to the file's), the failing rank named in
// its peers' errors where it could still speak, a stall where it could not.
TEST(CApiTest, RankModeNeverReturnsWhatAPeerDidNotSend) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  struct Rank {
    hoist::testing::ThreadExchange* exchange;
    uint32_t rank;
    int fail_start_at = 0;  // the start call (1-based) that returns nonzero; 0: none
    int abort_poll_at = 0;  // the exchange whose poll answers negative; 0: none
    int starts = 0;
  };
  struct Case {
    const char* name;
    int fail_start_rank1;
    int abort_poll_rank0;
    size_t shares_rank1;  // split shares rank 1 passes (0: none)
    hoist_status want0;
    const char* text0;
    hoist_status want1;
    const char* text1;
  };
  const std::vector<Case> cases = {
      {"refuses its shares", 0, 0, 3, HOIST_INVALID_ARGUMENT,
       "rank 1 of 2 failed its load: ", HOIST_INVALID_ARGUMENT, ""},
      {"start fails", 1, 0, 0, HOIST_STALLED,
       "s for the other ranks in the check before the all-gather", HOIST_DEVICE_ERROR,
       "the check before the all-gather: the all-gather callback failed"},
      {"the gather aborts", 0, 2, 0, HOIST_DEVICE_ERROR,
       "the all-gather of the tensors every rank holds whole: the all-gather failed (its poll said "
       "so)",
       HOIST_STALLED, "s for the other ranks in the check after the all-gather"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    hoist::testing::ThreadExchange exchange(2);
    std::vector<Rank> ranks{{&exchange, 0, 0, c.abort_poll_rank0, 0},
                            {&exchange, 1, c.fail_start_rank1, 0, 0}};
    std::vector<hoist_status> status(2, HOIST_OK);
    std::vector<std::string> error(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        const double shares[3] = {1, 1, 1};
        hoist_load_options options;
        hoist_load_options_init(&options);
        options.device = "host";
        options.stall_timeout_s = hoist::testing::TimeBound(1);
        if (r == 1 && c.shares_rank1 != 0) {
          options.split_shares = shares;
          options.split_share_count = c.shares_rank1;
        }
        hoist_all_gather gather{[](void* user, void* block, uint64_t chunk) {
                                  auto* me = static_cast<Rank*>(user);
                                  if (++me->starts == me->fail_start_at) return 1;
                                  return me->exchange->Start(me->rank, block, chunk);
                                },
                                [](void* user) {
                                  auto* me = static_cast<Rank*>(user);
                                  if (me->starts == me->abort_poll_at) return -1;
                                  return me->exchange->Poll(me->rank);
                                },
                                &ranks[r]};
        hoist_loaded* loaded = nullptr;
        status[r] = hoist_load_rank_ex(model, &options, "replicate", r, 2, &gather, &loaded);
        error[r] = status[r] == HOIST_OK ? "" : hoist_last_error();
        hoist_loaded_free(loaded);
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(status[0], c.want0) << error[0];
    EXPECT_NE(error[0].find(c.text0), std::string::npos) << error[0];
    EXPECT_EQ(status[1], c.want1) << error[1];
    EXPECT_NE(error[1].find(c.text1), std::string::npos) << error[1];
  }
  hoist_model_close(model);
}

// A rank waiting for its peers in a polled all-gather that never finishes stops within 0.5 s of
// the progress callback's cancel (what Ctrl-C does through every front end), and says so.
TEST(CApiTest, ARankWaitingForItsPeersIsCancelledWithinHalfASecond) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  struct Job {
    std::atomic<bool> polling{false};
    std::atomic<bool> cancel{false};
  } job;
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  options.stall_timeout_s = 60;
  options.progress = [](void* user, uint64_t, uint64_t) {
    return static_cast<Job*>(user)->cancel.load() ? 1 : 0;
  };
  options.progress_user = &job;
  hoist_all_gather never{[](void*, void*, uint64_t) { return 0; },
                         [](void* user) {
                           static_cast<Job*>(user)->polling = true;
                           return 0;
                         },
                         &job};
  std::chrono::steady_clock::time_point cancelled_at;
  std::thread user([&] {
    while (!job.polling) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well inside the wait
    cancelled_at = std::chrono::steady_clock::now();
    job.cancel = true;
  });
  hoist_loaded* loaded = nullptr;
  const hoist_status status =
      hoist_load_rank_ex(model, &options, "replicate", 0, 2, &never, &loaded);
  const auto returned_at = std::chrono::steady_clock::now();
  user.join();
  EXPECT_EQ(status, HOIST_CANCELLED) << hoist_last_error();
  EXPECT_LT(std::chrono::duration<double>(returned_at - cancelled_at).count(), 0.5);
  EXPECT_NE(std::strstr(hoist_last_error(),
                        "cancelled by the progress callback in the check before the all-gather"),
            nullptr)
      << hoist_last_error();
  hoist_model_close(model);
}

// An engine built against hoist 0.1's header passes the smaller struct it knew: accepted, the
// fields it lacks unset; a struct_size below that is refused.
TEST(CApiTest, OptionsFromTheFirstVersionAreAccepted) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim";
  options.struct_size = offsetof(hoist_load_options, tensor_loaded);
  options.destinations_when_needed = 1;  // past the struct_size: ignored
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK);
  hoist_loaded_free(loaded);
  options.struct_size = offsetof(hoist_load_options, progress_user);
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(hoist_last_error(), "struct_size"), nullptr);
  hoist_model_close(model);
}

// Every option out of its bounds is refused with HOIST_INVALID_ARGUMENT and a message: none
// reaches an allocation or a thread count unchecked, and no exception crosses the API.
TEST(CApiTest, OptionsOutOfBoundsAreInvalidArguments) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  struct Case {
    const char* what;
    void (*set)(hoist_load_options*);
    const char* message;
  };
  static const char* const kNullName[] = {nullptr};
  const Case cases[] = {
      {"threads", [](hoist_load_options* o) { o->threads = 100000; }, "threads is 100000"},
      {"negative threads", [](hoist_load_options* o) { o->threads = -1; }, "threads is -1"},
      {"staging", [](hoist_load_options* o) { o->staging_bytes = UINT64_MAX; }, "staging budget"},
      {"chunk", [](hoist_load_options* o) { o->chunk_bytes = 1; }, "chunk of 1 bytes"},
      {"huge chunk", [](hoist_load_options* o) { o->chunk_bytes = UINT64_MAX; }, "chunk of"},
      {"NaN timeout", [](hoist_load_options* o) { o->stall_timeout_s = std::nan(""); },
       "stall timeout"},
      {"negative timeout", [](hoist_load_options* o) { o->stall_timeout_s = -1; }, "stall timeout"},
      {"NULL name",
       [](hoist_load_options* o) {
         o->names = kNullName;
         o->name_count = 1;
       },
       "names[0] is NULL"},
      {"NULL names", [](hoist_load_options* o) { o->name_count = 3; }, "names is NULL"},
  };
  for (const Case& c : cases) {
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = "sim";
    c.set(&options);
    hoist_loaded* loaded = nullptr;
    EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT) << c.what;
    EXPECT_EQ(loaded, nullptr) << c.what;
    EXPECT_NE(std::strstr(hoist_last_error(), c.message), nullptr)
        << c.what << ": " << hoist_last_error();
  }
  hoist_model_close(model);
}

// The model's file replaced (by a rename) or written to between hoist_model_open and
// hoist_load: HOIST_FILE_CHANGED, never the other file's bytes loaded silently.
TEST(CApiTest, FileChangedAfterOpenIsReported) {
  hoist::testing::TempDir tmp;
  const std::string path = tmp.File("m.safetensors");
  const std::string other = tmp.File("other.safetensors");
  for (const bool rename : {true, false}) {
    hoist::SampleSpec spec;
    spec.format = "safetensors";
    spec.target_bytes = 1 << 20;
    ASSERT_TRUE(hoist::WriteSampleModel(path, spec).ok());
    hoist_model* model = nullptr;
    ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK) << hoist_last_error();
    if (rename) {
      spec.seed = 2;  // same layout and size, other bytes
      ASSERT_TRUE(hoist::WriteSampleModel(other, spec).ok());
      std::filesystem::rename(other, path);  // replaces path on Windows too (std::rename does not)
    } else {
      hoist::testing::AgeFile(path);
      hoist_model_close(model);
      ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK);
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-16, std::ios::end);
      f.write("0123456789abcdef", 16);
    }
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = "host";
    hoist_loaded* loaded = nullptr;
    EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_FILE_CHANGED) << rename;
    EXPECT_EQ(loaded, nullptr);
    EXPECT_NE(std::strstr(hoist_last_error(), rename ? "replaced by another file since the model "
                                                       "was opened"
                                                     : "written to"),
              nullptr)
        << hoist_last_error();
    EXPECT_STREQ(hoist_status_name(HOIST_FILE_CHANGED), "model changed");
    hoist_model_close(model);
  }
}

// A Loaded outlives the Model it came from: verify still reads the model's files (ASan would
// see the freed directory otherwise).
TEST(CppApiTest, LoadedKeepsATemporaryModelAlive) {
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim";
  options.checksum = 1;
  hoist::Loaded loaded = hoist::Model(Corpus("gguf/dummy-10-tensors.gguf")).load(options);
  EXPECT_EQ(loaded.verify(), 0u);
  EXPECT_EQ(loaded.checksum(0), 0x4722a534a9254fcaull);  // corpus/reference.json
  std::optional<hoist::Loaded> into;
  std::vector<std::vector<unsigned char>> buffers(10);  // the destinations: the caller's
  {
    hoist::Model model(Corpus("gguf/dummy-10-tensors.gguf"));
    into.emplace(model.load_into(options, [&](size_t i, const hoist_tensor_info& t) -> void* {
      buffers[i].resize(t.nbytes);
      return buffers[i].data();
    }));
  }
  EXPECT_EQ(into->verify(), 0u);
}

TEST(CppApiTest, ThrowsWithTheMessage) {
  try {
    hoist::Model model("/nonexistent.safetensors");
    FAIL() << "no exception";
  } catch (const hoist::Error& e) {
    EXPECT_EQ(e.status(), HOIST_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("/nonexistent.safetensors"), std::string::npos);
  }
}

// A model handed in as bytes in the caller's memory opens, loads and verifies as its file does,
// read in place; its errors name what the caller called it.
TEST(CApiTest, AModelInMemoryLoadsAsItsFileDoes) {
  std::ifstream in(Corpus("gguf/dummy-10-tensors.gguf"), std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  hoist_model_source source;
  hoist_model_source_init(&source);
  source.kind = HOIST_SOURCE_MEMORY;
  source.path = "dummy in memory";
  source.bytes = bytes.data();
  source.size = bytes.size();
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open_ex(&source, &model), HOIST_OK) << hoist_last_error();
  EXPECT_STREQ(hoist_model_format(model), "gguf");
  ASSERT_EQ(hoist_model_tensor_count(model), 10u);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim";
  options.checksum = 1;
  options.direct_io = 1;  // no use in memory: the load says so and reads it as it is
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  uint64_t xxh3 = 0;
  ASSERT_EQ(hoist_loaded_checksum(loaded, 0, &xxh3), HOIST_OK);
  EXPECT_EQ(xxh3, 0x4722a534a9254fcaull);  // corpus/reference.json, as from the file
  EXPECT_NE(std::strstr(hoist_loaded_report_json(loaded), "memory has no direct I/O"), nullptr)
      << hoist_loaded_report_json(loaded);
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_part part{};
  ASSERT_EQ(hoist_loaded_part(loaded, 0, &part), HOIST_OK);  // tensor 0, whole
  EXPECT_EQ(part.destination, hoist_loaded_tensor(loaded, 0));
  EXPECT_EQ(hoist_loaded_part(loaded, hoist_model_tensor_count(model), &part),
            HOIST_INVALID_ARGUMENT);
  hoist_loaded_free(loaded);
  hoist_model_close(model);

  source.size = 100;  // cut short
  EXPECT_EQ(hoist_model_open_ex(&source, &model), HOIST_INVALID_MODEL);
  EXPECT_EQ(std::string(hoist_last_error()).rfind("dummy in memory: ", 0), 0u)
      << hoist_last_error();
  source.kind = static_cast<hoist_source_kind>(7);
  EXPECT_EQ(hoist_model_open_ex(&source, &model), HOIST_INVALID_ARGUMENT);
  source.kind = HOIST_SOURCE_PATH;
  const std::string path = Corpus("gguf/dummy-10-tensors.gguf");
  source.path = path.c_str();
  ASSERT_EQ(hoist_model_open_ex(&source, &model), HOIST_OK) << hoist_last_error();
  hoist_model_close(model);
  source.struct_size = 4;
  EXPECT_EQ(hoist_model_open_ex(&source, &model), HOIST_INVALID_ARGUMENT);
}

// hoist_load with a split in its options loads the parts hoist_model_split gives, in its order,
// and each says what it is; a plan file changes the cuts for the split, the cut and the load.
TEST(CApiTest, ASplitInTheOptionsLoadsItsPartsAndAPlanChangesThem) {
  hoist::testing::TempDir tmp;
  hoist::SampleSpec spec;
  spec.target_bytes = 2 << 20;
  ASSERT_TRUE(hoist::WriteSampleModel(tmp.File("m.safetensors"), spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp.File("m.safetensors").c_str(), &model), HOIST_OK);
  {
    std::ofstream plan(tmp.File("plan.json"));
    plan << R"({"*": 1})";  // everything whole on the second device
  }
  const std::string plan_path = tmp.File("plan.json");
  for (const char* plan : {static_cast<const char*>(nullptr), plan_path.c_str()}) {
    SCOPED_TRACE(plan == nullptr ? "built-in rules" : "plan");
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = "sim,sim:bandwidth=2GB/s";
    options.split = "tensor";
    options.split_plan = plan;
    size_t count = 0;
    ASSERT_EQ(hoist_model_split(model, &options, "tensor", nullptr, 0, &count), HOIST_OK)
        << hoist_last_error();
    std::vector<hoist_part> parts(count);
    ASSERT_EQ(hoist_model_split(model, &options, "tensor", parts.data(), count, &count), HOIST_OK);
    size_t cut_count = 0;
    ASSERT_EQ(hoist_model_cut_ex(model, &options, "tensor", 2, nullptr, 0, &cut_count), HOIST_OK);
    EXPECT_EQ(cut_count, count);
    hoist_loaded* loaded = nullptr;
    ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
    for (size_t i = 0; i < count; ++i) {
      hoist_part got{};
      ASSERT_EQ(hoist_loaded_part(loaded, i, &got), HOIST_OK);
      EXPECT_EQ(got.tensor, parts[i].tensor);
      EXPECT_EQ(got.row_begin, parts[i].row_begin);
      EXPECT_EQ(got.column_end, parts[i].column_end);
      EXPECT_EQ(got.device, parts[i].device);
      if (plan != nullptr) {
        EXPECT_EQ(got.device, 1u);
      }
      EXPECT_EQ(got.destination, hoist_loaded_tensor(loaded, i));
    }
    hoist_part beyond{};
    EXPECT_EQ(hoist_loaded_part(loaded, count, &beyond), HOIST_INVALID_ARGUMENT);
    EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
    hoist_loaded_free(loaded);
    options.checksum = 1;
    EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
    EXPECT_STREQ(hoist_last_error(), "split tensor takes no checksum: verify compares every part");
  }
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim,sim";
  options.split_plan = plan_path.c_str();  // with the layer split
  hoist_loaded* loaded = nullptr;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "split_plan is for split tensor");
  options.split_plan = nullptr;
  options.split = "diagonal";
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_INVALID_ARGUMENT);
  // The built-in splits first; a test that registers a policy adds it after them.
  EXPECT_EQ(std::string(hoist_last_error())
                .rfind("split 'diagonal' is not a split: layer, tensor, replicate", 0),
            0u)
      << hoist_last_error();
  hoist_model_close(model);
}

// hoist.hpp wraps every entry point: a model from bytes, placement, splits, cuts, parts, rank
// mode and the version, each checked against what the C call gives.
TEST(CApiTest, TheCppWrapperReachesEveryEntryPoint) {
  std::ifstream in(Corpus("gguf/dummy-10-tensors.gguf"), std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  hoist::Model model = hoist::Model::FromBytes(bytes.data(), bytes.size(), "dummy");
  EXPECT_EQ(model.tensor_count(), 10u);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim,sim";
  EXPECT_EQ(model.plan(options).size(), 10u);  // whole tensors by layers
  options.split = "replicate";
  hoist::Plan plan = model.plan(options);
  const std::vector<hoist_part> parts = plan.parts();
  ASSERT_EQ(parts.size(), 20u);  // every tensor on both
  EXPECT_EQ(model.plan_cut(options, 2).size(), parts.size());
  EXPECT_EQ(model.plan_from_parts(parts).size(), parts.size());
  hoist::Loaded loaded = model.load(options, plan);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // The methods before plans give what the plan entries give.
  EXPECT_EQ(model.split(options, "replicate").size(), parts.size());
  EXPECT_EQ(model.cut(options, "replicate", 2).size(), parts.size());
  EXPECT_EQ(model.load_parts(options, parts).verify(), 0u);
  options.split = nullptr;
  EXPECT_EQ(model.place(options).size(), 10u);
#pragma GCC diagnostic pop
  EXPECT_EQ(loaded.verify(), 0u);
  EXPECT_EQ(loaded.part(3).tensor, parts[3].tensor);
  EXPECT_EQ(loaded.device(3), static_cast<int>(parts[3].device));
  options.device = "sim";
  int gathers = 0;
  hoist::Loaded rank = model.load_rank(options, "replicate", 0, 1, [&](void*, uint64_t) {
    ++gathers;
    return 0;
  });
  EXPECT_EQ(rank.verify(), 0u);
  EXPECT_EQ(gathers, 1);
  EXPECT_THROW(model.load_rank(options, "replicate", 0, 2, [](void*, uint64_t) { return 1; }),
               hoist::Error);
  EXPECT_EQ(hoist::Version(), hoist_version());
  EXPECT_EQ(model.block(0), (std::pair<uint32_t, uint32_t>{1, 4}));  // F32
  int places_parts = -1;
  EXPECT_EQ(hoist_split_places_parts("replicate", &places_parts), HOIST_OK);
  EXPECT_EQ(places_parts, 1);
  EXPECT_EQ(hoist_split_places_parts("layer", &places_parts), HOIST_OK);
  EXPECT_EQ(places_parts, 0);
  EXPECT_EQ(hoist_split_places_parts("diagonal", &places_parts), HOIST_INVALID_ARGUMENT);
}

// Each tensor's block geometry is ggml's (values and bytes per block) for GGUF's quantized
// types and an element (or the fewest whole bytes) for plain ones.
TEST(CApiTest, BlockGeometryOfEveryDtype) {
  hoist::testing::TempDir tmp;
  const std::string path = tmp.File("q.gguf");
  hoist::SampleSpec spec;
  spec.target_bytes = 1 << 20;
  spec.dtypes = {"Q4_K", "Q8_0", "F16", "Q6_K", "IQ4_NL"};
  ASSERT_TRUE(hoist::WriteSampleModel(path, spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK) << hoist_last_error();
  const std::vector<std::tuple<std::string, uint32_t, uint32_t>> expected = {
      {"Q4_K", 256, 144}, {"Q8_0", 32, 34},   {"F16", 1, 2},
      {"Q6_K", 256, 210}, {"IQ4_NL", 32, 18}, {"F32", 1, 4}};
  size_t checked = 0;
  for (size_t i = 0; i < hoist_model_tensor_count(model); ++i) {
    hoist_tensor_info info{};
    ASSERT_EQ(hoist_model_tensor(model, i, &info), HOIST_OK);
    uint32_t elements = 0;
    uint32_t bytes = 0;
    ASSERT_EQ(hoist_model_tensor_block(model, i, &elements, &bytes), HOIST_OK);
    for (const auto& [dtype, want_elements, want_bytes] : expected) {
      if (dtype != info.dtype) continue;
      EXPECT_EQ(elements, want_elements) << dtype;
      EXPECT_EQ(bytes, want_bytes) << dtype;
      ++checked;
    }
  }
  EXPECT_EQ(checked, hoist_model_tensor_count(model));  // every dtype the sample wrote
  uint32_t elements = 0;
  EXPECT_EQ(hoist_model_tensor_block(model, 1u << 30, &elements, &elements),
            HOIST_INVALID_ARGUMENT);
  EXPECT_EQ(hoist_model_tensor_block(model, 0, nullptr, &elements), HOIST_INVALID_ARGUMENT);
  hoist_model_close(model);
}

// Every status has one name, the library one version: what the CLI, doctor and Python show.
TEST(CApiTest, StatusNamesAndTheVersion) {
  const std::vector<std::pair<hoist_status, const char*>> names = {
      {HOIST_OK, "ok"},
      {HOIST_ERROR, "error"},
      {HOIST_INVALID_MODEL, "invalid model"},
      {HOIST_STALLED, "stalled"},
      {HOIST_DEVICE_ERROR, "device error"},
      {HOIST_VERIFY_MISMATCH, "verify mismatch"},
      {HOIST_CANCELLED, "cancelled"},
      {HOIST_IO_ERROR, "I/O error"},
      {HOIST_NOT_FOUND, "not found"},
      {HOIST_INVALID_ARGUMENT, "invalid argument"},
      {HOIST_UNAVAILABLE, "unavailable"},
      {HOIST_FILE_CHANGED, "model changed"}};
  for (const auto& [status, name] : names) EXPECT_STREQ(hoist_status_name(status), name);
  EXPECT_STREQ(hoist_status_name(static_cast<hoist_status>(99)), "unknown");
  const std::string version = hoist_version();
  EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2) << version;
}

}  // namespace

namespace {

// Whether `bytes` hold part p of the model's file (its rows, the part's bytes of each, packed).
void ExpectPartIsTheFile(std::ifstream& file, hoist_model* model, const hoist_part& p,
                         const void* bytes, size_t index) {
  hoist_tensor_info t{};
  ASSERT_EQ(hoist_model_tensor(model, p.tensor, &t), HOIST_OK);
  const uint64_t width = p.column_end - p.column_begin;
  if (width * (p.row_end - p.row_begin) == 0) return;
  ASSERT_NE(bytes, nullptr) << t.name << " part " << index;
  std::vector<unsigned char> row(width);
  for (uint64_t r = p.row_begin; r < p.row_end; ++r) {
    file.seekg(static_cast<std::streamoff>(t.offset + r * p.row_bytes + p.column_begin));
    file.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(width));
    ASSERT_EQ(
        std::memcmp(row.data(),
                    static_cast<const unsigned char*>(bytes) + (r - p.row_begin) * width, width),
        0)
        << t.name << " part " << index << " row " << r;
  }
}

std::vector<hoist_part> PlanParts(const hoist_plan* plan) {
  std::vector<hoist_part> parts(hoist_plan_part_count(plan));
  for (size_t i = 0; i < parts.size(); ++i)
    EXPECT_EQ(hoist_plan_part(plan, i, &parts[i]), HOIST_OK);
  return parts;
}

}  // namespace

// One load shape: for every split, the plan is what hoist_load does (hoist_loaded_part of its
// load gives the plan's parts) and what `hoist inspect --json` prints; hoist_load_plan loads each
// part byte-exact into hoist's memory or the caller's.
TEST(CApiTest, APlanIsWhatTheLoadDoesForEverySplitAndLoadsAsPlanned) {
  hoist::testing::TempDir tmp;
  hoist::SampleSpec spec;
  spec.format = "safetensors";
  spec.target_bytes = 2 << 20;
  const std::string path = tmp.File("m.safetensors");
  ASSERT_TRUE(hoist::WriteSampleModel(path, spec).ok());
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK);
  const size_t tensors = hoist_model_tensor_count(model);
  std::ifstream file(path, std::ios::binary);
  const std::vector<std::pair<const char*, const char*>> cases = {{"host", "layer"},
                                                                  {"host", "tensor"},
                                                                  {"host,host", "layer"},
                                                                  {"host,host", "tensor"},
                                                                  {"host,host", "replicate"}};
  for (const auto& [device, split] : cases) {
    SCOPED_TRACE(std::string(device) + " " + split);
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = device;
    options.split = split;
    hoist_plan* plan = nullptr;
    ASSERT_EQ(hoist_model_plan(model, &options, &plan), HOIST_OK) << hoist_last_error();
    const std::vector<hoist_part> parts = PlanParts(plan);
    const bool whole = std::string(device) == "host" || std::string(split) == "layer";
    if (whole) {
      ASSERT_EQ(parts.size(), tensors);
      for (size_t i = 0; i < tensors; ++i) {
        hoist_tensor_info t{};
        ASSERT_EQ(hoist_model_tensor(model, i, &t), HOIST_OK);
        EXPECT_EQ(parts[i].tensor, i);
        EXPECT_EQ(parts[i].row_end - parts[i].row_begin, 1u);
        EXPECT_EQ(parts[i].column_end - parts[i].column_begin, t.nbytes);
      }
    } else {
      EXPECT_GT(parts.size(), tensors);
    }
    // hoist_load with the same options loads the same parts.
    hoist_loaded* loaded = nullptr;
    ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
    for (size_t i = 0; i < parts.size(); ++i) {
      hoist_part got{};
      ASSERT_EQ(hoist_loaded_part(loaded, i, &got), HOIST_OK) << hoist_last_error();
      EXPECT_EQ(std::tie(got.tensor, got.row_begin, got.row_end, got.column_begin, got.column_end,
                         got.device),
                std::tie(parts[i].tensor, parts[i].row_begin, parts[i].row_end,
                         parts[i].column_begin, parts[i].column_end, parts[i].device))
          << "part " << i;
    }
    hoist_loaded_free(loaded);
    // The plan, into hoist's memory.
    ASSERT_EQ(hoist_load_plan(model, &options, plan, &loaded), HOIST_OK) << hoist_last_error();
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(hoist_loaded_tensor_device(loaded, i), static_cast<int>(parts[i].device));
      ExpectPartIsTheFile(file, model, parts[i], hoist_loaded_tensor(loaded, i), i);
    }
    EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
    hoist_loaded_free(loaded);
    // The plan, into the caller's memory.
    std::vector<std::vector<unsigned char>> memory(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      memory[i].resize((parts[i].row_end - parts[i].row_begin) *
                       (parts[i].column_end - parts[i].column_begin));
      ASSERT_EQ(hoist_plan_set_destination(plan, i, memory[i].data()), HOIST_OK);
    }
    ASSERT_EQ(hoist_load_plan(model, &options, plan, &loaded), HOIST_OK) << hoist_last_error();
    hoist_loaded_free(loaded);
    for (size_t i = 0; i < parts.size(); ++i) {
      ExpectPartIsTheFile(file, model, parts[i], memory[i].data(), i);
    }
    // The command line's plan for the same request.
    if (std::string(device) == "host,host") {
      const auto run = hoist::testing::RunHoist(
          {"inspect", path, "--json", "--device", device, "--split", split});
      ASSERT_EQ(run.exit_code, 0) << run.err;
      const nlohmann::json placement = nlohmann::json::parse(run.out)["placement"];
      if (whole) {
        for (size_t i = 0; i < tensors; ++i) {
          EXPECT_EQ(placement["device_of"][i].get<uint32_t>(), parts[i].device) << i;
        }
      } else {
        ASSERT_EQ(placement["parts"].size(), parts.size());
        for (size_t i = 0; i < parts.size(); ++i) {
          const nlohmann::json& p = placement["parts"][i];
          hoist_tensor_info t{};
          ASSERT_EQ(hoist_model_tensor(model, parts[i].tensor, &t), HOIST_OK);
          EXPECT_EQ(p["tensor"].get<std::string>(), t.name);
          EXPECT_EQ(p["device"].get<uint32_t>(), parts[i].device);
          EXPECT_EQ(p["rows"][0].get<uint64_t>(), parts[i].row_begin);
          EXPECT_EQ(p["rows"][1].get<uint64_t>(), parts[i].row_end);
          EXPECT_EQ(p["bytes"][0].get<uint64_t>(), parts[i].column_begin);
          EXPECT_EQ(p["bytes"][1].get<uint64_t>(), parts[i].column_end);
        }
      }
    }
    hoist_plan_free(plan);
  }
  hoist_model_close(model);
}

// A plan loads only as it was made: onto its devices, with a destination for every part or
// none; a cut for a job's ranks is read, not loaded; a caller's part names a tensor there is.
TEST(CApiTest, APlanIsRefusedWhereItDoesNotApply) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host,host";
  options.split = "replicate";
  hoist_plan* plan = nullptr;
  ASSERT_EQ(hoist_model_plan(model, &options, &plan), HOIST_OK) << hoist_last_error();
  hoist_loaded* loaded = nullptr;
  hoist_load_options other = options;
  other.device = "host";
  EXPECT_EQ(hoist_load_plan(model, &other, plan, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(),
               "the plan was made for device 'host,host'; the options name 'host'");
  unsigned char byte[64];
  ASSERT_EQ(hoist_plan_set_destination(plan, 0, byte), HOIST_OK);
  EXPECT_EQ(hoist_load_plan(model, &options, plan, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hoist_last_error())
                .find("1 of the plan's 20 parts that hold bytes have a "
                      "destination: every part has one or none has"),
            0u)
      << hoist_last_error();
  EXPECT_EQ(hoist_plan_set_destination(plan, 20, byte), HOIST_INVALID_ARGUMENT);
  hoist_part part{};
  EXPECT_EQ(hoist_plan_part(plan, 20, &part), HOIST_INVALID_ARGUMENT);
  hoist_plan_free(plan);

  ASSERT_EQ(hoist_model_plan_cut(model, &options, 2, &plan), HOIST_OK) << hoist_last_error();
  size_t count = 0;
  ASSERT_EQ(hoist_model_cut_ex(model, &options, "replicate", 2, nullptr, 0, &count), HOIST_OK);
  std::vector<hoist_part> cut(count);
  ASSERT_EQ(hoist_model_cut_ex(model, &options, "replicate", 2, cut.data(), count, &count),
            HOIST_OK);
  const std::vector<hoist_part> planned = PlanParts(plan);
  ASSERT_EQ(planned.size(), cut.size());
  for (size_t i = 0; i < cut.size(); ++i) {
    EXPECT_EQ(std::tie(planned[i].tensor, planned[i].device),
              std::tie(cut[i].tensor, cut[i].device));
  }
  EXPECT_EQ(hoist_load_plan(model, &options, plan, &loaded), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(),
               "a plan cut for 2 devices without opening them is a job's shares: hoist_load_rank "
               "loads a rank's");
  hoist_plan_free(plan);

  options.split = "layer";
  EXPECT_EQ(hoist_model_plan_cut(model, &options, 2, &plan), HOIST_INVALID_ARGUMENT);
  hoist_part bad{};
  bad.tensor = 10;
  EXPECT_EQ(hoist_plan_from_parts(model, &bad, 1, &plan), HOIST_INVALID_ARGUMENT);
  EXPECT_STREQ(hoist_last_error(), "parts[0].tensor is 10; the model has 10 tensors");
  EXPECT_EQ(hoist_plan_from_parts(model, nullptr, 1, &plan), HOIST_INVALID_ARGUMENT);
  hoist_model_close(model);
}

// Tensors named more than once are read once, also zero-byte ones that share their offset with
// other tensors (a sort by offset alone left their repeats apart).
TEST(CApiTest, AReaderAskedForATensorTwiceReadsItOnce) {
  hoist::testing::TempDir tmp;
  const std::string header = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("c":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})";
  // Built in place (an insert of the header into the 8-byte vector tripped GCC 12's
  // -Warray-bounds at -O2).
  std::vector<unsigned char> bytes(8 + header.size() + 16);
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  for (size_t v = 0; v < 16; ++v)
    bytes[8 + header.size() + v] = static_cast<unsigned char>(100 + v);
  const std::string path = tmp.File("z.safetensors");
  hoist::testing::WriteBytes(path, bytes);
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(path.c_str(), &model), HOIST_OK) << hoist_last_error();
  ASSERT_EQ(hoist_model_tensor_count(model), 3u);
  const size_t asked[] = {0, 1, 0, 2, 1, 2};
  hoist_reader_options options;
  hoist_reader_options_init(&options);
  options.tensors = asked;
  options.tensor_count = std::size(asked);
  options.pinned = 0;
  hoist_reader* reader = nullptr;
  ASSERT_EQ(hoist_reader_open(model, nullptr, &options, &reader), HOIST_OK) << hoist_last_error();
  for (size_t i = 0; i < 3; ++i) {
    hoist_host_tensor* tensor = nullptr;
    ASSERT_EQ(hoist_reader_take(reader, i, 10000, &tensor), HOIST_OK) << hoist_last_error();
    ASSERT_NE(tensor, nullptr) << i;
    EXPECT_EQ(hoist_host_tensor_size(tensor), i == 2 ? 16u : 0u) << i;
    if (i == 2) {
      EXPECT_EQ(std::memcmp(hoist_host_tensor_data(tensor), bytes.data() + 8 + header.size(), 16),
                0);
    }
    hoist_host_tensor_free(tensor);
  }
  hoist_reader_stats stats;
  hoist_reader_stats_get(reader, &stats);
  EXPECT_LE(stats.read_bytes, 16u);  // c once at most by the read-ahead (else on demand)
  EXPECT_EQ(stats.hits + stats.waits + stats.misses, 3u);
  hoist_reader_close(reader);
  hoist_model_close(model);
}

#pragma GCC diagnostic pop
