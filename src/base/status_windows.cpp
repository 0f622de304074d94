// Windows error codes → Status.
#include <windows.h>

#include <string>

#include "base/status.h"

namespace hoist {

Status WindowsErrorStatus(uint32_t err, std::string_view what, std::string_view path,
                          std::optional<uint64_t> byte_offset) {
  std::string message(path);
  message.append(": ").append(what);
  if (byte_offset) message.append(" at byte ").append(std::to_string(*byte_offset));
  char text[512] = {};
  const DWORD n = ::FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
                                   nullptr, err, 0, text, sizeof(text), nullptr);
  std::string reason(text, n);
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == '\r' ||
                             reason.back() == ' ' || reason.back() == '.')) {
    reason.pop_back();
  }
  if (reason.empty()) reason = "Windows error";
  message.append(": ").append(reason).append(" (error ").append(std::to_string(err)).append(")");
  const bool not_found = err == ERROR_FILE_NOT_FOUND || err == ERROR_PATH_NOT_FOUND;
  return {not_found ? Code::kNotFound : Code::kIoError, std::move(message)};
}

}  // namespace hoist
