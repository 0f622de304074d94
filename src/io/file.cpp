#include "io/file.h"

#include <string>

namespace hoist {

Status File::ReadExact(uint64_t offset, void* dst, size_t n) {
  constexpr int kMaxConsecutiveInterrupts = 10000;
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  int interrupts = 0;
  while (done < n) {
    HOIST_ASSIGN_OR_RETURN(RawRead got, ReadSome(offset + done, out + done, n - done));
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
                             std::to_string(offset + done) + " (" + std::to_string(n - done) +
                             " more bytes expected)");
    }
    if (got.bytes > n - done) {
      return Status::Internal(path() + ": read returned more bytes than asked");
    }
    done += got.bytes;
  }
  return Status::Ok();
}

}  // namespace hoist
