// What hoist reads from the environment, here only: the knobs a user sets without changing the
// caller's code.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace hoist {

enum class PinMode : uint8_t {
  kAuto,  // pinned when a GPU is present
  kOn,
  kOff,
};

struct Settings {
  // HOIST_AHEAD_MIB: what a consumer-ordered reader reads ahead of its requests.
  uint64_t ahead_bytes = 1024ULL << 20;
  // HOIST_PINNED_MIB: what the host tensors handed to callers may keep pinned at once; the
  // pinned slab pool takes it once, when the process's first pinned reader opens.
  uint64_t pinned_limit_bytes = 8192ULL << 20;
  // HOIST_PIN=on|off|auto: whether host tensors handed to callers are pinned.
  PinMode pin = PinMode::kAuto;
  // HOIST_GATHER=on|off: whether a column slice whose rows are all in the page cache has its
  // columns copied out of a mapping of the file (off: never map a file, and so never install
  // the SIGBUS guard's handler, for a process whose own runtime must own SIGBUS; whole rows are
  // read instead).
  bool gather_cached_rows = true;
  // Where models held for other processes listen (hoist serve): $XDG_RUNTIME_DIR/hoist, else
  // hoist-UID in TMPDIR (else /tmp).
  std::string held_models_directory;
};

// The settings as the environment gives them now (read at each call: a reader opened after a
// change sees it); kInvalidArgument naming the variable and what it takes when one is set to
// something else.
Result<Settings> ProcessSettings();

}  // namespace hoist
