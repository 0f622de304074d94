// Rank mode never returns bytes a peer did not send: ranks run as threads over an exchange
// polled as NCCL's and torch's are, and one of them fails before the gather, in it, after it,
// lies or goes silent. Every rank must end with an error naming what happened, or with every
// part equal to the file's.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/load_checks.h"
#include "pipeline/loader.h"
#include "pipeline/rank_verdict.h"
#include "plan/placement/replicate.h"

namespace hoist {
namespace {

using testing::MakeDevice;
using testing::Sample;
using testing::ThreadExchange;

constexpr uint32_t kWorld = 2;

struct RankOutcome {
  Result<std::unique_ptr<LoadedModel>> model = Status::Internal("not run");
  std::vector<TensorRegion> mine;
  std::shared_ptr<CheckedDevice> device;
};

class RankAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SampleSpec spec;
    spec.target_bytes = 2 << 20;
    dir_ = Sample(tmp_, "m.gguf", spec);
  }

  // The exchange rank `rank` sees: the shared one, unless `wrap` changes it.
  AllGather ExchangeOf(ThreadExchange& exchange, uint32_t rank) {
    return {[&exchange, rank](void* block, uint64_t chunk) {
              exchange.Start(rank, block, chunk);
              return Status::Ok();
            },
            [&exchange, rank]() -> Result<bool> {
              const int outcome = exchange.Poll(rank);
              if (outcome < 0) return Status::DeviceError("the exchange failed");
              return outcome == 1;
            }};
  }

  // Runs every rank on its own thread: rank r loads cuts[r] through gathers[r].
  std::vector<RankOutcome> RunJob(const std::vector<Result<std::vector<TensorRegion>>>& cuts,
                                  const std::vector<AllGather>& gathers, double stall_s) {
    std::vector<RankOutcome> out(kWorld);
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < kWorld; ++r) {
      out[r].device = MakeDevice("host");
      ranks.emplace_back([&, r] {
        LoadOptions o;
        o.stall_timeout_s = stall_s;
        out[r].model =
            LoadRank(dir_, out[r].device, cuts[r], r, kWorld, gathers[r], o, &out[r].mine);
      });
    }
    for (std::thread& t : ranks) t.join();
    return out;
  }

  // A rank that succeeded holds every part equal to the file's bytes; one that failed left
  // nothing allocated (unless an exchange was left in flight: `kept`).
  void ExpectPartsEqualTheFile(RankOutcome& rank) {
    ASSERT_TRUE(rank.model.ok()) << rank.model.status().message();
    auto parts = RegionDirectory(dir_, rank.mine);
    ASSERT_TRUE(parts.ok()) << parts.status().message();
    auto mismatches = Verify(*parts, **rank.model, 2, 10);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status().message();
    EXPECT_TRUE(mismatches->empty()) << (*mismatches)[0].tensor;
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
};

std::string MessageOf(const RankOutcome& r) {
  return r.model.ok() ? "loaded" : r.model.status().message();
}

TEST_F(RankAgreementTest, EveryRankLoadsItsPartsWhenAllSucceed) {
  ThreadExchange exchange(kWorld);
  const auto cut = ReplicateTensors(dir_, kWorld);
  auto ranks = RunJob({cut, cut}, {ExchangeOf(exchange, 0), ExchangeOf(exchange, 1)}, 10);
  for (RankOutcome& r : ranks) ExpectPartsEqualTheFile(r);
  // The check before the gather, the gather, the check after it.
  EXPECT_EQ(exchange.Started(0), 3u);
}

// Rank 1 refuses its cut (shares that do not fit the job): it still tells rank 0, which fails at
// once naming rank 1 and its reason instead of gathering what rank 1 never sent.
TEST_F(RankAgreementTest, ARankThatRefusesBeforeTheGatherFailsEveryRank) {
  ThreadExchange exchange(kWorld);
  const auto cut = ReplicateTensors(dir_, kWorld);
  const Status refused = Status::InvalidArgument("--tensor-split gives 3 shares for 2 devices");
  auto ranks = RunJob({cut, refused}, {ExchangeOf(exchange, 0), ExchangeOf(exchange, 1)}, 30);
  ASSERT_FALSE(ranks[0].model.ok());
  EXPECT_EQ(ranks[0].model.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MessageOf(ranks[0]),
            "rank 1 of 2 failed its load: --tensor-split gives 3 shares for 2 devices");
  ASSERT_FALSE(ranks[1].model.ok());
  EXPECT_EQ(MessageOf(ranks[1]), refused.message());
  for (RankOutcome& r : ranks) EXPECT_EQ(r.device->live_device_allocations(), 0u);
  EXPECT_EQ(exchange.Started(0), 1u);  // nothing was gathered
}

// Ranks that cut differently (other names, other shares, another model) would gather chunks
// that do not line up: refused by every rank before the gather.
TEST_F(RankAgreementTest, RanksThatLayOutOtherwiseAreRefusedBeforeTheGather) {
  ThreadExchange exchange(kWorld);
  const auto cut = ReplicateTensors(dir_, kWorld);
  std::vector<TensorRegion> fewer;
  for (const TensorRegion& r : cut) {
    if (r.tensor != 0) fewer.push_back(r);
  }
  auto ranks = RunJob({cut, fewer}, {ExchangeOf(exchange, 0), ExchangeOf(exchange, 1)}, 30);
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_FALSE(ranks[r].model.ok()) << r;
    EXPECT_EQ(ranks[r].model.status().code(), Code::kInvalidArgument);
    const std::string other = "rank " + std::to_string(1 - r) + " of 2 laid out the tensors";
    EXPECT_EQ(MessageOf(ranks[r]).rfind(other, 0), 0u) << MessageOf(ranks[r]);
    EXPECT_NE(MessageOf(ranks[r]).find("another model or other tensors): every rank loads the "
                                       "same model with the same split, shares and names"),
              std::string::npos);
    EXPECT_EQ(ranks[r].device->live_device_allocations(), 0u);
  }
}

