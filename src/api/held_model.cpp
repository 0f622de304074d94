#include "api/held_model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "api/settings.h"
#include "base/mutex.h"
#include "base/platform.h"
#include "device/checked_device.h"
#include "format/dtypes.h"
#include "format/json_text.h"
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
// A request is a small flat object ({"hoist_held":1,"op":"attach"}): anything longer or deeper
// is refused before it is parsed, so no client can make the holder parse its way out of memory.
constexpr uint64_t kMaxRequestBytes = 4096;
constexpr int kMaxRequestDepth = 4;
// An answer nests as deep as a tensor's shape in the list of tensors.
constexpr int kMaxAnswerDepth = 8;

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

// A stranger's JSON, or a discarded value when it nests deeper than max_depth: a message of
// brackets alone would otherwise cost the parser memory and time far past its size.
Json ParseShallow(const std::string& text, int max_depth) {
  if (FindExcessNesting(text, max_depth) != std::string::npos) {
    return Json(Json::value_t::discarded);
  }
  return Json::parse(text, nullptr, false);
}

HeldSummary SummaryFromJson(const Json& j) {
  HeldSummary s;
  // A holder's words, shown as one printable line whatever it sent.
  s.name = Printable(StringField(j, "name"), 64);
  s.model = Printable(StringField(j, "model"), 4096);
  s.pid = static_cast<int64_t>(UnsignedField(j, "pid").value_or(0));
  s.uid = static_cast<uint32_t>(UnsignedField(j, "uid").value_or(0));
  s.bytes = UnsignedField(j, "bytes").value_or(0);
  s.tensors = static_cast<size_t>(UnsignedField(j, "tensors").value_or(0));
  if (j.contains("devices") && j["devices"].is_array()) {
    for (const Json& d : j["devices"]) {
      if (d.is_string()) s.devices.push_back(d.get<std::string>());
    }
  }
  return s;
}

// One request to the holder at `path` and its answer. `who` names the holder in errors. With
// `listener`, who listens there as the kernel saw it bind, for the caller to judge.
Result<LocalMessage> Ask(const std::string& path, const std::string& op, double timeout_s,
                         const std::string& who, PeerCredentials* listener = nullptr) {
  HOIST_ASSIGN_OR_RETURN(LocalConnection connection, ConnectLocal(path, timeout_s));
  if (listener != nullptr) {
    HOIST_ASSIGN_OR_RETURN(*listener, connection.Peer());
  }
  const Json request = {{"hoist_held", kProtocol}, {"op", op}};
  const Status sent = connection.Send(request.dump(), {}, timeout_s, who);
  // A holder that has gone may still have left its answer (a refusal) to read.
  if (!sent.ok() && sent.code() != Code::kIoError) return sent;
  return connection.Receive(timeout_s, nullptr, who);
}

// The answer's JSON, or the holder's refusal as an error (the descriptors closed).
Result<Json> AnswerJson(LocalMessage& answer, const std::string& who) {
  Json j = ParseShallow(answer.text, kMaxAnswerDepth);
  auto refuse = [&answer](Status s) {
    for (int fd : answer.fds) CloseDescriptor(fd);
    answer.fds.clear();
    return s;
  };
  if (j.is_discarded() || !j.is_object()) return refuse(Status::IoError(who + " answered junk"));
  if (j.contains("error")) {
    return refuse(Status::InvalidArgument(who + " refused: " + Printable(StringField(j, "error"))));
  }
  if (UnsignedField(j, "hoist_held") != uint64_t{kProtocol}) {
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
  for (const FileEntry& f : tensors.files) {
    Json file = {{"path", f.path}, {"size", f.size}};
    // Which file it read, so that a process with the same path open can tell it is the same
    // one, unchanged (AttachInto).
    if (f.identity.known && f.identity.version.empty() && f.identity.modified_ns >= 0) {
      file["identity"] = {{"device", f.identity.device},
                          {"inode", f.identity.inode},
                          {"size", f.identity.size},
                          {"modified_ns", static_cast<uint64_t>(f.identity.modified_ns)}};
    }
    files.push_back(std::move(file));
  }
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
                         connection.Receive(kPeerTimeoutSeconds, nullptr, who, kMaxRequestBytes));
  for (int fd : request.fds) CloseDescriptor(fd);  // an attacher sends none
  if (!allowed) {
    note("refused " + who + ": another user (serve --allow-uid or --allow-gid admits one)");
    const Json refusal = {
        {"error", "'" + summary_.name + "' is held by user " + std::to_string(CurrentUserId()) +
                      ", who has not allowed user " + std::to_string(peer.uid) + " to attach"}};
    return connection.Send(refusal.dump(), {}, kPeerTimeoutSeconds, who);
  }
  const Json j = ParseShallow(request.text, kMaxRequestDepth);
  if (j.is_discarded() || !j.is_object() || UnsignedField(j, "hoist_held") != uint64_t{kProtocol}) {
    const Json refusal = {
        {"error", "not a request of hoist's protocol version " + std::to_string(kProtocol)}};
    return connection.Send(refusal.dump(), {}, kPeerTimeoutSeconds, who);
  }
  const std::string op = StringField(j, "op");
  if (op == "describe") {
    Json answer = SummaryToJson(summary_);
    answer["hoist_held"] = kProtocol;
    return connection.Send(answer.dump(), {}, kPeerTimeoutSeconds, who);
  }
  if (op != "attach") {
    return connection.Send(Json{{"error", "unknown request '" + Printable(op, 40) + "'"}}.dump(),
                           {}, kPeerTimeoutSeconds, who);
  }
  std::vector<int> fds;
  for (const ExportedMemory& b : blocks_) fds.push_back(b.fd);
  HOIST_RETURN_IF_ERROR(connection.Send(manifest_, fds, kPeerTimeoutSeconds, who));
  note("attached " + who);
  return Status::Ok();
}

