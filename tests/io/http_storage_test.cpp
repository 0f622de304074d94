// The HTTP source against a real web server: nginx on loopback, over HTTP and HTTPS (a
// self-signed certificate the test trusts), serving sample models in every shape; and a proxy
// in front of it that fails, resets, stalls or changes what it serves, as networks and object
// stores do. Every tensor loaded over HTTP is compared byte for byte with the local file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/request.h"
#include "format/model.h"
#include "format/sample_model.h"
#include "io/http_storage.h"
#include "io/hub.h"
#include "io/loopback.h"
#include "io/s3.h"
#include "pipeline/load_checks.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::Connect;
using testing::ExpectByteExact;
using testing::FreePort;
using testing::MakeDevice;
using testing::Run;
using testing::RunHoist;
using testing::ServerProcess;
using testing::Spawn;

// nginx serving `root` over HTTP and HTTPS on two free loopback ports, as a foreground process
// this object stops.
class Nginx {
 public:
  explicit Nginx(const std::string& dir) : dir_(dir) {
    cert_ = dir + "/cert.pem";
    const std::string key = dir + "/key.pem";
    ok_ = Run({HOIST_OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
               "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert_, "-days",
               "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"}) == 0;
    http_ = FreePort();
    https_ = FreePort();
    std::ofstream conf(dir + "/nginx.conf");
    conf << "daemon off;\nworker_processes 2;\npid " << dir << "/nginx.pid;\nerror_log " << dir
         << "/error.log;\nevents { worker_connections 256; }\nhttp {\n  access_log off;\n";
    for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"}) {
      conf << "  " << temp << "_temp_path " << dir << "/tmp;\n";
    }
    conf << "  server { listen 127.0.0.1:" << http_ << "; root " << dir << "/root; }\n"
         << "  server { listen 127.0.0.1:" << https_ << " ssl; root " << dir << "/root;\n"
         << "    ssl_certificate " << cert_ << "; ssl_certificate_key " << key << "; }\n}\n";
    conf.close();
    std::filesystem::create_directories(dir + "/root");
    std::filesystem::create_directories(dir + "/tmp");
    process_.Start({HOIST_NGINX, "-c", dir + "/nginx.conf", "-p", dir, "-e", dir + "/error.log"});
    for (int i = 0; i < 200 && ok_; ++i) {  // up to 10 s for it to listen
      const int s = Connect(http_);
      if (s >= 0) {
        close(s);
        return;
      }
      // A pacing loop: nginx says nothing when it listens, so its port is polled.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ok_ = false;
  }
  bool ok() const { return ok_ && process_.started(); }
  std::string root() const { return dir_ + "/root"; }
  std::string http(const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(http_) + "/" + name;
  }
  std::string https(const std::string& name) const {
    return "https://127.0.0.1:" + std::to_string(https_) + "/" + name;
  }
  int http_port() const { return http_; }
  const std::string& cert() const { return cert_; }

 private:
  std::string dir_;
  std::string cert_;
  int http_ = -1;
  int https_ = -1;
  bool ok_ = false;
  ServerProcess process_;  // last: stopped first
};

// What the proxy does to the responses it relays.
enum class Fault : uint8_t {
  kNone,
  kFailFirst,     // the first `count` ranged GETs get 500
  kResetOnce,     // the first ranged GET's body is cut in half and the connection closed
  kStall,         // ranged GETs after the first `count` get their headers and then nothing
  kChangeETag,    // ranged GETs after the first `count` carry another ETag
  kIgnoreRanges,  // ranged GETs are answered 200 with the whole file
  kCorruptOnce,   // one byte changed in the first ranged GET past the header (not at byte 0)
  kNoETag,        // ranged GETs after the first `count` carry no ETag
  kShiftRange,    // ranged GETs after the first `count` get the bytes one later, said so
  kSwapFile,      // requests after the first `count` ranged GETs are answered for NAME.swap:
                  // the file replaced on the server by another (another layout, another ETag)
};

// A hostile server's own answer to a request (the request as received), or "" to relay it.
using Answer = std::function<std::string(const std::string& request)>;

