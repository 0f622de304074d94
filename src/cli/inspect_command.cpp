#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/render.h"
#include "format/directory_json.h"
#include "format/model.h"

namespace hoist::cli {

Runner RegisterInspect(CLI::App& app) {
  struct Options {
    std::string path;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a model's format, files, metadata and tensors without loading it");
  cmd->add_option("PATH", options->path,
                  "a .gguf or .safetensors file, a model.safetensors.index.json, a directory "
                  "of shards, or the first GGUF split")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object (schema in docs/CLI.md)");
  return [options]() -> int {
    auto dir = ReadModelDirectory(options->path);
    if (!dir.ok()) {
      return ReportFailure(dir.status());
    }
    for (const std::string& w : dir->warnings)
      std::fprintf(stderr, "hoist: warning: %s\n", w.c_str());
    if (options->json) {
      std::cout << DumpJson(DirectoryToJson(dir.value())) << "\n";
    } else {
      std::cout << DirectoryToText(dir.value());
    }
    return kExitOk;
  };
}

}  // namespace hoist::cli
