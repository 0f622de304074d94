// A File that forwards to another and injects the faults real storage produces: short reads,
// EINTR, EIO at a chosen offset, truncation, slow or hanging reads. Tests wrap real files
// in it to prove that every reader of hoist survives or reports each fault.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "io/file.h"

namespace hoist {

struct FaultPlan {
  uint64_t short_read_max = 0;        // when non-zero, no read returns more than this many bytes
  uint32_t interrupt_every = 0;       // when non-zero, every Nth read is interrupted (EINTR)
  uint64_t eio_at = UINT64_MAX;       // a read covering this byte fails with EIO
  uint64_t truncate_at = UINT64_MAX;  // reads at or past this byte return end of file
  uint32_t delay_us = 0;              // every read sleeps this long first
  uint64_t hang_at = UINT64_MAX;      // a read covering this byte sleeps until Release()
};

class FaultInjectionFile final : public File {
 public:
  // Thread safety: as File. Owns target.
  FaultInjectionFile(std::unique_ptr<File> target, FaultPlan plan)
      : target_(std::move(target)), plan_(plan) {}

  const std::string& path() const override { return target_->path(); }
  uint64_t size() const override { return target_->size(); }
  bool direct() const override { return target_->direct(); }
  uint64_t direct_alignment() const override { return target_->direct_alignment(); }
  FileIdentity identity() const override { return target_->identity(); }
  Result<FileIdentity> CurrentIdentity() override { return target_->CurrentIdentity(); }
  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override;
  Status Advise(AccessHint hint, uint64_t offset, uint64_t length) override {
    return target_->Advise(hint, offset, length);
  }

  // Lets reads held at hang_at go on.
  void Release() { released_.store(true); }
  uint64_t reads() const { return reads_.load(); }

 private:
  std::unique_ptr<File> target_;
  FaultPlan plan_;
  std::atomic<uint64_t> reads_{0};
  std::atomic<bool> released_{false};
};

}  // namespace hoist
