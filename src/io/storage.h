// Where a model's bytes come from: a named store of files (LevelDB's Env is the model).
// Everything that reads a model (opening it, loading, verifying, the bench's measurements) goes
// through a Storage, so a new byte source is one new implementation of this interface.
// LocalStorage is the machine's file system and the only code that calls it; MemoryStorage
// serves tests and fuzzers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/file.h"
#include "io/shared_bytes.h"

namespace hoist {

enum class EntryType : uint8_t {
  kFile,       // a regular file: Open reads it
  kDirectory,  // ListFiles lists it
  kOther,      // a FIFO, a device, a socket: Open refuses it
};

// What a source can do, for the loader's choices.
struct StorageCapabilities {
  bool direct_io = false;     // Open honours OpenOptions::direct (reads that bypass a cache)
  bool read_advice = false;   // File::Advise reaches something that acts on it
  bool random_access = true;  // a read at any offset costs what a read in order costs
  // Reads in flight that the source serves best; 0: no preference (chosen from the machine).
  int preferred_reads_in_flight = 0;
};

// What a source's requests did, for a load's report: counts since the source was made (a
// caller takes the difference across a load). A source without requests counts none.
struct SourceCounters {
  uint64_t requests = 0;
  uint64_t retries = 0;
  uint64_t bytes = 0;  // received
};

// Names are the source's own ("models/a.safetensors"); Parent and Join are the only ways the
// rest of hoist takes them apart or builds them. Thread safety: every method may be called
// from any thread, concurrently.
class Storage {
 public:
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  virtual ~Storage() = default;

  virtual std::string description() const = 0;  // "local file system", "memory"
  virtual StorageCapabilities capabilities() const = 0;
  virtual SourceCounters counters() const { return {}; }

  // Opens a regular file for reading. Anything else is refused at once, without blocking:
  // kInvalidArgument; nothing by that name: kNotFound.
  virtual Result<std::unique_ptr<File>> Open(const std::string& name,
                                             const OpenOptions& options) = 0;
  // What `name` is: kNotFound when nothing has that name, kIoError when it cannot be told.
  virtual Result<EntryType> Type(const std::string& name) = 0;
  // The names of the regular files directly inside directory `dir`, each as Join(dir, file),
  // sorted.
  virtual Result<std::vector<std::string>> ListFiles(const std::string& dir) = 0;
  // The name of file `file` inside directory `dir` when it is there and stays there (a link
  // that leads out of `dir` is kInvalidArgument); kNotFound when it is not there. `file` is a
  // plain name, which the caller has checked.
  virtual Result<std::string> ResolveInside(const std::string& dir, const std::string& file) = 0;

  // The directory that holds `name` ("." for a bare name) and the name of `file` inside `dir`.
  virtual std::string Parent(const std::string& name) const = 0;
  virtual std::string Join(const std::string& dir, const std::string& file) const = 0;
};

// The whole of a small file of `storage` (a ref, a listing, a credentials file): kIoError
// naming it when it holds more than `max_bytes`.
Result<std::string> ReadSmallFile(Storage& storage, const std::string& name,
                                  uint64_t max_bytes = uint64_t{16} << 20);

// The machine's file system (POSIX or Windows files). One object serves the whole process.
std::shared_ptr<Storage> LocalStorage();

// Files held in memory under slash-separated names; a directory is any prefix that ends at a
// slash. Files added after a model was opened are seen by later opens.
class MemoryStorage final : public Storage {
 public:
  // Adds or replaces a file.
  void Add(const std::string& name, std::vector<unsigned char> bytes);
  // The same over bytes held elsewhere (SharedBytes' owner keeps them alive), without a copy.
  void Add(const std::string& name, SharedBytes bytes);

  std::string description() const override { return "memory"; }
  StorageCapabilities capabilities() const override { return {}; }
  Result<std::unique_ptr<File>> Open(const std::string& name, const OpenOptions& options) override;
  Result<EntryType> Type(const std::string& name) override;
  Result<std::vector<std::string>> ListFiles(const std::string& dir) override;
  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override;
  std::string Parent(const std::string& name) const override;
  std::string Join(const std::string& dir, const std::string& file) const override;

 private:
  Result<SharedBytes> Find(const std::string& name) const;

  mutable std::mutex mutex_;
  std::map<std::string, SharedBytes> files_;
};

}  // namespace hoist
