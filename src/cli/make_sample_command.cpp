#include <cstdio>
#include <memory>
#include <string>

#include "base/units.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "format/sample_model.h"

namespace hoist::cli {

Runner RegisterMakeSample(CLI::App& app) {
  struct Options {
    std::string path;
    std::string size = "64MiB";
    std::string dtypes;
    SampleSpec spec;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "make-sample", "Write a sample model shaped like a transformer, with pseudo-random weights");
  cmd->add_option("PATH", options->path,
                  "the file to write (for --shards: the index or the first GGUF split)")
      ->required();
  CLI::Option* format =
      cmd->add_option("--format", options->spec.format,
                      "gguf or safetensors (default: as PATH's extension says, else gguf)")
          ->check(CLI::IsMember({"gguf", "safetensors"}));
  cmd->add_option("--size", options->size, "approximate total tensor bytes (e.g. 64MiB, 20GiB)")
      ->capture_default_str();
  cmd->add_option("--dtypes", options->dtypes,
                  "comma-separated dtypes for the weight matrices (F16,Q4_K,...)");
  cmd->add_option("--shards", options->spec.shards, "number of files");
  cmd->add_option("--seed", options->spec.seed, "seed of the pseudo-random weights");
  cmd->add_flag("--normal", options->spec.normal_values,
                "F32, F16 and BF16 weights drawn from a normal distribution (std 0.02, as an "
                "initialised LLM's layers) instead of random bytes: what packs as real weights do");
  return [options, format]() -> int {
    // The file's extension says the format; --format may only agree with it.
    const std::string& path = options->path;
    const std::string implied = path.ends_with(".safetensors") || path.ends_with(".json")
                                    ? "safetensors"
                                : path.ends_with(".gguf") ? "gguf"
                                                          : "";
    if (format->count() == 0 && !implied.empty()) options->spec.format = implied;
    if (!implied.empty() && options->spec.format != implied) {
      return ReportFailure(Status::InvalidArgument(
          path + " names a " + implied + " file but --format is " + options->spec.format));
    }
    auto size = ParseByteSize(options->size);
    if (!size.ok()) {
      std::fprintf(stderr, "hoist: %s\n", size.status().message().c_str());
      return kExitFailure;
    }
    options->spec.target_bytes = size.value();
    std::string list = options->dtypes;
    for (size_t start = 0; !list.empty() && start <= list.size();) {
      const size_t comma = list.find(',', start);
      const size_t end = comma == std::string::npos ? list.size() : comma;
      if (end > start) options->spec.dtypes.push_back(list.substr(start, end - start));
      start = end + 1;
    }
    auto dir = WriteSampleModel(options->path, options->spec);
    if (!dir.ok()) {
      return ReportFailure(dir.status());
    }
    std::printf("wrote %s: %zu tensors, %s in %zu file(s)\n", options->path.c_str(),
                dir->tensors.size(), FormatBytes(dir->total_bytes()).c_str(), dir->files.size());
    return kExitOk;
  };
}

}  // namespace hoist::cli
