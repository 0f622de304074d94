// A new kind of device is a Device and one row: this test-only backend ("ledger", host memory
// that counts what is copied into it) is added with RegisterDeviceBackend, without touching
// src/, and every front end's request reaches it by name, alone or beside a built-in device.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/request.h"
#include "device/backends.h"
#include "device/checked_device.h"
#include "format/sample_model.h"
#include "hoist/hoist.h"
#include "test_util.h"

namespace hoist {
namespace {

std::atomic<uint64_t> g_copied_bytes{0};

class DoneCopy final : public CopyHandle {
 public:
  Result<bool> Poll() override { return true; }
};

// Copies on the calling thread; memory from the heap.
class LedgerDevice final : public Device {
 public:
  explicit LedgerDevice(std::string name) : name_(std::move(name)) {}

  DeviceInfo Info() override {
    DeviceInfo info;
    info.name = name_;
    info.kind = DeviceKind::kHost;
    info.description = "test ledger: host memory that counts its copies";
    return info;
  }
  int queues() const override { return 1; }
  Result<void*> AllocateDevice(uint64_t bytes) override { return Heap(bytes); }
  Status FreeDevice(void* ptr) override {
    std::free(ptr);  // NOLINT(cppcoreguidelines-no-malloc): the device's own heap
    return Status::Ok();
  }
  Result<void*> AllocatePinned(uint64_t bytes) override { return Heap(bytes); }
  Status ReturnPinned(void* ptr, uint64_t /*bytes*/) override { return FreeDevice(ptr); }
  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int /*queue*/) override {
    std::memcpy(dst, src, n);
    g_copied_bytes += n;
    return std::unique_ptr<CopyHandle>(std::make_unique<DoneCopy>());
  }
  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch,
                                                            int /*queue*/) override {
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<unsigned char*>(dst) + r * width,
                  static_cast<const unsigned char*>(src) + r * src_pitch, width);
    }
    g_copied_bytes += width * rows;
    return std::unique_ptr<CopyHandle>(std::make_unique<DoneCopy>());
  }
  Status CopyToHost(void* dst, const void* src, uint64_t n) override {
    std::memcpy(dst, src, n);
    return Status::Ok();
  }

 private:
  static Result<void*> Heap(uint64_t bytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);  // NOLINT(cppcoreguidelines-no-malloc)
    if (p == nullptr) return Status::DeviceError("ledger: out of memory");
    return p;
  }

  std::string name_;
};

// The one row.
void RegisterLedgerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    RegisterDeviceBackend(
        {{"ledger"},
         [](const std::string& prefix, const std::string& rest) -> Result<std::unique_ptr<Device>> {
           return std::unique_ptr<Device>(
               std::make_unique<LedgerDevice>(rest.empty() ? prefix : prefix + ":" + rest));
         },
         [] { return std::vector<DeviceInfo>{LedgerDevice("ledger").Info()}; },
         nullptr});
  });
}

class RegisteredBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterLedgerOnce();
    SampleSpec spec;
    spec.target_bytes = 1 << 20;
    ASSERT_TRUE(WriteSampleModel(tmp_.File("m.safetensors"), spec).ok());
  }
  testing::TempDir tmp_;
};

TEST_F(RegisteredBackendTest, TheFacadeOpensItByNameAndLoadsThroughIt) {
  auto dir = OpenModel({tmp_.File("m.safetensors"), nullptr, std::nullopt});
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  for (const std::string devices : {"ledger:0", "ledger:0,sim", "sim,ledger:1"}) {
    SCOPED_TRACE(devices);
    for (const char* split : {"layer", "tensor", "replicate"}) {
      SCOPED_TRACE(split);
      LoadRequest request;
      request.device = devices;
      auto policy = ParseSplit(split, "split");
      ASSERT_TRUE(policy.ok()) << policy.status().ToString();
      request.split = *policy;
      const uint64_t before = g_copied_bytes;
      auto loaded = Load(*dir, request);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_GT(g_copied_bytes - before, 0u);  // bytes went through the ledger
      auto mismatches = Verify(*loaded, 2, 10, 10);
      ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
      EXPECT_TRUE(mismatches->empty());
    }
  }
  const std::vector<DeviceInfo> listed = ListDevices();
  EXPECT_EQ(listed.back().name, "ledger");  // after the built-in kinds
}

TEST_F(RegisteredBackendTest, TheCApiReachesItToo) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp_.File("m.safetensors").c_str(), &model), HOIST_OK);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "ledger:3";
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  EXPECT_NE(std::strstr(hoist_loaded_report_json(loaded), "\"device\":\"ledger:3\""), nullptr);
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);
  hoist_model_close(model);
}

}  // namespace
}  // namespace hoist
