#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace hoist {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidModel:
      return "invalid model";
    case Code::kIoError:
      return "I/O error";
    case Code::kNotFound:
      return "not found";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kStalled:
      return "stalled";
    case Code::kDeviceError:
      return "device error";
    case Code::kVerifyMismatch:
      return "verify mismatch";
    case Code::kCancelled:
      return "cancelled";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kFileChanged:
      return "model changed";
    case Code::kInternal:
      return "internal error";
  }
  return "unknown";
}

Status Status::InvalidModel(std::string_view path, uint64_t byte_offset, std::string_view rule) {
  std::string message;
  message.reserve(path.size() + rule.size() + 32);
  message.append(path).append(": ").append(rule).append(" at byte ");
  message.append(std::to_string(byte_offset));
  return {Code::kInvalidModel, std::move(message)};
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  out.append(": ").append(message_);
  return out;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string message(prefix);
  message.append(": ").append(message_);
  return {code_, std::move(message)};
}

Status ErrnoStatus(int err, std::string_view what, std::string_view path,
                   std::optional<uint64_t> byte_offset) {
  std::string message(path);
  message.append(": ").append(what);
  if (byte_offset) message.append(" at byte ").append(std::to_string(*byte_offset));
  message.append(": ").append(std::strerror(err));  // NOLINT(concurrency-mt-unsafe)
  return {err == ENOENT ? Code::kNotFound : Code::kIoError, std::move(message)};
}

}  // namespace hoist
