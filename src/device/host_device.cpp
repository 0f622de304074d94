// The host backend: "device" memory is host memory and copies are memcpy on worker threads.
#include <cstdlib>
#include <cstring>

#include "device/copy_engine.h"
#include "device/device.h"
#include "device/host_memory.h"

namespace hoist {

DeviceInfo HostDeviceInfo(int workers) {
  DeviceInfo info{"host",
                  DeviceKind::kHost,
                  "host memory, copies by " + std::to_string(workers) + " memcpy threads",
                  PhysicalMemoryBytes(),
                  AvailableMemoryBytes(),
                  {}};
  info.capabilities.async_copies = true;
  info.capabilities.can_abandon = true;
  info.capabilities.memory_is_host = true;
  info.capabilities.shares_memory = HostMemoryCanBeShared();
  return info;
}

namespace {

class HostDevice final : public Device {
 public:
  explicit HostDevice(int workers) : workers_(workers) {}
  Status Start() { return engine_.Start(workers_); }

  DeviceInfo Info() override { return HostDeviceInfo(workers_); }
  int queues() const override { return workers_; }

  Result<void*> AllocateDevice(uint64_t bytes) override {
    return AllocateHostMemory(bytes, "host");
  }
  Status FreeDevice(void* ptr) override {
    FreeHostMemory(ptr);
    return Status::Ok();
  }
  Result<void*> AllocatePinned(uint64_t bytes) override {
    return AllocateHostMemory(bytes, "host");
  }
  Status ReturnPinned(void* ptr, uint64_t /*bytes*/) override {
    FreeHostMemory(ptr);
    return Status::Ok();
  }

  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int /*queue*/) override {
    return engine_.Submit([dst, src, n] {
      std::memcpy(dst, src, n);
      return JobResult{};
    });
  }

  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch,
                                                            int /*queue*/) override {
    return engine_.Submit([dst, src, width, rows, src_pitch] {
      for (uint64_t r = 0; r < rows; ++r) {
        std::memcpy(static_cast<unsigned char*>(dst) + r * width,
                    static_cast<const unsigned char*>(src) + r * src_pitch, width);
      }
      return JobResult{};
    });
  }

  Status CopyToHost(void* dst, const void* src, uint64_t n) override {
    std::memcpy(dst, src, n);
    return Status::Ok();
  }

  bool Abandon() override {
    engine_.Abandon();
    return true;
  }

  Result<void*> AllocateShareable(uint64_t bytes) override {
    return AllocateSharedHostMemory(bytes, "host");
  }
  Result<ExportedMemory> ExportShareable(void* ptr) override { return ExportSharedHostMemory(ptr); }
  Result<void*> ImportShareable(int fd, uint64_t bytes) override {
    return MapSharedHostMemory(fd, bytes, "host");
  }
  Status CopyWithinDevice(void* dst, const void* src, uint64_t n) override {
    std::memcpy(dst, src, n);
    return Status::Ok();
  }

 private:
  int workers_;
  CopyEngine engine_;
};

}  // namespace

Result<std::unique_ptr<Device>> MakeHostDevice(int workers) {
  auto device = std::make_unique<HostDevice>(workers);
  HOIST_RETURN_IF_ERROR(device->Start());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace hoist
