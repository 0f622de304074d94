// Unix-domain stream sockets between processes of one machine (a held model and the processes
// that attach to it, api/held_model.h): length-framed messages, file descriptors passed with
// them, the peer's credentials read from the kernel. One implementation per platform:
// local_socket_posix.cpp; Windows has none (kUnavailable).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace hoist {

// The largest message either side takes: a model's description of a million tensors fits.
inline constexpr uint64_t kMaxLocalMessageBytes = 256ull << 20;
// The most descriptors one message carries.
inline constexpr size_t kMaxLocalDescriptors = 64;

struct PeerCredentials {
  int64_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

struct LocalMessage {
  std::string text;
  std::vector<int> fds;  // the receiver's to close
};

// One connected socket; closed with the object. Not thread safe.
class LocalConnection {
 public:
  explicit LocalConnection(int fd) : fd_(fd) {}
  LocalConnection(LocalConnection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  LocalConnection& operator=(LocalConnection&& other) noexcept;
  LocalConnection(const LocalConnection&) = delete;
  LocalConnection& operator=(const LocalConnection&) = delete;
  ~LocalConnection();

  // Sends text with copies of fds (they stay the caller's). kStalled when the peer has not
  // taken it within timeout_s; kIoError naming `peer` when it has gone.
  Status Send(const std::string& text, const std::vector<int>& fds, double timeout_s,
              const std::string& peer);
  // One message of at most max_bytes. kStalled after timeout_s without its bytes, kCancelled
  // once *cancel is set or a stop signal came, kIoError naming `peer` when it closed before the
  // whole message or announced a longer one (refused before any of it is read).
  Result<LocalMessage> Receive(double timeout_s, const std::atomic<bool>* cancel,
                               const std::string& peer, uint64_t max_bytes = kMaxLocalMessageBytes);
  // Who is on the other side, as the kernel saw it connect.
  Result<PeerCredentials> Peer() const;

 private:
  Status ReceiveInto(LocalMessage& out, double timeout_s, const std::atomic<bool>* cancel,
                     const std::string& peer, uint64_t max_bytes);
  int fd_;
};

// A listening socket at a path, which is removed with the object. Not thread safe.
class LocalListener {
 public:
  // Binds and listens at path: the socket file's mode 0600, or 0666 when other users may
  // connect (the listener then checks each peer's credentials). kIoError when something is
  // there already: the caller decides whether it is stale.
  static Result<LocalListener> Listen(const std::string& path, bool others_may_connect);
  LocalListener(LocalListener&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
    other.fd_ = -1;
  }
  LocalListener(const LocalListener&) = delete;
  LocalListener& operator=(const LocalListener&) = delete;
  LocalListener& operator=(LocalListener&&) = delete;
  ~LocalListener();

  // The next connection, or nullopt when none came within timeout_ms.
  Result<std::optional<LocalConnection>> Accept(int timeout_ms);

 private:
  LocalListener(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// Connects to the socket at path. kNotFound when nothing is there or nothing listens
// (a stale socket: its holder is gone); kStalled after timeout_s.
Result<LocalConnection> ConnectLocal(const std::string& path, double timeout_s);

// Creates directory `path` (mode 0700) unless it exists, and checks that it is a directory,
// not a link, owned by this user, and open to no one else: kInvalidArgument saying which rule
// it breaks otherwise.
Status EnsurePrivateDirectory(const std::string& path);

// This process's user and process ids; 0 where the platform has none.
uint32_t CurrentUserId();
int64_t CurrentProcessId();

// Closes a descriptor received or exported.
void CloseDescriptor(int fd);

}  // namespace hoist
