// Feeds arbitrary option values to the two places users hand hoist numbers: the command line's
// load settings (parsed by CLI11, translated by ToLoadOptions) and the C API's
// hoist_load_options (checked, then a real load of a small model on host or sim). Either may
// refuse; neither may crash, abort, throw or let a value past its bound.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/load_flags.h"
#include "device/sim_device.h"
#include "format/sample_model.h"
#include "hoist/hoist.h"
#include "pipeline/loader.h"

namespace {

hoist_model* g_model = nullptr;

void CheckInBounds(const hoist::LoadOptions& o) {
  if (!hoist::CheckLoadOptions(o).ok()) std::abort();  // the translation let a bad value by
}

void FuzzCommandLine(FuzzedDataProvider& in) {
  std::vector<std::string> args;
  while (in.remaining_bytes() > 0 && args.size() < 12) {
    args.push_back(in.ConsumeRandomLengthString(48));
  }
  CLI::App app;
  hoist::cli::LoadSettingFlags flags;
  std::string device = "auto";
  app.add_option("--device", device);
  hoist::cli::AddLoadSettingFlags(&app, flags, true);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last to first
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
    return;  // refused by the parser, with a message: fine
  }
  auto options = hoist::cli::ToLoadOptions(flags);
  if (options.ok()) CheckInBounds(*options);
  if (device.rfind("sim:", 0) == 0) (void)hoist::ParseSimOptions(device.substr(4));
}

void FuzzCApi(FuzzedDataProvider& in) {
  hoist_load_options options;
  hoist_load_options_init(&options);
  static const char* const kDevices[] = {"host",
                                         "sim",
                                         "sim:engines=3",
                                         "sim:fail_copy_after=1KiB",
                                         "sim:pinned_limit=0,reject_pageable=1",
                                         "tpu:0",
                                         ""};
  options.device = kDevices[in.ConsumeIntegralInRange<size_t>(0, std::size(kDevices) - 1)];
  options.threads = in.ConsumeIntegral<int>();
  options.chunk_bytes = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                         : in.ConsumeIntegralInRange<uint64_t>(0, 1 << 24);
  options.staging_bytes = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                           : in.ConsumeIntegralInRange<uint64_t>(0, 1 << 26);
  options.stall_timeout_s = in.ConsumeFloatingPoint<double>();
  options.checksum = in.ConsumeIntegral<int>();
  options.direct_io = in.ConsumeIntegral<int>();
  // Names: real ones, unknown ones and NULLs, with a count that fits the array (a count past
  // the caller's array is the caller's contract, out of reach of any check).
  const size_t count = in.ConsumeIntegralInRange<size_t>(0, 3);
  std::vector<std::string> storage;
  storage.reserve(count);  // names point into it: it must not move
  std::vector<const char*> names;
  for (size_t i = 0; i < count; ++i) {
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0:
        names.push_back("blk.0.attn_q.weight");
        break;
      case 1:
        storage.push_back(in.ConsumeRandomLengthString(32));
        names.push_back(storage.back().c_str());
        break;
      default:
        names.push_back(nullptr);
    }
  }
  if (in.ConsumeBool()) {
    options.names = names.data();
    options.name_count = names.size();
  } else {
    options.name_count = in.ConsumeIntegralInRange<size_t>(0, 2);  // names NULL: must be 0
  }
  // Valid but slow settings are cut down so that each input stays a few milliseconds: many
  // threads and a large staging budget are correct, just not what this target is for.
  if (options.threads > 0 && options.threads <= hoist::kMaxReaderThreads) {
    options.threads = 1 + options.threads % 8;
  }
  if (options.staging_bytes <= hoist::MaxStagingBytes()) options.staging_bytes %= 64ull << 20;
  if (options.stall_timeout_s > 0 && options.stall_timeout_s < 1) options.stall_timeout_s = 1;
  hoist_loaded* loaded = nullptr;
  const hoist_status status = hoist_load(g_model, &options, &loaded);
  if ((status == HOIST_OK) != (loaded != nullptr)) std::abort();
  hoist_loaded_free(loaded);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const std::string path = "/tmp/hoist-options-fuzzer-model.gguf";
  hoist::SampleSpec spec;
  spec.target_bytes = 256 << 10;
  if (!hoist::WriteSampleModel(path, spec).ok()) std::abort();
  if (hoist_model_open(path.c_str(), &g_model) != HOIST_OK) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeBool()) {
    FuzzCommandLine(in);
  } else {
    FuzzCApi(in);
  }
  return 0;
}