namespace {

// The clients a holder answers at once, each on a thread of its own under its own deadline (an
// idle or slow client delays no one), at most kMaxClients in all and kMaxClientsPerUser of one
// user, so no one user can take every place. Thread safe.
class ClientThreads {
 public:
  static constexpr size_t kMaxClients = 512;
  static constexpr size_t kMaxClientsPerUser = 128;

  ~ClientThreads() { JoinAll(); }

  // Runs `answer` on a thread for a client of user `uid`, or false when there is no place.
  bool Start(uint32_t uid, std::function<void()> answer) HOIST_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    if (running_ >= kMaxClients || per_user_[uid] >= kMaxClientsPerUser) return false;
    ++running_;
    ++per_user_[uid];
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back({std::thread([this, uid, done, answer = std::move(answer)] {
                          answer();
                          MutexLock finished(mutex_);
                          --running_;
                          --per_user_[uid];
                          done->store(true);
                        }),
                        done});
    return true;
  }
  // Joins the threads that have finished.
  void Reap() HOIST_EXCLUDES(mutex_) {
    std::vector<std::thread> finished;
    {
      MutexLock lock(mutex_);
      for (auto it = threads_.begin(); it != threads_.end();) {
        if (it->second->load()) {
          finished.push_back(std::move(it->first));
          it = threads_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (std::thread& t : finished) t.join();
  }
  void JoinAll() HOIST_EXCLUDES(mutex_) {
    std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> all;
    {
      MutexLock lock(mutex_);
      all.swap(threads_);
    }
    for (auto& [thread, done] : all) thread.join();
  }

 private:
  Mutex mutex_;
  size_t running_ HOIST_GUARDED_BY(mutex_) = 0;
  std::map<uint32_t, size_t> per_user_ HOIST_GUARDED_BY(mutex_);
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> threads_
      HOIST_GUARDED_BY(mutex_);
};

}  // namespace

Status HeldModel::Serve(const std::atomic<bool>* stop,
                        const std::function<void(const std::string&)>& note) {
  Mutex note_mutex;
  auto say = [&](const std::string& line) {
    MutexLock lock(note_mutex);
    note(line);
  };
  ClientThreads clients;
  for (;;) {
    clients.Reap();
    if ((stop != nullptr && stop->load()) || !StopRequested().ok()) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(std::optional<LocalConnection> connection,
                           listener_->Accept(kAcceptSliceMs));
    if (!connection) continue;
    const Result<PeerCredentials> peer = connection->Peer();
    if (!peer.ok()) continue;
    auto shared = std::make_shared<LocalConnection>(std::move(*connection));
    const bool started = clients.Start(peer->uid, [this, shared, &say] {
      // One attacher's failure (it died mid-answer, it sent junk) is its own: the holder goes
      // on, whatever a library under the answer threw.
      Status s;
      try {
        s = Answer(*shared, say);
      } catch (const std::exception& e) {
        s = Status::Internal(std::string("answering it threw: ") + e.what());
      }
      if (!s.ok()) say("an attach failed: " + s.message());
    });
    if (!started) {
      say("refused a connection of uid " + std::to_string(peer->uid) +
          ": too many connections open at once");
    }
  }
}

namespace {

// A field the manifest must hold, of its type: an integer the parser kept as one (never a number
// past 2^64-1, which it keeps as a float), a string without NUL.
uint64_t ManifestUnsigned(const Json& j, const char* key) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned()) {
    throw std::invalid_argument(std::string("'") + key + "' is not an integer from 0 to 2^64-1");
  }
  return v.get<uint64_t>();
}
std::string ManifestString(const Json& j, const char* key) {
  const Json& v = j.at(key);
  if (!v.is_string()) throw std::invalid_argument(std::string("'") + key + "' is not a string");
  std::string text = v.get<std::string>();
  if (text.find('\0') != std::string::npos) {
    throw std::invalid_argument(std::string("'") + key + "' holds a NUL");
  }
  return text;
}

// The bytes a tensor of `dtype` and `shape` holds by the format's rules (a part of a tensor cut
// by bytes: the product of its shape), or why it has none.
Result<uint64_t> ShapeBytes(const std::string& format, const std::string& dtype,
                            const std::vector<uint64_t>& shape, bool whole) {
  uint64_t product = 1;
  for (const uint64_t d : shape) {
    if (d != 0 && product > UINT64_MAX / d) return Status::InvalidArgument("its shape overflows");
    product *= d;
  }
  if (!whole) return product;
  const std::optional<DtypeBlock> block = BlockOf(format, dtype);
  if (!block) return Status::InvalidArgument("its dtype '" + Printable(dtype, 40) + "' is unknown");
  if (product % block->elements != 0) {
    return Status::InvalidArgument("its shape is not whole blocks of its dtype");
  }
  const uint64_t blocks = product / block->elements;
  if (blocks > UINT64_MAX / block->bytes) return Status::InvalidArgument("its size overflows");
  return blocks * block->bytes;
}

// One tensor of the manifest, checked by the rules a file's header is: its name, its size by
// its dtype and shape, its file, its place inside its block.
Status ReadManifestTensor(const Json& t, const AttachedModel& out,
                          const std::vector<std::pair<std::string, uint64_t>>& blocks,
                          TensorEntry& e, std::pair<size_t, uint64_t>& place) {
  e.name = ManifestString(t, "name");
  e.dtype = ManifestString(t, "dtype");
  const Json& shape = t.at("shape");
  if (!shape.is_array() || shape.size() > 8) {
    return Status::InvalidArgument("its shape is not a list of at most 8 dimensions");
  }
  for (const Json& d : shape) {
    if (!d.is_number_unsigned()) return Status::InvalidArgument("its shape holds a non-integer");
    e.shape.push_back(d.get<uint64_t>());
  }
  e.nbytes = ManifestUnsigned(t, "nbytes");
  HOIST_ASSIGN_OR_RETURN(const uint64_t shaped,
                         ShapeBytes(out.dir.format, e.dtype, e.shape, out.verifiable));
  if (shaped != e.nbytes) {
    return Status::InvalidArgument("its dtype and shape make " + std::to_string(shaped) +
                                   " bytes, it says " + std::to_string(e.nbytes));
  }
  const uint64_t file = ManifestUnsigned(t, "file");
  if (file >= out.dir.files.size()) {
    return Status::InvalidArgument("it names file " + std::to_string(file) + " of " +
                                   std::to_string(out.dir.files.size()));
  }
  e.file = static_cast<uint32_t>(file);
  e.offset = ManifestUnsigned(t, "offset");
  if (e.offset > out.dir.files[file].size || e.nbytes > out.dir.files[file].size - e.offset) {
    return Status::InvalidArgument("it lies outside its file");
  }
  const uint64_t block = ManifestUnsigned(t, "block");
  const uint64_t at = ManifestUnsigned(t, "at");
  if (block >= blocks.size() || at > blocks[block].second || e.nbytes > blocks[block].second - at) {
    return Status::InvalidArgument("it lies outside its block");
  }
  place = {static_cast<size_t>(block), at};
  return Status::Ok();
}

// Checks the holder's description against the descriptors that came with it and builds the
// directory; kIoError naming the holder and the rule for anything that does not add up.
Status ReadManifest(const Json& j, size_t fds, const std::string& who, AttachedModel& out,
                    std::vector<std::pair<std::string, uint64_t>>& blocks,
                    std::vector<std::pair<size_t, uint64_t>>& places) {
  auto bad = [&who](const std::string& what) {
    return Status::IoError(who + " described its model wrongly: " + what);
  };
  try {
    for (const Json& b : j.at("blocks")) {
      blocks.emplace_back(ManifestString(b, "device"), ManifestUnsigned(b, "bytes"));
    }
    if (blocks.size() != fds) {
      return bad(std::to_string(blocks.size()) + " blocks and " + std::to_string(fds) +
                 " descriptors");
    }
    out.dir.format = ManifestString(j, "format");
    if (out.dir.format != "gguf" && out.dir.format != "safetensors") {
      return bad("format '" + Printable(out.dir.format, 40) + "'");
    }
    const Json& whole = j.at("whole_tensors");
    if (!whole.is_boolean()) return bad("'whole_tensors' is not true or false");
    out.verifiable = whole.get<bool>();
    for (const Json& f : j.at("files")) {
      out.dir.files.push_back({ManifestString(f, "path"), ManifestUnsigned(f, "size"), {}});
      if (f.contains("identity")) {
        const Json& id = f.at("identity");
        FileIdentity& identity = out.dir.files.back().identity;
        identity.device = ManifestUnsigned(id, "device");
        identity.inode = ManifestUnsigned(id, "inode");
        identity.size = ManifestUnsigned(id, "size");
        const uint64_t modified = ManifestUnsigned(id, "modified_ns");
        if (modified > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          throw std::invalid_argument("'modified_ns' is past 2^63-1");
        }
        identity.modified_ns = static_cast<int64_t>(modified);
        identity.known = true;
      }
    }
    for (const Json& t : j.at("tensor_list")) {
      TensorEntry e;
      std::pair<size_t, uint64_t> place;
      if (Status s = ReadManifestTensor(t, out, blocks, e, place); !s.ok()) {
        return bad("tensor " + std::to_string(out.dir.tensors.size()) + " ('" +
                   Printable(e.name, 80) + "'): " + s.message());
      }
      places.push_back(place);
      out.dir.tensors.push_back(std::move(e));
    }
  } catch (const std::exception& e) {  // a field missing or of another type
    return bad(e.what());
  }
  out.holder = SummaryFromJson(j);
  // One name per block: a part replicated on several devices has one name in each.
  std::set<std::pair<std::string_view, size_t>> names;
  for (size_t i = 0; i < out.dir.tensors.size(); ++i) {
    if (!names.insert({out.dir.tensors[i].name, places[i].first}).second) {
      return bad("two tensors are named '" + Printable(out.dir.tensors[i].name, 80) + "'");
    }
  }
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
  PeerCredentials listener;
  auto answer = Ask(path, "attach", request.timeout_s, who, &listener);
  if (!answer.ok() && answer.status().code() == Code::kNotFound) {
    return Status::NotFound("no model is held under '" + request.name + "' (nothing listens " +
                            "at " + path + "; hoist serve --list shows what is held)");
  }
  if (!answer.ok()) return answer.status();
  // Memory is taken only from this user, root, or a user trusted by name: whoever listens in a
  // directory others can write to could otherwise hand over its own memory as a model.
  const bool trusted = listener.uid == CurrentUserId() || listener.uid == 0 ||
                       std::find(request.trusted_uids.begin(), request.trusted_uids.end(),
                                 listener.uid) != request.trusted_uids.end();
  if (!trusted) {
    for (int fd : answer->fds) CloseDescriptor(fd);
    return Status::InvalidArgument(
        path + " is served by user " + std::to_string(listener.uid) + " (process " +
        std::to_string(listener.pid) + "), not this user or root: refused (hoist attach " +
        "--trust-uid " + std::to_string(listener.uid) + " takes memory from that user)");
  }
  HOIST_ASSIGN_OR_RETURN(Json j, AnswerJson(*answer, who));
  const std::optional<uint64_t> uid = UnsignedField(j, "uid");
  const std::optional<uint64_t> pid = UnsignedField(j, "pid");
  if (uid != uint64_t{listener.uid} || pid != static_cast<uint64_t>(listener.pid)) {
    for (int fd : answer->fds) CloseDescriptor(fd);
    return Status::IoError(
        who + " claims to be user " + (uid ? std::to_string(*uid) : std::string("?")) +
        ", process " + (pid ? std::to_string(*pid) : std::string("?")) + "; the kernel says user " +
        std::to_string(listener.uid) + ", process " + std::to_string(listener.pid) + ": refused");
  }
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