// A proxy on a free loopback port in front of nginx's HTTP port: each request is sent to nginx
// on a connection of its own, its whole answer read, and relayed (or not) as `fault` says, on a
// client connection kept alive.
class FaultProxy {
 public:
  FaultProxy(int upstream, Fault fault, int count, Answer answer = nullptr)
      : upstream_(upstream), fault_(fault), count_(count), answer_(std::move(answer)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &n) == 0 &&
        listen(listener_, 64) == 0) {
      port_ = ntohs(a.sin_port);
    }
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FaultProxy() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    for (int s : clients_) shutdown(s, SHUT_RDWR);
    for (std::thread& t : workers_) t.join();
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string url(const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + name;
  }
  int ranged_gets() const { return ranged_gets_; }
  // Waits until `n` ranged GETs arrived or `seconds` passed; whether they did.
  bool WaitForRangedGets(int n, double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    return request_cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                                [&] { return ranged_gets_ >= n; });
  }
  int port() const { return port_; }
  // Every request received, in order.
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  void Accept() {
    while (!stop_) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      clients_.push_back(client);
      workers_.emplace_back([this, client] { Serve(client); });
    }
  }

  static bool SendAll(int s, const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(s, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // The upstream's whole answer to `request` (sent with Connection: close).
  std::string Upstream(std::string request) const {
    const size_t end = request.find("\r\n\r\n");
    request.insert(end, "\r\nConnection: close");
    const int s = Connect(upstream_);
    if (s < 0 || !SendAll(s, request)) {
      if (s >= 0) close(s);
      return {};
    }
    std::string answer;
    char buffer[1 << 16];
    for (ssize_t n; (n = recv(s, buffer, sizeof buffer, 0)) > 0;) {
      answer.append(buffer, static_cast<size_t>(n));
    }
    close(s);
    return answer;
  }

  void Serve(int client) {
    std::string pending;
    char buffer[1 << 14];
    while (!stop_) {
      const size_t end = pending.find("\r\n\r\n");
      if (end == std::string::npos) {
        const ssize_t n = recv(client, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        pending.append(buffer, static_cast<size_t>(n));
        continue;
      }
      std::string request = pending.substr(0, end + 4);
      pending.erase(0, end + 4);
      const bool ranged =
          request.rfind("GET ", 0) == 0 && request.find("Range:") != std::string::npos;
      const int index = ranged ? ranged_gets_++ : -1;
      if (fault_ == Fault::kSwapFile && (ranged ? index : ranged_gets_.load()) >= count_) {
        const size_t path_end = request.find(' ', request.find(' ') + 1);
        request.insert(path_end, ".swap");
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(request);
        request_cv_.notify_all();
      }
      if (answer_) {
        if (const std::string own = answer_(request); !own.empty()) {
          if (!SendAll(client, own)) break;
          continue;
        }
      }
      if (!Relay(client, request, ranged, index)) break;
    }
    close(client);
  }

  bool Relay(int client, std::string request, bool ranged, int index) {
    if (ranged && fault_ == Fault::kFailFirst && index < count_) {
      return SendAll(client, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n");
    }
    if (ranged && fault_ == Fault::kIgnoreRanges) {
      const size_t range = request.find("Range:");
      request.erase(range, request.find("\r\n", range) + 2 - range);
    }
    std::string answer = Upstream(request);
    const size_t head_end = answer.find("\r\n\r\n") + 4;
    if (ranged && fault_ == Fault::kChangeETag && index >= count_) {
      const size_t etag = answer.find("ETag: \"");
      if (etag != std::string::npos) answer.replace(etag + 7, 1, "f");
    }
    if (ranged && fault_ == Fault::kNoETag && index >= count_) {
      const size_t etag = answer.find("ETag: ");
      if (etag != std::string::npos) answer.erase(etag, answer.find("\r\n", etag) + 2 - etag);
    }
    if (ranged && fault_ == Fault::kShiftRange && index >= count_) {
      // The next bytes' answer for this range, which says (truthfully) that it is theirs.
      const size_t range = request.find("Range: bytes=") + 13;
      const uint64_t first = std::stoull(request.substr(range));
      const uint64_t last = std::stoull(request.substr(request.find('-', range) + 1));
      std::string shifted = request;
      shifted.replace(range, request.find("\r\n", range) - range,
                      std::to_string(first + 1) + "-" + std::to_string(last + 1));
      answer = Upstream(shifted);
    }
    if (ranged && fault_ == Fault::kStall && index >= count_) {
      SendAll(client, answer.substr(0, head_end));
      // The fault under test: the answer stops after its head until the proxy stops (a
      // pacing loop: stop_ is set from the proxy's destructor).
      while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return false;
    }
    if (ranged && fault_ == Fault::kCorruptOnce && answer.size() > head_end &&
        request.find("Range: bytes=0-") == std::string::npos && !corrupted_.exchange(true)) {
      answer[head_end + (answer.size() - head_end) / 2] ^= 0x40;
    }
    if (ranged && fault_ == Fault::kResetOnce && index == 0) {
      SendAll(client, answer.substr(0, head_end + (answer.size() - head_end) / 2));
      return false;  // closes the connection mid-body
    }
    return SendAll(client, answer);
  }

  int upstream_;
  Fault fault_;
  int count_;
  Answer answer_;
  int listener_ = -1;
  int port_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> ranged_gets_{0};
  std::condition_variable request_cv_;  // with mutex_: a request arrived
  std::atomic<bool> corrupted_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::vector<int> clients_;
  std::vector<std::string> requests_;
  std::vector<std::thread> workers_;
};

class HttpStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Nginx>(tmp_.path());
    ASSERT_TRUE(server_->ok()) << "nginx did not start; see " << tmp_.File("error.log");
  }

  // Writes a sample model under the server's root; its local directory.
  TensorDirectory Write(const std::string& name, SampleSpec spec) {
    auto dir = WriteSampleModel(server_->root() + "/" + name, spec);
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    auto opened = ReadModelDirectory(server_->root() + "/" + name);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : TensorDirectory{};
  }

  HttpOptions Options() const {
    HttpOptions o;
    o.ca_file = server_->cert();
    o.retries = 3;
    o.stall_timeout_s = 2;
    return o;
  }

  // Opens `url` through a source of its own and loads it onto a host device with `options`;
  // the directory (its source() tells the source's counts) in *dir_out.
  Result<std::unique_ptr<LoadedModel>> LoadUrl(const std::string& url, HttpOptions http,
                                               TensorDirectory* dir_out, LoadOptions options = {}) {
    HOIST_ASSIGN_OR_RETURN(TensorDirectory dir, ReadModelDirectory(MakeHttpStorage(http), url));
    if (options.threads == 0) options.threads = 4;
    if (options.chunk_bytes == 0) options.chunk_bytes = 1 << 20;
    auto model = Load(dir, MakeDevice("host"), options);
    *dir_out = std::move(dir);
    return model;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Nginx> server_;
};

TEST(HubNames, RepoIdsAndRevisionsFollowTheHubsRules) {
  auto name = ParseHubName("hf://Qwen/Qwen2.5-0.5B_v1.1@refs/pr/3");
  ASSERT_TRUE(name.ok() && name->has_value());
  EXPECT_EQ((*name)->repo, "Qwen/Qwen2.5-0.5B_v1.1");
  EXPECT_EQ((*name)->revision, "refs/pr/3");
  name = ParseHubName("hf://org/name");
  ASSERT_TRUE(name.ok() && name->has_value());
  EXPECT_EQ((*name)->revision, "main");
  EXPECT_FALSE(ParseHubName("./org/name")->has_value());
  for (const char* bad : {"hf://org", "hf://org/", "hf:///name", "hf://org/name/extra",
                          "hf://-org/name", "hf://org/.name", "hf://org/na me", "hf://org/name@",
                          "hf://org/name@a b", "hf://org/name@x@y"}) {
    EXPECT_EQ(ParseHubName(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(IsHubRepoId("a/b"));
  EXPECT_FALSE(IsHubRepoId("a/b/c"));
  EXPECT_FALSE(IsHubRepoId("ab"));
}

TEST_F(HttpStorageTest, EveryShapeOfModelLoadsByteExactOverHttpAndHttps) {
  struct Case {
    std::string name;  // what the user names: a file, an index, the first split
    std::string format;
    int shards;
  };
  for (const Case& c : {Case{"a.safetensors", "safetensors", 1}, Case{"b.gguf", "gguf", 1},
                        Case{"c/model.safetensors.index.json", "safetensors", 3},
                        Case{"d/m-00001-of-00002.gguf", "gguf", 2}}) {
    SCOPED_TRACE(c.name);
    std::filesystem::create_directories(
        std::filesystem::path(server_->root() + "/" + c.name).parent_path());
    SampleSpec spec;
    spec.format = c.format;
    spec.shards = c.shards;
    spec.target_bytes = 6 << 20;
    const TensorDirectory local = Write(c.name, spec);
    for (const std::string& url : {server_->http(c.name), server_->https(c.name)}) {
      SCOPED_TRACE(url);
      TensorDirectory remote;
      auto model = LoadUrl(url, Options(), &remote);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      ASSERT_EQ(remote.tensors.size(), local.tensors.size());
      ASSERT_EQ(remote.files.size(), static_cast<size_t>(c.shards));
      ExpectByteExact(local, **model);  // every tensor against the local file's bytes
      EXPECT_GT(remote.source().counters().requests, 0u);
      EXPECT_EQ(remote.source().counters().retries, 0u);
    }
  }
}

// Threads left to hoist: an HTTP source gets the 16 requests in flight it serves best, however
// few the cores; threads the caller sets are kept.
TEST_F(HttpStorageTest, ALoadOverHttpKeepsTheRequestsInFlightTheSourcePrefers) {
  SampleSpec spec;
  spec.format = "safetensors";
  spec.target_bytes = 6 << 20;
  const TensorDirectory local = Write("t.safetensors", spec);
  ASSERT_EQ(MakeHttpStorage(Options())->capabilities().preferred_reads_in_flight, 16);
  for (const int threads : {0, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    auto dir = ReadModelDirectory(MakeHttpStorage(Options()), server_->http("t.safetensors"));
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    LoadOptions options;
    options.threads = threads;
    options.chunk_bytes = 256 << 10;
    auto model = Load(*dir, MakeDevice("host"), options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->report.threads, threads == 0 ? std::max(16, DefaultReaderThreads()) : 3);
    ExpectByteExact(local, **model);
  }
}

TEST_F(HttpStorageTest, AMissingFileAnUntrustedCertificateAndAServerThatIgnoresRanges) {
  TensorDirectory remote;
  auto missing = LoadUrl(server_->http("nothing.safetensors"), Options(), &remote);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), server_->http("nothing.safetensors") + ": 404 Not Found");

  Write("a.safetensors", SampleSpec{"safetensors", 1 << 20});
  HttpOptions untrusting = Options();
  untrusting.ca_file = tmp_.File("nothing.pem");  // trusts no one: the peer is not verified
  auto untrusted = LoadUrl(server_->https("a.safetensors"), untrusting, &remote);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), Code::kIoError);
  EXPECT_EQ(untrusted.status().message().rfind(server_->https("a.safetensors") + ": ", 0), 0u)
      << untrusted.status().message();

  FaultProxy proxy(server_->http_port(), Fault::kIgnoreRanges, 0);
  auto whole = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find(
                "(it ignores byte ranges); serve the model with one that answers Range requests "
                "(nginx, Apache, caddy, or `npx http-server`; Python's http.server does not)"),
            std::string::npos)
      << whole.status().message();

  // A directory's URL is named as one, not blamed on credentials.
  std::filesystem::create_directories(server_->root() + "/models");
  auto directory = LoadUrl(server_->http("models/"), Options(), &remote);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(),
            server_->http("models/") +
                ": 403 Forbidden (a directory's URL: name the model's file, or the .index.json of "
                "a sharded model)");
}

