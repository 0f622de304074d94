// A model held once and attached by other processes (hoist serve, hoist_attach,
// hoist.attach): the holder loads it through the façade into memory other processes can map
// (Device::AllocateShareable), listens on a Unix-domain socket named after it in a directory
// only its user can enter, and answers each attacher of an allowed user with the model's
// description and a descriptor of each device block. The attacher maps the blocks and, unless
// it shares them, copies them within its device. The memory is counted by descriptor: a holder
// killed while attached loses nothing for those attached, and the memory goes when the last
// process lets go. Nothing listens on a network.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "base/status.h"
#include "format/tensor_directory.h"
#include "io/local_socket.h"
#include "pipeline/loader.h"

namespace hoist {

// What `hoist serve --list` shows of a holder and its ready line says.
struct HeldSummary {
  std::string name;
  std::string model;  // as the holder was given it, secrets in URLs redacted
  std::string socket;
  int64_t pid = 0;
  uint32_t uid = 0;
  std::vector<std::string> devices;
  uint64_t bytes = 0;  // of tensors
  size_t tensors = 0;
  bool stale = false;  // a socket nobody listens at (its holder died): only --list shows these
};

nlohmann::ordered_json SummaryToJson(const HeldSummary& s);

// A name a model is held under: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.' or '-'.
Status CheckHeldName(const std::string& name);
// The name a model is held under when none is given: its path's last component without the
// format's extension, other characters as '-'.
std::string DefaultHeldName(const std::string& model_path);

struct HoldRequest {
  std::string model;                   // as OpenModel takes it
  std::string name;                    // empty: DefaultHeldName(model)
  LoadRequest load;                    // devices, split, settings
  std::vector<uint32_t> allowed_uids;  // besides the holder's own user
  std::vector<uint32_t> allowed_gids;  // a peer whose primary group is one of these
  // Where it listens; empty: NAME.sock in the user's own directory, which only the user can
  // enter (other users attach by a socket path given here, in a directory they can reach).
  std::string socket_path;
};

// A held model. Serve from one thread; destroying it stops listening, removes its socket and
// frees its memory (what attachers mapped stays theirs).
class HeldModel {
 public:
  // Opens and loads the model into shareable memory and listens under its name. A live holder
  // of that name is kInvalidArgument naming its pid; a stale socket is replaced.
  static Result<std::unique_ptr<HeldModel>> Hold(const HoldRequest& request);
  HeldModel(const HeldModel&) = delete;
  HeldModel& operator=(const HeldModel&) = delete;
  ~HeldModel();

  const HeldSummary& summary() const { return summary_; }
  const CompletedLoad& load() const { return *load_; }

  // Answers attachers until *stop is set or a stop signal comes (then OK). `note` is told of
  // each attach and refusal, in one line.
  Status Serve(const std::atomic<bool>* stop, const std::function<void(const std::string&)>& note);

 private:
  HeldModel() = default;
  Status Answer(LocalConnection& connection, const std::function<void(const std::string&)>& note);
  // The summary and the description attachers get, the blocks exported for them.
  Status DescribeForAttachers(const std::string& name, const std::string& path);
  // Each device block's descriptor (in blocks_) and its entry; block_of: device -> block or -1.
  Result<nlohmann::json> ExportBlocks(std::vector<int>& block_of);
  // Each loaded tensor's entry: where it lies in its block; bytes: their sum.
  Result<nlohmann::json> TensorList(const std::vector<int>& block_of, uint64_t& bytes) const;

  HoldRequest request_;
  std::unique_ptr<TensorDirectory> dir_;
  std::optional<CompletedLoad> load_;
  std::vector<ExportedMemory> blocks_;  // one per device that holds tensors, descriptors open
  std::string manifest_;
  std::optional<LocalListener> listener_;
  HeldSummary summary_;
};

struct AttachRequest {
  std::string name;    // a held name, or the path of a holder's socket (it holds a '/')
  std::string device;  // empty: the holder's devices; else it must be one of them
  bool share = false;  // map the holder's memory (read-only by contract), not a private copy
  double timeout_s = 10;
  // Users besides this one and root whose holders it takes memory from (the kernel says who
  // listens at the socket; an attach by path to anyone else's is refused).
  std::vector<uint32_t> trusted_uids;
};

// An attached model: its directory (names, dtypes, shapes; the files as the holder read them)
// and the tensors on the holder's devices, as a load's.
struct AttachedModel {
  TensorDirectory dir;
  std::unique_ptr<LoadedModel> model;
  ModelPlan plan;
  bool verifiable = false;  // the holder loaded whole tensors: Verify can compare them
  HeldSummary holder;
};

// Attaches to the model held under request.name. No holder is kNotFound saying how to list
// what is held; another user's holder, or a device it does not use, kInvalidArgument; a holder
// that closes mid-answer kIoError; no answer within the timeout kStalled.
Result<AttachedModel> Attach(const AttachRequest& request);

// Every holder of this user (live ones asked for their summary, stale sockets marked).
Result<std::vector<HeldSummary>> ListHeld(double timeout_s);

}  // namespace hoist
