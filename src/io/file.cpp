#include "io/file.h"

#include <string>

#include "base/units.h"

namespace hoist {

Status File::ReadAtLeast(uint64_t offset, void* dst, size_t need, size_t ask) {
  constexpr int kMaxConsecutiveInterrupts = 10000;
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  int interrupts = 0;
  while (done < need) {
    HOIST_ASSIGN_OR_RETURN(RawRead got, ReadSome(offset + done, out + done, ask - done));
    if (got.interrupted) {
      if (++interrupts > kMaxConsecutiveInterrupts) {
        return Status::IoError(path() + ": read interrupted " +
                               std::to_string(kMaxConsecutiveInterrupts) +
                               " times in a row at byte " + std::to_string(offset + done));
      }
      continue;
    }
    interrupts = 0;
    if (got.bytes == 0) {
      return Status::IoError(path() + ": unexpected end of file at byte " +
                             std::to_string(offset + done) + " (" + std::to_string(need - done) +
                             " more bytes expected)");
    }
    if (got.bytes > ask - done) {
      return Status::Internal(path() + ": read returned more bytes than asked");
    }
    // A direct read must go on at an aligned offset.
    if (direct() && got.bytes % direct_alignment() != 0 && done + got.bytes < need) {
      return Status::IoError(path() + ": short direct read at byte " +
                             std::to_string(offset + done));
    }
    done += got.bytes;
  }
  return Status::Ok();
}

std::string DescribeFileChange(const FileIdentity& was, const FileIdentity& now) {
  if (!was.known || !now.known) return {};
  if (was.device != now.device || was.inode != now.inode) return "replaced by another file";
  if (was.size != now.size) {
    return "written to (its size went from " + std::to_string(was.size) + " to " +
           std::to_string(now.size) + " bytes)";
  }
  if (was.modified_ns != now.modified_ns) {
    return "written to (its modification time changed)";
  }
  if (was.version != now.version) {
    return "replaced (its version went from " + (was.version.empty() ? "none" : was.version) +
           " to " + (now.version.empty() ? "none" : now.version) + ")";
  }
  return {};
}

Result<unsigned char*> File::ReadCovering(uint64_t offset, unsigned char* dst, size_t n) {
  if (!direct()) {
    HOIST_RETURN_IF_ERROR(ReadExact(offset, dst, n));
    return dst;
  }
  const uint64_t a = direct_alignment();
  const uint64_t begin = offset / a * a;
  const uint64_t end = AlignUp(offset + n, a);
  HOIST_RETURN_IF_ERROR(ReadAtLeast(begin, dst, offset + n - begin, end - begin));
  return dst + (offset - begin);
}

}  // namespace hoist