TEST_F(HttpStorageTest, FailuresThatPassAreRetriedAndTheBytesStayExact) {
  SampleSpec spec{"safetensors", 4 << 20};
  const TensorDirectory local = Write("a.safetensors", spec);
  for (const Fault fault : {Fault::kFailFirst, Fault::kResetOnce}) {
    SCOPED_TRACE(static_cast<int>(fault));
    FaultProxy proxy(server_->http_port(), fault, 2);
    TensorDirectory remote;
    auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
    EXPECT_GE(remote.source().counters().retries, fault == Fault::kFailFirst ? 2u : 1u);
  }
  // Past the retries: the last error, naming the URL and the range.
  FaultProxy failing(server_->http_port(), Fault::kFailFirst, 1000);
  TensorDirectory remote;
  HttpOptions once = Options();
  once.retries = 1;
  auto failed = LoadUrl(failing.url("a.safetensors"), once, &remote);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kIoError);
  EXPECT_NE(
      failed.status().message().find(failing.url("a.safetensors") + ": 500 Internal Server Error"),
      std::string::npos)
      << failed.status().message();
}

TEST_F(HttpStorageTest, AFileReplacedWhileItIsReadIsAnErrorNotMixedBytes) {
  Write("a.safetensors", SampleSpec{"safetensors", 4 << 20});
  FaultProxy proxy(server_->http_port(), Fault::kChangeETag, 1);
  TensorDirectory remote;
  auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged);
  EXPECT_NE(model.status().message().find(proxy.url("a.safetensors") +
                                          " changed while it was read (ETag was \""),
            std::string::npos)
      << model.status().message();
}

TEST_F(HttpStorageTest, AStalledServerIsTheWatchdogsWithinItsTimeout) {
  Write("a.safetensors", SampleSpec{"safetensors", 4 << 20});
  FaultProxy proxy(server_->http_port(), Fault::kStall, 2);
  TensorDirectory remote;
  HttpOptions patient = Options();
  patient.stall_timeout_s = 30;  // the transfer would wait longer than the load's watchdog
  LoadOptions options;
  options.stall_timeout_s = 1;
  const auto start = std::chrono::steady_clock::now();
  auto model = LoadUrl(proxy.url("a.safetensors"), patient, &remote, options);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kStalled) << model.status().ToString();
  EXPECT_LT(waited, 10.0);
}

// --stall-timeout bounds the opening too: a server that stalls the header's read (after its
// answer's head) ends the load at the stall timeout, exit 3, not after the HTTP source's own
// 30 s and its retries.
TEST_F(HttpStorageTest, AStalledOpenEndsAtTheLoadsStallTimeout) {
  Write("a.safetensors", SampleSpec{"safetensors", 1 << 20});
  FaultProxy proxy(server_->http_port(), Fault::kStall, 0);  // every ranged GET, the header's too
  const auto start = std::chrono::steady_clock::now();
  const auto r = testing::RunHoist(
      {"load", proxy.url("a.safetensors"), "--device", "host", "--stall-timeout", "2", "--quiet"});
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.err.find("hoist: " + proxy.url("a.safetensors") +
                       ": no progress for 2.0 s (under 1 KiB/s) reading bytes 0-"),
            0u)
      << r.err;
  EXPECT_LT(waited, testing::TimeBound(2 + 5));
}

