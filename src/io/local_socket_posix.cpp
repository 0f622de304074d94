#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "base/platform.h"
#include "base/stall.h"
#include "io/local_socket.h"

namespace hoist {
namespace {

using Clock = std::chrono::steady_clock;

// Every message starts with these 4 bytes and its length (8 bytes, little-endian).
constexpr char kMessageMagic[4] = {'H', 'L', 'D', '1'};
constexpr size_t kHeaderBytes = 12;
// How often a wait looks at cancel and the stop signals.
constexpr int kPollSliceMs = 50;

std::string Errno() { return std::strerror(errno); }

Result<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument(path + ": a socket path holds at most " +
                                   std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Waits until fd is ready for `events`: true; false once the deadline passed. Cancelled by
// *cancel or a stop signal.
Result<bool> WaitForSocket(int fd, short events, Clock::time_point deadline,
                           const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel != nullptr && cancel->load()) return Status::Cancelled("cancelled");
    HOIST_RETURN_IF_ERROR(StopRequested());
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return Status::IoError("poll on a socket failed: " + Errno());
  }
}

Clock::time_point DeadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

// The length a message's header gives, checked.
Result<uint64_t> MessageLength(const std::string& header, const std::string& peer,
                               uint64_t max_bytes) {
  if (std::memcmp(header.data(), kMessageMagic, sizeof kMessageMagic) != 0) {
    return Status::IoError(peer + " does not speak hoist's protocol");
  }
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(header[4 + i])) << (8 * i);
  }
  if (length > max_bytes) {
    return Status::IoError(peer + " sent a message of " + std::to_string(length) +
                           " bytes, more than the " + std::to_string(max_bytes) + " it may");
  }
  return length;
}

void TakeDescriptors(msghdr& message, std::vector<int>& fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
}

}  // namespace

LocalConnection& LocalConnection::operator=(LocalConnection&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

LocalConnection::~LocalConnection() {
  if (fd_ >= 0) ::close(fd_);
}

Status LocalConnection::Send(const std::string& text, const std::vector<int>& fds, double timeout_s,
                             const std::string& peer) {
  if (fds.size() > kMaxLocalDescriptors || text.size() > kMaxLocalMessageBytes) {
    return Status::Internal("a message to " + peer + " too large to send");
  }
  std::string bytes(kMessageMagic, sizeof kMessageMagic);
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  bytes += text;
  const Clock::time_point deadline = DeadlineIn(timeout_s);
  size_t sent = 0;
  while (sent < bytes.size()) {
    iovec io{bytes.data() + sent, bytes.size() - sent};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    std::vector<char> control;
    if (sent == 0 && !fds.empty()) {  // the descriptors ride with the first byte
      control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
      message.msg_control = control.data();
      message.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&message);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      HOIST_ASSIGN_OR_RETURN(const bool ready, WaitForSocket(fd_, POLLOUT, deadline, nullptr));
      if (!ready) {
        return Status::Stalled(peer + " took no message for " + StallSeconds(timeout_s));
      }
      continue;
    }
    return Status::IoError(peer + " went away while it was sent a message: " + Errno());
  }
  return Status::Ok();
}

Result<LocalMessage> LocalConnection::Receive(double timeout_s, const std::atomic<bool>* cancel,
                                              const std::string& peer, uint64_t max_bytes) {
  LocalMessage out;
  if (Status s = ReceiveInto(out, timeout_s, cancel, peer, max_bytes); !s.ok()) {
    for (int fd : out.fds) ::close(fd);  // what came with a message never whole
    return s;
  }
  return out;
}

