// hoist serve / hoist attach / hoist_attach: a model held by one process and attached by
// others, on host memory and the sim, against the model's file byte for byte; a holder killed
// while attached; every refusal one clear line.
#ifdef __linux__
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hoist/hoist.h"
#include "io/local_socket.h"
#include "test_util.h"

namespace hoist::testing {
namespace {

class ServeTest : public SampleModelTest<4u << 20> {
 protected:
  void SetUp() override {
    SampleModelTest::SetUp();
    runtime_ = tmp_.File("run");
    ASSERT_EQ(::mkdir(runtime_.c_str(), 0700), 0);
    SetVariable("XDG_RUNTIME_DIR", runtime_.c_str());
  }
  void TearDown() override { SetVariable("XDG_RUNTIME_DIR", nullptr); }

  // A holder of model_ under `name` on `device`, once it says it is ready.
  std::unique_ptr<HoistProcess> Serve(const std::string& name, const std::string& device,
                                      std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"serve", model_, "--device", device, "--name", name, "--json"};
    args.insert(args.end(), more.begin(), more.end());
    auto holder = std::make_unique<HoistProcess>(args);
    EXPECT_TRUE(holder->WaitUntil(
        [&] { return holder->Out().find("\"ready\":true") != std::string::npos; }, TimeBound(30)))
        << holder->Err();
    return holder;
  }
  std::string Socket(const std::string& name) const {
    return runtime_ + "/hoist/" + name + ".sock";
  }
  // The holder of `name`'s answer to an attach, as an attacher receives it (its descriptors
  // the caller's to close).
  LocalMessage AttachAnswer(const std::string& name) {
    auto c = ConnectLocal(Socket(name), 5);
    EXPECT_TRUE(c.ok()) << c.status().message();
    if (!c.ok()) return {};
    EXPECT_TRUE(c->Send(R"({"hoist_held":1,"op":"attach"})", {}, 5, "the holder").ok());
    auto answer = c->Receive(5, nullptr, "the holder");
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    return answer.ok() ? std::move(answer).value() : LocalMessage{};
  }

