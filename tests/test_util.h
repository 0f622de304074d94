// Helpers shared by the tests: temporary directories, raw file bytes, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "format/sample_model.h"

namespace hoist::testing {

// The corpus of real files written by other tools (tests/corpus; origins and licences in its
// README).
std::string CorpusDir();

// A fresh directory removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A test with a llama-shaped sample GGUF of about kBytes of tensors, model_, in its own
// temporary directory tmp_.
template <uint64_t kBytes>
class SampleModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.target_bytes = kBytes;
    ASSERT_TRUE(WriteSampleModel(model_ = tmp_.File("m.gguf"), spec).ok());
  }
  TempDir tmp_;
  std::string model_;
};

std::vector<unsigned char> ReadBytes(const std::string& path);
// Sets a file's modification time an hour back, so that any write after it is seen as a change
// whatever the grain of the file system's clock.
void AgeFile(const std::string& path);
void WriteBytes(const std::string& path, const std::vector<unsigned char>& bytes);

// Little-endian byte builder for crafting files by hand.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    const size_t at = data.size();
    data.resize(at + sizeof(T));
    std::memcpy(data.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    return Raw(s);
  }
  // resize and memcpy, not vector::insert: GCC 12 at -O3 warns falsely (-Warray-bounds) inside
  // the latter.
  Bytes& Raw(const std::string& s) {
    const size_t at = data.size();
    data.resize(at + s.size());
    if (!s.empty()) std::memcpy(data.data() + at, s.data(), s.size());
    return *this;
  }
  Bytes& Zeros(size_t n) {
    data.resize(data.size() + n, 0);
    return *this;
  }
  Bytes& AlignTo(size_t a) { return Zeros((a - data.size() % a) % a); }
  size_t size() const { return data.size(); }
  std::vector<unsigned char> data;
};

// A time bound for a test, stretched by HOIST_TEST_TIME_SCALE (sanitizer builds run slower).
double TimeBound(double seconds);

// Sets environment variable `name` to `value`, or unsets it when value is null (setenv and
// unsetenv; _putenv_s on Windows, where an empty value unsets).
void SetVariable(const char* name, const char* value);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs the hoist executable with args (each one shell-quoted) and captures its output.
CommandResult RunHoist(const std::vector<std::string>& args);

#ifndef _WIN32
// The hoist executable running as a child process, for tests that act on it while it runs
// (signals, files changed under it) and bound its run time from the outside: every wait has a
// deadline, and a child still running when the object goes away is killed.
class HoistProcess {
 public:
  // stdout goes to stdout_path (a file of the object's own when empty); stderr is captured.
  explicit HoistProcess(const std::vector<std::string>& args, const std::string& stdout_path = "");
  ~HoistProcess();
  HoistProcess(const HoistProcess&) = delete;
  HoistProcess& operator=(const HoistProcess&) = delete;

  int pid() const { return pid_; }
  std::string Out() const;
  std::string Err() const;
  // Polls `condition` until it holds (true), the child ends or `seconds` pass (false).
  bool WaitUntil(const std::function<bool()>& condition, double seconds);
  bool WaitForErr(const std::string& text, double seconds) {
    return WaitUntil([&] { return Err().find(text) != std::string::npos; }, seconds);
  }
  // Whether the child holds a descriptor open on `path` (Linux: /proc/PID/fd).
  bool HasOpen(const std::string& path) const;
  // Bytes the child has read through read calls of any descriptor (Linux: rchar of
  // /proc/PID/io); 0 when unknown.
  uint64_t BytesRead() const;
  void Signal(int signal) const;
  // The exit code (128 + N for signal N), or -1 when it had not ended within `seconds`
  // (it is then killed).
  int Wait(double seconds);

 private:
  std::unique_ptr<class TempDir> dir_;
  std::string stdout_path_;
  int pid_ = -1;
  int exit_code_ = -1;
};
#endif

// An all-gather between threads that stand for the ranks of a job, polled as NCCL's and
// torch's are: a rank's round finishes once every rank has started it, when each rank's chunk
// is copied into every other's block. A round whose ranks gave different chunk sizes fails
// (Poll -1) and copies nothing. Thread safe.
class ThreadExchange {
 public:
  explicit ThreadExchange(uint32_t world) : world_(world), started_(world, 0) {}
  // Starts `rank`'s next round over block (world chunks of `chunk` bytes). Returns 0.
  int Start(uint32_t rank, void* block, uint64_t chunk);
  // `rank`'s latest round: 1 finished, 0 waiting for other ranks, -1 failed.
  int Poll(uint32_t rank);
  // How many rounds `rank` has started.
  uint64_t Started(uint32_t rank);

 private:
  struct Round {
    std::vector<unsigned char*> blocks;
    std::vector<uint64_t> chunks;
    uint32_t count = 0;
    int outcome = 0;
  };
  std::mutex mutex_;
  uint32_t world_;
  std::vector<uint64_t> started_;
  std::map<uint64_t, Round> rounds_;
};

// Writes a sparse GGUF (no disk cost) whose tensors "near" (F32 [16], 64 bytes), "past_2g"
// (Q8_0 [4, 64], 272 bytes, past 2 GiB) and "past_4g" (F16 [8, 512], 8192 bytes, past 4 GiB)
// hold FillSampleBytes(seed, index, ...): the 64-bit offset squeezed through 32 bits fails
// there. False when it could not be written.
bool WriteFarGguf(const std::string& path, uint64_t seed);

}  // namespace hoist::testing
