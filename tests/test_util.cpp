#include "test_util.h"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <thread>

#include "base/units.h"
#include "format/gguf.h"
#include "format/sample_model.h"

namespace hoist::testing {

std::string CorpusDir() { return HOIST_CORPUS_DIR; }

bool WriteFarGguf(const std::string& path, uint64_t seed) {
  const std::vector<GgufTensorSpec> specs = {
      {"near", "F32", {16}, 0},
      {"past_2g", "Q8_0", {4, 64}, 2 * kGiB + 4096},
      {"past_4g", "F16", {8, 512}, 2 * kGiB + 4096},
  };
  auto fill = [seed](size_t i, uint64_t off, std::span<unsigned char> out) {
    FillSampleBytes(seed, i, off, out);
    return true;
  };
  return WriteGguf(path, {}, specs, fill).ok();
}

double TimeBound(double seconds) {
  const char* scale = std::getenv("HOIST_TEST_TIME_SCALE");
  return scale != nullptr ? seconds * std::strtod(scale, nullptr) : seconds;
}

void SetVariable(const char* name, const char* value) {
#ifdef _WIN32
  ASSERT_EQ(_putenv_s(name, value == nullptr ? "" : value), 0);
#else
  ASSERT_EQ(value == nullptr ? unsetenv(name) : setenv(name, value, 1), 0);
#endif
}

TempDir::TempDir() {
  std::random_device random;
  const std::filesystem::path base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::filesystem::path candidate = base / ("hoist-test-" + std::to_string(random()));
    std::error_code ec;
    if (std::filesystem::create_directory(candidate, ec)) {
      path_ = candidate.generic_string();
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory in " + base.string());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void AgeFile(const std::string& path) {
  std::filesystem::last_write_time(path,
                                   std::filesystem::last_write_time(path) - std::chrono::hours(1));
}

std::vector<unsigned char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

namespace {
#ifdef _WIN32
// Double quotes around each word, as the C runtime splits a command line (the tests pass no
// double quote inside one, nor a word ending in a backslash).
std::string Quote(const std::string& s) {
  std::string q(1, '"');
  q.append(s).push_back('"');
  return q;
}

// A file the child inherits as a standard stream.
HANDLE InheritableFile(const std::string& path, DWORD access, DWORD disposition) {
  SECURITY_ATTRIBUTES inherit{sizeof(SECURITY_ATTRIBUTES), nullptr, TRUE};
  return CreateFileA(path.c_str(), access, FILE_SHARE_READ | FILE_SHARE_WRITE, &inherit,
                     disposition, FILE_ATTRIBUTE_NORMAL, nullptr);
}

// Runs a command line by CreateProcess, not cmd.exe: under wine, cmd now and then failed to
// start the program ("Can't recognize ... as an internal or external command", exit 9009).
// The exit code, or -1 with the reason appended to `err` when it could not start.
int RunDirectly(const std::string& command_line, const std::string& out, const std::string& err) {
  HANDLE streams[3] = {InheritableFile("NUL", GENERIC_READ, OPEN_EXISTING),
                       InheritableFile(out, GENERIC_WRITE, CREATE_ALWAYS),
                       InheritableFile(err, GENERIC_WRITE, CREATE_ALWAYS)};
  STARTUPINFOA startup{};
  startup.cb = sizeof startup;
  startup.dwFlags = STARTF_USESTDHANDLES;
  startup.hStdInput = streams[0];
  startup.hStdOutput = streams[1];
  startup.hStdError = streams[2];
  PROCESS_INFORMATION process{};
  std::string line = command_line;  // CreateProcessA may write into it
  const BOOL started = CreateProcessA(nullptr, line.data(), nullptr, nullptr, TRUE, 0, nullptr,
                                      nullptr, &startup, &process);
  const DWORD error = started ? 0 : GetLastError();
  DWORD code = 0;
  if (started) {
    WaitForSingleObject(process.hProcess, INFINITE);
    GetExitCodeProcess(process.hProcess, &code);
    CloseHandle(process.hThread);
    CloseHandle(process.hProcess);
  }
  for (HANDLE h : streams) {
    if (h != INVALID_HANDLE_VALUE) CloseHandle(h);
  }
  if (!started) {
    std::ofstream(err, std::ios::app) << "CreateProcess failed: error " << error << "\n";
    return -1;
  }
  return static_cast<int>(code);
}
#else
std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}
#endif
// Text mode: a Windows program's "\r\n" reads as "\n".
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

CommandResult RunHoist(const std::vector<std::string>& args) {
  TempDir dir;
  std::string command = Quote(HOIST_CLI);
  for (const std::string& a : args) command.append(" ").append(Quote(a));
  CommandResult result;
#ifdef _WIN32
  result.exit_code = RunDirectly(command, dir.File("out"), dir.File("err"));
#else
  command.append(" >").append(Quote(dir.File("out")));
  command.append(" 2>").append(Quote(dir.File("err")));
  command += " </dev/null";
  const int status = std::system(command.c_str());  // NOLINT(cert-env33-c)
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
#endif
  result.out = Slurp(dir.File("out"));
  result.err = Slurp(dir.File("err"));
  return result;
}

#ifndef _WIN32
HoistProcess::HoistProcess(const std::vector<std::string>& args, const std::string& stdout_path)
    : dir_(std::make_unique<TempDir>()),
      stdout_path_(stdout_path.empty() ? dir_->File("out") : stdout_path) {
  std::vector<std::string> argv_storage = {HOIST_CLI};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err_path = dir_->File("err");
  pid_ = ::fork();
  if (pid_ == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(HOIST_CLI, argv.data());
    ::_exit(127);
  }
  if (pid_ < 0) throw std::runtime_error("fork failed");
}

HoistProcess::~HoistProcess() {
  if (exit_code_ < 0 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::string HoistProcess::Out() const { return Slurp(stdout_path_); }
std::string HoistProcess::Err() const { return Slurp(dir_->File("err")); }

bool HoistProcess::WaitUntil(const std::function<bool()>& condition, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    int status = 0;
    if (exit_code_ < 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (exit_code_ >= 0) return condition();
    // A pacing loop: a file's contents and /proc have no event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

bool HoistProcess::HasOpen(const std::string& path) const {
  std::error_code ec;
  const std::filesystem::path want = std::filesystem::canonical(path, ec);
  if (ec) return false;
  const std::string fds = "/proc/" + std::to_string(pid_) + "/fd";
  for (const auto& entry : std::filesystem::directory_iterator(fds, ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(entry.path(), link_ec) == want) return true;
  }
  return false;
}

uint64_t HoistProcess::BytesRead() const {
  std::ifstream io("/proc/" + std::to_string(pid_) + "/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

void HoistProcess::Signal(int signal) const { ::kill(pid_, signal); }

int HoistProcess::Wait(double seconds) {
  WaitUntil([this] { return exit_code_ >= 0; }, seconds);
  return exit_code_;
}
#endif

int ThreadExchange::Start(uint32_t rank, void* block, uint64_t chunk) {
  std::lock_guard<std::mutex> lock(mutex_);
  Round& round = rounds_[started_[rank]++];
  if (round.blocks.empty()) {
    round.blocks.assign(world_, nullptr);
    round.chunks.assign(world_, 0);
  }
  round.blocks[rank] = static_cast<unsigned char*>(block);
  round.chunks[rank] = chunk;
  if (++round.count < world_) return 0;
  for (uint32_t r = 0; r < world_; ++r) {
    if (round.chunks[r] != chunk) {
      round.outcome = -1;
      return 0;
    }
  }
  for (uint32_t to = 0; to < world_; ++to) {
    for (uint32_t from = 0; from < world_; ++from) {
      if (from != to) {
        std::memcpy(round.blocks[to] + from * chunk, round.blocks[from] + from * chunk, chunk);
      }
    }
  }
  round.outcome = 1;
  return 0;
}

int ThreadExchange::Poll(uint32_t rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_[rank] == 0) return -1;
  return rounds_[started_[rank] - 1].outcome;
}

uint64_t ThreadExchange::Started(uint32_t rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_[rank];
}

}  // namespace hoist::testing
