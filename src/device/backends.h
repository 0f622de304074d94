// The device backends: one row per kind of device, the only place that knows which kinds this
// build has. A new kind is a directory (or a file) with its Device and one row in
// backends.cpp's table; a test or a host program can add its own row with
// RegisterDeviceBackend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/device.h"

namespace hoist {

struct DeviceBackend {
  // The names it answers to, each alone or followed by ":" and what the backend reads after
  // the colon ("sim:bandwidth=2GB/s", "cuda:1").
  std::vector<std::string> prefixes;
  // Opens a device: `prefix` is the one the name used, `rest` what followed the colon ("" for
  // none).
  std::function<Result<std::unique_ptr<Device>>(const std::string& prefix, const std::string& rest)>
      open;
  // The devices it can open on this machine, nothing opened (doctor, ListDevices); may be empty.
  std::function<std::vector<DeviceInfo>()> list;
  // What "auto" picks: the name of its first usable device, or "" (host is the last resort).
  std::function<std::string()> preferred;
  // Why it has no usable device on this machine, in words ("cuda: no usable GPU (...)"), or ""
  // when it has one or opens devices only when named (doctor and "auto" say it).
  std::function<std::string()> unusable;
};

// Adds a backend after the built-in ones. Thread safe; a prefix a built-in row answers to
// still opens the built-in device.
void RegisterDeviceBackend(DeviceBackend backend);

// The rows, built-in first, then the registered ones in order.
std::vector<DeviceBackend> DeviceBackends();

}  // namespace hoist
