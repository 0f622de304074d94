// Status and Result<T>: the one error model of hoist. Every fallible call returns one of these;
// no exception crosses a module boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hoist {

// What kind of failure. StatusRow (below) gives each its C API status, its name and the
// command-line tool's exit code.
enum class Code : uint8_t {
  kOk = 0,
  kInvalidModel,     // the model's bytes break a rule of their format
  kIoError,          // a read, write or open failed
  kNotFound,         // a file or tensor that was named does not exist
  kInvalidArgument,  // the caller asked for something impossible
  kStalled,          // a stage made no progress within its deadline
  kDeviceError,      // the device reported an error or ran out of memory
  kVerifyMismatch,   // bytes on the device differ from the file's
  kCancelled,        // the caller (or a signal) cancelled the work
  kUnavailable,      // the device or feature is not present on this machine
  kFileChanged,      // a model file was replaced or written to after it was opened
  kInternal,         // a broken invariant inside hoist
};

// One row per Code: the name every front end shows (hoist_status_name, Python's
// HoistError.status) and the command-line tool's exit code (kinds without one of their own share
// 1). The C API maps each Code to its hoist_status (kCStatuses in api/c_api.cpp).
struct StatusRow {
  Code code;
  int exit_code;
  std::string_view name;
};
const StatusRow& RowOf(Code code);

std::string_view CodeName(Code code);  // RowOf(code).name

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidModel(std::string_view path, uint64_t byte_offset, std::string_view rule);
  static Status IoError(std::string message) { return {Code::kIoError, std::move(message)}; }
  static Status NotFound(std::string message) { return {Code::kNotFound, std::move(message)}; }
  static Status InvalidArgument(std::string message) {
    return {Code::kInvalidArgument, std::move(message)};
  }
  static Status Stalled(std::string message) { return {Code::kStalled, std::move(message)}; }
  static Status DeviceError(std::string message) {
    return {Code::kDeviceError, std::move(message)};
  }
  static Status VerifyMismatch(std::string message) {
    return {Code::kVerifyMismatch, std::move(message)};
  }
  static Status Cancelled(std::string message) { return {Code::kCancelled, std::move(message)}; }
  static Status Unavailable(std::string message) {
    return {Code::kUnavailable, std::move(message)};
  }
  static Status FileChanged(std::string message) {
    return {Code::kFileChanged, std::move(message)};
  }
  static Status Internal(std::string message) { return {Code::kInternal, std::move(message)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "Code: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "prefix: message"; OK stays OK.
  Status WithContext(std::string_view prefix) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Converts an errno value into a Status, naming what failed and where. The only place errno
// becomes a Status; ENOENT maps to kNotFound, everything else to kIoError.
Status ErrnoStatus(int err, std::string_view what, std::string_view path,
                   std::optional<uint64_t> byte_offset = std::nullopt);
#ifdef _WIN32
// The same for a Windows error code (GetLastError()); the only place one becomes a Status
// (status_windows.cpp). File and path not found map to kNotFound.
Status WindowsErrorStatus(uint32_t err, std::string_view what, std::string_view path,
                          std::optional<uint64_t> byte_offset = std::nullopt);
#endif

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : value_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(value_).ok()) value_ = Status::Internal("Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(value_); }
  // REQUIRES: !ok()
  const Status& status() const { return std::get<Status>(value_); }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace hoist

#define HOIST_CONCAT_INNER(a, b) a##b
#define HOIST_CONCAT(a, b) HOIST_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define HOIST_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::hoist::Status hoist_status_ = (expr);        \
    if (!hoist_status_.ok()) return hoist_status_; \
  } while (0)

// Declares `lhs` from a Result, or returns its status from the enclosing function.
#define HOIST_ASSIGN_OR_RETURN(lhs, expr) \
  HOIST_ASSIGN_OR_RETURN_IMPL(HOIST_CONCAT(hoist_result_, __LINE__), lhs, expr)
#define HOIST_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