TEST_F(HttpStorageTest, SigtermMidDownloadEndsTheLoadWithin2Seconds) {
  Write("a.safetensors", SampleSpec{"safetensors", 4 << 20});
  FaultProxy proxy(server_->http_port(), Fault::kStall, 2);  // the load's reads never finish
  const pid_t pid = Spawn({HOIST_CLI, "load", proxy.url("a.safetensors"), "--device", "host",
                           "--stall-timeout", "600", "--quiet"});
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(proxy.WaitForRangedGets(3, 30)) << "the load never asked for its ranges";
  const auto sent = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    ASSERT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(5)) << "no exit";
    // A pacing loop: a child's exit is polled with waitpid(WNOHANG).
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  EXPECT_LT(took, 2.0);
}

// hf://ORG/NAME: the hub's layout (its listing at /api/models/REPO/revision/REV, its files at
// /REPO/resolve/COMMIT/FILE) served by nginx under HF_ENDPOINT, and the local cache first.
TEST_F(HttpStorageTest, AHuggingFaceRepoIdLoadsFromTheCacheElseFromTheHub) {
  const std::string commit(40, 'c');
  std::filesystem::create_directories(server_->root() + "/api/models/org/name/revision");
  std::ofstream(server_->root() + "/api/models/org/name/revision/main")
      << R"({"id": "org/name", "sha": ")" << commit
      << R"(", "siblings": [{"rfilename": "config.json"}, {"rfilename": "README.md"},)"
      << R"( {"rfilename": "model.safetensors.index.json"}, {"rfilename": "x/extra.gguf"}]})";
  const std::string files = "org/name/resolve/" + commit;
  std::filesystem::create_directories(server_->root() + "/" + files);
  SampleSpec spec{"safetensors", 6 << 20};
  spec.shards = 2;
  const TensorDirectory local = Write(files + "/model.safetensors.index.json", spec);
  const std::string cache = tmp_.File("cache");
  std::filesystem::create_directories(cache);
  ASSERT_EQ(setenv("HF_ENDPOINT",
                   ("http://127.0.0.1:" + std::to_string(server_->http_port())).c_str(), 1),
            0);
  ASSERT_EQ(setenv("HF_HUB_CACHE", cache.c_str(), 1), 0);
  ASSERT_EQ(setenv("HF_TOKEN", "secret-token", 1), 0);
  auto from_hub = ReadModelDirectory("hf://org/name");
  ASSERT_TRUE(from_hub.ok()) << from_hub.status().ToString();
  ASSERT_EQ(from_hub->files.size(), 2u);
  EXPECT_EQ(from_hub->files[0].path.rfind(server_->http(files) + "/model-", 0), 0u)
      << from_hub->files[0].path;
  {
    auto model = Load(*from_hub, MakeDevice("host"), LoadOptions{});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
  }
  // Which files make the model is the rule of any directory (format/model.cpp): without an
  // index, every top-level .safetensors file of the listing, as from the cache.
  {
    std::ofstream listing(server_->root() + "/api/models/org/name/revision/shards");
    listing << R"({"sha": ")" << commit << R"(", "siblings": [)";
    for (size_t i = 0; i < local.files.size(); ++i) {
      listing << (i ? ", " : "") << R"({"rfilename": ")"
              << std::filesystem::path(local.files[i].path).filename().string() << R"("})";
    }
    listing << "]}";
  }
  auto shards = ReadModelDirectory("hf://org/name@shards");
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  EXPECT_EQ(shards->files.size(), 2u);
  EXPECT_EQ(shards->tensors.size(), local.tensors.size());
  auto bad = ReadModelDirectory("hf://org/name@nothing");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kNotFound) << bad.status().ToString();
  EXPECT_EQ(ReadModelDirectory("hf://not-a-repo").status().message(),
            "hf://not-a-repo: not a Hugging Face repo id (hf://ORG/NAME[@REVISION])");

  // A hub whose listing names a commit that is a path is refused before any file is asked.
  std::ofstream(server_->root() + "/api/models/org/name/revision/evil")
      << R"({"sha": "../../../etc", "siblings": [{"rfilename": "model.safetensors"}]})";
  EXPECT_EQ(ReadModelDirectory("hf://org/name@evil").status().message(),
            "http://127.0.0.1:" + std::to_string(server_->http_port()) +
                "/api/models/org/name/revision/evil: the hub's answer names the commit "
                "'../../../etc', not 40 hex digits: refused");

  // In the cache (refs/main names the snapshot): read from there, the hub not asked. As
  // huggingface_hub lays it out: each snapshot file a link to ../../blobs/HASH.
  const std::string repo = cache + "/models--org--name";
  const std::string snapshot = repo + "/snapshots/" + commit;
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(repo + "/blobs");
  std::filesystem::create_directories(repo + "/refs");
  std::ofstream(repo + "/refs/main") << commit;
  std::vector<std::string> paths;
  for (const FileEntry& f : local.files) paths.push_back(f.path);
  paths.push_back(server_->root() + "/" + files + "/model.safetensors.index.json");
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string blob = "blob" + std::to_string(i);
    std::filesystem::copy(paths[i], repo + "/blobs/" + blob);
    std::filesystem::create_symlink(
        "../../blobs/" + blob,
        snapshot + "/" + std::filesystem::path(paths[i]).filename().string());
  }
  setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);  // nothing listens: the hub is not asked
  // A ref that holds a path, not a commit, is not followed out of the cache.
  std::ofstream(repo + "/refs/evil") << "../../../" << commit;
  EXPECT_EQ(ReadModelDirectory("hf://org/name@evil").status().code(), Code::kIoError);
  for (const char* bad : {"hf://org/name@../../x", "hf://org/name@a//b", "hf://org/name@./a"}) {
    EXPECT_EQ(ReadModelDirectory(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  auto cached = ReadModelDirectory("hf://org/name");
  unsetenv("HF_ENDPOINT");
  unsetenv("HF_HUB_CACHE");
  unsetenv("HF_TOKEN");
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->files[0].path.rfind(snapshot + "/", 0), 0u) << cached->files[0].path;
  auto model = Load(*cached, MakeDevice("host"), LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);
}

// A password in HF_ENDPOINT or a URL, a token in HF_TOKEN, a signature in a query: no refusal of
// the hub's or a URL's path shows them, whichever way its message was made (a listing too large
// to take once printed the endpoint whole).
TEST_F(HttpStorageTest, NoRefusalShowsASecretOfTheUrlOrTheEnvironment) {
  const std::string root = server_->root() + "/api/models/org";
  for (const char* repo : {"big", "text", "sha"}) {
    std::filesystem::create_directories(root + "/" + repo + "/revision");
  }
  {
    std::ofstream big(root + "/big/revision/main");
    big << R"({"sha": ")" << std::string(40, 'c') << R"(", "pad": ")";
  }
  std::filesystem::resize_file(root + "/big/revision/main", 17 << 20);  // past the 16 MiB cap
  std::ofstream(root + "/text/revision/main") << "not json";
  std::ofstream(root + "/sha/revision/main") << R"({"sha": "../../etc"})";
  const std::string port = std::to_string(server_->http_port());
  const std::vector<std::string> secrets = {"Pw-secret", "hf-secret-token", "sig-secret"};
  testing::SetVariable("HF_TOKEN", "hf-secret-token");
  testing::SetVariable("HF_HUB_CACHE", tmp_.File("empty-cache").c_str());
  struct Case {
    std::string endpoint;  // HF_ENDPOINT; empty: the name is a URL
    std::string name;
  };
  const std::string with_password = "http://user:Pw-secret@127.0.0.1:";
  const std::vector<Case> cases = {
      {with_password + port, "hf://org/big"},
      {with_password + port, "hf://org/text"},
      {with_password + port, "hf://org/sha"},
      {with_password + port, "hf://org/missing"},
      {with_password + "1", "hf://org/big"},  // nothing listens
      {"", with_password + port + "/gone.safetensors"},
      {"", "http://127.0.0.1:" + port + "/gone.safetensors?sv=1&sig=sig-secret"},
      {"", with_password + port + "/api/models/org/text/revision/main?sig=sig-secret"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.endpoint + " " + c.name);
    testing::SetVariable("HF_ENDPOINT", c.endpoint.empty() ? nullptr : c.endpoint.c_str());
    for (const char* command : {"inspect", "load"}) {
      std::vector<std::string> args = {command, c.name};
      if (std::string(command) == "load") args.insert(args.end(), {"--device", "host"});
      const auto r = RunHoist(args);
      EXPECT_NE(r.exit_code, 0);
      EXPECT_FALSE(r.err.empty());
      for (const std::string& secret : secrets) {
        EXPECT_EQ(r.err.find(secret), std::string::npos) << secret << " in: " << r.err;
        EXPECT_EQ(r.out.find(secret), std::string::npos) << secret << " in: " << r.out;
      }
    }
  }
  testing::SetVariable("HF_ENDPOINT", nullptr);
  testing::SetVariable("HF_TOKEN", nullptr);
  testing::SetVariable("HF_HUB_CACHE", nullptr);
}

