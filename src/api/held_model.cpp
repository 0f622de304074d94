#include "api/held_model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "api/settings.h"
#include "base/platform.h"
#include "device/checked_device.h"
#include "io/http_storage.h"
#include "io/hub.h"

namespace hoist {
namespace {

// The protocol's version: a holder and an attacher of different versions refuse each other.
constexpr int kProtocol = 1;
constexpr const char* kSocketSuffix = ".sock";
// How long a holder waits for an attacher's request and for it to take the answer.
constexpr double kPeerTimeoutSeconds = 5;
constexpr int kAcceptSliceMs = 100;

using Json = nlohmann::json;

Result<std::string> HeldDirectory() {
  HOIST_ASSIGN_OR_RETURN(const Settings settings, ProcessSettings());
  const std::string& dir = settings.held_models_directory;
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), error);
  HOIST_RETURN_IF_ERROR(EnsurePrivateDirectory(dir));
  return dir;
}

std::string SocketPath(const std::string& dir, const std::string& name) {
  return dir + "/" + name + kSocketSuffix;
}

HeldSummary SummaryFromJson(const Json& j) {
  HeldSummary s;
  s.name = j.value("name", "");
  s.model = j.value("model", "");
  s.pid = j.value("pid", int64_t{0});
  s.uid = j.value("uid", uint32_t{0});
  s.bytes = j.value("bytes", uint64_t{0});
  s.tensors = j.value("tensors", size_t{0});
  if (j.contains("devices") && j["devices"].is_array()) {
    for (const Json& d : j["devices"]) {
      if (d.is_string()) s.devices.push_back(d.get<std::string>());
    }
  }
  return s;
}

// One request to the holder at `path` and its answer. `who` names the holder in errors.
Result<LocalMessage> Ask(const std::string& path, const std::string& op, double timeout_s,
                         const std::string& who) {
  HOIST_ASSIGN_OR_RETURN(LocalConnection connection, ConnectLocal(path, timeout_s));
  const Json request = {{"hoist_held", kProtocol}, {"op", op}};
  const Status sent = connection.Send(request.dump(), {}, timeout_s, who);
  // A holder that has gone may still have left its answer (a refusal) to read.
  if (!sent.ok() && sent.code() != Code::kIoError) return sent;
  return connection.Receive(timeout_s, nullptr, who);
}

// The answer's JSON, or the holder's refusal as an error (the descriptors closed).
Result<Json> AnswerJson(LocalMessage& answer, const std::string& who) {
  Json j = Json::parse(answer.text, nullptr, false);
  auto refuse = [&answer](Status s) {
    for (int fd : answer.fds) CloseDescriptor(fd);
    answer.fds.clear();
    return s;
  };
  if (j.is_discarded() || !j.is_object()) return refuse(Status::IoError(who + " answered junk"));
  if (j.contains("error")) {
    return refuse(Status::InvalidArgument(who + " refused: " + j.value("error", std::string())));
  }
  if (j.value("hoist_held", 0) != kProtocol) {
    return refuse(Status::InvalidArgument(who + " speaks another version of the protocol"));
  }
  return j;
}

// A live holder's summary, or stale (nothing listens), or the error of asking.
Result<HeldSummary> Describe(const std::string& path, double timeout_s) {
  const std::string who = "the holder at " + path;
  auto answer = Ask(path, "describe", timeout_s, who);
  if (!answer.ok() && answer.status().code() == Code::kNotFound) {
    HeldSummary stale;
    stale.socket = path;
    stale.stale = true;
    return stale;
  }
  if (!answer.ok()) return answer.status();
  HOIST_ASSIGN_OR_RETURN(const Json j, AnswerJson(*answer, who));
  HeldSummary s = SummaryFromJson(j);
  s.socket = path;
  return s;
}

std::vector<std::string> DeviceNames(const LoadedModel& model) {
  std::vector<std::string> names;
  for (const auto& d : model.devices()) names.push_back(d->name());
  return names;
}

}  // namespace

