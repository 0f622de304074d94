#include "io/fault_injection_file.h"

#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

namespace hoist {

Result<RawRead> FaultInjectionFile::ReadSome(uint64_t offset, void* dst, size_t n) {
  FaultGate& gate = *plan_.gate;
  {
    std::lock_guard<std::mutex> lock(gate.mutex_);
    ++gate.in_flight_;
  }
  Result<RawRead> read = Read(offset, dst, n);
  std::lock_guard<std::mutex> lock(gate.mutex_);
  --gate.in_flight_;
  gate.changed_.notify_all();
  return read;
}

void FaultGate::Release() {
  std::lock_guard<std::mutex> lock(mutex_);
  released_ = true;
  changed_.notify_all();
}

void FaultGate::ReleaseAndWaitForReads() {
  std::unique_lock<std::mutex> lock(mutex_);
  released_ = true;
  changed_.notify_all();
  changed_.wait(lock, [this] { return in_flight_ == 0; });
}

Result<RawRead> FaultInjectionFile::Read(uint64_t offset, void* dst, size_t n) {
  const uint64_t call = reads_.fetch_add(1) + 1;
  if (plan_.delay_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(plan_.delay_us));
  if (plan_.interrupt_every != 0 && call % plan_.interrupt_every == 0) return RawRead{0, true};
  const uint64_t end = offset + n;
  if (plan_.hang_at >= offset && plan_.hang_at < end) {
    FaultGate& gate = *plan_.gate;
    std::unique_lock<std::mutex> lock(gate.mutex_);
    gate.changed_.wait(lock, [&gate] { return gate.released_; });
  }
  if (plan_.eio_at >= offset && plan_.eio_at < end) {
    return ErrnoStatus(EIO, "read failed", path(), plan_.eio_at);
  }
  if (offset >= plan_.truncate_at) return RawRead{0, false};
  if (plan_.truncate_at < end) n = static_cast<size_t>(plan_.truncate_at - offset);
  if (plan_.short_read_max != 0 && n > plan_.short_read_max) {
    n = static_cast<size_t>(plan_.short_read_max);
  }
  return target_->ReadSome(offset, dst, n);
}

Result<std::unique_ptr<File>> FaultInjectionStorage::Open(const std::string& name,
                                                          const OpenOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> file, target_->Open(name, options));
  auto faulty = std::make_unique<FaultInjectionFile>(std::move(file), plan_);
  return std::unique_ptr<File>(std::move(faulty));
}

}  // namespace hoist
