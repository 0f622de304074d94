// `hoist serve` (hold a model for other processes, or list what is held) and `hoist attach`
// (take a held model: time it, check it against its file, keep it a while).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/held_model.h"
#include "base/json_schema.h"
#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/device_flags.h"
#include "cli/exit_codes.h"
#include "cli/load_flags.h"
#include "format/directory_json.h"
#include "io/http_storage.h"
#include "pipeline/loader.h"

namespace hoist::cli {
namespace {

struct ServeFlags {
  std::string model;
  std::string name;
  std::string socket;
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  bool list = false;
  bool json = false;
  DeviceFlags devices;
  LoadSettingFlags settings;
};

std::string DevicesText(const std::vector<std::string>& devices) {
  std::string out;
  for (const std::string& d : devices) out += (out.empty() ? "" : ",") + d;
  return out;
}

int RunList(const ServeFlags& f) {
  auto held = ListHeld(2.0);
  if (!held.ok()) return ReportFailure(held.status());
  if (f.json) {
    nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion},
                                {"held", nlohmann::ordered_json::array()}};
    for (const HeldSummary& s : *held) j["held"].push_back(SummaryToJson(s));
    std::cout << DumpJson(j) << "\n";
    return kExitOk;
  }
  if (held->empty()) std::printf("no model is held by this user\n");
  for (const HeldSummary& s : *held) {
    if (s.stale) {
      std::printf("%s  (stale: its holder is gone; the next serve of that name replaces it)\n",
                  s.name.c_str());
      continue;
    }
    std::printf("%s  %s on %s, %zu tensors, %s, pid %lld\n", s.name.c_str(), s.model.c_str(),
                DevicesText(s.devices).c_str(), s.tensors, FormatBytes(s.bytes).c_str(),
                static_cast<long long>(s.pid));
  }
  return kExitOk;
}

int RunServe(const ServeFlags& f) {
  InstallStopSignalHandlers();
  // A holder outlives whoever reads its notes: their going must not end it and leave its socket.
  IgnoreBrokenPipes();
  if (f.list) return RunList(f);
  if (f.model.empty()) {
    return ReportFailure(Status::InvalidArgument("serve takes a MODEL (or --list)"));
  }
  HoldRequest request;
  request.model = f.model;
  request.name = f.name;
  request.socket_path = f.socket;
  request.allowed_uids = f.allow_uids;
  request.allowed_gids = f.allow_gids;
  auto load = ToRequest(f.devices);
  if (!load.ok()) return ReportFailure(load.status());
  auto options = ToLoadOptions(f.settings);
  if (!options.ok()) return ReportFailure(options.status());
  request.load = std::move(load).value();
  request.load.options = std::move(options).value();
  const auto start = std::chrono::steady_clock::now();
  auto held = HeldModel::Hold(request);
  if (!held.ok()) return ReportOrExitNow(held.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const HeldSummary& s = (*held)->summary();
  if (f.json) {
    nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion}, {"ready", true}};
    j.update(SummaryToJson(s));
    j["load_s"] = seconds;
    std::cout << DumpJson(j) << std::endl;
  } else {
    std::printf(
        "holding '%s': %s on %s, %zu tensors, %s (loaded in %.3f s) at %s; Ctrl-C "
        "frees it\n",
        s.name.c_str(), s.model.c_str(), DevicesText(s.devices).c_str(), s.tensors,
        FormatBytes(s.bytes).c_str(), seconds, s.socket.c_str());
    std::fflush(stdout);
  }
  const Status served = (*held)->Serve(nullptr, [](const std::string& line) {
    std::fprintf(stderr, "hoist serve: %s\n", line.c_str());
  });
  if (!served.ok()) return ReportFailure(served);
  return kExitOk;
}

struct AttachFlags {
  std::string name;
  std::string device;
  bool share = false;
  bool verify = false;
  bool json = false;
  double timeout_s = 10;
  double hold_s = 0;
  std::vector<uint32_t> trusted_uids;
};