nlohmann::ordered_json SummaryToJson(const HeldSummary& s) {
  nlohmann::ordered_json j = {{"name", s.name},   {"model", s.model},    {"socket", s.socket},
                              {"pid", s.pid},     {"uid", s.uid},        {"devices", s.devices},
                              {"bytes", s.bytes}, {"tensors", s.tensors}};
  if (s.stale) j["stale"] = true;
  return j;
}

namespace {
// A character a held name may hold.
bool IsHeldNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}
}  // namespace

Status CheckHeldName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-' &&
                  std::all_of(name.begin(), name.end(), IsHeldNameChar);
  if (ok) return Status::Ok();
  return Status::InvalidArgument("'" + name +
                                 "' is not a name a model is held under: 1 to 64 of A-Z a-z 0-9 "
                                 ". _ -, not starting with '.' or '-'");
}

std::string DefaultHeldName(const std::string& model_path) {
  std::string path = model_path.substr(0, model_path.find('?'));
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::string name =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (const char* ext : {".safetensors", ".gguf", ".json", ".hoistpack"}) {
    const std::string e(ext);
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
      break;
    }
  }
  for (char& c : name) {
    if (!IsHeldNameChar(c)) c = '-';
  }
  while (!name.empty() && (name[0] == '.' || name[0] == '-')) name.erase(0, 1);
  if (name.size() > 64) name.resize(64);
  return name.empty() ? "model" : name;
}

namespace {

// Where a holder of `name` listens, once nothing else is there: a live holder refuses at once,
// a stale socket goes, anything but a socket stays and refuses.
Result<std::string> ClaimSocketPath(const HoldRequest& request, const std::string& name) {
  std::string path = request.socket_path;
  if (path.empty()) {
    HOIST_ASSIGN_OR_RETURN(const std::string dir, HeldDirectory());
    path = SocketPath(dir, name);
  }
  std::error_code error;
  const auto status = std::filesystem::symlink_status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_socket(status)) {
    return Status::InvalidArgument(path +
                                   ": something other than a socket is there: hoist "
                                   "serve replaces only a stale socket");
  }
  HOIST_ASSIGN_OR_RETURN(const HeldSummary there, Describe(path, kPeerTimeoutSeconds));
  if (!there.stale) {
    return Status::InvalidArgument("a model is already held at " + path + " ('" + there.name +
                                   "': " + there.model + ", pid " + std::to_string(there.pid) +
                                   "): give another --name");
  }
  std::filesystem::remove(path, error);
  return path;
}

}  // namespace

Result<std::unique_ptr<HeldModel>> HeldModel::Hold(const HoldRequest& request) {
  std::unique_ptr<HeldModel> held(new HeldModel());
  held->request_ = request;
  const std::string name = request.name.empty() ? DefaultHeldName(request.model) : request.name;
  HOIST_RETURN_IF_ERROR(CheckHeldName(name));
  HOIST_ASSIGN_OR_RETURN(const std::string path, ClaimSocketPath(request, name));
  LoadRequest load = request.load;
  load.shareable_memory = true;
  HOIST_ASSIGN_OR_RETURN(TensorDirectory opened, OpenModel({request.model, nullptr, std::nullopt,
                                                            load.options.stall_timeout_s}));
  held->dir_ = std::make_unique<TensorDirectory>(std::move(opened));
  if (held->dir_->total_bytes() == 0) {
    return Status::InvalidArgument(request.model + ": no tensor holds a byte: nothing to hold");
  }
  HOIST_ASSIGN_OR_RETURN(CompletedLoad loaded, Load(*held->dir_, load));
  held->load_.emplace(std::move(loaded));
  HOIST_RETURN_IF_ERROR(held->DescribeForAttachers(name, path));
  HOIST_ASSIGN_OR_RETURN(
      LocalListener listener,
      LocalListener::Listen(path, !request.allowed_uids.empty() || !request.allowed_gids.empty()));
  held->listener_.emplace(std::move(listener));
  return held;
}

