// `hoist load|verify|inspect --device A,B,...`: one model across several devices.
#include <gtest/gtest.h>

#include <fstream>
#ifndef _WIN32
#include <sys/stat.h>
#endif
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace hoist {
namespace {

using testing::RunHoist;

class MultiDeviceCliTest : public testing::SampleModelTest<24 << 20> {};

TEST_F(MultiDeviceCliTest, VerifiesAcrossTwoSimsAndHostByLayers) {
  // A sim's options hold commas too; the second sim's are kept together.
  auto r = RunHoist({"verify", model_, "--device", "sim,host,sim:latency_us=5,engines=2", "--json",
                     "--checksum", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["verified"].get<bool>());
  EXPECT_EQ(j["device"], "sim, host, sim");
  ASSERT_EQ(j["devices"].size(), 3u);
  uint64_t bytes = 0;
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["bytes"].get<uint64_t>(), 0u) << d;
    EXPECT_GE(d["threads"].get<int>(), 1);
    bytes += d["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(bytes, j["bytes"].get<uint64_t>());
  // Layers in order (the names differ from one device to the next): each device holds one run
  // of consecutive tensors.
  std::string last_device;
  int changes = 0;
  for (const auto& t : j["tensors"]) {
    const std::string device = t["device"];
    if (device != last_device) ++changes;
    last_device = device;
  }
  EXPECT_EQ(changes, 3);
}

TEST_F(MultiDeviceCliTest, InspectShowsThePlacementBeforeLoading) {
  auto r = RunHoist({"inspect", model_, "--device", "sim,host", "--tensor-split", "3,1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("placement (layer split):\n  sim: layers 0-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  host: layers "), std::string::npos) << r.out;
  auto j = RunHoist({"inspect", model_, "--device", "sim,host", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["placement"]["devices"], nlohmann::json({"sim", "host"}));
  EXPECT_EQ(parsed["placement"]["device_of"].size(), parsed["tensors"].size());
}

TEST_F(MultiDeviceCliTest, APlacementThatDoesNotFitIsRefusedUpFront) {
  auto r = RunHoist({"load", model_, "--device", "sim:mem=4MiB,sim", "--tensor-split", "1,1"});
  EXPECT_EQ(r.exit_code, 4) << r.err;  // a device error, before anything is loaded
  EXPECT_NE(r.err.find("the layer split puts "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" on sim, which has 4.00 MiB free"), std::string::npos) << r.err;
  auto mismatch = RunHoist({"load", model_, "--device", "sim,sim", "--tensor-split", "1,2,3"});
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_NE(mismatch.err.find("--tensor-split gives 3 shares for 2 devices"), std::string::npos)
      << mismatch.err;
  auto bad = RunHoist({"load", model_, "--device", "sim,", "--quiet"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--device names an empty device"), std::string::npos) << bad.err;
}

TEST_F(MultiDeviceCliTest, AFailingDeviceFailsTheLoadNamingIt) {
  auto r = RunHoist({"load", model_, "--device", "host,sim:fail_copy_after=1MiB", "--quiet"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("to sim"), std::string::npos) << r.err;
}

TEST_F(MultiDeviceCliTest, ATensorSplitAndReplicasVerifyByteExactOnEveryDevice) {
  auto plan = RunHoist({"inspect", model_, "--device", "sim,sim", "--split", "tensor"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("placement (tensor split):\n  sim: "), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("cut by rows: "), std::string::npos) << plan.out;
  for (const char* split : {"tensor", "replicate"}) {
    SCOPED_TRACE(split);
    auto r =
        RunHoist({"verify", model_, "--device", "sim,sim", "--split", split, "--json", "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["verified"].get<bool>());
    ASSERT_EQ(j["devices"].size(), 2u);
    const uint64_t model_bytes = j["read_bytes"].get<uint64_t>();
    const uint64_t on0 = j["devices"][0]["bytes"].get<uint64_t>();
    const uint64_t on1 = j["devices"][1]["bytes"].get<uint64_t>();
    if (std::string(split) == "replicate") {
      EXPECT_EQ(on0, model_bytes);  // each byte read once, landed on both
      EXPECT_EQ(on1, model_bytes);
    } else {
      EXPECT_LT(on0, model_bytes * 6 / 10);  // about half each, norms on both
      EXPECT_LT(on1, model_bytes * 6 / 10);
    }
  }
  // A plan file: everything whole on the second device but the q projections, cut by rows.
  const std::string plan_file = tmp_.File("plan.json");
  std::ofstream(plan_file) << R"({"*attn_q*": "rows", "*": 1})";
  auto planned = RunHoist({"verify", model_, "--device", "sim,sim", "--split", "tensor",
                           "--split-plan", plan_file, "--json", "--quiet"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json p = nlohmann::json::parse(planned.out);
  EXPECT_LT(p["devices"][0]["bytes"].get<uint64_t>(), p["devices"][1]["bytes"].get<uint64_t>());
}

TEST_F(MultiDeviceCliTest, ASplitRefusesWhatItCannotDoWithAClearError) {
  const std::string plan_file = tmp_.File("bad.json");
  std::ofstream(plan_file) << R"({"*": "diagonal"})";
  auto bad = RunHoist({"load", model_, "--device", "sim,sim", "--split", "tensor", "--split-plan",
                       plan_file, "--quiet"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find(plan_file + ": \"*\": \"diagonal\" is not \"rows\""), std::string::npos)
      << bad.err;
  // A plan that is no regular file or is too large is refused before it is read: a FIFO would
  // wait for a writer, /dev/zero never ends.
#ifndef _WIN32
  const std::string fifo = tmp_.File("plan.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& special : {fifo, std::string("/dev/zero")}) {
    auto r = RunHoist({"load", model_, "--device", "sim,sim", "--split", "tensor", "--split-plan",
                       special, "--quiet"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(special + ": not a regular file (a plan is a JSON file)"),
              std::string::npos)
        << r.err;
  }
#endif
  const std::string huge = tmp_.File("huge.json");
  {
    std::ofstream out(huge, std::ios::binary);
    out << "{\"*\": \"rows\"}";
    out << std::string((16u << 20) + 1, ' ');
  }
  auto too_large = RunHoist({"load", model_, "--device", "sim,sim", "--split", "tensor",
                             "--split-plan", huge, "--quiet"});
  EXPECT_EQ(too_large.exit_code, 1);
  EXPECT_NE(too_large.err.find("; a plan is at most 16777216 bytes"), std::string::npos)
      << too_large.err;
  auto layer_plan = RunHoist({"load", model_, "--device", "sim,sim", "--split-plan", plan_file});
  EXPECT_EQ(layer_plan.exit_code, 1);
  EXPECT_NE(layer_plan.err.find("--split-plan is for --split tensor"), std::string::npos)
      << layer_plan.err;
  auto checksum = RunHoist(
      {"load", model_, "--device", "sim,sim", "--split", "replicate", "--checksum", "--quiet"});
  EXPECT_EQ(checksum.exit_code, 1);
  EXPECT_NE(checksum.err.find("--split replicate takes no --checksum"), std::string::npos)
      << checksum.err;
  auto full =
      RunHoist({"load", model_, "--device", "sim:mem=8MiB,sim", "--split", "replicate", "--quiet"});
  EXPECT_EQ(full.exit_code, 4) << full.err;
  EXPECT_NE(full.err.find(" on sim, which has 8.00 MiB free; every device holds the whole "
                          "model when replicated"),
            std::string::npos)
      << full.err;
}

}  // namespace
}  // namespace hoist
