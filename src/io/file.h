// Positional, 64-bit-offset file access. One implementation file per platform
// (file_posix.cpp, file_windows.cpp), chosen by CMake; the read loop that every platform
// shares lives in file.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace hoist {

struct OpenOptions {
  // Bypass the page cache (O_DIRECT, FILE_FLAG_NO_BUFFERING). Reads must then use offsets,
  // lengths and buffer addresses that are multiples of File::direct_alignment().
  bool direct = false;
};

enum class AccessHint : uint8_t {
  kSequential,  // the range will be read front to back
  kWillNeed,    // the range will be read soon
  kDropCache,   // the range's cached pages are no longer needed
};

// What a file was when it was opened, to tell later whether the name now leads to another file
// (replaced by a rename) or the file was written to. Windows: volume serial and file index.
struct FileIdentity {
  bool known = false;  // false for sources without one (memory); such files are never compared
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  // Last write, nanoseconds since the epoch. (Not the status-change time: renaming another file
  // over this one changes that, and the bytes read through an open handle stay the same.)
  int64_t modified_ns = 0;
  // A remote object's version as its server names it (an ETag, else Last-Modified); empty for a
  // local file, or a server that names none.
  std::string version;
};
// How `now` differs from `was`, in words ("replaced by another file", "written to: ..."), or
// an empty string when they are the same file, unchanged, or either is unknown.
std::string DescribeFileChange(const FileIdentity& was, const FileIdentity& now);

// One call's outcome of File::ReadSome.
struct RawRead {
  size_t bytes = 0;          // 0 with !interrupted means end of file
  bool interrupted = false;  // EINTR or the platform's equivalent: nothing was read, try again
};

// Whether `rows` rows of `width` bytes, `pitch` bytes apart from offset, lie inside the first
// `size` bytes of a file (false for none, or for rows wider than their pitch).
inline bool RowsInside(uint64_t size, uint64_t offset, uint64_t width, uint64_t pitch,
                       uint64_t rows) {
  if (rows == 0 || width == 0 || offset > size || width > size - offset) return false;
  if (rows == 1) return true;
  return width <= pitch && rows - 1 <= (size - offset - width) / pitch;
}

// A file opened for reading. Thread safety: every method may be called concurrently; reads
// at different offsets do not interfere.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  virtual ~File() = default;

  virtual const std::string& path() const = 0;
  // Size in bytes when the file was opened.
  virtual uint64_t size() const = 0;
  virtual bool direct() const { return false; }
  // Alignment that direct reads need, in bytes (1 when not direct).
  virtual uint64_t direct_alignment() const { return 1; }
  // What the file was when opened, and what it is now (asked of the open handle, so a name
  // replaced by a rename does not change it; a write to the file does).
  virtual FileIdentity identity() const { return {}; }
  virtual Result<FileIdentity> CurrentIdentity() { return FileIdentity{}; }

  // One positional read of at most n bytes at offset; may return fewer bytes than asked.
  virtual Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) = 0;
  // A hint to the operating system; a platform without the hint returns OK and does nothing.
  virtual Status Advise(AccessHint hint, uint64_t offset, uint64_t length) = 0;
  // Copies `width` bytes of each of `rows` rows, `pitch` bytes apart from offset, packed into
  // dst, when every page they lie in is in memory already (the page cache) and the platform can
  // copy them out without reading the rest of the rows: for half of each row, half the memory
  // traffic of reading whole rows. False when it cannot, or stopped (a page not cached, the
  // file changed under it); dst may then be partly written, and the caller reads whole rows
  // instead, which reports any error.
  virtual bool GatherCachedRows(uint64_t /*offset*/, uint64_t /*width*/, uint64_t /*pitch*/,
                                uint64_t /*rows*/, unsigned char* /*dst*/) {
    return false;
  }

  // Ends the reads in progress and refuses new ones (kCancelled), for a load that stops: a
  // source whose reads can hang (a network) returns from them promptly. A local file's reads
  // cannot be interrupted and return when the disk answers. Thread safe.
  virtual void Abort() {}
  // Reads exactly n bytes at offset, looping over short and interrupted reads. A read that
  // returns 0 bytes before n are read is an error naming the file and the offset.
  Status ReadExact(uint64_t offset, void* dst, size_t n) { return ReadAtLeast(offset, dst, n, n); }
  // Reads the bytes [offset, offset + n) into dst. On a direct file it reads the whole
  // aligned blocks that cover them (dst needs room for n + 2 * direct_alignment() - 2 bytes
  // and must be aligned) and the last block of the file may come back short. Returns where
  // file byte `offset` landed in dst.
  Result<unsigned char*> ReadCovering(uint64_t offset, unsigned char* dst, size_t n);

 private:
  // The one read loop: at least `need` bytes, asking for up to `ask`, at offset.
  Status ReadAtLeast(uint64_t offset, void* dst, size_t need, size_t ask);
};

// A file opened for writing (the format writers and tests use it). Not thread safe.
class WritableFile {
 public:
  WritableFile() = default;
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;
  virtual ~WritableFile() = default;

  virtual const std::string& path() const = 0;
  // Writes all n bytes at offset, looping over short writes.
  virtual Status WriteAt(uint64_t offset, const void* src, size_t n) = 0;
  // Sets the file's size; growing it leaves a hole that reads as zeros (sparse where the
  // file system allows).
  virtual Status Truncate(uint64_t size) = 0;
  virtual Status Close() = 0;
};

// A whole file mapped read-only into memory. Only the reference strategies of `hoist bench`
// use it (llama.cpp's mmap path); the load engine never hands mapped pages to a device.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  virtual ~MappedFile() = default;
  virtual const unsigned char* data() const = 0;
  virtual uint64_t size() const = 0;
};

// Opens a regular file; anything else (a FIFO, a device, a socket, a directory) is refused at
// once, without blocking, as kInvalidArgument.
Result<std::unique_ptr<File>> OpenFile(const std::string& path, const OpenOptions& options = {});
Result<std::unique_ptr<MappedFile>> MapFile(const std::string& path);
// Creates or truncates path. With `exclusive`, creates it only where nothing of that name is
// (no file, and no link, which is never followed): an error otherwise.
Result<std::unique_ptr<WritableFile>> CreateWritableFile(const std::string& path,
                                                         bool exclusive = false);

// Output written whole or not at all: the bytes go to a new file beside `target` (its name in
// *temporary, created exclusively), then ReplaceWith renames it over the target. A target that
// exists and is not a regular file (a device node, a FIFO, a directory) is refused up front
// with kInvalidArgument naming what it is, so nothing is ever renamed over one; a target that
// is a link is replaced where it leads.
Result<std::unique_ptr<WritableFile>> CreateFileBeside(const std::string& target,
                                                       std::string* temporary);
Status ReplaceWith(const std::string& temporary, const std::string& target);

}  // namespace hoist