Result<nlohmann::json> HeldModel::ExportBlocks(std::vector<int>& block_of) {
  const LoadedModel& model = load_->model();
  block_of.assign(model.devices().size(), -1);
  Json blocks = Json::array();
  for (size_t d = 0; d < model.devices().size(); ++d) {
    if (model.block(d) == nullptr) continue;
    HOIST_ASSIGN_OR_RETURN(const ExportedMemory exported,
                           model.devices()[d]->ExportShareable(model.block(d)));
    block_of[d] = static_cast<int>(blocks_.size());
    blocks_.push_back(exported);
    blocks.push_back({{"device", model.devices()[d]->name()}, {"bytes", exported.bytes}});
  }
  return blocks;
}

Result<nlohmann::json> HeldModel::TensorList(const std::vector<int>& block_of,
                                             uint64_t& bytes) const {
  const LoadedModel& model = load_->model();
  const TensorDirectory& tensors = load_->directory();
  Json entries = Json::array();
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    if (!model.loaded(i)) continue;
    const TensorEntry& t = tensors.tensors[i];
    const uint32_t d = model.device_index(i);
    const int b = block_of[d];
    if (b < 0 && t.nbytes > 0) {
      return Status::Internal(t.name + " lies outside the memory hoist allocated");
    }
    // A zero-byte tensor on a device that holds nothing is listed in the first block, empty.
    const auto at = b < 0 ? 0
                          : static_cast<uint64_t>(static_cast<unsigned char*>(model.data(i)) -
                                                  static_cast<unsigned char*>(model.block(d)));
    entries.push_back({{"name", t.name},
                       {"dtype", t.dtype},
                       {"shape", t.shape},
                       {"nbytes", t.nbytes},
                       {"file", t.file},
                       {"offset", t.offset},
                       {"block", std::max(b, 0)},
                       {"at", at}});
    bytes += t.nbytes;
  }
  return entries;
}

Status HeldModel::DescribeForAttachers(const std::string& name, const std::string& path) {
  std::vector<int> block_of;
  HOIST_ASSIGN_OR_RETURN(Json blocks, ExportBlocks(block_of));
  uint64_t bytes = 0;
  HOIST_ASSIGN_OR_RETURN(Json entries, TensorList(block_of, bytes));
  const TensorDirectory& tensors = load_->directory();
  Json files = Json::array();
  for (const FileEntry& f : tensors.files) files.push_back({{"path", f.path}, {"size", f.size}});
  HeldSummary& s = summary_;
  s.name = name;
  // A local model by its absolute path: what a front end matches a checkpoint against.
  std::error_code error;
  s.model = IsRemoteName(request_.model)
                ? RedactUrl(request_.model)
                : std::filesystem::absolute(request_.model, error).lexically_normal().string();
  s.socket = path;
  s.pid = CurrentProcessId();
  s.uid = CurrentUserId();
  s.devices = DeviceNames(load_->model());
  s.bytes = bytes;
  s.tensors = entries.size();
  Json manifest = SummaryToJson(s);
  manifest["hoist_held"] = kProtocol;
  manifest["format"] = tensors.format;
  manifest["whole_tensors"] = !load_->plan().by_parts;
  manifest["blocks"] = std::move(blocks);
  manifest["files"] = std::move(files);
  manifest["tensor_list"] = std::move(entries);
  manifest_ = manifest.dump();
  return Status::Ok();
}

HeldModel::~HeldModel() {
  listener_.reset();  // no new attacher while the memory goes
  for (const ExportedMemory& b : blocks_) CloseDescriptor(b.fd);
}