Status LocalConnection::ReceiveInto(LocalMessage& out, double timeout_s,
                                    const std::atomic<bool>* cancel, const std::string& peer,
                                    uint64_t max_bytes) {
  std::string bytes;
  uint64_t want = kHeaderBytes;
  const Clock::time_point deadline = DeadlineIn(timeout_s);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxLocalDescriptors));
  std::vector<char> buffer(1 << 16);
  while (bytes.size() < want) {
    iovec io{buffer.data(),
             static_cast<size_t>(std::min<uint64_t>(want - bytes.size(), buffer.size()))};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    const ssize_t n = ::recvmsg(fd_, &message, MSG_CMSG_CLOEXEC);
    if (n > 0) {
      TakeDescriptors(message, out.fds);
      bytes.append(buffer.data(), static_cast<size_t>(n));
      if (want == kHeaderBytes && bytes.size() >= kHeaderBytes) {
        HOIST_ASSIGN_OR_RETURN(const uint64_t length, MessageLength(bytes, peer, max_bytes));
        want = kHeaderBytes + length;
      }
      continue;
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {  // gone, with or without reading ours
      return Status::IoError(
          peer + " closed the connection " +
          (bytes.empty() ? std::string("without answering") : "in the middle of its message"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::IoError("reading from " + peer + ": " + Errno());
    }
    HOIST_ASSIGN_OR_RETURN(const bool ready, WaitForSocket(fd_, POLLIN, deadline, cancel));
    if (!ready) return Status::Stalled(peer + " sent no answer for " + StallSeconds(timeout_s));
  }
  out.text = bytes.substr(kHeaderBytes);
  return Status::Ok();
}

Result<PeerCredentials> LocalConnection::Peer() const {
#if defined(SO_PEERCRED)
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return Status::IoError("cannot read a peer's credentials: " + Errno());
  }
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
#else
  uid_t uid = 0;
  gid_t gid = 0;
  if (::getpeereid(fd_, &uid, &gid) != 0) {
    return Status::IoError("cannot read a peer's credentials: " + Errno());
  }
  return PeerCredentials{0, uid, gid};
#endif
}

Result<LocalListener> LocalListener::Listen(const std::string& path, bool others_may_connect) {
  HOIST_ASSIGN_OR_RETURN(const sockaddr_un address, AddressOf(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError("cannot create a socket: " + Errno());
  // Created with its mode from the start: no moment when another user could connect.
  const mode_t old_mask = ::umask(others_may_connect ? 0111 : 0177);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    ::close(fd);
    return Status::IoError(path + ": cannot listen there: " + std::strerror(bind_errno));
  }
  if (::listen(fd, 64) != 0) {
    Status failed = Status::IoError(path + ": cannot listen: " + Errno());
    ::close(fd);
    ::unlink(path.c_str());
    return failed;
  }
  return LocalListener(fd, path);
}

LocalListener::~LocalListener() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(path_.c_str());
}

Result<std::optional<LocalConnection>> LocalListener::Accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  if (n < 0 && errno != EINTR) return Status::IoError(path_ + ": poll failed: " + Errno());
  if (n <= 0) return std::optional<LocalConnection>();
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return std::optional<LocalConnection>();
    }
    return Status::IoError(path_ + ": accept failed: " + Errno());
  }
  return std::optional<LocalConnection>(LocalConnection(fd));
}

Result<LocalConnection> ConnectLocal(const std::string& path, double timeout_s) {
  HOIST_ASSIGN_OR_RETURN(const sockaddr_un address, AddressOf(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IoError("cannot create a socket: " + Errno());
  LocalConnection connection(fd);
  // A Unix socket whose backlog is full answers EAGAIN and is not left connecting (unlike TCP's
  // EINPROGRESS): the connect is tried again until the deadline, as the holder drains its queue.
  const Clock::time_point deadline = DeadlineIn(timeout_s);
  int result = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  while (result != 0 && errno == EAGAIN && Clock::now() < deadline) {
    HOIST_RETURN_IF_ERROR(StopRequested());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    result = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  }
  if (result == 0) return connection;
  if (errno == EAGAIN) {
    return Status::Stalled(path + ": no connection within " + StallSeconds(timeout_s) +
                           " (the holder's queue stayed full)");
  }
  if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTSOCK) {
    return Status::NotFound(path + ": nothing listens there (" + Errno() + ")");
  }
  if (errno == EACCES || errno == EPERM) {
    return Status::InvalidArgument(path + ": not allowed to connect (" + Errno() + ")");
  }
  if (errno != EAGAIN && errno != EINPROGRESS) {
    return Status::IoError(path + ": cannot connect: " + Errno());
  }
  // A full backlog: the holder is busy answering others.
  HOIST_ASSIGN_OR_RETURN(const bool ready, WaitForSocket(fd, POLLOUT, deadline, nullptr));
  if (!ready) return Status::Stalled(path + ": no connection within " + StallSeconds(timeout_s));
  int error = 0;
  socklen_t size = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error != 0) {
    return Status::NotFound(path + ": nothing listens there (" + std::strerror(error) + ")");
  }
  return connection;
}

Status EnsurePrivateDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IoError(path + ": cannot create the directory: " + Errno());
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::IoError(path + ": " + Errno());
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(path + ": not a directory (a link or a file is there)");
  }
  if (st.st_uid != ::getuid()) {
    return Status::InvalidArgument(path + ": owned by user " + std::to_string(st.st_uid) +
                                   ", not by this user (" + std::to_string(::getuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(path + ": open to other users (mode " + mode +
                                   "): it must be 0700");
  }
  return Status::Ok();
}

uint32_t CurrentUserId() { return ::getuid(); }
int64_t CurrentProcessId() { return ::getpid(); }

void CloseDescriptor(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace hoist
