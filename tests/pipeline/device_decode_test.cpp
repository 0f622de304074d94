// A packed model onto a device that decodes it (pipeline/device_decode.h), on the sim, whose
// decoder runs the GPU kernel's steps on the host over the parts in its memory: the parts stream as
// stored through the scratch ring and every tensor lands byte for byte as the original's, on one
// device or two, into hoist's block or the caller's memory, all or some tensors; a corrupt block is
// an error naming the tensor and the block; a decode that never finishes is a stall naming it.
#include "pipeline/device_decode.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "format/model.h"
#include "format/packed.h"
#include "format/packed_checks.h"
#include "format/sample_model.h"
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

class DeviceDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec{"safetensors", 5 << 20};
    spec.dtypes = {"BF16", "F16", "F32"};
    spec.normal_values = true;
    ASSERT_TRUE(WriteSampleModel(tmp_.File("m.safetensors"), spec).ok());
    auto original = ReadModelDirectory(tmp_.File("m.safetensors"));
    ASSERT_TRUE(original.ok()) << original.status().ToString();
    original_ = std::move(original).value();
    packed_path_ = tmp_.File("m.hoistpack");
    auto report = WritePacked(original_, packed_path_, 2);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    for (size_t i = 0; i < report->tensors.size(); ++i) {
      if (report->tensors[i].coded) {
        coded_bytes_ += report->tensors[i].bytes;
        ++coded_tensors_;
      }
    }
    ASSERT_GT(coded_bytes_, 0u);
    auto packed = ReadModelDirectory(packed_path_);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    packed_ = std::move(packed).value();
  }

  void ExpectOriginal(LoadedModel& model, size_t i) {
    const TensorEntry& o = original_.tensors[i];
    EXPECT_TRUE(LoadedBytes(model, i, o.nbytes) == FileBytes(original_, o)) << o.name;
  }

  static LoadOptions Small() {
    LoadOptions o;
    o.threads = 3;
    o.chunk_bytes = 256 << 10;
    o.staging_bytes = 1 << 20;  // a ring smaller than the packed tensors together
    return o;
  }

  testing::TempDir tmp_;
  TensorDirectory original_;
  TensorDirectory packed_;
  std::string packed_path_;
  uint64_t coded_bytes_ = 0;
  size_t coded_tensors_ = 0;
};

TEST_F(DeviceDecodeTest, CodedTensorsStreamAsStoredAndLandDecodedByteForByte) {
  for (const char* spec : {"sim", "sim:decode=0"}) {
    SCOPED_TRACE(spec);
    auto device = MakeDevice(spec);
    const bool decodes = device->capabilities().decodes_exponents;
    EXPECT_EQ(DecodesOnDevice(packed_, {device}, Small(), {}), decodes);
    auto model = Load(packed_, device, Small());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    for (size_t i = 0; i < original_.tensors.size(); ++i) ExpectOriginal(**model, i);
    const LoadReport& r = (*model)->report;
    EXPECT_EQ(r.tensor_bytes, original_.total_bytes());
    EXPECT_EQ(r.decoded_on_device_bytes, decodes ? coded_bytes_ : 0);
    EXPECT_EQ(r.decode.tensors, decodes ? coded_tensors_ : 0);
    if (decodes) {
      EXPECT_LT(r.read_bytes, r.tensor_bytes);  // the stored bytes, not the decoded ones
      EXPECT_GT(r.decode.busy, 0.0);
      EXPECT_TRUE(r.fallbacks.empty());
    } else {
      EXPECT_EQ(r.decode.busy, 0.0);
      EXPECT_EQ(r.decode.after_stream, 0.0);
      // Said, not silent: a GPU without the decoder loads at the CPU's decode rate.
      ASSERT_EQ(r.fallbacks.size(), 1u);
      EXPECT_EQ(r.fallbacks[0],
                "packed tensors decoded on the CPU for sim: it has no decoder (a build without "
                "the GPU kernels, HOIST_GPU_KERNELS; or sim:decode=0); such a load runs at the "
                "CPU's decode rate, not the link's");
    }
    model->reset();
    EXPECT_EQ(device->live_device_allocations(), 0u);
    EXPECT_EQ(device->live_pinned_allocations(), 0u);
  }
  // Checksums are of the staged bytes: such a load decodes on the host, as it reads.
  LoadOptions with_checksums = Small();
  with_checksums.checksum = true;
  EXPECT_FALSE(DecodesOnDevice(packed_, {MakeDevice("sim")}, with_checksums, {}));
}

TEST_F(DeviceDecodeTest, IntoTheCallersMemoryAsNeededReportingEachTensorOnceDecoded) {
  std::vector<std::vector<unsigned char>> memory(packed_.tensors.size());
  std::mutex mutex;
  std::vector<int> reported(packed_.tensors.size(), 0);
  std::vector<bool> whole_when_reported(packed_.tensors.size(), false);
  LoadOptions o = Small();
  o.destination = [&](size_t i, const TensorEntry& t) -> Result<void*> {
    memory[i].assign(t.nbytes, 0);
    return static_cast<void*>(memory[i].data());
  };
  o.destinations_when_needed = true;
  o.tensor_loaded = [&](size_t i) {
    const std::vector<unsigned char> want = FileBytes(original_, original_.tensors[i]);
    std::lock_guard<std::mutex> lock(mutex);
    ++reported[i];
    whole_when_reported[i] = memory[i] == want;
  };
  auto device = MakeDevice("sim");
  auto model = Load(packed_, device, o);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE((*model)->external_destinations());
  for (size_t i = 0; i < packed_.tensors.size(); ++i) {
    EXPECT_EQ(reported[i], 1) << packed_.tensors[i].name;
    EXPECT_TRUE(whole_when_reported[i]) << packed_.tensors[i].name;
    EXPECT_EQ((*model)->data(i), memory[i].data());
  }
  model->reset();
  EXPECT_EQ(device->live_device_allocations(), 0u);
}