// HF_HUB_OFFLINE=1 (as huggingface_hub reads it): the cache or a clear "not found", never the
// hub, though the hub here would answer; 0 or a typo is online.
TEST_F(HttpStorageTest, HfHubOfflineReadsTheCacheAndNeverAsksTheHub) {
  const std::string commit(40, 'c');
  std::filesystem::create_directories(server_->root() + "/api/models/org/name/revision");
  std::ofstream(server_->root() + "/api/models/org/name/revision/main")
      << R"({"sha": ")" << commit << R"(", "siblings": [{"rfilename": "model.safetensors"}]})";
  const TensorDirectory local = Write("org/name/resolve/" + commit + "/model.safetensors",
                                      SampleSpec{"safetensors", 1 << 20});
  const std::string cache = tmp_.File("offline-cache");
  std::filesystem::create_directories(cache);
  ASSERT_EQ(setenv("HF_ENDPOINT",
                   ("http://127.0.0.1:" + std::to_string(server_->http_port())).c_str(), 1),
            0);
  ASSERT_EQ(setenv("HF_HUB_CACHE", cache.c_str(), 1), 0);
  for (const char* offline : {"1", "ON", "yes", "True"}) {
    ASSERT_EQ(setenv("HF_HUB_OFFLINE", offline, 1), 0);
    const auto refused = ReadModelDirectory("hf://org/name");
    ASSERT_FALSE(refused.ok()) << offline;
    EXPECT_EQ(refused.status().code(), Code::kNotFound) << offline;
    EXPECT_EQ(refused.status().message(),
              "hf://org/name@main: not in the Hugging Face cache (" + cache +
                  ") and HF_HUB_OFFLINE is set, so the hub is not asked: download it while "
                  "online (huggingface-cli download org/name --revision main) or unset "
                  "HF_HUB_OFFLINE")
        << offline;
  }
  const auto r = RunHoist({"load", "hf://org/name", "--device", "host", "--quiet"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HF_HUB_OFFLINE is set, so the hub is not asked"), std::string::npos)
      << r.err;
  for (const char* online : {"0", "off", "maybe"}) {
    ASSERT_EQ(setenv("HF_HUB_OFFLINE", online, 1), 0);
    const auto from_hub = ReadModelDirectory("hf://org/name");
    ASSERT_TRUE(from_hub.ok()) << online << ": " << from_hub.status().ToString();
    EXPECT_EQ(from_hub->files[0].path.rfind(server_->http(""), 0), 0u) << online;
  }
  // Cached: read from the cache while offline, byte-exact.
  ASSERT_EQ(setenv("HF_HUB_OFFLINE", "1", 1), 0);
  const std::string snapshot = cache + "/models--org--name/snapshots/" + commit;
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(cache + "/models--org--name/refs");
  std::ofstream(cache + "/models--org--name/refs/main") << commit;
  std::filesystem::copy(local.files[0].path, snapshot + "/model.safetensors");
  auto cached = ReadModelDirectory("hf://org/name");
  unsetenv("HF_HUB_OFFLINE");
  unsetenv("HF_ENDPOINT");
  unsetenv("HF_HUB_CACHE");
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->files[0].path, snapshot + "/model.safetensors");
  auto model = Load(*cached, MakeDevice("host"), LoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);
}

// HTTP carries no checksum of its own: a byte changed in transit loads as it came, and `hoist
// verify`, which reads the file again, names the tensor it lands in.
TEST_F(HttpStorageTest, BytesCorruptedInTransitAreCaughtByVerifyNamingTheTensor) {
  const TensorDirectory local = Write("a.safetensors", SampleSpec{"safetensors", 2 << 20});
  {
    FaultProxy proxy(server_->http_port(), Fault::kCorruptOnce, 0);
    TensorDirectory remote;
    auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote, {.chunk_bytes = 1 << 20});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    size_t differing = 0;
    for (size_t i = 0; i < local.tensors.size(); ++i) {
      const TensorEntry& t = local.tensors[i];
      differing += testing::LoadedBytes(**model, i, t.nbytes) != testing::FileBytes(local, t);
    }
    EXPECT_EQ(differing, 1u);
  }
  FaultProxy proxy(server_->http_port(), Fault::kCorruptOnce, 0);
  const auto r = RunHoist({"verify", proxy.url("a.safetensors"), "--device", "host"});
  EXPECT_EQ(r.exit_code, 5) << r.err;  // the device's bytes differ from the file's
  EXPECT_NE(r.err.find("tensors on host differ from " + proxy.url("a.safetensors") + ":\n  "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(": first difference at byte "), std::string::npos) << r.err;
}

TEST_F(HttpStorageTest, TheCliLoadsAndVerifiesAUrlAndNamesItInErrors) {
  Write("a.gguf", SampleSpec{"gguf", 2 << 20});
  auto r = RunHoist({"verify", server_->http("a.gguf"), "--device", "sim"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunHoist({"load", server_->http("a.gguf"), "--device", "host", "--json", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["source"]["kind"], "HTTP");
  EXPECT_GT(report["source"]["requests"].get<uint64_t>(), 0u);
  EXPECT_EQ(report["source"]["retries"].get<uint64_t>(), 0u);
  EXPECT_GE(report["source"]["bytes"].get<uint64_t>(), report["bytes"].get<uint64_t>());
  // The doctor measures the source: its first byte, one stream and a load's many.
  r = RunHoist({"doctor", server_->http("a.gguf"), "--device", "sim", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doctor = nlohmann::json::parse(r.out);
  EXPECT_EQ(doctor["machine"]["source"], "HTTP");
  EXPECT_GT(doctor["machine"]["time_to_first_byte_s"].get<double>(), 0.0);
  EXPECT_GT(doctor["ceilings"]["source_one_stream_gbps"].get<double>(), 0.0);
  EXPECT_GT(doctor["ceilings"]["source_streams_gbps"].get<double>(), 0.0);
  r = RunHoist({"load", server_->http("gone.gguf"), "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + server_->http("gone.gguf") + ": 404 Not Found\n");
}

// A hostile server: an answer that says it holds other bytes than those asked for, or that
// comes without the version the file had when opened, is refused, never loaded as the file's.
TEST_F(HttpStorageTest, AnswersOfOtherBytesOrOfNoVersionAreRefused) {
  Write("a.safetensors", SampleSpec{"safetensors", 2 << 20});
  {
    FaultProxy proxy(server_->http_port(), Fault::kShiftRange, 0);
    TensorDirectory remote;
    auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kIoError) << model.status().ToString();
    EXPECT_NE(model.status().message().find(proxy.url("a.safetensors") +
                                            ": the server answered a request for bytes 0-"),
              std::string::npos)
        << model.status().message();
    EXPECT_NE(model.status().message().find(" with bytes 1-"), std::string::npos)
        << model.status().message();
  }
  FaultProxy proxy(server_->http_port(), Fault::kNoETag, 1);
  TensorDirectory remote;
  auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged) << model.status().ToString();
  EXPECT_NE(model.status().message().find(" without the version it had when opened (\""),
            std::string::npos)
      << model.status().message();
}

// The version (ETag) seen when the model was opened is the one every later open must find: a
// file replaced between the parse and the load is refused, not loaded as the new bytes.
TEST_F(HttpStorageTest, AFileReplacedBetweenItsOpenAndItsLoadIsRefused) {
  Write("a.safetensors", SampleSpec{"safetensors", 2 << 20});
  auto dir = ReadModelDirectory(MakeHttpStorage(Options()), server_->http("a.safetensors"));
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  // Other bytes of the same size under the same name (nginx's ETag: modification time, size).
  const std::string path = server_->root() + "/a.safetensors";
  std::vector<unsigned char> bytes = testing::ReadBytes(path);
  bytes[bytes.size() - 7] ^= 0xff;
  const auto modified = std::filesystem::last_write_time(path);
  testing::WriteBytes(path, bytes);
  std::filesystem::last_write_time(path, modified + std::chrono::seconds(10));
  auto model = Load(*dir, MakeDevice("host"), LoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), Code::kFileChanged) << model.status().ToString();
  EXPECT_NE(model.status().message().find(server_->http("a.safetensors") +
                                          ": replaced (its version went from \""),
            std::string::npos)
      << model.status().message();
}

// A file replaced on the server between the header's read and the data's (another layout,
// another version): every command that reads it refuses with exit 6 and leaves no output, never
// writing one version's header with the other's bytes (pack once did, and its --check passed).
TEST_F(HttpStorageTest, AFileReplacedAfterItsHeaderIsRefusedByEveryCommand) {
  Write("a.safetensors", SampleSpec{"safetensors", 2 << 20});
  SampleSpec other{"safetensors", 3 << 20};
  other.seed = 77;
  Write("a.safetensors.swap", other);
  const std::string out = tmp_.File("out.hoistpack");
  const std::vector<std::vector<std::string>> commands = {
      {"load", "URL", "--device", "host", "--quiet"},
      {"verify", "URL", "--device", "host", "--quiet"},
      {"pack", "URL", "-o", out},
      {"pack", "URL", "-o", out, "--check"},
      {"bench", "URL", "--device", "host", "--repeat", "1"},
  };
  for (std::vector<std::string> args : commands) {
    SCOPED_TRACE(args[0] + (args.back() == "--check" ? " --check" : ""));
    FaultProxy proxy(server_->http_port(), Fault::kSwapFile, 2);  // after the header's reads
    for (std::string& a : args) {
      if (a == "URL") a = proxy.url("a.safetensors");
    }
    const auto r = RunHoist(args);
    EXPECT_EQ(r.exit_code, 6) << r.err << r.out;
    EXPECT_NE(r.err.find("a.safetensors: written to (its size went from "), std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
    for (const auto& entry : std::filesystem::directory_iterator(tmp_.path())) {
      EXPECT_EQ(entry.path().filename().string().find("partial"), std::string::npos)
          << entry.path();
    }
  }
  {
    // inspect reads the header alone: replaced between its two reads, it refuses too.
    FaultProxy proxy(server_->http_port(), Fault::kSwapFile, 1);
    const auto r = RunHoist({"inspect", proxy.url("a.safetensors")});
    EXPECT_EQ(r.exit_code, 6) << r.err << r.out;
    EXPECT_NE(r.err.find("a.safetensors changed while it was read (ETag was \""), std::string::npos)
        << r.err;
  }
  // Unchanged, the same pack with --check writes the file.
  const auto r = RunHoist({"pack", server_->http("a.safetensors"), "-o", out, "--check"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(out));
}

// The first request of each transfer, redirected to `to` (another origin) as object stores and
// hubs redirect to their CDN.
Answer RedirectTo(const FaultProxy& to) {
  return [&to](const std::string& request) {
    const size_t path = request.find(' ') + 2;
    return "HTTP/1.1 307 Temporary Redirect\r\nLocation: " +
           to.url(request.substr(path, request.find(' ', path) - path)) +
           "\r\nContent-Length: 0\r\n\r\n";
  };
}

bool AnyHas(const std::vector<std::string>& requests, const std::string& text) {
  for (const std::string& r : requests) {
    if (r.find(text) != std::string::npos) return true;
  }
  return false;
}

// A URL's user:password@ leaves the name where the source is made: no summary, JSON document,
// inspect or error shows it, and it is sent to the URL's own origin only, never after a
// redirect to another.
TEST_F(HttpStorageTest, APasswordInTheUrlIsNeverShownAndGoesToItsOriginAlone) {
  Write("a.safetensors", SampleSpec{"safetensors", 1 << 20});
  FaultProxy elsewhere(server_->http_port(), Fault::kNone, 0);
  FaultProxy first(server_->http_port(), Fault::kNone, 0, RedirectTo(elsewhere));
  const std::string base = "http://hoist:s3cr3t@127.0.0.1:" + std::to_string(first.port()) + "/";
  const std::string shown = "http://***@127.0.0.1:" + std::to_string(first.port()) + "/";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"load", base + "a.safetensors", "--device", "host", "--json"},
        std::vector<std::string>{"load", base + "a.safetensors", "--device", "host"},
        std::vector<std::string>{"inspect", base + "a.safetensors", "--json"},
        std::vector<std::string>{"inspect", base + "a.safetensors"}}) {
    const auto r = RunHoist(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    EXPECT_EQ((r.out + r.err).find("s3cr3t"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.out.find(shown + "a.safetensors"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(AnyHas(first.requests(), "Authorization: Basic "));
  EXPECT_FALSE(elsewhere.requests().empty());
  EXPECT_FALSE(AnyHas(elsewhere.requests(), "Authorization")) << elsewhere.requests()[0];
  const auto r = RunHoist({"load", base + "gone.safetensors", "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + shown + "gone.safetensors: 404 Not Found\n");
}

// A SAS's or a presigned URL's signature, credential and token are secrets in the query: no
// output shows them, and the request carries them as given.
TEST_F(HttpStorageTest, ASignedUrlsSecretsAreNeverShown) {
  Write("a.safetensors", SampleSpec{"safetensors", 1 << 20});
  FaultProxy proxy(server_->http_port(), Fault::kNone, 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(proxy.port()) + "/";
  const std::string query =
      "?sv=2021-08-06&se=2030-01-01&SIG=s3cr3tSig%3D&X-Amz-Credential=AKIDSECRET%2F2026&"
      "X-Amz-Security-Token=SESSIONSECRET#frag";
  const std::string shown_query =
      "?sv=2021-08-06&se=2030-01-01&SIG=***&X-Amz-Credential=***&X-Amz-Security-Token=***#frag";
  EXPECT_EQ(RedactUrl(base + "a.safetensors" + query), base + "a.safetensors" + shown_query);
  EXPECT_EQ(RedactUrl("https://u:p@h/x?token=t&a=1"), "https://***@h/x?token=***&a=1");
  EXPECT_EQ(RedactUrl("https://h/x?signature"), "https://h/x?signature");
  // Every URL inside a message, wherever it stands; the rest of the text as it was.
  EXPECT_EQ(RedactSecrets("hoist: http://user:pw@h:1/hub: 17 bytes, more than (see "
                          "s3+https://k:s@b/o?sig=abc&x=1 'https://a:b@c/d')"),
            "hoist: http://***@h:1/hub: 17 bytes, more than (see s3+https://***@b/o?sig=***&x=1 "
            "'https://***@c/d')");
  EXPECT_EQ(RedactSecrets("no url: a://b, ://x, 50% done"), "no url: a://b, ://x, 50% done");
  EXPECT_EQ(RedactSecrets("http://***@h/x"), "http://***@h/x");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"load", base + "a.safetensors" + query, "--device", "host",
                                 "--json"},
        std::vector<std::string>{"inspect", base + "a.safetensors" + query}}) {
    const auto r = RunHoist(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    for (const char* secret : {"s3cr3tSig", "AKIDSECRET", "SESSIONSECRET"}) {
      EXPECT_EQ((r.out + r.err).find(secret), std::string::npos) << secret << ": " << r.out;
    }
    EXPECT_NE(r.out.find("SIG=***"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(AnyHas(proxy.requests(), "SIG=s3cr3tSig%3D"));
  const auto r = RunHoist({"load", base + "gone.safetensors" + query, "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + base + "gone.safetensors" + shown_query + ": 404 Not Found\n");
}

// An S3 request's signature and session token, and a hub's bearer token, go to the endpoint's
// origin only: a redirect to another origin is followed without them.
TEST_F(HttpStorageTest, CredentialHeadersAreDroppedOnARedirectToAnotherOrigin) {
  std::filesystem::create_directories(server_->root() + "/bucket");
  Write("bucket/a.safetensors", SampleSpec{"safetensors", 1 << 20});
  FaultProxy elsewhere(server_->http_port(), Fault::kNone, 0);
  FaultProxy first(server_->http_port(), Fault::kNone, 0, RedirectTo(elsewhere));
  HttpOptions options = Options();
  S3Config s3;
  s3.endpoint = "http://127.0.0.1:" + std::to_string(first.port());
  s3.credentials = AwsCredentialSource::Fixed(
      "the test", {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", "SESSIONTOKEN", std::nullopt});
  options.endpoint = MakeS3Endpoint(s3);
  TensorDirectory remote;
  auto model = LoadUrl("s3://bucket/a.safetensors", options, &remote);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE(AnyHas(first.requests(), "x-amz-security-token: SESSIONTOKEN"));
  // A hub's token likewise.
  HttpOptions hub = Options();
  hub.endpoint = MakePlainEndpoint("", "hf_TOKEN", "127.0.0.1:" + std::to_string(first.port()));
  TensorDirectory remote_hub;
  auto hub_model =
      LoadUrl("http://127.0.0.1:" + std::to_string(first.port()) + "/bucket/a.safetensors", hub,
              &remote_hub);
  ASSERT_TRUE(hub_model.ok()) << hub_model.status().ToString();
  EXPECT_TRUE(AnyHas(first.requests(), "Authorization: Bearer hf_TOKEN"));
  EXPECT_FALSE(elsewhere.requests().empty());
  for (const char* secret : {"SESSIONTOKEN", "Authorization", "AKIDEXAMPLE", "hf_TOKEN"}) {
    EXPECT_FALSE(AnyHas(elsewhere.requests(), secret)) << secret;
  }
}

// The hub's redirect to its CDN says which file it leads to (X-Linked-Etag, X-Linked-Size):
// the file's version is that, checked on every read's redirect, whatever the CDN's own ETag;
// a size the CDN does not serve is refused at open.
TEST_F(HttpStorageTest, AHubsRedirectNamesTheFilesVersionCheckedOnEveryRead) {
  const TensorDirectory local = Write("a.safetensors", SampleSpec{"safetensors", 2 << 20});
  const uint64_t size = std::filesystem::file_size(server_->root() + "/a.safetensors");
  FaultProxy cdn(server_->http_port(), Fault::kNone, 0);
  std::atomic<int> redirects{0};
  std::atomic<int> change_after{1 << 30};  // the redirect that starts naming another version
  std::atomic<uint64_t> stated_size{size};
  FaultProxy hub(server_->http_port(), Fault::kNone, 0, [&](const std::string& request) {
    const size_t path = request.find(' ') + 2;
    const int n = redirects++;
    return "HTTP/1.1 302 Found\r\nLocation: " +
           cdn.url(request.substr(path, request.find(' ', path) - path)) + "\r\nX-Linked-Etag: \"" +
           (n >= change_after ? "sha256-other" : "sha256-a") +
           "\"\r\nX-Linked-Size: " + std::to_string(stated_size.load()) +
           "\r\nX-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\nContent-Length: "
           "0\r\n\r\n";
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(hub.port()) + "/a.safetensors";
  {
    SCOPED_TRACE("the same version throughout");
    TensorDirectory remote;
    HttpOptions options = Options();
    options.retries = 0;
    LoadOptions load;
    load.threads = 2;
    load.chunk_bytes = 256 << 10;
    auto model = LoadUrl(url, options, &remote, load);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
    EXPECT_GT(redirects.load(), 4);
  }
  {
    SCOPED_TRACE("the redirect names another version mid-load");
    auto dir = ReadModelDirectory(MakeHttpStorage(Options()), url);
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    change_after = redirects.load() + 2;
    LoadOptions options;
    options.threads = 1;
    options.chunk_bytes = 256 << 10;
    auto model = Load(*dir, MakeDevice("host"), options);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), Code::kFileChanged) << model.status().ToString();
    EXPECT_NE(model.status().message().find("\"sha256-other\""), std::string::npos)
        << model.status().message();
    change_after = 1 << 30;
  }
  {
    SCOPED_TRACE("a size the server it leads to does not serve");
    stated_size = size + 1;
    auto dir = ReadModelDirectory(MakeHttpStorage(Options()), url);
    ASSERT_FALSE(dir.ok());
    EXPECT_EQ(dir.status().message(), url + ": the redirect says the file holds " +
                                          std::to_string(size + 1) +
                                          " bytes (X-Linked-Size), the server it leads to serves " +
                                          std::to_string(size) + ": refused");
  }
}

// Names a hostile index gives are one path segment of the URL, percent-encoded: "..%2Fx" names
// a file of that name beside the index, never one a directory up.
TEST_F(HttpStorageTest, AnIndexNamesFilesBesideItPercentEncoded) {
  Write("a.safetensors", SampleSpec{"safetensors", 1 << 20});
  std::filesystem::create_directories(server_->root() + "/c");
  std::ofstream(server_->root() + "/c/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x": "..%2Fa.safetensors"}})";
  auto dir = ReadModelDirectory(MakeHttpStorage(Options()),
                                server_->http("c/model.safetensors.index.json"));
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), Code::kNotFound) << dir.status().ToString();
  EXPECT_NE(dir.status().message().find(server_->http("c/..%252Fa.safetensors")), std::string::npos)
      << dir.status().message();
}

// Server text reaches a message as one printable line: no terminal escapes, no line breaks.
TEST_F(HttpStorageTest, AServersReasonIsPrintedAsPrintableText) {
  FaultProxy proxy(server_->http_port(), Fault::kNone, 0, [](const std::string&) {
    return std::string("HTTP/1.1 404 Not \x1b[2J\x1b[31mFound\r\nContent-Length: 0\r\n\r\n");
  });
  TensorDirectory remote;
  auto model = LoadUrl(proxy.url("a.safetensors"), Options(), &remote);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            proxy.url("a.safetensors") + R"(: 404 Not \x1b[2J\x1b[31mFound)");
}

// An S3 listing is the server's word on what lies under a prefix: a key with a ".." part, or a
// continuation token given twice, is refused (a load never reads another object for it, nor
// follows a listing forever).
TEST_F(HttpStorageTest, AHostileS3ListingIsRefused) {
  const char* kListing =
      "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: %zu\r\n\r\n%s";
  auto listing = [&](const std::string& body) {
    char head[512];
    std::snprintf(head, sizeof head, kListing, body.size(), "");
    return std::string(head) + body;
  };
  for (const bool loop : {false, true}) {
    const std::string body =
        loop ? "<ListBucketResult><Contents><Key>m/a.safetensors</Key></Contents>"
               "<IsTruncated>true</IsTruncated><NextContinuationToken>again"
               "</NextContinuationToken></ListBucketResult>"
             : "<ListBucketResult><Contents><Key>m/../evil.safetensors</Key></Contents>"
               "<IsTruncated>false</IsTruncated></ListBucketResult>";
    FaultProxy proxy(server_->http_port(), Fault::kNone, 0, [&](const std::string& request) {
      return request.find("list-type=2") != std::string::npos
                 ? listing(body)
                 : std::string("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    });
    HttpOptions options = Options();
    S3Config s3;
    s3.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port());
    options.endpoint = MakeS3Endpoint(s3);
    auto dir = ReadModelDirectory(MakeHttpStorage(options), "s3://bucket/m/");
    ASSERT_FALSE(dir.ok()) << loop;
    EXPECT_NE(dir.status().message().find(
                  loop ? "s3://bucket/m/: the listing gives the same continuation token twice: "
                         "refused"
                       : "s3://bucket/m/: the listing names the object 'm/../evil.safetensors', "
                         "which does not lie plainly under the prefix"),
              std::string::npos)
        << dir.status().message();
  }
}

}  // namespace
}  // namespace hoist
