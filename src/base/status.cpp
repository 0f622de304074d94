#include "base/status.h"

#include <cerrno>
#include <cstring>
#include <iterator>

namespace hoist {

namespace {

// Indexed by Code. The exit codes are the values docs/CLI.md promises.
constexpr StatusRow kRows[] = {
    {Code::kOk, 0, "ok"},
    {Code::kInvalidModel, 2, "invalid model"},
    {Code::kIoError, 1, "I/O error"},
    {Code::kNotFound, 1, "not found"},
    {Code::kInvalidArgument, 1, "invalid argument"},
    {Code::kStalled, 3, "stalled"},
    {Code::kDeviceError, 4, "device error"},
    {Code::kVerifyMismatch, 5, "verify mismatch"},
    {Code::kCancelled, 1, "cancelled"},  // 128 + N when signal N stopped it
    {Code::kUnavailable, 1, "unavailable"},
    {Code::kFileChanged, 6, "model changed"},
    {Code::kInternal, 1, "error"},
};
static_assert(std::size(kRows) == static_cast<size_t>(Code::kInternal) + 1);

constexpr bool RowsInCodeOrder() {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    if (static_cast<size_t>(kRows[i].code) != i) return false;
  }
  return true;
}
static_assert(RowsInCodeOrder());

}  // namespace

const StatusRow& RowOf(Code code) {
  const auto i = static_cast<size_t>(code);
  return i < std::size(kRows) ? kRows[i] : kRows[static_cast<size_t>(Code::kInternal)];
}

std::string_view CodeName(Code code) { return RowOf(code).name; }

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