Status HeldModel::Answer(LocalConnection& connection,
                         const std::function<void(const std::string&)>& note) {
  HOIST_ASSIGN_OR_RETURN(const PeerCredentials peer, connection.Peer());
  const std::string who =
      "process " + std::to_string(peer.pid) + " (uid " + std::to_string(peer.uid) + ")";
  const bool allowed = peer.uid == CurrentUserId() ||
                       std::find(request_.allowed_uids.begin(), request_.allowed_uids.end(),
                                 peer.uid) != request_.allowed_uids.end() ||
                       std::find(request_.allowed_gids.begin(), request_.allowed_gids.end(),
                                 peer.gid) != request_.allowed_gids.end();
  // The request is read first, also from a peer refused: its answer is then what it reads.
  HOIST_ASSIGN_OR_RETURN(LocalMessage request,
                         connection.Receive(kPeerTimeoutSeconds, nullptr, who));
  for (int fd : request.fds) CloseDescriptor(fd);  // an attacher sends none
  if (!allowed) {
    note("refused " + who + ": another user (serve --allow-uid or --allow-gid admits one)");
    const Json refusal = {
        {"error", "'" + summary_.name + "' is held by user " + std::to_string(CurrentUserId()) +
                      ", who has not allowed user " + std::to_string(peer.uid) + " to attach"}};
    return connection.Send(refusal.dump(), {}, kPeerTimeoutSeconds, who);
  }
  const Json j = Json::parse(request.text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("hoist_held", 0) != kProtocol) {
    const Json refusal = {
        {"error", "not a request of hoist's protocol version " + std::to_string(kProtocol)}};
    return connection.Send(refusal.dump(), {}, kPeerTimeoutSeconds, who);
  }
  const std::string op = j.value("op", "");
  if (op == "describe") {
    Json answer = SummaryToJson(summary_);
    answer["hoist_held"] = kProtocol;
    return connection.Send(answer.dump(), {}, kPeerTimeoutSeconds, who);
  }
  if (op != "attach") {
    return connection.Send(Json{{"error", "unknown request '" + op + "'"}}.dump(), {},
                           kPeerTimeoutSeconds, who);
  }
  std::vector<int> fds;
  for (const ExportedMemory& b : blocks_) fds.push_back(b.fd);
  HOIST_RETURN_IF_ERROR(connection.Send(manifest_, fds, kPeerTimeoutSeconds, who));
  note("attached " + who);
  return Status::Ok();
}

Status HeldModel::Serve(const std::atomic<bool>* stop,
                        const std::function<void(const std::string&)>& note) {
  for (;;) {
    if ((stop != nullptr && stop->load()) || !StopRequested().ok()) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(std::optional<LocalConnection> connection,
                           listener_->Accept(kAcceptSliceMs));
    if (!connection) continue;
    // One attacher's failure (it died mid-answer, it sent junk) is its own: the holder goes on.
    if (Status s = Answer(*connection, note); !s.ok()) note("an attach failed: " + s.message());
  }
}

