// Servers on loopback for the remote sources' tests: free ports, connections, and the
// processes (nginx, the S3 server, the reference clients) the tests start.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;  // NOLINT: posix_spawn's environment

namespace hoist::testing {

inline int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof a;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    close(s);
    return -1;
  }
  close(s);
  return ntohs(a.sin_port);
}

inline int Connect(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// Starts argv[0] (a path) with this process's environment; with `out` set, its standard output
// goes to that file. -1 when it cannot start.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& out = "") {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!out.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = -1;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// A server this object starts and, when it ends, stops (SIGTERM, then waited for).
class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // As Spawn; false when it cannot start.
  bool Start(const std::vector<std::string>& argv, const std::string& out = "") {
    pid_ = Spawn(argv, out);
    return pid_ > 0;
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

// Runs argv to its end: its exit code, or -1.
inline int Run(const std::vector<std::string>& argv, const std::string& out = "") {
  const pid_t pid = Spawn(argv, out);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace hoist::testing