TEST_F(DeviceDecodeTest, OnTwoDevicesAndForSomeTensors) {
  auto a = MakeDevice("sim");
  auto b = MakeDevice("sim");
  std::vector<uint32_t> placement(packed_.tensors.size());
  for (size_t i = 0; i < placement.size(); ++i) placement[i] = static_cast<uint32_t>(i % 2);
  auto model = Load(packed_, {a, b}, Small(), placement);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (size_t i = 0; i < original_.tensors.size(); ++i) {
    EXPECT_EQ((*model)->device_index(i), placement[i]);
    ExpectOriginal(**model, i);
  }
  LoadOptions some = Small();
  some.names = {packed_.tensors.back().name, packed_.tensors.front().name};
  auto part = Load(packed_, a, some);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  for (size_t i = 0; i < packed_.tensors.size(); ++i) {
    const bool chosen = i == 0 || i + 1 == packed_.tensors.size();
    EXPECT_EQ((*part)->loaded(i), chosen);
    if (chosen) ExpectOriginal(**part, i);
  }
  some.names = {"nope"};
  auto missing = Load(packed_, a, some);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "no tensor named 'nope' in the model");
}

TEST_F(DeviceDecodeTest, ACorruptBlockIsAnErrorNamingTheTensorAndTheBlock) {
  const std::vector<unsigned char> good = ReadBytes(packed_path_);
  const testing::KeptByte kept = testing::KeptByteInBlockOne(packed_path_);
  ASSERT_FALSE(kept.tensor.empty());
  std::vector<unsigned char> bad = good;
  bad[kept.at] ^= 0x20;
  WriteBytes(packed_path_, bad);
  const auto r = RunHoist({"load", packed_path_, "--device", "sim"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(packed_path_ + ": tensor " + kept.tensor +
                       ", block 1 (values 32768-65535): it does not decode to what its index "
                       "and checksum say, on sim (the packed file is corrupt)"),
            std::string::npos)
      << r.err;
  // verify reads the tensors back and compares them with the host's decode of the file.
  WriteBytes(packed_path_, good);
  const auto loaded = RunHoist({"load", packed_path_, "--device", "sim"});
  EXPECT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find(" of tensors decoded on the device"), std::string::npos) << loaded.out;
  const auto verified = RunHoist({"verify", packed_path_, "--device", "sim", "--quiet"});
  EXPECT_EQ(verified.exit_code, 0) << verified.err;
}

// The sim decodes with the GPU kernel's own steps (pack/exponent_decode_block.h) and reports
// through the same flag, so this fails when the kernel's checks or its verdict's way to the
// load stop catching a flipped bit; the host decodes with the CPU's decoder.
TEST_F(DeviceDecodeTest, EveryDamagedPlaceIsAnErrorNamingTheTensorAndTheBlock) {
  const std::vector<unsigned char> good = ReadBytes(packed_path_);
  for (const char* place : {"coded-first", "coded-last", "kept-first", "kept-last", "checksum-last",
                            "unit-bits", "group-start", "raw"}) {
    const testing::Damage d = testing::DamageAt(packed_path_, place);
    ASSERT_FALSE(d.tensor.empty()) << place;
    std::vector<unsigned char> bad = good;
    bad[d.at] ^= d.bit;
    WriteBytes(packed_path_, bad);
    for (const char* device : {"sim", "host"}) {
      const auto r = RunHoist({"load", packed_path_, "--device", device, "--quiet"});
      EXPECT_EQ(r.exit_code, 2) << place << " on " << device << ": " << r.err;
      EXPECT_NE(r.err.find(packed_path_ + ": tensor " + d.tensor), std::string::npos)
          << place << " on " << device << ": " << r.err;
      if (d.block >= 0) {
        EXPECT_NE(r.err.find("block " + std::to_string(d.block)), std::string::npos)
            << place << " on " << device << ": " << r.err;
      }
    }
  }
  WriteBytes(packed_path_, good);
  const auto r = RunHoist({"load", packed_path_, "--device", "sim", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(DeviceDecodeTest, ADecodeThatNeverFinishesIsAStallNamingTheTensor) {
  auto device = MakeDevice("sim:hang_decode=1");
  LoadOptions o = Small();
  o.stall_timeout_s = 1;
  const auto start = std::chrono::steady_clock::now();
  auto model = Load(packed_, device, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled);
  EXPECT_NE(model.status().message().find("decode stage: decoding tensor "), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find(
                " on sim did not finish within 1.0 s; the device memory it reads and writes is "
                "left allocated until the process exits"),
            std::string::npos)
      << model.status().message();
  EXPECT_LT(s, testing::TimeBound(1 + 2.0 + 1.5));
  EXPECT_FALSE(device->free_on_destroy());
  EXPECT_GT(device->live_device_allocations(), 0u);
  device->set_free_on_destroy(true);  // this test's own clean-up: the hung decode touches nothing
}

}  // namespace
}  // namespace hoist
