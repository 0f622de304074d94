// The rules of S3 credentials, without a server: when a source is asked again, what a failed
// fetch leaves, and what a credentials service that lies gets (a fake in place of the network).
#include "io/aws_credentials.h"

#include "test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// The chain with only the variables a case sets, every request answered by `answer` and kept.
class AwsChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_WEB_IDENTITY_TOKEN_FILE",
          "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
          "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
          "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT"}) {
      Set(name, nullptr);
    }
    Set("AWS_EC2_METADATA_DISABLED", "true");
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      testing::SetVariable(name.c_str(), value ? value->c_str() : nullptr);
    }
  }
  void Set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    testing::SetVariable(name.c_str(), value);
  }
  Result<std::shared_ptr<AwsCredentialSource>> Find() {
    AwsChainInput input;
    input.setting = [](const char*) { return std::string(); };
    input.ask = [this](const ServiceRequest& r) -> Result<ServiceAnswer> {
      requests.push_back(r);
      return answer(r);
    };
    return FindAwsCredentials(input);
  }

  std::function<Result<ServiceAnswer>(const ServiceRequest&)> answer;
  std::vector<ServiceRequest> requests;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(AwsChainTest, AContainerEndpointThatLiesIsRefusedNamingIt) {
  const std::string url = "http://127.0.0.1:9/creds";
  Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", url.c_str());
  Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "secret-token");
  const std::string source =
      "S3 credentials from the container credentials endpoint (" + url + "): ";
  struct Case {
    Result<ServiceAnswer> answer;
    std::string message;
  };
  const std::vector<Case> cases = {
      {ServiceAnswer{200, "OK", "not json"},
       source + "the answer is not credentials (a JSON object with AccessKeyId and "
                "SecretAccessKey)"},
      {ServiceAnswer{200, "OK",
                     R"({"AccessKeyId": "K", "SecretAccessKey": "S", "Expiration": "soon"})"},
       source + "the credentials' Expiration 'soon' is not an ISO 8601 UTC time"},
      {ServiceAnswer{302, "Found", ""}, source + url + " answered 302 Found"},
      {Status::IoError(url + ": Couldn't connect to server"),
       source + url + ": Couldn't connect to server"}};
  for (const Case& c : cases) {
    answer = [&](const ServiceRequest&) { return c.answer; };
    const auto found = Find();
    ASSERT_FALSE(found.ok()) << c.message;
    EXPECT_EQ(found.status().message(), c.message);
  }
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests[0].headers, std::vector<std::string>{"Authorization: secret-token"});

  // A token that would add a header of its own is never sent.
  requests.clear();
  Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t\r\nX-Injected: 1");
  const auto found = Find();
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().message(),
            source + "the authorization token holds a line break: refused");
  EXPECT_TRUE(requests.empty());
}

TEST_F(AwsChainTest, AnInstanceMetadataServiceThatLiesIsRefusedAndOneThatIsAbsentIsNone) {
  Set("AWS_EC2_METADATA_DISABLED", nullptr);
  Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9/");
  const std::string credentials =
      R"({"Code": "Success", "AccessKeyId": "ASIA1", "SecretAccessKey": "S", "Token": "T",
          "Expiration": "2099-01-01T00:00:00Z"})";
  std::string role = "loader\n";
  std::string session = "session";
  answer = [&](const ServiceRequest& r) -> Result<ServiceAnswer> {
    if (r.method == "PUT") return ServiceAnswer{200, "OK", session};
    if (r.url.ends_with("/security-credentials/")) return ServiceAnswer{200, "OK", role};
    return ServiceAnswer{200, "OK", credentials};
  };
  auto found = Find();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_NE(*found, nullptr);
  EXPECT_EQ((*found)->name(), "the instance metadata service (role loader)");
  EXPECT_EQ((*found)->Current()->session_token, "T");
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].url, "http://127.0.0.1:9/latest/api/token");
  EXPECT_EQ(requests[1].headers, std::vector<std::string>{"X-aws-ec2-metadata-token: session"});
  EXPECT_EQ(requests[2].url, "http://127.0.0.1:9/latest/meta-data/iam/security-credentials/loader");

  // A role's name that would climb out of the path, a session token that would add a header.
  role = "../../user-data";
  found = Find();
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().message(),
            "S3 credentials from the instance metadata service: the role's name "
            "'../../user-data' is not one");
  role = "loader";
  session = "s\r\nX-Injected: 1";
  found = Find();
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().message(),
            "S3 credentials from the instance metadata service: the session token holds a line "
            "break");

  // Every request went directly, never through a proxy the environment names.
  for (const ServiceRequest& r : requests) EXPECT_TRUE(r.direct) << r.url;

  // No service answering: no credentials, and no error (a machine that is no cloud instance).
  answer = [](const ServiceRequest& r) -> Result<ServiceAnswer> {
    return Status::IoError(r.url + ": Connection timed out");
  };
  found = Find();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, nullptr);
  // A firewall on the address refusing the token's PUT: no instance metadata service either.
  for (const long refused : {403L, 404L, 405L}) {
    answer = [&](const ServiceRequest&) -> Result<ServiceAnswer> {
      return ServiceAnswer{refused, "Forbidden", "resolve_deny: denied destination"};
    };
    found = Find();
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(*found, nullptr) << refused;
  }
}

}  // namespace
}  // namespace hoist