  std::string runtime_;
};

// Every tensor of an attached model equals the model file's bytes.
void ExpectEqualsFile(hoist_model* model, hoist_loaded* loaded, const std::string& path) {
  const std::vector<unsigned char> file = ReadBytes(path);
  ASSERT_GT(hoist_model_tensor_count(model), 0u);
  for (size_t i = 0; i < hoist_model_tensor_count(model); ++i) {
    hoist_tensor_info t{};
    ASSERT_EQ(hoist_model_tensor(model, i, &t), HOIST_OK);
    const void* p = hoist_loaded_tensor(loaded, i);
    ASSERT_TRUE(p != nullptr || t.nbytes == 0) << t.name;
    ASSERT_LE(t.offset + t.nbytes, file.size());
    EXPECT_EQ(std::memcmp(p, file.data() + t.offset, t.nbytes), 0) << t.name;
  }
}

TEST_F(ServeTest, AHeldModelAttachesByteExactOnHostAndSim) {
  for (const std::string device : {"host", "sim"}) {
    SCOPED_TRACE(device);
    auto holder = Serve("m", device);
    for (const bool share : {false, true}) {
      std::vector<std::string> args = {"attach", "m", "--verify", "--json"};
      if (share) args.push_back("--share");
      const CommandResult attached = RunHoist(args);
      EXPECT_EQ(attached.exit_code, 0) << attached.err;
      EXPECT_NE(attached.out.find("\"verified\":true"), std::string::npos) << attached.out;
      EXPECT_NE(attached.out.find("\"device\":\"" + device + "\""), std::string::npos);
    }
    // The C API: names, shapes and the bytes themselves, from a private copy and the shared map.
    for (const int share : {0, 1}) {
      hoist_attach_options options;
      hoist_attach_options_init(&options);
      options.share = share;
      hoist_model* model = nullptr;
      hoist_loaded* loaded = nullptr;
      ASSERT_EQ(hoist_attach("m", &options, &model, &loaded), HOIST_OK) << hoist_last_error();
      ExpectEqualsFile(model, loaded, model_);
      size_t mismatches = 1;
      EXPECT_EQ(hoist_loaded_verify(loaded, &mismatches), HOIST_OK) << hoist_last_error();
      EXPECT_EQ(mismatches, 0u);
      hoist_loaded_free(loaded);
      hoist_model_close(model);
    }
    const CommandResult list = RunHoist({"serve", "--list", "--json"});
    EXPECT_EQ(list.exit_code, 0) << list.err;
    EXPECT_NE(list.out.find("\"name\":\"m\""), std::string::npos) << list.out;
    EXPECT_NE(list.out.find("\"pid\":" + std::to_string(holder->pid())), std::string::npos);
    holder->Signal(SIGTERM);
    EXPECT_EQ(holder->Wait(TimeBound(10)), 0) << holder->Err();
    EXPECT_FALSE(std::filesystem::exists(Socket("m"))) << "the holder left its socket";
  }
}

TEST_F(ServeTest, WhatIsAttachedOutlivesItsHolder) {
  // SIGTERM to a holder with a private copy attached, SIGKILL to one with its memory shared:
  // each attacher still reads the file's bytes.
  for (const bool share : {false, true}) {
    SCOPED_TRACE(share ? "shared, SIGKILL" : "private copy, SIGTERM");
    auto holder = Serve("m", "host");
    std::vector<std::string> args = {"attach", "m", "--verify", "--hold", "1.5"};
    if (share) args.push_back("--share");
    HoistProcess attacher(args);
    ASSERT_TRUE(attacher.WaitUntil(
        [&] { return attacher.Out().find("attached 'm'") != std::string::npos; }, TimeBound(10)))
        << attacher.Err();
    holder->Signal(share ? SIGKILL : SIGTERM);
    EXPECT_EQ(holder->Wait(TimeBound(10)), share ? 128 + SIGKILL : 0) << holder->Err();
    EXPECT_EQ(attacher.Wait(TimeBound(30)), 0) << attacher.Err();
    EXPECT_NE(attacher.Out().find("verified: every tensor matches the file"), std::string::npos)
        << attacher.Out();
  }
  // Its socket is stale now: listed as such, refused as no holder, replaced by the next serve.
  ASSERT_TRUE(std::filesystem::exists(Socket("m")));
  const CommandResult list = RunHoist({"serve", "--list"});
  EXPECT_NE(list.out.find("m  (stale"), std::string::npos) << list.out;
  const CommandResult none = RunHoist({"attach", "m"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no model is held under 'm'"), std::string::npos) << none.err;
  auto again = Serve("m", "host");
  const CommandResult attached = RunHoist({"attach", "m", "--verify"});
  EXPECT_EQ(attached.exit_code, 0) << attached.err;
}

TEST_F(ServeTest, AnAttachTakesTheHoldersDevicesOrOneOfThem) {
  auto holder = Serve("m", "sim,host");
  const CommandResult all = RunHoist({"attach", "m", "--verify", "--json"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("\"device\":\"sim, host\""), std::string::npos) << all.out;
  size_t tensors_on[2] = {0, 0};
  for (const std::string device : {"sim", "host"}) {
    const CommandResult one = RunHoist({"attach", "m", "--device", device, "--verify", "--json"});
    EXPECT_EQ(one.exit_code, 0) << one.err;
    EXPECT_NE(one.out.find("\"device\":\"" + device + "\""), std::string::npos) << one.out;
    const size_t at = one.out.find("\"tensors\":");
    ASSERT_NE(at, std::string::npos);
    tensors_on[device == "host"] = std::stoul(one.out.substr(at + 10));
  }
  EXPECT_GT(tensors_on[0], 0u);
  EXPECT_GT(tensors_on[1], 0u);
  const size_t at = all.out.find("\"tensors\":");
  EXPECT_EQ(tensors_on[0] + tensors_on[1], std::stoul(all.out.substr(at + 10)));
  holder.reset();
  // A split's parts attach; --verify, which compares whole tensors, says why it cannot.
  auto parts = Serve("p", "sim,host", {"--split", "tensor"});
  EXPECT_EQ(RunHoist({"attach", "p"}).exit_code, 0);
  const CommandResult verify = RunHoist({"attach", "p", "--verify"});
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_NE(verify.err.find("'p' holds parts of tensors"), std::string::npos) << verify.err;
}

TEST_F(ServeTest, AnotherDeviceGetsACopyOverItsLinkToTheHolders) {
  // sim:0 and sim:1 stand for two GPUs of one host (peers by default).
  auto holder = Serve("m", "sim:0");
  const CommandResult copied = RunHoist({"attach", "m", "--device", "sim:1", "--verify", "--json"});
  EXPECT_EQ(copied.exit_code, 0) << copied.err;
  EXPECT_NE(copied.out.find("\"device\":\"sim:1\""), std::string::npos) << copied.out;
  EXPECT_NE(copied.out.find("\"verified\":true"), std::string::npos) << copied.out;
  const CommandResult no_link = RunHoist({"attach", "m", "--device", "sim:2,peers=0"});
  EXPECT_EQ(no_link.exit_code, 1);
  EXPECT_NE(no_link.err.find("sim:2 has no direct link to sim:0, which holds the model"),
            std::string::npos)
      << no_link.err;
  const CommandResult shared = RunHoist({"attach", "m", "--device", "sim:1", "--share"});
  EXPECT_EQ(shared.exit_code, 1);
  EXPECT_NE(shared.err.find("a shared attach maps the memory where it is"), std::string::npos)
      << shared.err;
}

TEST_F(ServeTest, RefusalsAreOneClearLine) {
  auto holder = Serve("m", "host");
  const CommandResult twice = RunHoist({"serve", model_, "--device", "host", "--name", "m"});
  EXPECT_EQ(twice.exit_code, 1);
  EXPECT_NE(twice.err.find("already held at " + Socket("m")), std::string::npos) << twice.err;
  EXPECT_NE(twice.err.find("pid " + std::to_string(holder->pid())), std::string::npos);

  const CommandResult other_device = RunHoist({"attach", "m", "--device", "sim"});
  EXPECT_EQ(other_device.exit_code, 1);
  EXPECT_NE(other_device.err.find("'m' is held on host, not sim"), std::string::npos)
      << other_device.err;

  for (const std::string& bad :
       std::vector<std::string>{"..", "../x", "-x", "a b", std::string(65, 'a')}) {
    const CommandResult named = RunHoist({"serve", model_, "--device", "host", "--name", bad});
    EXPECT_EQ(named.exit_code, 1) << bad;
    EXPECT_NE(named.err.find("is not a name a model is held under"), std::string::npos)
        << named.err;
  }
  // A file that is not a socket is never replaced.
  const std::string file = tmp_.File("not-a-socket");
  WriteBytes(file, {1, 2, 3});
  const CommandResult over = RunHoist({"serve", model_, "--device", "host", "--socket", file});
  EXPECT_EQ(over.exit_code, 1);
  EXPECT_NE(over.err.find("something other than a socket is there"), std::string::npos);
  EXPECT_EQ(ReadBytes(file).size(), 3u);

  // A holder that accepts and dies before it answers.
  const std::string dead = tmp_.File("dead.sock");
  auto listener = LocalListener::Listen(dead, false);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  std::atomic<bool> done{false};
  std::thread fake([&] {
    while (!done) {
      auto c = listener->Accept(20);
      if (c.ok() && c->has_value()) c->reset();  // closes without a word
    }
  });
  const CommandResult hung_up = RunHoist({"attach", dead});
  done = true;
  fake.join();
  EXPECT_EQ(hung_up.exit_code, 1);
  EXPECT_NE(hung_up.err.find("closed the connection without answering"), std::string::npos)
      << hung_up.err;

  // The user's directory open to others is refused, not used.
  ASSERT_EQ(::chmod((runtime_ + "/hoist").c_str(), 0755), 0);
  const CommandResult open_dir = RunHoist({"attach", "m"});
  EXPECT_EQ(open_dir.exit_code, 1);
  EXPECT_NE(open_dir.err.find("open to other users (mode 0755)"), std::string::npos)
      << open_dir.err;
  ASSERT_EQ(::chmod((runtime_ + "/hoist").c_str(), 0700), 0);
}

// A holder that lies: it relays a real holder's answer with memory of its own in place of the
// held memory, memory whose size it could change under the attacher's mapping.
TEST_F(ServeTest, MemoryWhoseSizeCouldChangeIsRefused) {
  auto holder = Serve("m", "host");
  LocalMessage answer = AttachAnswer("m");
  ASSERT_EQ(answer.fds.size(), 1u);
  struct stat held {};
  ASSERT_EQ(::fstat(answer.fds[0], &held), 0);
  // The real holder's memory cannot be cut, not even through a descriptor reopened for writing.
  const std::string reopened = "/proc/self/fd/" + std::to_string(answer.fds[0]);
  const int writable = ::open(reopened.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(writable, 0);
  EXPECT_NE(::ftruncate(writable, 0), 0);
  EXPECT_EQ(errno, EPERM);
  ::close(writable);

  const int unsealed = ::memfd_create("liar", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::ftruncate(unsealed, held.st_size), 0);
  const std::string plain_path = tmp_.File("plain");
  WriteBytes(plain_path, std::vector<unsigned char>(static_cast<size_t>(held.st_size)));
  const int plain = ::open(plain_path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(plain, 0);
  const std::vector<std::pair<int, std::string>> lies = {
      {unsealed, "not sealed against shrinking and growing"},
      {plain, "not sealable memory (memfd)"}};
  const std::string liar = tmp_.File("liar.sock");
  auto listener = LocalListener::Listen(liar, false);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  for (const auto& [fd, refusal] : lies) {
    for (const bool share : {true, false}) {
      SCOPED_TRACE(refusal + (share ? " (shared)" : " (private)"));
      // Answers one attach with the real answer (as this process: the attacher checks who
      // listens) and its own fd.
      nlohmann::json as_this = nlohmann::json::parse(answer.text);
      as_this["pid"] = ::getpid();
      std::thread fake([&, fd = fd, text = as_this.dump()] {
        for (int tries = 0; tries < 500; ++tries) {
          auto c = listener->Accept(20);
          if (!c.ok() || !c->has_value()) continue;
          if ((*c)->Receive(5, nullptr, "the attacher").ok()) {
            (void)(*c)->Send(text, {fd}, 5, "the attacher");
          }
          return;
        }
      });
      std::vector<std::string> args = {"attach", liar};
      if (share) args.push_back("--share");
      const CommandResult attached = RunHoist(args);
      fake.join();
      EXPECT_EQ(attached.exit_code, 1) << attached.err;
      EXPECT_NE(attached.err.find("host: the shared memory sent is " + refusal +
                                  ": the process that sent it could cut it under the mapping"),
                std::string::npos)
          << attached.err;
    }
  }
  ::close(unsealed);
  ::close(plain);
  for (int fd : answer.fds) ::close(fd);
}

// Requests of the wrong shape (wrong JSON types, junk, nesting, a flood of brackets) each get
// a refusal or a closed connection; the holder serves the next attach as ever. Wrong types once
// ended it ("unexpected failure: [json.exception...]").
TEST_F(ServeTest, AMalformedRequestNeverEndsTheHolder) {
  auto holder = Serve("m", "host");
  const std::vector<std::string> requests = {R"({"hoist_held":"1"})",
                                             R"({"op":5})",
                                             R"({"hoist_held":1,"op":5})",
                                             R"({"hoist_held":1,"op":[]})",
                                             R"([1,2,3])",
                                             "not json",
                                             R"({"hoist_held":1e400})",
                                             std::string(64, '['),
                                             std::string(16 << 10, '['),
                                             R"({"hoist_held":1,"op":"describe\u0000"})"};
  for (const std::string& request : requests) {
    SCOPED_TRACE(request.substr(0, 40));
    auto c = ConnectLocal(Socket("m"), 5);
    ASSERT_TRUE(c.ok()) << c.status().message();
    if (!c->Send(request, {}, 5, "the holder").ok()) continue;
    auto answer = c->Receive(5, nullptr, "the holder");
    if (request.size() <= 4096) {
      ASSERT_TRUE(answer.ok()) << answer.status().message();
      EXPECT_NE(answer->text.find("\"error\""), std::string::npos) << answer->text;
      EXPECT_TRUE(answer->fds.empty());
    }
  }
  const CommandResult attached = RunHoist({"attach", "m", "--verify"});
  EXPECT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_EQ(holder->Wait(0.01), -1) << holder->Err();  // still running
}

// A holder that lies about any field of its answer is refused, one line naming the rule, before
// anything is mapped or read: never a crash, never a tensor over another's bytes.
TEST_F(ServeTest, ALyingHoldersEveryFieldIsChecked) {
  auto holder = Serve("m", "host");
  LocalMessage answer = AttachAnswer("m");
  const nlohmann::json truth = nlohmann::json::parse(answer.text);
  using Lie = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Lie>> lies = {
      {"names file 0 of 0", [](nlohmann::json& j) { j["files"] = nlohmann::json::array(); }},
      {"'nbytes' is not an integer from 0 to 2^64-1",
       [](nlohmann::json& j) { j["tensor_list"][0]["nbytes"] = 1e20; }},
      {"'nbytes' is not an integer",
       [](nlohmann::json& j) { j["tensor_list"][0]["nbytes"] = "8"; }},
      {"is unknown", [](nlohmann::json& j) { j["tensor_list"][0]["dtype"] = "Q9_Z"; }},
      {"holds a NUL",
       [](nlohmann::json& j) { j["tensor_list"][0]["name"] = std::string("a\0b", 3); }},
      {"two tensors are named",
       [](nlohmann::json& j) { j["tensor_list"][1]["name"] = j["tensor_list"][0]["name"]; }},
      {"its dtype and shape make", [](nlohmann::json& j) { j["tensor_list"][0]["shape"][0] = 3; }},
      {"its shape overflows",
       [](nlohmann::json& j) {
         j["tensor_list"][0]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40};
       }},
      {"lies outside its block", [](nlohmann::json& j) { j["tensor_list"][0]["at"] = UINT64_MAX; }},
      {"lies outside its file",
       [](nlohmann::json& j) { j["tensor_list"][0]["offset"] = UINT64_MAX - 1; }},
      {"1 blocks and 1 descriptors", [](nlohmann::json&) {}},  // the truth: attaches
      {"2 blocks and 1 descriptors",
       [](nlohmann::json& j) { j["blocks"].push_back(j["blocks"][0]); }},
      {"claims to be user", [](nlohmann::json& j) { j["uid"] = 4242; }},
      {"claims to be user", [](nlohmann::json& j) { j["pid"] = 1; }},
  };
  const std::string liar = tmp_.File("liar.sock");
  auto listener = LocalListener::Listen(liar, false);
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  for (const auto& [refusal, lie] : lies) {
    SCOPED_TRACE(refusal);
    nlohmann::json told = truth;
    lie(told);
    told["pid"] = told["pid"] == truth["pid"] ? nlohmann::json(::getpid()) : told["pid"];
    std::thread fake([&, text = told.dump()] {  // the real descriptors with the lie
      for (int tries = 0; tries < 500; ++tries) {
        auto c = listener->Accept(20);
        if (!c.ok() || !c->has_value()) continue;
        if ((*c)->Receive(5, nullptr, "the attacher").ok()) {
          (void)(*c)->Send(text, answer.fds, 5, "the attacher");
        }
        return;
      }
    });
    const CommandResult attached = RunHoist({"attach", liar, "--verify"});
    fake.join();
    if (refusal == "1 blocks and 1 descriptors") {
      EXPECT_EQ(attached.exit_code, 0) << attached.err;
      continue;
    }
    EXPECT_EQ(attached.exit_code, 1) << attached.err;
    EXPECT_NE(attached.err.find(refusal), std::string::npos) << attached.err;
    EXPECT_EQ(std::count(attached.err.begin(), attached.err.end(), '\n'), 1) << attached.err;
  }
  for (int fd : answer.fds) ::close(fd);
}

// A holder answers its clients at once: 100 idle connections and one that sends a byte a second
// do not keep an attach (or serve --list) from its answer. One at a time, an idle client cost
// the next attach up to 5 s, and 50 of them made attaches time out.
TEST_F(ServeTest, IdleAndSlowClientsDelayNoOne) {
  auto holder = Serve("m", "host");
  std::vector<LocalConnection> idle;
  for (int i = 0; i < 100; ++i) {
    auto c = ConnectLocal(Socket("m"), 5);
    ASSERT_TRUE(c.ok()) << c.status().message();
    idle.push_back(std::move(*c));
  }
  std::atomic<bool> done{false};
  std::thread slow([&] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, Socket("m").c_str(), sizeof address.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      const char byte = 'H';
      while (!done) {
        if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
        for (int i = 0; i < 100 && !done; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
    ::close(fd);
  });
  const CommandResult attached = RunHoist({"attach", "m", "--verify", "--timeout", "3"});
  const CommandResult listed = RunHoist({"serve", "--list"});
  done = true;
  slow.join();
  EXPECT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(listed.out.rfind("m  ", 0), 0u) << listed.out;
}

// A holder whose notes' reader has gone (its stderr a pipe closed at the far end) serves on:
// it once died of SIGPIPE at the next attach and left a stale socket.
TEST_F(ServeTest, AHolderOutlivesItsStderrReader) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ::close(pipe_fds[0]);  // no reader from the start
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    std::string cli = HOIST_CLI;
    std::vector<std::string> args = {cli, "serve", model_, "--device", "host", "--name", "p"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // as a shell would start it
    ::execv(HOIST_CLI, argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  for (int i = 0; i < 3000 && !std::filesystem::exists(Socket("p")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int attach = 0; attach < 2; ++attach) {
    const CommandResult r = RunHoist({"attach", "p", "--verify"});
    EXPECT_EQ(r.exit_code, 0) << attach << ": " << r.err;
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << status;  // not killed by SIGPIPE
  EXPECT_FALSE(std::filesystem::exists(Socket("p")));
}

// SIGINT while attached (--hold) ends the attach with the documented 128 + N.
TEST_F(ServeTest, SigintDuringHoldExitsWith130) {
  auto holder = Serve("m", "host");
  HoistProcess attach({"attach", "m", "--hold", "30"});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  attach.Signal(SIGINT);
  EXPECT_EQ(attach.Wait(TimeBound(5)), 130) << attach.Err();
}

TEST_F(ServeTest, AnEmptyNameIsRefused) {
  const CommandResult r = RunHoist({"serve", model_, "--device", "host", "--name", ""});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
}

// Held host memory is sealed against writing once handed out: the descriptor sent, one reopened
// for writing through /proc, a writable mapping of either and mprotect of a read-only one all
// fail, and the owner's verify still matches the file. Before, an admitted user wrote 64 bytes
// and every attacher saw them.
TEST_F(ServeTest, HeldMemoryCannotBeWrittenByAnyRoute) {
  auto holder = Serve("m", "host");
  LocalMessage answer = AttachAnswer("m");
  ASSERT_EQ(answer.fds.size(), 1u);
  const int sent = answer.fds[0];
  const std::string path = "/proc/self/fd/" + std::to_string(sent);
  const int reopened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  const char junk[64] = {1};
  for (const int fd : {sent, reopened}) {
    SCOPED_TRACE(fd == sent ? "the descriptor sent" : "reopened for writing");
    if (fd < 0) continue;  // refused outright: as good
    EXPECT_EQ(::pwrite(fd, junk, sizeof junk, 0), -1);
    void* writable = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_EQ(writable, MAP_FAILED);
    if (writable != MAP_FAILED) ::munmap(writable, 4096);
    void* readable = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(readable, MAP_FAILED);
    EXPECT_NE(::mprotect(readable, 4096, PROT_READ | PROT_WRITE), 0);
    ::munmap(readable, 4096);
  }
  if (reopened >= 0) ::close(reopened);
  ::close(sent);
  const CommandResult verified = RunHoist({"attach", "m", "--share", "--verify"});
  EXPECT_EQ(verified.exit_code, 0) << verified.err;
}

// A process that writes the tensors of a shared attach (an in-place op on a share=True tensor)
// neither dies nor changes what the holder and the other attachers read: its writes land in
// pages of its own. Before, the write killed it with SIGSEGV.
TEST_F(ServeTest, WritesToASharedAttachStayTheWritersOwn) {
  for (const std::string device : {"host", "sim"}) {
    SCOPED_TRACE(device);
    auto holder = Serve("m", device);
    hoist_attach_options options;
    hoist_attach_options_init(&options);
    options.share = 1;
    hoist_model* model = nullptr;
    hoist_loaded* writer = nullptr;
    ASSERT_EQ(hoist_attach("m", &options, &model, &writer), HOIST_OK) << hoist_last_error();
    const size_t count = hoist_model_tensor_count(model);
    size_t written = 0;
    for (size_t i = 0; i < count; ++i) {
      hoist_tensor_info info{};
      ASSERT_EQ(hoist_model_tensor(model, i, &info), HOIST_OK);
      // What a framework's in-place op on the tensor does.
      auto* p = static_cast<unsigned char*>(hoist_loaded_tensor(writer, i));
      if (p == nullptr || info.nbytes == 0) continue;
      std::memset(p, 0xA5, static_cast<size_t>(info.nbytes));
      ++written;
    }
    ASSERT_GT(written, 0u);
    size_t mismatches = 0;
    EXPECT_NE(hoist_loaded_verify(writer, &mismatches), HOIST_OK) << "the writer reads its writes";
    hoist_model* other_model = nullptr;
    hoist_loaded* other = nullptr;
    ASSERT_EQ(hoist_attach("m", &options, &other_model, &other), HOIST_OK) << hoist_last_error();
    ExpectEqualsFile(other_model, other, model_);
    hoist_loaded_free(other);
    hoist_model_close(other_model);
    hoist_loaded_free(writer);
    hoist_model_close(model);
    const CommandResult verified = RunHoist({"attach", "m", "--share", "--verify"});
    EXPECT_EQ(verified.exit_code, 0) << verified.err;
  }
}

// hoist_attach_into: the tensors of a model the caller opened, copied from the holder of that
// very file into the caller's buffers, byte-exact; none held there is HOIST_NOT_FOUND; once the
// file is written after the holder read it, HOIST_FILE_CHANGED and nothing copied.
TEST_F(ServeTest, AttachIntoCopiesOnlyTheSameFilesTensors) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(model_.c_str(), &model), HOIST_OK) << hoist_last_error();
  const size_t count = hoist_model_tensor_count(model);
  struct Buffers {
    std::vector<std::vector<unsigned char>> of;
    size_t asked = 0;
  } buffers;
  buffers.of.resize(count);
  auto destination = [](void* user, size_t index, const hoist_tensor_info* t) -> void* {
    auto* b = static_cast<Buffers*>(user);
    ++b->asked;
    b->of[index].assign(static_cast<size_t>(t->nbytes), 0);
    return b->of[index].data();
  };
  uint64_t copied = 1;
  EXPECT_EQ(hoist_attach_into(model, "host", 5, destination, &buffers, &copied), HOIST_NOT_FOUND)
      << hoist_last_error();
  EXPECT_EQ(copied, 0u);
  auto holder = Serve("m", "host");
  EXPECT_EQ(hoist_attach_into(model, "sim", 5, destination, &buffers, &copied), HOIST_NOT_FOUND)
      << "held on host, not on sim";
  ASSERT_EQ(hoist_attach_into(model, "host", 5, destination, &buffers, &copied), HOIST_OK)
      << hoist_last_error();
  const std::vector<unsigned char> file = ReadBytes(model_);
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    hoist_tensor_info t{};
    ASSERT_EQ(hoist_model_tensor(model, i, &t), HOIST_OK);
    total += t.nbytes;
    if (t.nbytes == 0) continue;
    ASSERT_EQ(buffers.of[i].size(), t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(buffers.of[i].data(), file.data() + t.offset, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(copied, total);
  // The same bytes written again: the file's last write is not the one the holder read.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  WriteBytes(model_, file);
  hoist_model_close(model);
  ASSERT_EQ(hoist_model_open(model_.c_str(), &model), HOIST_OK) << hoist_last_error();
  buffers = Buffers{};
  buffers.of.resize(count);
  EXPECT_EQ(hoist_attach_into(model, "host", 5, destination, &buffers, &copied),
            HOIST_FILE_CHANGED);
  EXPECT_NE(std::string(hoist_last_error()).find("read another version of"), std::string::npos)
      << hoist_last_error();
  EXPECT_EQ(buffers.asked, 0u);
  EXPECT_EQ(copied, 0u);
  hoist_model_close(model);
}

// Runs `hoist attach SOCKET` as user and group 65534 (nobody); its exit code and stderr.
CommandResult AttachAsNobody(const std::string& socket, const std::string& err_path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (err < 0 || ::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      ::_exit(126);
    }
    ::dup2(err, 2);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    std::string cli = HOIST_CLI;
    std::string verb = "attach";
    std::string target = socket;
    char* argv[] = {cli.data(), verb.data(), target.data(), nullptr};
    ::execv(HOIST_CLI, argv);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::vector<unsigned char> err = ReadBytes(err_path);
  r.err.assign(err.begin(), err.end());
  return r;
}

// Whether user 65534 can run the hoist binary: not from a clone inside a private folder.
bool NobodyCanRunHoist() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    ::_exit(::access(HOIST_CLI, X_OK) == 0 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST_F(ServeTest, AnotherUserAttachesOnlyWhenAllowed) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to act as a second user (CI runs as root)";
  if (!NobodyCanRunHoist()) {
    GTEST_SKIP() << "user 65534 cannot reach " << HOIST_CLI
                 << " (a clone inside a private folder): the second user has no binary to run";
  }
  // A directory the second user can reach: the socket path is given to both sides.
  char shared_dir[] = "/tmp/hoist-serve-users-XXXXXX";
  ASSERT_NE(::mkdtemp(shared_dir), nullptr);
  ASSERT_EQ(::chmod(shared_dir, 0755), 0);
  const std::string socket = std::string(shared_dir) + "/held.sock";
  const std::string err = std::string(shared_dir) + "/err";
  {
    auto holder = Serve("m", "host", {"--socket", socket, "--allow-gid", "4242"});
    const CommandResult refused = AttachAsNobody(socket, err);
    EXPECT_EQ(refused.exit_code, 1) << refused.err;
    EXPECT_NE(refused.err.find("who has not allowed user 65534 to attach"), std::string::npos)
        << refused.err;
    EXPECT_TRUE(holder->WaitForErr("refused process", TimeBound(5))) << holder->Err();
  }
  {
    auto holder = Serve("m2", "host", {"--socket", socket, "--allow-uid", "65534"});
    const CommandResult allowed = AttachAsNobody(socket, err);
    EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  }
  std::filesystem::remove_all(shared_dir);
}

}  // namespace
}  // namespace hoist::testing
#endif
