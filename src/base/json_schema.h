// The version of the JSON documents hoist prints (--json of every command, the C API's report):
// each carries it as "schema_version". Keys are snake_case; sizes are numbers of bytes, times
// numbers of seconds (_s), rates numbers of GB/s (_gbps). Raised when a key changes its meaning
// or goes away; new keys do not raise it. docs/CLI.md lists the keys.
#pragma once

namespace hoist {

inline constexpr int kJsonSchemaVersion = 1;

}  // namespace hoist