namespace {

// Checks the holder's description against the descriptors that came with it and builds the
// directory; kIoError naming the holder for anything that does not add up.
Status ReadManifest(const Json& j, size_t fds, const std::string& who, AttachedModel& out,
                    std::vector<std::pair<std::string, uint64_t>>& blocks,
                    std::vector<std::pair<size_t, uint64_t>>& places) {
  auto bad = [&who](const std::string& what) {
    return Status::IoError(who + " described its model wrongly: " + what);
  };
  try {
    for (const Json& b : j.at("blocks")) {
      blocks.emplace_back(b.at("device").get<std::string>(), b.at("bytes").get<uint64_t>());
    }
    if (blocks.size() != fds) {
      return bad(std::to_string(blocks.size()) + " blocks and " + std::to_string(fds) +
                 " descriptors");
    }
    out.dir.format = j.at("format").get<std::string>();
    for (const Json& f : j.at("files")) {
      out.dir.files.push_back({f.at("path").get<std::string>(), f.at("size").get<uint64_t>(), {}});
    }
    for (const Json& t : j.at("tensor_list")) {
      TensorEntry e;
      e.name = t.at("name").get<std::string>();
      e.dtype = t.at("dtype").get<std::string>();
      e.shape = t.at("shape").get<std::vector<uint64_t>>();
      e.nbytes = t.at("nbytes").get<uint64_t>();
      e.file = t.at("file").get<uint32_t>();
      e.offset = t.at("offset").get<uint64_t>();
      const auto block = t.at("block").get<size_t>();
      const auto at = t.at("at").get<uint64_t>();
      if (block >= blocks.size() || at > blocks[block].second ||
          e.nbytes > blocks[block].second - at) {
        return bad("tensor '" + e.name + "' lies outside its block");
      }
      if (e.file >= out.dir.files.size() && !out.dir.files.empty()) {
        return bad("tensor '" + e.name + "' names file " + std::to_string(e.file));
      }
      places.emplace_back(block, at);
      out.dir.tensors.push_back(std::move(e));
    }
    out.verifiable = j.at("whole_tensors").get<bool>();
  } catch (const Json::exception& e) {
    return bad(e.what());
  }
  out.holder = SummaryFromJson(j);
  out.dir.IndexNames();
  return Status::Ok();
}

// Maps each block on its device and, for a private copy, copies it within the device and lets
// the mapping go.
Result<std::vector<void*>> MapBlocks(const std::vector<std::shared_ptr<CheckedDevice>>& devices,
                                     const std::vector<std::pair<std::string, uint64_t>>& blocks,
                                     const std::vector<int>& fds, bool share) {
  std::vector<void*> mapped(blocks.size(), nullptr);
  Status failed = Status::Ok();
  for (size_t b = 0; b < blocks.size() && failed.ok(); ++b) {
    auto imported = devices[b]->ImportShareable(fds[b], blocks[b].second);
    if (!imported.ok()) {
      failed = imported.status();
      break;
    }
    mapped[b] = *imported;
    if (share) continue;
    auto own = devices[b]->AllocateDevice(blocks[b].second);
    if (own.ok()) failed = devices[b]->CopyWithinDevice(*own, mapped[b], blocks[b].second);
    (void)devices[b]->FreeDevice(mapped[b]);
    mapped[b] = own.ok() ? *own : nullptr;
    if (!own.ok()) failed = own.status();
  }
  if (!failed.ok()) {
    for (size_t b = 0; b < mapped.size(); ++b) {
      if (mapped[b] != nullptr) (void)devices[b]->FreeDevice(mapped[b]);
    }
    return failed;
  }
  return mapped;
}

}  // namespace

namespace {

// Descriptors received, closed when it goes.
class Descriptors {
 public:
  explicit Descriptors(std::vector<int> fds) : fds_(std::move(fds)) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (int fd : fds_) CloseDescriptor(fd);
  }
  const std::vector<int>& fds() const { return fds_; }

 private:
  std::vector<int> fds_;
};

// The holder's answer to an attach: its description, and the descriptors in `fds`.
Result<Json> AskToAttach(const AttachRequest& request, std::vector<int>& fds) {
  std::string path = request.name;
  if (request.name.find('/') == std::string::npos) {
    HOIST_RETURN_IF_ERROR(CheckHeldName(request.name));
    HOIST_ASSIGN_OR_RETURN(const std::string dir, HeldDirectory());
    path = SocketPath(dir, request.name);
  }
  const std::string who = "the holder of '" + request.name + "'";
  auto answer = Ask(path, "attach", request.timeout_s, who);
  if (!answer.ok() && answer.status().code() == Code::kNotFound) {
    return Status::NotFound("no model is held under '" + request.name + "' (nothing listens " +
                            "at " + path + "; hoist serve --list shows what is held)");
  }
  if (!answer.ok()) return answer.status();
  HOIST_ASSIGN_OR_RETURN(Json j, AnswerJson(*answer, who));
  fds = std::move(answer->fds);
  return j;
}

