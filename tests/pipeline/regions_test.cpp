// Slices of tensors loaded as tensors of their own: row ranges read as one file range, column
// ranges staged by rows with only their columns copied, every byte checked against the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/fault_injection_file.h"
#include "pipeline/load_checks.h"
#include "pipeline/loader.h"

namespace hoist {
namespace {

using testing::FileBytes;
using testing::MakeDevice;
using testing::Sample;

// Only Linux files gather columns out of the page cache (mincore and the SIGBUS guard).
#if defined(__linux__)
constexpr bool kFilesGather = true;
#else
constexpr bool kFilesGather = false;
#endif

class RegionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.format = "safetensors";
    spec.target_bytes = 8 << 20;
    spec.dtypes = {"BF16", "F32"};
    dir_ = Sample(tmp_, "model.safetensors", spec);
    for (size_t i = 0; i < dir_.tensors.size(); ++i) {
      if (dir_.tensors[i].shape.size() == 2 && dir_.tensors[i].shape[0] > 1) matrices_.push_back(i);
    }
    ASSERT_GE(matrices_.size(), 8u);
  }

  uint64_t RowBytes(size_t i) const { return dir_.tensors[i].nbytes / dir_.tensors[i].shape[0]; }

  // The region's bytes as the file holds them, packed row after row.
  std::vector<unsigned char> Expected(const TensorRegion& r) const {
    const std::vector<unsigned char> whole = FileBytes(dir_, dir_.tensors[r.tensor]);
    std::vector<unsigned char> out;
    for (uint64_t row = r.row_begin; row < r.row_end; ++row) {
      const auto* at = whole.data() + row * r.row_bytes;
      out.insert(out.end(), at + r.column_begin, at + r.column_end);
    }
    return out;
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
  std::vector<size_t> matrices_;
};

TEST_F(RegionsTest, RowAndColumnRangesLoadByteExactAcrossChunksAndThreads) {
  std::mt19937_64 rng(7);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  std::vector<TensorRegion> regions;
  for (size_t k = 0; k < 40; ++k) {
    const size_t i = matrices_[k % matrices_.size()];
    const uint64_t rows = dir_.tensors[i].shape[0];
    const uint64_t row_bytes = RowBytes(i);
    const uint64_t element = row_bytes / dir_.tensors[i].shape[1];
    TensorRegion r;
    r.tensor = i;
    r.row_bytes = row_bytes;
    switch (k % 5) {
      case 0:  // rows, every column: one file range
        r.row_begin = pick(rows);
        r.row_end = r.row_begin + 1 + pick(rows - r.row_begin);
        r.column_end = row_bytes;
        break;
      case 1:  // the first half of the columns of every row ([:, :half])
        r.row_end = rows;
        r.column_end = row_bytes / element / 2 * element;
        break;
      case 2:  // the second half
        r.row_end = rows;
        r.column_begin = row_bytes / element / 2 * element;
        r.column_end = row_bytes;
        break;
      case 3:  // a block inside
        r.row_begin = pick(rows);
        r.row_end = r.row_begin + 1 + pick(rows - r.row_begin);
        r.column_begin = pick(row_bytes / element) * element;
        r.column_end =
            r.column_begin + (1 + pick((row_bytes - r.column_begin) / element)) * element;
        break;
      default:  // one element
        r.row_begin = pick(rows);
        r.row_end = r.row_begin + 1;
        r.column_begin = pick(row_bytes / element) * element;
        r.column_end = r.column_begin + element;
    }
    regions.push_back(r);
  }
  struct Config {
    const char* device;
    int threads;
    uint64_t chunk;
  };
  // Chunks smaller than a row (rows read in pieces), holding a few rows, and many.
  const Config configs[] = {
      {"sim", 1, 4096}, {"sim", 4, 64 << 10}, {"host", 8, 4 << 20}, {"sim:engines=3", 3, 16 << 10}};
  // The sample's file, cached as it was just written: on Linux column slices gather their
  // columns out of the page cache. Through a storage whose files cannot gather, or with
  // gathering off (HOIST_GATHER=off): whole rows.
  TensorDirectory whole_rows = dir_;
  whole_rows.storage = std::make_shared<FaultInjectionStorage>(dir_.storage, FaultPlan{});
  struct Way {
    const TensorDirectory* dir;
    bool gather;
  };
  for (const Config& c : configs) {
    for (const Way& way : {Way{&dir_, true}, Way{&dir_, false}, Way{&whole_rows, true}}) {
      const TensorDirectory* dir = way.dir;
      const bool gathers = kFilesGather && dir == &dir_ && way.gather;
      SCOPED_TRACE(std::string(c.device) + " threads=" + std::to_string(c.threads) +
                   " chunk=" + std::to_string(c.chunk) + (gathers ? " gathered" : " whole rows"));
      auto device = MakeDevice(c.device);
      std::vector<void*> memory;
      for (TensorRegion& r : regions) {
        auto p =
            device->AllocateDevice((r.row_end - r.row_begin) * (r.column_end - r.column_begin));
        ASSERT_TRUE(p.ok());
        r.destination = *p;
        memory.push_back(*p);
      }
      LoadOptions o;
      o.threads = c.threads;
      o.chunk_bytes = c.chunk;
      o.gather_cached_rows = way.gather;
      auto model = LoadRegions(*dir, device, regions, o);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      EXPECT_EQ((*model)->report.tensors, regions.size());
      if (gathers) {
        EXPECT_GT((*model)->report.gathered_bytes, 0u);
      } else {
        EXPECT_EQ((*model)->report.gathered_bytes, 0u);
      }
      for (size_t k = 0; k < regions.size(); ++k) {
        const TensorRegion& r = regions[k];
        const std::vector<unsigned char> want = Expected(r);
        std::vector<unsigned char> got(want.size());
        ASSERT_TRUE(device->CopyToHost(got.data(), r.destination, got.size()).ok());
        ASSERT_TRUE(got == want) << "region " << k << " of " << dir_.tensors[r.tensor].name;
      }
      model->reset();
      for (void* p : memory) ASSERT_TRUE(device->FreeDevice(p).ok());
      EXPECT_EQ(device->live_pinned_allocations(), 0u);
    }
  }
}

TEST_F(RegionsTest, ARowRangeReadsOnlyItsRowsAndAColumnRangeItsRowsOnce) {
  const size_t i = matrices_.front();
  const uint64_t rows = dir_.tensors[i].shape[0];
  const uint64_t row_bytes = RowBytes(i);
  auto device = MakeDevice("sim");
  auto memory = device->AllocateDevice(dir_.tensors[i].nbytes);
  ASSERT_TRUE(memory.ok());
  LoadOptions o;
  o.chunk_bytes = 1 << 20;
  // Rows [1, rows - 1): the file range of those rows alone.
  TensorRegion r{i, row_bytes, 1, rows - 1, 0, row_bytes, *memory};
  auto model = LoadRegions(dir_, device, {r}, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->report.read_bytes, (rows - 2) * row_bytes);
  EXPECT_EQ((*model)->report.tensor_bytes, (rows - 2) * row_bytes);
  // The left half of every row: the rows' range once, half of it on the device.
  r = {i, row_bytes, 0, rows, 0, row_bytes / 2, *memory};
  model = LoadRegions(dir_, device, {r}, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->report.read_bytes, (rows - 1) * row_bytes + row_bytes / 2);
  EXPECT_EQ((*model)->report.tensor_bytes, rows * (row_bytes / 2));
  model->reset();
  ASSERT_TRUE(device->FreeDevice(*memory).ok());
}

TEST_F(RegionsTest, RegionsOutOfTheirTensorAreRefusedNamingTheRule) {
  const size_t i = matrices_.front();
  const TensorEntry& t = dir_.tensors[i];
  const uint64_t rows = t.shape[0];
  const uint64_t row_bytes = RowBytes(i);
  int dummy = 0;
  struct Case {
    TensorRegion region;
    std::string message;
  };
  const std::string of = "region 0 of '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes)";
  const Case cases[] = {
      {{dir_.tensors.size(), row_bytes, 0, 1, 0, 1, &dummy},
       "region 0 names tensor " + std::to_string(dir_.tensors.size()) + "; the model has " +
           std::to_string(dir_.tensors.size())},
      {{i, t.nbytes + 1, 0, 1, 0, 1, &dummy},
       of + ": rows of " + std::to_string(t.nbytes + 1) + " bytes do not divide it"},
      {{i, row_bytes, 0, rows + 1, 0, 1, &dummy},
       of + ": rows [0, " + std::to_string(rows + 1) + ") are not a range of its " +
           std::to_string(rows)},
      {{i, row_bytes, 2, 2, 0, 1, &dummy},
       of + ": rows [2, 2) are not a range of its " + std::to_string(rows)},
      {{i, row_bytes, 0, 1, 4, row_bytes + 1, &dummy},
       of + ": bytes [4, " + std::to_string(row_bytes + 1) + ") are not a range of its " +
           std::to_string(row_bytes) + "-byte rows"},
      {{i, row_bytes, 0, 1, 0, 1, &dummy, 1}, "region 0 is for device 1; the load has 1"},
  };
  for (const Case& c : cases) {
    auto model = LoadRegions(dir_, MakeDevice("host"), {c.region}, {});
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(model.status().message(), c.message);
  }
  LoadOptions checksum;
  checksum.checksum = true;
  EXPECT_EQ(LoadRegions(dir_, MakeDevice("host"), {{i, row_bytes, 0, 1, 0, 1, &dummy}}, checksum)
                .status()
                .code(),
            Code::kInvalidArgument);
}

TEST_F(RegionsTest, ADeviceFailingMidSliceFailsTheLoadAndFreesStaging) {
  const size_t i = matrices_.front();
  const uint64_t row_bytes = RowBytes(i);
  const uint64_t rows = dir_.tensors[i].shape[0];
  auto device = MakeDevice("sim:fail_copy_after=1000");
  auto memory = device->AllocateDevice(dir_.tensors[i].nbytes);
  ASSERT_TRUE(memory.ok());
  LoadOptions o;
  o.chunk_bytes = 4096;
  auto model = LoadRegions(dir_, device, {{i, row_bytes, 0, rows, 0, row_bytes / 2, *memory}}, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kDeviceError);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
  ASSERT_TRUE(device->FreeDevice(*memory).ok());
}

// Column slices gather out of a mapping of the file; a file cut short under that load is a
// changed file, as for any load (never a SIGBUS, never an I/O error of the disk).
TEST_F(RegionsTest, AFileCutShortUnderAColumnSliceLoadIsReportedAsChanged) {
  const std::string path = dir_.files[0].path;
  const uint64_t size = dir_.files[0].size;
  std::vector<TensorRegion> regions;
  for (size_t i : matrices_) {
    regions.push_back({i, RowBytes(i), 0, dir_.tensors[i].shape[0], 0, RowBytes(i) / 2});
  }
  auto device = MakeDevice("sim:bandwidth=50MB/s");
  LoadOptions o;
  o.chunk_bytes = 64 << 10;
  o.threads = 4;
  bool truncated = false;
  o.progress = [&](const LoadProgress&) {
    if (!truncated) std::filesystem::resize_file(path, size / 2);
    truncated = true;
    return true;
  };
  auto model = LoadRegions(dir_, device, regions, o);
  ASSERT_TRUE(truncated) << "the load ended before its first progress report";
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged) << model.status().message();
  EXPECT_EQ(device->live_device_allocations(), 0u);
  EXPECT_EQ(device->live_pinned_allocations(), 0u);
}

}  // namespace
}  // namespace hoist
