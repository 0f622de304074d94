#include "api/settings.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "base/platform.h"
#include "io/local_socket.h"

namespace hoist {
namespace {

constexpr double kLargestMib = 1ULL << 30;

Status ReadMib(const char* name, uint64_t& bytes) {
  const std::string value = EnvironmentVariable(name);
  if (value.empty()) return Status::Ok();
  char* end = nullptr;
  const double mib = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !(mib >= 0 && mib <= kLargestMib)) {
    return Status::InvalidArgument(std::string(name) + "='" + value +
                                   "': expected a number of MiB from 0 to " +
                                   std::to_string(1ULL << 30));
  }
  bytes = static_cast<uint64_t>(mib * (1 << 20));
  return Status::Ok();
}

std::string Lowered(std::string value) {
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value;
}

bool IsOn(const std::string& v) { return v == "1" || v == "on" || v == "true" || v == "yes"; }
bool IsOff(const std::string& v) { return v == "0" || v == "off" || v == "false" || v == "no"; }

Status ReadPin(PinMode& pin) {
  const std::string value = Lowered(EnvironmentVariable("HOIST_PIN"));
  if (value.empty() || value == "auto") return Status::Ok();
  if (IsOn(value)) {
    pin = PinMode::kOn;
  } else if (IsOff(value)) {
    pin = PinMode::kOff;
  } else {
    return Status::InvalidArgument("HOIST_PIN='" + value + "': expected on, off or auto");
  }
  return Status::Ok();
}

Status ReadOnOff(const char* name, bool& on) {
  const std::string value = Lowered(EnvironmentVariable(name));
  if (value.empty()) return Status::Ok();
  if (!IsOn(value) && !IsOff(value)) {
    return Status::InvalidArgument(std::string(name) + "='" + value + "': expected on or off");
  }
  on = IsOn(value);
  return Status::Ok();
}

std::string HeldModelsDirectory() {
  const std::string runtime = EnvironmentVariable("XDG_RUNTIME_DIR");
  if (!runtime.empty()) return runtime + "/hoist";
  std::string temp = EnvironmentVariable("TMPDIR");
  if (temp.empty()) temp = "/tmp";
  return temp + "/hoist-" + std::to_string(CurrentUserId());
}

}  // namespace

Result<Settings> ProcessSettings() {
  Settings s;
  HOIST_RETURN_IF_ERROR(ReadMib("HOIST_AHEAD_MIB", s.ahead_bytes));
  HOIST_RETURN_IF_ERROR(ReadMib("HOIST_PINNED_MIB", s.pinned_limit_bytes));
  HOIST_RETURN_IF_ERROR(ReadPin(s.pin));
  HOIST_RETURN_IF_ERROR(ReadOnOff("HOIST_GATHER", s.gather_cached_rows));
  s.held_models_directory = HeldModelsDirectory();
  return s;
}

}  // namespace hoist
