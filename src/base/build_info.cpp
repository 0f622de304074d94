#include "base/build_info.h"

namespace hoist {

// The definitions come from src/CMakeLists.txt.
const char* Version() { return HOIST_VERSION; }
const char* BuildType() { return HOIST_BUILD_TYPE[0] == '\0' ? "unspecified" : HOIST_BUILD_TYPE; }
const char* GpuBackend() { return HOIST_GPU_BACKEND; }

std::string BuildDescription() {
  return std::string("hoist ") + Version() + " (" + BuildType() +
         " build, GPU backend: " + GpuBackend() + ")";
}

}  // namespace hoist
