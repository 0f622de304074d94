// The conventions a user's hands already know: files of other formats and names that are not
// files named for what they are, sizes with their units, the nearest command or option for a
// typo, the program's name in its usage lines, and what the build is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hoist/hoist.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::RunHoist;

class ConventionsCliTest : public testing::SampleModelTest<8 << 20> {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    testing::WriteBytes(tmp_.File(name), std::vector<unsigned char>(bytes.begin(), bytes.end()));
    return tmp_.File(name);
  }
};

TEST_F(ConventionsCliTest, FilesOfOtherFormatsAreNamedWithTheNextStep) {
  const std::string convert =
      "; convert it to safetensors first, e.g. python3 -c \"import torch, hoist.safetensors.torch "
      "as "
      "st; st.save_file(torch.load('";
  struct Case {
    std::string name, bytes, what, next;
  };
  const Case cases[] = {
      {"model.bin", std::string("PK\x03\x04", 4) + "zip-entry-bytes",
       "a zip archive, as PyTorch's torch.save writes (.bin, .pt, .pth)", convert},
      {"old.pt", std::string("\x80\x02\x8a\x0a", 4) + "l\xfc\x9c\x46\xf9 j\xa8P\x19.",
       "a Python pickle, as PyTorch's torch.save wrote before 1.6", convert},
      {"llama.bin", std::string("tjgg\x03\x00\x00\x00", 8) + "ggml-bytes",
       "a legacy GGML file (ggml, ggmf or ggjt: before GGUF)",
       "; convert it with llama.cpp's convert_llama_ggml_to_gguf.py"},
      {"w.npy", std::string("\x93NUMPY\x01\x00", 8) + "v{'descr'", "a NumPy .npy array",
       "; save the arrays with safetensors.numpy.save_file first"},
      // A shard index under a model's name (make-sample once wrote one so).
      {"index.safetensors", "{\"metadata\": {}, \"weight_map\": {}}",
       "JSON text (a shard index is read as one only when its name ends in .index.json)",
       "; name it MODEL.safetensors.index.json, with its shards beside it"},
      {"pickled.gguf", std::string("\x80\x02\x8a\x0a", 4) + "l\xfc\x9c\x46\xf9 j\xa8P\x19.",
       "a Python pickle, as PyTorch's torch.save wrote before 1.6", convert},
  };
  const std::string sharded = tmp_.File("sharded.safetensors");
  auto refused = RunHoist({"make-sample", sharded, "--shards", "3", "--size", "1MiB"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, "hoist: " + sharded +
                             ": a sharded safetensors sample is written as its index, whose name "
                             "must end in .index.json (model.safetensors.index.json)\n");
  EXPECT_FALSE(std::filesystem::exists(sharded));
  for (const Case& c : cases) {
    const std::string path = Write(c.name, c.bytes);
    auto r = RunHoist({"inspect", path});
    EXPECT_EQ(r.exit_code, 2) << c.name;
    EXPECT_EQ(r.err.find("hoist: " + path + ": not safetensors or GGUF but " + c.what +
                         " at byte 0" + c.next),
              0u)
        << r.err;
  }
  // A safetensors file whose header length happens to start like a pickle is still read as
  // safetensors (its ninth byte is the header's '{').
  std::string header = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  header.resize(0x280, ' ');
  const std::string st = Write(
      "odd.safetensors", std::string("\x80\x02\0\0\0\0\0\0", 8) + header + std::string(1, '\x07'));
  auto r = RunHoist({"inspect", st});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A directory of PyTorch checkpoints says what it holds.
  std::filesystem::create_directory(tmp_.File("hf-model"));
  Write("hf-model/pytorch_model.bin", "PK\x03\x04");
  Write("hf-model/config.json", "{}");
  r = RunHoist({"load", tmp_.File("hf-model"), "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no .safetensors or .gguf files in the directory; it holds PyTorch "
                       "checkpoints (.bin, .pt, .pth, .ckpt); convert them to safetensors first"),
            std::string::npos)
      << r.err;
}

TEST_F(ConventionsCliTest, NamesThatAreNotFilesSayWhatToDo) {
  auto r = RunHoist({"load", "meta-llama/Llama-3-8B", "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  // The system's words for a missing file first (they differ by platform), then hoist's.
  EXPECT_EQ(r.err.find("hoist: meta-llama/Llama-3-8B: "), 0u) << r.err;
  EXPECT_NE(r.err.find("; it looks like a Hugging Face repo id: name it "
                       "hf://meta-llama/Llama-3-8B (hoist reads it from the Hugging Face cache, "
                       "else from the hub)\n"),
            std::string::npos)
      << r.err;
  r = RunHoist({"inspect", "abfs://container/m.safetensors"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("; it is a URL hoist does not read (it reads local files, http://, "
                       "https://, s3://, gs://, az:// and hf://)"),
            std::string::npos)
      << r.err;
#ifndef _WIN32  // setenv; the cache's layout is the same everywhere
  // A repo in the local Hugging Face cache: its snapshot is named.
  const std::string repo = tmp_.File("hub/models--org--name");
  std::filesystem::create_directories(repo + "/refs");
  const std::string commit = "0123abcd" + std::string(32, 'e');  // refs hold 40-hex commits
  std::filesystem::create_directories(repo + "/snapshots/" + commit);
  Write("hub/models--org--name/refs/main", commit + "\n");
  ASSERT_EQ(setenv("HF_HUB_CACHE", tmp_.File("hub").c_str(), 1), 0);
  r = RunHoist({"inspect", "org/name"});
  unsetenv("HF_HUB_CACHE");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("it looks like a Hugging Face repo id, and the Hugging Face cache holds "
                       "it: name it hf://org/name (or give hoist " +
                       repo + "/snapshots/" + commit + ")"),
            std::string::npos)
      << r.err;
#endif
}

TEST_F(ConventionsCliTest, SizeFlagsTakeTheirUnitsOrAPlainNumberOfMiB) {
  const std::pair<std::string, uint64_t> chunks[] = {
      {"64KiB", 64u << 10}, {"1MB", 1000000}, {"0.5", 512u << 10}, {"2", 2u << 20}};
  for (const auto& [text, bytes] : chunks) {
    auto r = RunHoist({"load", model_, "--device", "host", "--json", "--quiet", "--chunk", text,
                       "--staging", "16MiB"});
    ASSERT_EQ(r.exit_code, 0) << text << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["chunk_bytes"], bytes) << text;
    EXPECT_LE(j["staging"]["bytes"].get<uint64_t>(), 16u << 20) << text;
  }
  auto r = RunHoist({"load", model_, "--device", "host", "--chunk", "4xb"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hoist: --chunk 4xb: expected a size such as 4MiB, 512KiB, 1GB, or a number "
            "of MiB\n");
  r = RunHoist({"load", model_, "--device", "host", "--staging", "-1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: --staging takes a number of MiB from 0 to 1073741824, not -1\n");
  // A rate says its unit: a bare number would be bytes a second.
  r = RunHoist({"load", model_, "--device", "sim:bandwidth=5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("rate '5' needs a unit, such as 5GB/s, 800MiB/s or 100B/s"),
            std::string::npos)
      << r.err;
}

TEST_F(ConventionsCliTest, TyposGetTheNearestCommandOrOption) {
  auto r = RunHoist({"lod", model_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hoist: unknown command 'lod'; did you mean 'load'? (commands: inspect, load, "
            "verify, make-sample, bench, doctor, pack, serve, attach)\n");
  r = RunHoist({"xyzzy"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("hoist: unknown command 'xyzzy' (commands:"), 0u) << r.err;
  r = RunHoist({"load", model_, "--devcie", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hoist load: unknown option '--devcie'; did you mean '--device'? (hoist load --help "
            "lists them)\n");
  r = RunHoist({"verify", model_, "--chunck=2MiB"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("did you mean '--chunk'?"), std::string::npos) << r.err;
  // A word added to an option's name: too far for the edit distance, still that option.
  for (const char* spelled : {"--chunk-size=2MiB", "--chunk-bytes"}) {
    r = RunHoist({"load", model_, spelled});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("did you mean '--chunk'?"), std::string::npos) << spelled << r.err;
  }
  r = RunHoist({});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("hoist: a command is required (inspect, load,"), 0u) << r.err;
  r = RunHoist({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("or a URL:\nhttp(s)://HOST/PATH (a server that answers Range requests), "
                       "s3://BUCKET/KEY,\ngs://BUCKET/OBJECT, az://CONTAINER/BLOB, or "
                       "hf://ORG/NAME[@REVISION]\n(docs/SOURCES.md)."),
            std::string::npos)
      << r.out;
  r = RunHoist({"load", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Usage: hoist load [OPTIONS] PATH"), std::string::npos) << r.out;
  // Device names as for commands: the nearest, its index kept; a name in capitals.
  for (const auto& [typed, meant] : std::vector<std::pair<std::string, std::string>>{
           {"cuad:0", "cuda:0"},
           {"CPU", "cpu"},
           {"hots", "host"},
           {"smi:bandwidth=1GB/s", "sim:bandwidth=1GB/s"}}) {
    r = RunHoist({"load", model_, "--device", typed});
    EXPECT_EQ(r.exit_code, 1) << typed;
    EXPECT_EQ(r.err, "hoist: unknown device '" + typed +
                         "': expected auto, host (or cpu), sim[:options], gpu[:N] or cuda[:N]; did "
                         "you mean '" +
                         meant + "'?\n");
  }
  r = RunHoist({"load", model_, "--device", "xyzzy:3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

// Every command that reads a model says its PATH may be remote; options with a default show it.
TEST_F(ConventionsCliTest, HelpSaysWhatAPathMayBeAndEachDefault) {
  for (const char* command : {"inspect", "load", "verify", "bench", "pack"}) {
    const auto r = RunHoist({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_NE(r.out.find("s3://, gs://, az:// or hf://"), std::string::npos) << command << r.out;
  }
  const auto sample = RunHoist({"make-sample", "--help"});
  EXPECT_NE(sample.out.find("--size TEXT=64MiB"), std::string::npos) << sample.out;
  const auto attach = RunHoist({"attach", "--help"});
  EXPECT_NE(attach.out.find("]=10\n"), std::string::npos) << attach.out;
  const auto load = RunHoist({"load", "--help"});
  EXPECT_NE(load.out.find("{buffered,direct}=buffered"), std::string::npos) << load.out;
}

// "--device auto" that finds no usable GPU loads to host and says so, with each GPU backend's
// reason (a build without one says that), in the summary, --json and doctor.
TEST_F(ConventionsCliTest, AFallbackFromAutoSaysWhatItFellBackFromAndWhy) {
  auto r = RunHoist({"load", model_, "--device", "auto", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  const std::string said = "--device auto found no usable GPU; loading to host memory: ";
  std::string fallback;
  for (const auto& f : report["fallbacks"]) {
    if (f.get<std::string>().rfind(said, 0) == 0) fallback = f;
  }
  auto doctor = RunHoist({"doctor", "--device", "auto", "--json"});
  ASSERT_EQ(doctor.exit_code, 0) << doctor.err;
  const auto found = nlohmann::json::parse(doctor.out);
  if (report["device"] != "host") {  // a GPU build on a machine with a GPU
    EXPECT_EQ(fallback, "") << r.out;
    return;
  }
  ASSERT_NE(fallback, "") << r.out;
  const std::string version = RunHoist({"--version"}).out;
  if (version.find("GPU backend: none") != std::string::npos) {
    EXPECT_EQ(fallback, said +
                            "gpu: this build has no GPU backend (rebuild with -DHOIST_CUDA=ON "
                            "or -DHOIST_HIP=ON)");
  } else {
    EXPECT_NE(fallback.find(": no usable GPU ("), std::string::npos) << fallback;
  }
  ASSERT_TRUE(found.contains("unusable_backends")) << doctor.out;
  EXPECT_EQ(found["unusable_backends"][0], fallback.substr(said.size()));
  EXPECT_NE(std::find(found["traps"].begin(), found["traps"].end(), fallback), found["traps"].end())
      << doctor.out;
  r = RunHoist({"load", model_, "--device", "auto"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("    " + fallback + "\n"), std::string::npos) << r.out;
}

TEST_F(ConventionsCliTest, VersionAndDoctorSayWhatTheBuildIs) {
  auto r = RunHoist({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  // One version everywhere: CMake's project(VERSION), which the library reports.
  EXPECT_EQ(r.out.find("hoist " + std::string(hoist_version()) + " ("), 0u) << r.out;
  EXPECT_NE(r.out.find(" build, GPU backend: "), std::string::npos) << r.out;
  r = RunHoist({"doctor", "--device", "host", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto found = nlohmann::json::parse(r.out);
  const auto machine = found["machine"];
  // The host pins nothing, so no pinned allocation rate is made up for it.
  EXPECT_TRUE(found["ceilings"]["pinned_allocation_gbps"].is_null()) << r.out;
  EXPECT_EQ(found["not_measured"]["pinned_allocation_gbps"],
            "host stages in ordinary memory: nothing is pinned");
  EXPECT_EQ(machine["hoist_version"], hoist_version());
  EXPECT_TRUE(machine["gpu_backend"].is_string());
  EXPECT_TRUE(machine["build_type"].is_string());
}

}  // namespace
}  // namespace hoist