int RunAttach(const AttachFlags& f) {
  InstallStopSignalHandlers();
  const auto start = std::chrono::steady_clock::now();
  auto attached = Attach({f.name, f.device, f.share, f.timeout_s, f.trusted_uids});
  if (!attached.ok()) return ReportFailure(attached.status());
  const double attach_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Kept attached this long first: the holder may go meanwhile, and what was attached stays.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(f.hold_s * 1e6));
  while (std::chrono::steady_clock::now() < until && StopSignalReceived() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (StopSignalReceived() != 0) return kExitSignalBase + StopSignalReceived();
  AttachedModel& a = *attached;
  if (f.verify && !a.verifiable) {
    return ReportFailure(Status::InvalidArgument(
        "'" + a.holder.name + "' holds parts of tensors (a split across its devices): --verify " +
        "compares whole tensors with the model's file"));
  }
  CompletedLoad loaded(a.dir, std::move(a.model), a.plan, nullptr, a.verifiable);
  std::vector<Mismatch> mismatches;
  if (f.verify) {
    auto found = Verify(loaded, DefaultReaderThreads(), 16, kDefaultStallTimeoutSeconds);
    if (!found.ok()) return ReportOrExitNow(found.status());
    mismatches = std::move(found).value();
  }
  const LoadReport& r = loaded.model().report;
  if (f.json) {
    nlohmann::ordered_json j = {{"schema_version", kJsonSchemaVersion},
                                {"name", a.holder.name},
                                {"model", a.holder.model},
                                {"holder_pid", a.holder.pid},
                                {"device", r.device},
                                {"shared", f.share},
                                {"tensors", r.tensors},
                                {"tensor_bytes", r.tensor_bytes},
                                {"attach_s", attach_s}};
    if (f.verify) j["verified"] = mismatches.empty();
    std::cout << DumpJson(j) << "\n";
  } else {
    std::printf("attached '%s' (%s, pid %lld): %zu tensors, %s on %s, %s, in %.3f ms\n",
                a.holder.name.c_str(), a.holder.model.c_str(), static_cast<long long>(a.holder.pid),
                r.tensors, FormatBytes(r.tensor_bytes).c_str(), r.device.c_str(),
                f.share ? "shared" : "a private copy", attach_s * 1e3);
  }
  if (!mismatches.empty()) {
    std::fprintf(stderr, "hoist: verify failed: %s differs from %s at tensor byte %llu\n",
                 Printable(mismatches.front().tensor).c_str(), a.holder.model.c_str(),
                 static_cast<unsigned long long>(mismatches.front().tensor_offset));
    return kExitVerifyMismatch;
  }
  if (f.verify && !f.json) std::printf("verified: every tensor matches the file\n");
  return kExitOk;
}

}  // namespace

Runner RegisterServe(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Hold a model in memory other processes attach to (hoist attach, hoist_attach, "
      "hoist.attach) until Ctrl-C or SIGTERM; --list shows what is held (docs/SERVE.md)");
  cmd->add_option("MODEL", flags->model, "a model file, index, directory, URL or first GGUF split");
  cmd->add_option("--name", flags->name,
                  "the name it is held under (default: the model's file or directory name)")
      ->check([](const std::string& name) -> std::string {
        return name.empty() ? "a held name is 1 to 64 of A-Z a-z 0-9 . _ -, not empty" : "";
      });
  cmd->add_option("--socket", flags->socket,
                  "listen at this path instead of NAME.sock in the user's own directory (for "
                  "other users, with --allow-uid/--allow-gid)");
  cmd->add_option("--allow-uid", flags->allow_uids, "a user besides this one who may attach");
  cmd->add_option("--allow-gid", flags->allow_gids, "a group whose members may attach");
  cmd->add_flag("--list", flags->list, "list the models this user's holders hold");
  cmd->add_flag("--json", flags->json, "print one JSON line when ready (with --list: the list)");
  AddDeviceFlags(cmd, flags->devices);
  AddLoadSettingFlags(cmd, flags->settings, true);
  return [flags]() -> int { return RunServe(*flags); };
}

Runner RegisterAttach(CLI::App& app) {
  auto flags = std::make_shared<AttachFlags>();
  CLI::App* cmd = app.add_subcommand(
      "attach", "Attach to a model hoist serve holds: time it, and check it against its file");
  cmd->add_option("NAME", flags->name, "the name it is held under, or its holder's socket path")
      ->required();
  cmd->add_option("--device", flags->device, "one of the holder's devices (default: all of them)");
  cmd->add_flag("--share", flags->share,
                "map the holder's memory (read-only by contract) instead of a private copy");
  cmd->add_flag("--verify", flags->verify, "compare every tensor with the model's file");
  cmd->add_option("--timeout", flags->timeout_s, "seconds to wait for the holder's answer")
      ->check(CLI::Range(0.001, 1e7))
      ->capture_default_str();
  cmd->add_option("--trust-uid", flags->trusted_uids,
                  "a user besides this one and root whose holder may hand over memory (an "
                  "attach by path to another user's socket is refused otherwise)");
  cmd->add_option("--hold", flags->hold_s, "seconds to keep it attached before the check and exit")
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_flag("--json", flags->json, "print the result as one JSON object");
  return [flags]() -> int { return RunAttach(*flags); };
}

}  // namespace hoist::cli