// What an attach takes: the blocks on its device (every block when it names none), or, for a
// device the holder does not use, the one block copied to it over a direct link (`peer`).
struct Chosen {
  std::vector<size_t> blocks;
  std::shared_ptr<CheckedDevice> peer;
  std::shared_ptr<CheckedDevice> source;  // with peer: the holder's device, opened here
  std::shared_ptr<CheckedDevice> asked;   // the device asked for, opened to learn its name
};

Result<Chosen> ChooseBlocks(const AttachRequest& request,
                            const std::vector<std::pair<std::string, uint64_t>>& blocks) {
  Chosen chosen;
  if (request.device.empty()) {
    for (size_t b = 0; b < blocks.size(); ++b) chosen.blocks.push_back(b);
    return chosen;
  }
  HOIST_ASSIGN_OR_RETURN(auto device, OpenDevice(request.device));
  chosen.asked = device;
  const std::string asked = device->name();  // as the device calls itself ("gpu:0": "cuda:0")
  std::string held_on;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b].first == asked) chosen.blocks.push_back(b);
    held_on += (held_on.empty() ? "" : ", ") + blocks[b].first;
  }
  if (!chosen.blocks.empty()) return chosen;
  const std::string refused = "'" + request.name + "' is held on " + held_on + ", not " + asked;
  if (blocks.size() != 1)
    return Status::InvalidArgument(refused + ": attach to the holder's devices");
  HOIST_ASSIGN_OR_RETURN(chosen.source, OpenDevice(blocks[0].first));
  if (chosen.source->kind() != device->kind() || device->kind() == DeviceKind::kHost) {
    return Status::InvalidArgument(refused + ": attach to the holder's devices");
  }
  if (request.share) {
    return Status::InvalidArgument(refused + ": a shared attach maps the memory where it is; " +
                                   "a copy to " + asked + " is private (share=False)");
  }
  chosen.blocks.push_back(0);
  chosen.peer = std::move(device);
  return chosen;
}

// The holder's block (fd) mapped on its own device and copied to `peer` over the link between
// them, each byte read once; the mapping let go.
Result<void*> CopyBlockToPeer(CheckedDevice& source, CheckedDevice& peer, int fd, uint64_t bytes,
                              double timeout_s) {
  if (!source.CanReachPeer(peer)) {
    return Status::InvalidArgument(peer.name() + " has no direct link to " + source.name() +
                                   ", which holds the model: attach to " + source.name());
  }
  HOIST_ASSIGN_OR_RETURN(void* held, source.ImportShareable(fd, bytes));
  auto copy = peer.AllocateDevice(bytes);
  Status done = copy.ok() ? Status::Ok() : copy.status();
  if (copy.ok()) {
    auto started = source.CopyToPeerAsync(*copy, peer, held, bytes, 0);
    done = started.ok() ? WaitForCopy(**started, timeout_s) : started.status();
  }
  if (done.code() == Code::kStalled) {  // the copy may still run: nothing is freed under it
    source.set_free_on_destroy(false);
    peer.set_free_on_destroy(false);
    return done;
  }
  (void)source.FreeDevice(held);
  if (!done.ok()) {
    if (copy.ok()) (void)peer.FreeDevice(*copy);
    return done;
  }
  return *copy;
}

}  // namespace

