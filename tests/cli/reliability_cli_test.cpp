// The promises of docs/RELIABILITY.md tried as a hostile user would, through the hoist command:
// odd paths, signals in every phase, odd option values, files changed under a load, output
// that cannot be written. Time bounds are the harness's deadlines (HoistProcess), never
// sleeps that a slow machine could outrun.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "format/sample_model.h"
#include "test_util.h"

#ifndef _WIN32
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#endif

namespace hoist {
namespace {

using testing::RunHoist;

class ReliabilityCliTest : public testing::SampleModelTest<16 << 20> {};

// NaN passes every range check made of comparisons; each number is refused before the model is
// opened, with the option's name.
TEST_F(ReliabilityCliTest, NumbersOutOfRangeOrNotFiniteAreRefusedUpFront) {
  const std::vector<std::vector<std::string>> bad = {
      {"--chunk", "nan"},         {"--staging", "nan"},
      {"--stall-timeout", "nan"}, {"--chunk", "inf"},
      {"--stall-timeout", "-1"},  {"--staging", "1048576"},
      {"--chunk", "0.0001"},      {"--threads", "100000"},
      {"--chunk", "1e400"},       {"--stall-timeout", "0x1p2000"},
  };
  for (const auto& flags : bad) {
    for (const char* command : {"load", "verify", "bench"}) {
      if (std::string(command) == "bench" && flags[0] == "--stall-timeout") continue;
      std::vector<std::string> args = {command, model_, "--device", "host", "--quiet"};
      if (std::string(command) == "bench") args.pop_back();
      args.insert(args.end(), flags.begin(), flags.end());
      auto r = RunHoist(args);
      EXPECT_EQ(r.exit_code, 1) << command << " " << flags[0] << " " << flags[1] << ": " << r.err;
      // Named as the flag ("--stall-timeout: ...") or as the setting ("stall timeout of ...").
      std::string setting = flags[0].substr(2);
      for (char& c : setting) c = c == '-' ? ' ' : c;
      EXPECT_TRUE(r.err.find(flags[0]) != std::string::npos ||
                  r.err.find(setting) != std::string::npos)
          << command << " " << flags[0] << " " << flags[1] << ": " << r.err;
    }
  }
  // 1 TiB of staging on a machine with less than 2 TiB of memory names the bound.
  auto r = RunHoist({"load", model_, "--device", "host", "--staging", "1048576"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("more than half of this machine's memory"), std::string::npos) << r.err;
}

// A sample larger than the free space is refused before a byte is written, not after the disk
// is full.
TEST_F(ReliabilityCliTest, SampleLargerThanTheFreeSpaceIsRefusedUpFront) {
  const std::string path = tmp_.File("huge.gguf");
  auto r = RunHoist({"make-sample", path, "--size", "900TiB"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(path + ": a sample of 900.00 TiB does not fit in the"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::ifstream(path).good());
}

// Chunks that are not a multiple of the direct-I/O alignment still load byte-exact with
// O_DIRECT: staging buffers are whole pages.
TEST_F(ReliabilityCliTest, DirectIoTakesAnyChunkSize) {
  for (const char* chunk : {"3.3", "0.01", "1.0001"}) {
    auto r = RunHoist(
        {"verify", model_, "--device", "host", "--io", "direct", "--chunk", chunk, "--quiet"});
    EXPECT_EQ(r.exit_code, 0) << chunk << ": " << r.err;
    EXPECT_NE(r.out.find("all match"), std::string::npos) << chunk << ": " << r.out;
  }
}

#ifndef _WIN32
// A FIFO opened for reading waits for a writer: hoist must refuse it at once, not hang.
TEST_F(ReliabilityCliTest, FifoAndOtherNonRegularFilesAreRefusedAtOnce) {
  const std::string fifo = tmp_.File("f.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const char* command : {"inspect", "load", "verify"}) {
    std::vector<std::string> args = {command, fifo};
    if (std::string(command) != "inspect") args.insert(args.end(), {"--device", "host"});
    testing::HoistProcess p(args);
    const int code = p.Wait(testing::TimeBound(5));
    ASSERT_NE(code, -1) << command << " on a FIFO was still running after 5 s";
    EXPECT_EQ(code, 1) << command;
    EXPECT_EQ(p.Err(),
              "hoist: " + fifo + ": is a FIFO (named pipe); a model is read from regular files\n");
  }
  auto dev = RunHoist({"inspect", "/dev/zero"});
  EXPECT_EQ(dev.exit_code, 1);
  EXPECT_NE(dev.err.find("/dev/zero: is a character device"), std::string::npos) << dev.err;
}

// Each way a path can fail says what the system said, not "no such file".
TEST_F(ReliabilityCliTest, PathErrorsSayWhatTheSystemSaid) {
  const std::string loop = tmp_.File("loop.gguf");
  ASSERT_EQ(::symlink(loop.c_str(), loop.c_str()), 0);
  auto r = RunHoist({"inspect", loop});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + loop + ": Too many levels of symbolic links\n");
  const std::string long_name = tmp_.File(std::string(300, 'x') + ".gguf");
  r = RunHoist({"load", long_name, "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + long_name + ": File name too long\n");
  r = RunHoist({"inspect", tmp_.File("missing.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + tmp_.File("missing.gguf") + ": No such file or directory\n");
}

// SIGTERM while verify reads the tensors back ends it with 143 within 2 s: on one device, and
// on two whose read-back pieces take seconds each.
TEST_F(ReliabilityCliTest, SigtermDuringVerifyReadBackEndsItWithin2Seconds) {
  // 64 MiB read back at 32 MB/s: about 2 s of read-back in pieces of at most 16 MiB (0.5 s
  // each), so the signal lands in the middle of it.
  SampleSpec spec;
  spec.target_bytes = 64 << 20;
  const std::string big = tmp_.File("big.gguf");
  ASSERT_TRUE(WriteSampleModel(big, spec).ok());
  const std::vector<std::vector<std::string>> runs = {
      {"verify", big, "--device", "sim:readback_bandwidth=32MB/s"},
      {"verify", model_, "--device", "sim:readback_bandwidth=20KB/s,sim", "--split", "replicate"}};
  for (const auto& args : runs) {
    testing::HoistProcess p(args);
    // Printed as the read-back starts; the signal lands in it (it takes seconds).
    ASSERT_TRUE(p.WaitForErr("hoist: verifying", testing::TimeBound(10))) << p.Err();
    const auto start = std::chrono::steady_clock::now();
    p.Signal(SIGTERM);
    const int code = p.Wait(testing::TimeBound(2));
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(code, 143) << args[3] << ": " << p.Err();
    EXPECT_LT(s, testing::TimeBound(2)) << args[3];
    EXPECT_NE(p.Err().find("verify: cancelled by signal 15"), std::string::npos) << p.Err();
  }
}

// A read-back that crawls is a stall: with the read-back at 1 KB/s on one of two devices, the
// verify ends at the stall timeout with exit 3 naming the tensor and the device (it once ran
// until killed).
TEST_F(ReliabilityCliTest, AStalledMultiDeviceVerifyEndsAtTheStallTimeout) {
  for (const char* split : {"tensor", "replicate", "layer"}) {
    testing::HoistProcess p({"verify", model_, "--device", "sim:readback_bandwidth=1KB/s,sim",
                             "--split", split, "--stall-timeout", "1", "--quiet"});
    const auto start = std::chrono::steady_clock::now();
    const int code = p.Wait(testing::TimeBound(1 + 3.0));
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(code, 3) << split << ": " << p.Err();
    EXPECT_LT(s, testing::TimeBound(1 + 3.0)) << split;
    EXPECT_NE(p.Err().find("verify: no progress for 1.0 s: reading tensor '"), std::string::npos)
        << split << ": " << p.Err();
    EXPECT_NE(p.Err().find("' back from sim has not returned"), std::string::npos) << p.Err();
  }
}

// A copy whose modelled time outlasts the stall timeout: the watchdog's exit 3 comes at the
// timeout, not when the copy would have finished (here never, in practice).
TEST_F(ReliabilityCliTest, CopySlowerThanTheStallTimeoutIsAbandonedAtOnce) {
  for (const char* latency : {"10000000", "1000000000000"}) {
    testing::HoistProcess p({"load", model_, "--device", std::string("sim:latency_us=") + latency,
                             "--stall-timeout", "1", "--quiet"});
    const int code = p.Wait(testing::TimeBound(1 + 2.5));
    EXPECT_EQ(code, 3) << latency << ": " << p.Err();
    EXPECT_NE(p.Err().find("device copy stage on sim"), std::string::npos) << p.Err();
  }
}

// bench and doctor wait on device copies for their ceilings and reference strategies: a device
// that stops completing copies ends them with exit 3 at the stall timeout, not never.
TEST_F(ReliabilityCliTest, StalledDeviceEndsBenchAndDoctorAtTheStallTimeout) {
  const std::vector<std::vector<std::string>> commands = {
      {"doctor", "--device", "sim:stall_after=1MiB", "--stall-timeout", "1"},
      {"bench", model_, "--device", "sim:stall_after=1MiB", "--stall-timeout", "1", "--repeat",
       "1"},
  };
  for (const auto& args : commands) {
    testing::HoistProcess p(args);
    // The 1 s timeout, plus what each does before its copies stall: about 3 s for doctor on
    // two cores shared with another build (it failed at 1 + 4 there), never a hang.
    EXPECT_EQ(p.Wait(testing::TimeBound(1 + 9)), 3) << args[0] << ": " << p.Err();
    EXPECT_NE(p.Err().find("made no progress"), std::string::npos) << args[0] << ": " << p.Err();
  }
}

// SIGTERM while bench measures its ceilings (here a slow link) ends it with 143 within 2 s.
TEST_F(ReliabilityCliTest, SigtermDuringBenchMeasurementsEndsItWithin2Seconds) {
  testing::HoistProcess p({"bench", model_, "--device", "sim:bandwidth=20MB/s"});
  ASSERT_TRUE(p.WaitForErr("measuring ceilings", testing::TimeBound(10))) << p.Err();
  const auto start = std::chrono::steady_clock::now();
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(testing::TimeBound(2)), 143) << p.Err();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            testing::TimeBound(2));
  EXPECT_NE(p.Err().find("cancelled by signal 15"), std::string::npos) << p.Err();
}

// Overwritten in place while the load runs: exit 6, never 0 with torn tensors. The write
// waits for the load's first megabyte (the model is open and its state taken: a write between
// open and fstat is a file that was never torn, and under TSan that window is wide), and the
// load is stopped while the file is written, so a loaded machine cannot let it finish first.
TEST_F(ReliabilityCliTest, FileWrittenToDuringALoadIsReportedAsChanged) {
  testing::AgeFile(model_);
  testing::HoistProcess p({"load", model_, "--device", "sim:bandwidth=8MB/s", "--quiet"});
  ASSERT_TRUE(p.WaitUntil([&] { return p.HasOpen(model_) && p.BytesRead() > (1u << 20); },
                          testing::TimeBound(10)));
  p.Signal(SIGSTOP);
  {
    std::fstream f(model_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(model_) - 4096));
    f.write(std::string(4096, 'x').data(), 4096);
  }
  p.Signal(SIGCONT);
  EXPECT_EQ(p.Wait(testing::TimeBound(10)), 6) << p.Err();
  EXPECT_NE(p.Err().find(model_ + ": written to"), std::string::npos) << p.Err();
}

// Replaced by a rename while verify's load runs: verify compares against the file that was
// loaded or says the file changed (exit 6); it never blames the device (exit 5).
TEST_F(ReliabilityCliTest, FileReplacedDuringVerifyIsReportedAsChanged) {
  SampleSpec other;
  other.target_bytes = 16 << 20;
  other.seed = 99;
  const std::string replacement = tmp_.File("other.gguf");
  ASSERT_TRUE(WriteSampleModel(replacement, other).ok());
  testing::HoistProcess p({"verify", model_, "--device", "sim:bandwidth=8MB/s", "--quiet"});
  ASSERT_TRUE(p.WaitUntil([&] { return p.HasOpen(model_); }, testing::TimeBound(10)));
  ASSERT_EQ(std::rename(replacement.c_str(), model_.c_str()), 0);
  EXPECT_EQ(p.Wait(testing::TimeBound(10)), 6) << p.Err();
  EXPECT_NE(p.Err().find(model_ + ": replaced by another file since the model was opened"),
            std::string::npos)
      << p.Err();
}

// Output that never reached its destination is an error, not a quiet success.
TEST_F(ReliabilityCliTest, WriteErrorOnStdoutIsAFailure) {
  // Containers may bind a regular file at /dev/full, which takes every write.
  struct stat full {};
  if (::stat("/dev/full", &full) != 0 || !S_ISCHR(full.st_mode)) {
    GTEST_SKIP() << "/dev/full is not the character device that fails every write (a "
                    "container's?): nothing here refuses a write to standard output";
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", model_, "--json"},
        {"inspect", model_},
        {"load", model_, "--device", "host", "--quiet", "--json"}}) {
    testing::HoistProcess p(args, "/dev/full");
    EXPECT_EQ(p.Wait(testing::TimeBound(10)), 1) << args[0];
    EXPECT_NE(p.Err().find("hoist: cannot write to standard output"), std::string::npos) << p.Err();
  }
}

// Out of threads (address space for their stacks): a clear error, never an abort (exit 134).
TEST_F(ReliabilityCliTest, ThreadsThatCannotStartAreAnErrorNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit this test sets";
#else
  testing::TempDir dir;
  const std::string command = "ulimit -v 300000; exec '" + std::string(HOIST_CLI) + "' load '" +
                              model_ + "' --device host --threads 1024 --staging 16 --quiet 2>'" +
                              dir.File("err") + "'";
  const int status = std::system(command.c_str());  // NOLINT(cert-env33-c)
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  std::ifstream in(dir.File("err"));
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("cannot start reader thread"), std::string::npos) << err;
#endif
}
#endif

}  // namespace
}  // namespace hoist
