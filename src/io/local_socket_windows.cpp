// hoist serve's sockets are Unix-domain sockets with descriptors passed between processes:
// not built for Windows.
#include "io/local_socket.h"

namespace hoist {
namespace {
Status NotBuilt() {
  return Status::Unavailable(
      "models held for other processes (hoist serve) are not built for "
      "Windows");
}
}  // namespace

LocalConnection& LocalConnection::operator=(LocalConnection&& other) noexcept {
  fd_ = other.fd_;
  other.fd_ = -1;
  return *this;
}
LocalConnection::~LocalConnection() = default;
Status LocalConnection::Send(const std::string&, const std::vector<int>&, double,
                             const std::string&) {
  return NotBuilt();
}
Result<LocalMessage> LocalConnection::Receive(double, const std::atomic<bool>*, const std::string&,
                                              uint64_t) {
  return NotBuilt();
}
Status LocalConnection::ReceiveInto(LocalMessage&, double, const std::atomic<bool>*,
                                    const std::string&, uint64_t) {
  return NotBuilt();
}
Result<PeerCredentials> LocalConnection::Peer() const { return NotBuilt(); }
Result<LocalListener> LocalListener::Listen(const std::string&, bool) { return NotBuilt(); }
LocalListener::~LocalListener() = default;
Result<std::optional<LocalConnection>> LocalListener::Accept(int) { return NotBuilt(); }
Result<LocalConnection> ConnectLocal(const std::string&, double) { return NotBuilt(); }
Status EnsurePrivateDirectory(const std::string&) { return NotBuilt(); }
uint32_t CurrentUserId() { return 0; }
int64_t CurrentProcessId() { return 0; }
void CloseDescriptor(int) {}

}  // namespace hoist
