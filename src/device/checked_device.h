// The shared layer every device call goes through: it checks that copies stay inside known
// allocations, counts what is allocated so that nothing is left behind, and frees whatever
// remains when it is destroyed. Backends stay thin (as ggml's backend wrappers keep them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device/device.h"

namespace hoist {

class CheckedDevice {
 public:
  explicit CheckedDevice(std::unique_ptr<Device> backend);
  ~CheckedDevice();
  CheckedDevice(const CheckedDevice&) = delete;
  CheckedDevice& operator=(const CheckedDevice&) = delete;

  const std::string& name() const { return name_; }
  DeviceKind kind() const { return kind_; }
  DeviceInfo Info() { return backend_->Info(); }
  int queues() const { return backend_->queues(); }

  Result<void*> AllocateDevice(uint64_t bytes);
  Status FreeDevice(void* ptr);
  Result<void*> AllocatePinned(uint64_t bytes);
  Status FreePinned(void* ptr);

  // dst must lie inside an allocation from AllocateDevice, or the caller vouches for it
  // (external = true: destinations supplied by an engine). src is host memory.
  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int queue, bool external = false);
  Status CopyToHost(void* dst, const void* src, uint64_t n, bool external = false);
  bool Abandon();
  bool CanAbandon() const { return backend_->CanAbandon(); }

  // Live allocations made through this object: device and pinned.
  size_t live_device_allocations() const;
  size_t live_pinned_allocations() const;
  uint64_t live_pinned_bytes() const;
  // When false (a stalled device that could not promise to stop), the destructor leaves
  // memory allocated rather than free it under a copy that may still run.
  void set_free_on_destroy(bool value) { free_on_destroy_ = value; }

 private:
  Status CheckRange(const void* ptr, uint64_t n, const char* what) const;

  std::unique_ptr<Device> backend_;
  std::string name_;
  DeviceKind kind_ = DeviceKind::kHost;
  mutable std::mutex mutex_;
  std::map<uintptr_t, uint64_t> device_;  // start → bytes
  std::map<uintptr_t, uint64_t> pinned_;
  uint64_t pinned_bytes_ = 0;
  bool free_on_destroy_ = true;
};

}  // namespace hoist
