// A File that forwards to another and injects the faults real storage produces: short reads,
// EINTR, EIO at a chosen offset, truncation, slow or hanging reads; and a Storage whose files
// all do. Tests wrap real files in them to prove that every reader of hoist survives or
// reports each fault.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/file.h"
#include "io/storage.h"

namespace hoist {

// Where reads held at hang_at wait. Shared by the files of a plan and whoever releases them,
// and outliving the files: a load left behind may destroy its files as soon as their reads end.
class FaultGate {
 public:
  // Lets every held read go on.
  void Release();
  // Release, then waits until no read is in any file of the gate (the ones let go have written
  // their bytes and returned).
  void ReleaseAndWaitForReads();

 private:
  friend class FaultInjectionFile;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool released_ = false;  // guarded by mutex_
  int in_flight_ = 0;      // guarded by mutex_
};

struct FaultPlan {
  uint64_t short_read_max = 0;        // when non-zero, no read returns more than this many bytes
  uint32_t interrupt_every = 0;       // when non-zero, every Nth read is interrupted (EINTR)
  uint64_t eio_at = UINT64_MAX;       // a read covering this byte fails with EIO
  uint64_t truncate_at = UINT64_MAX;  // reads at or past this byte return end of file
  uint32_t delay_us = 0;              // every read sleeps this long first
  uint64_t hang_at = UINT64_MAX;      // a read covering this byte waits until gate->Release()
  std::shared_ptr<FaultGate> gate = std::make_shared<FaultGate>();
};

class FaultInjectionFile final : public File {
 public:
  // Thread safety: as File. Owns target.
  FaultInjectionFile(std::unique_ptr<File> target, FaultPlan plan)
      : target_(std::move(target)), plan_(std::move(plan)) {}

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

  uint64_t reads() const { return reads_.load(); }

 private:
  Result<RawRead> Read(uint64_t offset, void* dst, size_t n);

  std::unique_ptr<File> target_;
  FaultPlan plan_;
  std::atomic<uint64_t> reads_{0};
};

// Forwards to `target`, wrapping every file it opens in a FaultInjectionFile with `plan`.
class FaultInjectionStorage final : public Storage {
 public:
  FaultInjectionStorage(std::shared_ptr<Storage> target, FaultPlan plan)
      : target_(std::move(target)), plan_(std::move(plan)) {}

  std::string description() const override { return target_->description() + " with faults"; }
  StorageCapabilities capabilities() const override { return target_->capabilities(); }
  Result<std::unique_ptr<File>> Open(const std::string& name, const OpenOptions& options) override;
  Result<EntryType> Type(const std::string& name) override { return target_->Type(name); }
  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    return target_->ListFiles(dir);
  }
  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override {
    return target_->ResolveInside(dir, file);
  }
  std::string Parent(const std::string& name) const override { return target_->Parent(name); }
  std::string Join(const std::string& dir, const std::string& file) const override {
    return target_->Join(dir, file);
  }

 private:
  std::shared_ptr<Storage> target_;
  FaultPlan plan_;
};

}  // namespace hoist
