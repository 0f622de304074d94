// The shared layer every device call goes through: it checks that copies stay inside known
// allocations, counts what is allocated so that nothing is left behind, and frees whatever
// remains when it is destroyed. Backends stay thin (as ggml's backend wrappers keep them). It
// is itself a Device, so wrappers stack (a fault-injecting device under or over it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "device/device.h"

namespace hoist {

class CheckedDevice final : public Device {
 public:
  explicit CheckedDevice(std::unique_ptr<Device> backend);
  ~CheckedDevice() override;

  const std::string& name() const { return name_; }
  DeviceKind kind() const { return kind_; }
  const DeviceCapabilities& capabilities() const { return capabilities_; }
  bool CanAbandon() const { return capabilities_.can_abandon; }
  // Why this device stands in for the one asked for ("auto" found no usable GPU), in words;
  // empty when it is the one asked for. Set once, before the device is shared.
  const std::string& fallback() const { return fallback_; }
  void set_fallback(std::string why) { fallback_ = std::move(why); }

  DeviceInfo Info() override { return backend_->Info(); }
  int queues() const override { return backend_->queues(); }
  Result<void*> AllocateDevice(uint64_t bytes) override;
  Status FreeDevice(void* ptr) override;
  Result<void*> AllocatePinned(uint64_t bytes) override;
  // bytes must be what was allocated.
  Status ReturnPinned(void* ptr, uint64_t bytes) override;
  Status ReturnPinned(void* ptr);
  // dst must lie inside an allocation from AllocateDevice.
  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int queue) override {
    return CopyToDeviceAsync(dst, src, n, queue, false);
  }
  // The same, or (external) dst is memory the caller vouches for: destinations an engine
  // supplied.
  Result<std::unique_ptr<CopyHandle>> CopyToDeviceAsync(void* dst, const void* src, uint64_t n,
                                                        int queue, bool external);
  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch,
                                                            int queue) override {
    return CopyRowsToDeviceAsync(dst, src, width, rows, src_pitch, queue, false);
  }
  Result<std::unique_ptr<CopyHandle>> CopyRowsToDeviceAsync(void* dst, const void* src,
                                                            uint64_t width, uint64_t rows,
                                                            uint64_t src_pitch, int queue,
                                                            bool external);
  // peer must be a CheckedDevice: its backend does the copy's far side. src must lie inside
  // an allocation of this device and dst inside one of peer's, unless (external) the caller
  // vouches for both.
  Result<std::unique_ptr<CopyHandle>> CopyToPeerAsync(void* dst, Device& peer, const void* src,
                                                      uint64_t n, int queue) override {
    return CopyToPeerAsync(dst, peer, src, n, queue, false);
  }
  Result<std::unique_ptr<CopyHandle>> CopyToPeerAsync(void* dst, Device& peer, const void* src,
                                                      uint64_t n, int queue, bool external);
  bool CanReachPeer(const Device& peer) const override;
  // t.out must lie inside an allocation from AllocateDevice unless (external) the caller
  // vouches for it.
  Result<std::unique_ptr<CopyHandle>> DecodeExponentsAsync(const GpuExponentTensor& t) override {
    return DecodeExponentsAsync(t, false);
  }
  Result<std::unique_ptr<CopyHandle>> DecodeExponentsAsync(const GpuExponentTensor& t,
                                                           bool external);
  Status CopyToHost(void* dst, const void* src, uint64_t n) override {
    return CopyToHost(dst, src, n, false);
  }
  Status CopyToHost(void* dst, const void* src, uint64_t n, bool external);
  bool Abandon() override;

  // Tracked as AllocateDevice's memory is (ranges checked, freed with the device).
  Result<void*> AllocateShareable(uint64_t bytes) override;
  Result<ExportedMemory> ExportShareable(void* ptr) override;
  Result<void*> ImportShareable(int fd, uint64_t bytes) override;
  // src and dst must each lie inside an allocation of this device.
  Status CopyWithinDevice(void* dst, const void* src, uint64_t n) override {
    return CopyWithinDevice(dst, src, n, false);
  }
  // The same, or (external) dst is memory the caller vouches for: an engine's own buffers.
  Status CopyWithinDevice(void* dst, const void* src, uint64_t n, bool external);
  // When set, AllocateDevice allocates shareable memory: what a load allocates can then be
  // exported (a model held for other processes). Set before the device is shared.
  void set_shareable_allocations(bool value) { shareable_allocations_ = value; }

  // Live allocations made through this object: device and pinned.
  size_t live_device_allocations() const;
  size_t live_pinned_allocations() const;
  uint64_t live_pinned_bytes() const;
  // When false (a stalled device that could not promise to stop), the destructor leaves
  // memory allocated rather than free it under a copy that may still run.
  void set_free_on_destroy(bool value) { free_on_destroy_ = value; }
  // False once a load found copies it could not stop: memory it allocated from this device may
  // still be written, and is not to be freed.
  bool free_on_destroy() const { return free_on_destroy_; }

 private:
  Status CheckRange(const void* ptr, uint64_t n, const char* what) const;
  // expected: the size the caller says it allocated, checked when given.
  Status ReleasePinned(void* ptr, std::optional<uint64_t> expected);

  std::unique_ptr<Device> backend_;
  std::string name_;
  std::string fallback_;
  DeviceKind kind_ = DeviceKind::kHost;
  DeviceCapabilities capabilities_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, uint64_t> device_;  // start → bytes
  std::map<uintptr_t, uint64_t> pinned_;
  uint64_t pinned_bytes_ = 0;
  bool free_on_destroy_ = true;
  bool shareable_allocations_ = false;
};

}  // namespace hoist
