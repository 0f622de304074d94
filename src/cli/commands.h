// The subcommands of the hoist tool. Each Register function adds its subcommand to the app
// and returns the function that runs it, which returns the process's exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace hoist::cli {

using Runner = std::function<int()>;

Runner RegisterInspect(CLI::App& app);
Runner RegisterMakeSample(CLI::App& app);
Runner RegisterLoad(CLI::App& app);
Runner RegisterVerify(CLI::App& app);
Runner RegisterBench(CLI::App& app);
Runner RegisterDoctor(CLI::App& app);
Runner RegisterPack(CLI::App& app);
Runner RegisterServe(CLI::App& app);
Runner RegisterAttach(CLI::App& app);

}  // namespace hoist::cli
