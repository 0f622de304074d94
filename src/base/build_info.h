// What this build of hoist is: its version, build type and GPU backend, for --version, doctor
// and bug reports.
#pragma once

#include <string>

namespace hoist {

// CMake's project(VERSION), "MAJOR.MINOR.PATCH": the one place the version is written.
const char* Version();
// "Release", "Debug", ... as CMake built it ("unspecified" without a build type).
const char* BuildType();
// The GPU backend compiled in: "CUDA 12.4" (the toolkit built against), "HIP", or "none".
const char* GpuBackend();
// "hoist 0.1.0 (Release build, GPU backend: CUDA 12.4)".
std::string BuildDescription();

}  // namespace hoist