namespace {

// The blocks an attach takes, each on its device: mapped (shared) or copied, in `devices`'
// order; index_of[block] is its place there (-1: not taken).
struct TakenBlocks {
  std::vector<std::shared_ptr<CheckedDevice>> devices;
  std::vector<void*> mapped;
  std::vector<int> index_of;
};

Result<TakenBlocks> TakeBlocks(const AttachRequest& request, const Chosen& chosen,
                               const std::vector<std::pair<std::string, uint64_t>>& blocks,
                               const std::vector<int>& fds) {
  TakenBlocks out;
  out.index_of.assign(blocks.size(), -1);
  if (chosen.peer) {
    HOIST_ASSIGN_OR_RETURN(void* copy, CopyBlockToPeer(*chosen.source, *chosen.peer, fds[0],
                                                       blocks[0].second, request.timeout_s));
    out.devices.push_back(chosen.peer);
    out.mapped.push_back(copy);
    out.index_of[0] = 0;
    return out;
  }
  std::vector<std::pair<std::string, uint64_t>> taken;
  std::vector<int> taken_fds;
  for (const size_t b : chosen.blocks) {
    // The device asked for was opened to learn its name: not opened again.
    std::shared_ptr<CheckedDevice> device = chosen.asked;
    if (!device) {
      HOIST_ASSIGN_OR_RETURN(device, OpenDevice(blocks[b].first));
    }
    out.index_of[b] = static_cast<int>(out.devices.size());
    out.devices.push_back(std::move(device));
    taken.push_back(blocks[b]);
    taken_fds.push_back(fds[b]);
  }
  HOIST_ASSIGN_OR_RETURN(out.mapped, MapBlocks(out.devices, taken, taken_fds, request.share));
  return out;
}

}  // namespace

Result<AttachedModel> Attach(const AttachRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> received;
  HOIST_ASSIGN_OR_RETURN(const Json j, AskToAttach(request, received));
  const Descriptors fds(std::move(received));
  const std::string who = "the holder of '" + request.name + "'";
  AttachedModel out;
  std::vector<std::pair<std::string, uint64_t>> blocks;
  std::vector<std::pair<size_t, uint64_t>> places;
  HOIST_RETURN_IF_ERROR(ReadManifest(j, fds.fds().size(), who, out, blocks, places));
  HOIST_ASSIGN_OR_RETURN(const Chosen chosen, ChooseBlocks(request, blocks));
  HOIST_ASSIGN_OR_RETURN(const TakenBlocks taken, TakeBlocks(request, chosen, blocks, fds.fds()));
  out.model = std::make_unique<LoadedModel>(taken.devices, out.dir.tensors.size());
  for (size_t d = 0; d < taken.mapped.size(); ++d) out.model->AdoptBlock(d, taken.mapped[d]);
  uint64_t bytes = 0;
  size_t tensors = 0;
  for (size_t i = 0; i < places.size(); ++i) {
    const auto [block, at] = places[i];  // ReadManifest checked both
    const int d = taken.index_of[block];
    if (d < 0) continue;  // on a device not asked for
    out.model->SetLoaded(i, static_cast<unsigned char*>(taken.mapped[d]) + at,
                         static_cast<uint32_t>(d));
    bytes += out.dir.tensors[i].nbytes;
    ++tensors;
  }
  out.plan.devices = taken.devices.size();
  LoadReport& r = out.model->report;
  r.tensors = tensors;
  r.tensor_bytes = bytes;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& d : taken.devices) r.device += (r.device.empty() ? "" : ", ") + d->name();
  return out;
}

Result<std::vector<HeldSummary>> ListHeld(double timeout_s) {
  HOIST_ASSIGN_OR_RETURN(const std::string dir, HeldDirectory());
  std::vector<HeldSummary> out;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix(kSocketSuffix);
    if (file.size() <= suffix.size() ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    auto s = Describe(entry.path().string(), timeout_s);
    if (!s.ok()) continue;  // a holder too busy or broken to answer: not listed
    if (s->stale) s->name = file.substr(0, file.size() - suffix.size());
    out.push_back(std::move(s).value());
  }
  if (error) return Status::IoError(dir + ": cannot be listed: " + error.message());
  std::sort(out.begin(), out.end(),
            [](const HeldSummary& a, const HeldSummary& b) { return a.name < b.name; });
  return out;
}

}  // namespace hoist
