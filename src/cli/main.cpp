// hoist: load model weights into device memory at the speed of the slowest link.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "base/build_info.h"
#include "base/platform.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/suggest.h"

int main(int argc, char** argv) {
  CLI::App app{
      "hoist loads model weights (GGUF, safetensors, sharded sets) into GPU or host memory\n"
      "at the speed of the machine's slowest link, and never hangs doing it.\n\n"
      "A model is a file, a directory, an index (*.index.json), a GGUF split, or a URL:\n"
      "http(s)://HOST/PATH (a server that answers Range requests), s3://BUCKET/KEY,\n"
      "gs://BUCKET/OBJECT, az://CONTAINER/BLOB, or hf://ORG/NAME[@REVISION]\n"
      "(docs/SOURCES.md).\n\n"
      "Exit codes: 0 ok, 1 other failure, 2 invalid model, 3 stalled, 4 device error,\n"
      "5 verify mismatch, 6 model file changed while read, 128+N cancelled by signal N.",
      "hoist"};
  app.require_subcommand(1);
  // Paths may start with '/', so never read "/x" as an option (CLI11's default on Windows).
  app.allow_windows_style_options(false);
  app.set_version_flag("--version", hoist::BuildDescription());
  std::map<std::string, hoist::cli::Runner> runners;
  runners["inspect"] = hoist::cli::RegisterInspect(app);
  runners["load"] = hoist::cli::RegisterLoad(app);
  runners["verify"] = hoist::cli::RegisterVerify(app);
  runners["make-sample"] = hoist::cli::RegisterMakeSample(app);
  runners["bench"] = hoist::cli::RegisterBench(app);
  runners["doctor"] = hoist::cli::RegisterDoctor(app);
  runners["pack"] = hoist::cli::RegisterPack(app);
  runners["serve"] = hoist::cli::RegisterServe(app);
  runners["attach"] = hoist::cli::RegisterAttach(app);
  std::vector<std::string> args = hoist::CommandLineArguments(argc, argv);
  args.erase(args.begin());
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // A mistyped command or option: say which, and the nearest name, rather than CLI11's
    // "A subcommand is required" or "not expected: host --devcie".
    const std::string suggestion =
        e.get_exit_code() == 0 ? std::string() : hoist::cli::SuggestForParseError(app, args);
    if (!suggestion.empty()) {
      std::fprintf(stderr, "%s\n", suggestion.c_str());
      return hoist::cli::kExitFailure;
    }
    const int code = app.exit(e);
    return code == 0 ? 0 : hoist::cli::kExitFailure;
  }
  int code = hoist::cli::kExitFailure;
  try {
    for (auto& [name, run] : runners) {
      if (app.got_subcommand(name)) code = run();
    }
  } catch (const std::exception& e) {
    // Every failure the code knows of is a Status; this is the net under the ones it does not.
    code = hoist::cli::ReportFailure(
        hoist::Status::Internal(std::string("unexpected failure: ") + e.what()));
  }
  // Output that never reached its destination (a full disk, a closed pipe) is a failure, not
  // a success with nothing to show for it.
  std::cout.flush();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout) {
    const int err = errno;  // 0 when only an earlier write failed
    std::fprintf(stderr, "hoist: cannot write to standard output: %s\n",
                 err != 0 ? std::strerror(err)  // NOLINT(concurrency-mt-unsafe)
                          : "an earlier write failed");
    if (code == hoist::cli::kExitOk) code = hoist::cli::kExitFailure;
  }
  return code;
}