// The gather fails on rank 0 alone (its collective aborted): rank 0 fails, and rank 1, whose
// gather finished, never returns without rank 0's word after it: it stalls, not succeeds.
TEST_F(RankAgreementTest, AGatherThatFailsOnOneRankFailsEveryRank) {
  ThreadExchange exchange(kWorld);
  const auto cut = ReplicateTensors(dir_, kWorld);
  AllGather aborts = ExchangeOf(exchange, 0);
  aborts.poll = [&exchange]() -> Result<bool> {
    if (exchange.Started(0) == 2) return Status::DeviceError("the collective was aborted");
    return exchange.Poll(0) == 1;
  };
  auto ranks = RunJob({cut, cut}, {aborts, ExchangeOf(exchange, 1)}, testing::TimeBound(1));
  ASSERT_FALSE(ranks[0].model.ok());
  EXPECT_EQ(MessageOf(ranks[0]).rfind("the all-gather of the tensors every rank holds whole: the "
                                      "collective was aborted; this rank's block (",
                                      0),
            0u)
      << MessageOf(ranks[0]);
  ASSERT_FALSE(ranks[1].model.ok());
  EXPECT_EQ(ranks[1].model.status().code(), Code::kStalled);
  EXPECT_NE(MessageOf(ranks[1]).find("rank 1 of 2 waited "), std::string::npos);
  EXPECT_NE(MessageOf(ranks[1]).find(" for the other ranks in the check after the all-gather"),
            std::string::npos)
      << MessageOf(ranks[1]);
  for (RankOutcome& r : ranks) r.device->set_free_on_destroy(true);  // nothing writes now
}

// A rank whose start callback fails sent nothing: its peer finds it silent (a stall, named), it
// fails with its own error, and neither keeps memory the exchange never had.
TEST_F(RankAgreementTest, ARankWhoseExchangeFailsToStartLeavesItsPeerStalled) {
  ThreadExchange exchange(kWorld);
  const auto cut = ReplicateTensors(dir_, kWorld);
  AllGather refuses{[](void*, uint64_t) { return Status::DeviceError("the callback failed"); }, {}};
  auto ranks = RunJob({cut, cut}, {ExchangeOf(exchange, 0), refuses}, testing::TimeBound(1));
  EXPECT_EQ(MessageOf(ranks[1]), "the check before the all-gather: the callback failed");
  EXPECT_EQ(ranks[1].device->live_device_allocations(), 0u);
  ASSERT_FALSE(ranks[0].model.ok());
  EXPECT_EQ(ranks[0].model.status().code(), Code::kStalled);
  EXPECT_NE(MessageOf(ranks[0]).find(" for the other ranks in the check before the all-gather "),
            std::string::npos)
      << MessageOf(ranks[0]);
  ranks[0].device->set_free_on_destroy(true);
}

// A peer whose record is not a record (zeros: the exchange dropped it; junk; another load's) is
// refused, as is one whose message is not terminated or whose status is out of range; its text
// is shown as printable ASCII only.
TEST_F(RankAgreementTest, APeersRecordIsReadAsAStrangersBytes) {
  const RankLayout mine{7, 256, 512};
  std::vector<unsigned char> records(kWorld * kRankVerdictBytes, 0);
  WriteRankVerdict(records.data(), 0, kWorld, RankStep::kBeforeGather, Status::Ok(), mine);
  auto read = [&] {
    return ReadRankVerdicts(records.data(), 0, kWorld, RankStep::kBeforeGather, mine);
  };
  unsigned char* peer = records.data() + kRankVerdictBytes;
  EXPECT_EQ(read().message(),
            "rank 1 of 2 sent no record of the check before the all-gather (its bytes are not "
            "this load's): the exchange did not carry it, or that rank runs another load");
  WriteRankVerdict(peer, 1, kWorld, RankStep::kAfterGather, Status::Ok(), mine);
  EXPECT_FALSE(read().ok());  // another step's record
  WriteRankVerdict(peer, 1, 3, RankStep::kBeforeGather, Status::Ok(), mine);
  EXPECT_FALSE(read().ok());  // another job's
  WriteRankVerdict(peer, 1, kWorld, RankStep::kBeforeGather, Status::Ok(), mine);
  EXPECT_TRUE(read().ok()) << read().message();
  std::memset(peer + 48, 'x', kRankVerdictBytes - 48);
  EXPECT_EQ(read().message(),
            "rank 1 of 2's record of the check before the all-gather breaks its format: its "
            "message has no end");
  WriteRankVerdict(peer, 1, kWorld, RankStep::kBeforeGather, Status::IoError("bad\x1b[31m read\n"),
                   mine);
  EXPECT_EQ(read().code(), Code::kIoError);
  EXPECT_EQ(read().message(), "rank 1 of 2 failed its load: bad?[31m read?");
  peer[20] = 200;  // a status no hoist sends
  EXPECT_EQ(read().message(),
            "rank 1 of 2's record of the check before the all-gather breaks its format: status "
            "200 is none of hoist's");
  // A long message is cut, still terminated.
  WriteRankVerdict(peer, 1, kWorld, RankStep::kBeforeGather,
                   Status::IoError(std::string(1000, 'a')), mine);
  EXPECT_EQ(read().message(), "rank 1 of 2 failed its load: " + std::string(207, 'a'));
}

}  // namespace
}  // namespace hoist
