#include "device/checked_device.h"

#include <chrono>
#include <string>

#include "base/platform.h"
#include "base/stall.h"
#include "pack/exponent_decode_gpu.h"

namespace hoist {

CheckedDevice::CheckedDevice(std::unique_ptr<Device> backend) : backend_(std::move(backend)) {
  const DeviceInfo info = backend_->Info();
  name_ = info.name;
  kind_ = info.kind;
  capabilities_ = info.capabilities;
}

CheckedDevice::~CheckedDevice() {
  if (!free_on_destroy_) return;
  for (const auto& [ptr, bytes] : device_) (void)backend_->FreeDevice(reinterpret_cast<void*>(ptr));
  for (const auto& [ptr, bytes] : pinned_) {
    (void)backend_->ReturnPinned(reinterpret_cast<void*>(ptr), bytes);
  }
}

Result<void*> CheckedDevice::AllocateDevice(uint64_t bytes) {
  if (shareable_allocations_) return AllocateShareable(bytes);
  if (bytes == 0) bytes = 1;
  HOIST_ASSIGN_OR_RETURN(void* ptr, backend_->AllocateDevice(bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  device_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  return ptr;
}

Result<void*> CheckedDevice::AllocateShareable(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  HOIST_ASSIGN_OR_RETURN(void* ptr, backend_->AllocateShareable(bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  device_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  return ptr;
}

Result<ExportedMemory> CheckedDevice::ExportShareable(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device_.count(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      return Status::Internal(name_ + ": export of device memory that was not allocated here");
    }
  }
  return backend_->ExportShareable(ptr);
}

Result<void*> CheckedDevice::ImportShareable(int fd, uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument(name_ + ": import of 0 bytes");
  HOIST_ASSIGN_OR_RETURN(void* ptr, backend_->ImportShareable(fd, bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  device_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  return ptr;
}

Status CheckedDevice::CopyWithinDevice(void* dst, const void* src, uint64_t n, bool external) {
  if (n == 0) return Status::Ok();
  if (!external) HOIST_RETURN_IF_ERROR(CheckRange(dst, n, "copy within the device to"));
  HOIST_RETURN_IF_ERROR(CheckRange(src, n, "copy within the device from"));
  return backend_->CopyWithinDevice(dst, src, n);
}

Status CheckedDevice::FreeDevice(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device_.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      return Status::Internal(name_ + ": free of device memory that was not allocated here");
    }
  }
  return backend_->FreeDevice(ptr);
}

Result<void*> CheckedDevice::AllocatePinned(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("pinned allocation of 0 bytes");
  HOIST_ASSIGN_OR_RETURN(void* ptr, backend_->AllocatePinned(bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  pinned_bytes_ += bytes;
  return ptr;
}

Status CheckedDevice::ReturnPinned(void* ptr) { return ReleasePinned(ptr, std::nullopt); }

Status CheckedDevice::ReturnPinned(void* ptr, uint64_t bytes) { return ReleasePinned(ptr, bytes); }

Status CheckedDevice::ReleasePinned(void* ptr, std::optional<uint64_t> expected) {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pinned_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == pinned_.end()) {
      return Status::Internal(name_ + ": free of pinned memory that was not allocated here");
    }
    if (expected && *expected != it->second) {
      return Status::Internal(name_ + ": free of " + std::to_string(*expected) +
                              " bytes of pinned memory allocated as " + std::to_string(it->second));
    }
    bytes = it->second;
    pinned_bytes_ -= bytes;
    pinned_.erase(it);
  }
  return backend_->ReturnPinned(ptr, bytes);
}

Status CheckedDevice::CheckRange(const void* ptr, uint64_t n, const char* what) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = device_.upper_bound(p);
  if (it != device_.begin()) {
    --it;
    if (p >= it->first && n <= it->second && p - it->first <= it->second - n) return Status::Ok();
  }
  return Status::Internal(name_ + ": " + what + " of " + std::to_string(n) +
                          " bytes falls outside every device allocation");
}

Result<std::unique_ptr<CopyHandle>> CheckedDevice::CopyToDeviceAsync(void* dst, const void* src,
                                                                     uint64_t n, int queue,
                                                                     bool external) {
  if (queue < 0 || queue >= backend_->queues()) {
    return Status::Internal(name_ + ": copy queue " + std::to_string(queue) + " out of range");
  }
  if (!external) HOIST_RETURN_IF_ERROR(CheckRange(dst, n, "copy to device"));
  return backend_->CopyToDeviceAsync(dst, src, n, queue);
}

Result<std::unique_ptr<CopyHandle>> CheckedDevice::CopyRowsToDeviceAsync(void* dst, const void* src,
                                                                         uint64_t width,
                                                                         uint64_t rows,
                                                                         uint64_t src_pitch,
                                                                         int queue, bool external) {
  if (queue < 0 || queue >= backend_->queues()) {
    return Status::Internal(name_ + ": copy queue " + std::to_string(queue) + " out of range");
  }
  if (width == 0 || rows == 0 || src_pitch < width || rows > UINT64_MAX / src_pitch) {
    return Status::Internal(name_ + ": a copy of " + std::to_string(rows) + " rows of " +
                            std::to_string(width) + " bytes " + std::to_string(src_pitch) +
                            " bytes apart is not a copy of rows");
  }
  if (!external) HOIST_RETURN_IF_ERROR(CheckRange(dst, width * rows, "copy to device"));
  return backend_->CopyRowsToDeviceAsync(dst, src, width, rows, src_pitch, queue);
}

Result<std::unique_ptr<CopyHandle>> CheckedDevice::CopyToPeerAsync(void* dst, Device& peer,
                                                                   const void* src, uint64_t n,
                                                                   int queue, bool external) {
  auto* checked_peer = dynamic_cast<CheckedDevice*>(&peer);
  if (checked_peer == nullptr) {
    return Status::Internal(name_ + ": a peer copy's far side must be a checked device");
  }
  if (queue < 0 || queue >= backend_->queues()) {
    return Status::Internal(name_ + ": copy queue " + std::to_string(queue) + " out of range");
  }
  if (!external) {
    HOIST_RETURN_IF_ERROR(CheckRange(src, n, "peer copy from device"));
    HOIST_RETURN_IF_ERROR(checked_peer->CheckRange(dst, n, "peer copy to device"));
  }
  return backend_->CopyToPeerAsync(dst, *checked_peer->backend_, src, n, queue);
}

Result<std::unique_ptr<CopyHandle>> CheckedDevice::DecodeExponentsAsync(const GpuExponentTensor& t,
                                                                        bool external) {
  if (t.value_bytes != 2 && t.value_bytes != 4) {
    return Status::Internal(name_ + ": a decode of " + std::to_string(t.value_bytes) +
                            "-byte values");
  }
  if (!external) {
    HOIST_RETURN_IF_ERROR(
        CheckRange(t.out, t.values * static_cast<uint64_t>(t.value_bytes), "decode on device"));
  }
  return backend_->DecodeExponentsAsync(t);
}

bool CheckedDevice::CanReachPeer(const Device& peer) const {
  const auto* checked_peer = dynamic_cast<const CheckedDevice*>(&peer);
  return checked_peer != nullptr && backend_->CanReachPeer(*checked_peer->backend_);
}

Status CheckedDevice::CopyToHost(void* dst, const void* src, uint64_t n, bool external) {
  if (!external) HOIST_RETURN_IF_ERROR(CheckRange(src, n, "copy from device"));
  return backend_->CopyToHost(dst, src, n);
}

bool CheckedDevice::Abandon() { return backend_->Abandon(); }

size_t CheckedDevice::live_device_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_.size();
}

size_t CheckedDevice::live_pinned_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_.size();
}

uint64_t CheckedDevice::live_pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_bytes_;
}

Status WaitForCopy(CopyHandle& copy, double timeout_s) {
  StallClock waited;
  waited.Start(timeout_s);
  return PollUntil([&copy] { return copy.Poll(); }, std::chrono::microseconds(0),
                   [&waited] {
                     if (!waited.Stalled(MonotonicNs())) return Status::Ok();
                     return Status::Stalled("a device copy made no progress for " +
                                            StallSeconds(waited.timeout_s()));
                   });
}

}  // namespace hoist
