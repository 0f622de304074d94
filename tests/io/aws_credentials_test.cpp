// The rules of S3 credentials that expire, without a server: when a source is asked again, and
// what a failed fetch leaves.
#include "io/aws_credentials.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace hoist {
namespace {

using Clock = std::chrono::system_clock;

TEST(AwsCredentials, ExpirationsAreReadAsIsoUtcTimes) {
  const auto t = ParseIsoTime("2026-12-06T04:05:06Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(t->time_since_epoch()).count(),
            1796529906);
  EXPECT_EQ(ParseIsoTime("2026-12-06T04:05:06.123456Z"), t);
  EXPECT_EQ(ParseIsoTime("2026-12-06T04:05:06+00:00"), t);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(
                ParseIsoTime("1970-01-01T00:00:00Z")->time_since_epoch())
                .count(),
            0);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(
                ParseIsoTime("2024-02-29T12:00:00Z")->time_since_epoch())
                .count(),
            1709208000);
  for (const char* bad : {"", "2026-12-06", "2026-12-06T04:05:06", "2026-13-06T04:05:06Z",
                          "2026-12-06T04:05:06+02:00", "tomorrow", "2026-12-06T24:00:00Z"}) {
    EXPECT_FALSE(ParseIsoTime(bad).has_value()) << bad;
  }
}

// A source counting its fetches, each giving credentials that expire `life` after it.
struct CountingSource {
  explicit CountingSource(Clock::duration life) : life(life) {}
  std::shared_ptr<AwsCredentialSource> Make() {
    return std::make_shared<AwsCredentialSource>("the test", [this]() -> Result<AwsCredentials> {
      ++fetched;
      if (fail) return Status::IoError("the test's source refused");
      return AwsCredentials{"KEY" + std::to_string(fetched), "SECRET", "TOKEN",
                            Clock::now() + life};
    });
  }
  Clock::duration life;
  int fetched = 0;
  bool fail = false;
};

TEST(AwsCredentials, CredentialsAreFetchedAgainOnlyWithinFiveMinutesOfTheirExpiration) {
  CountingSource hours(std::chrono::hours(1));
  auto source = hours.Make();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(source->Current()->access_key_id, "KEY1");
  EXPECT_EQ(hours.fetched, 1);

  // Inside the window: asked again, at most once a second while the old ones work.
  CountingSource short_lived(std::chrono::minutes(4));
  source = short_lived.Make();
  EXPECT_EQ(source->Current()->access_key_id, "KEY1");
  EXPECT_EQ(source->Current()->access_key_id, "KEY1");
  EXPECT_EQ(short_lived.fetched, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(source->Current()->access_key_id, "KEY2");
  EXPECT_EQ(source->fetches(), 2);

  // A fetch that fails while the old ones still work: they serve; once expired, the error.
  short_lived.fail = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto kept = source->Current();
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->access_key_id, "KEY2");
  CountingSource expired(-std::chrono::seconds(1));
  source = expired.Make();
  EXPECT_TRUE(source->Current().ok());  // the first fetch: given as they are
  expired.fail = true;
  const auto refused = source->Current();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "the test's source refused");
}

TEST(AwsCredentials, FixedCredentialsAreNeverFetchedAgain) {
  auto source = AwsCredentialSource::Fixed("AWS_ACCESS_KEY_ID", {"K", "S", "", std::nullopt});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(source->Current()->secret_access_key, "S");
  EXPECT_EQ(source->fetches(), 1);
  EXPECT_EQ(source->name(), "AWS_ACCESS_KEY_ID");
}

}  // namespace
}  // namespace hoist
