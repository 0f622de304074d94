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

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
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

// Starts argv[0] (a path) with this process's environment; its standard output goes to `out`
// and its standard error to `out`.err when `out` is set, else nowhere. -1 when it cannot start.
// Never to the test's own: a server that outlives a test which crashed would hold ctest's pipe
// open, and ctest would wait for it until the test's timeout (300 s a test) instead of
// reporting the crash.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& out = "") {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string err = out.empty() ? "/dev/null" : out + ".err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.empty() ? "/dev/null" : out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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

// The body of GET `path` from the server on loopback `port`; "" when none came.
inline std::string GetBody(int port, const std::string& path) {
  const int s = Connect(port);
  if (s < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (send(s, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    close(s);
    return "";
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(s, buffer, sizeof buffer, 0)) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(s);
  const size_t body = answer.find("\r\n\r\n");
  return body == std::string::npos ? "" : answer.substr(body + 4);
}

// A fake server of tests/reference (node SCRIPT ARGS...) that prints "port N" once it listens,
// with the fakes' two control paths: GET /__counts and GET /__config?NAME=VALUE&...
class ReferenceServer {
 public:
  // `out`: the file its standard output goes to.
  ReferenceServer(const std::vector<std::string>& argv, const std::string& out) {
    process_.Start(argv, out);
    for (int i = 0; i < 300 && process_.started(); ++i) {  // up to 15 s for it to listen
      std::ifstream in(out);
      std::string word;
      if (in >> word >> port_ && word == "port") return;
      port_ = -1;
      // A pacing loop: the server writes its port to a file, which has no event to wait on.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  bool ok() const { return process_.started() && port_ > 0; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // What the server counted (each fake says what in its opening comment).
  nlohmann::json Counts() const {
    return nlohmann::json::parse(GetBody(port_, "/__counts"), nullptr, /*allow_exceptions=*/false);
  }
  // Sets the fake's knobs (each fake names its own).
  void Configure(const std::string& query) const { GetBody(port_, "/__config?" + query); }

 private:
  ServerProcess process_;
  int port_ = -1;
};

}  // namespace hoist::testing
