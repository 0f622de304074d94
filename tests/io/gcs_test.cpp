// The rules of gs:// names, the JSON API's listings and errors, and the Google credentials
// chain, without a server: a fake in place of the network, as a metadata server, a token
// endpoint or a firewall that lies would answer.
#include "io/gcs.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hoist {
namespace {

TEST(Gcs, NamesAreBucketsAndObjects) {
  auto name = ParseGcsName("gs://my-bucket_1/dir/model.safetensors");
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(name->bucket, "my-bucket_1");
  EXPECT_EQ(name->object, "dir/model.safetensors");
  name = ParseGcsName("gs://a.b.c");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->object, "");
  for (const char* bad : {"gs://ab/x", "gs://Bucket/x", "gs://-bucket/x", "gs://bucket-/x",
                          "gs://buc ket/x", "gs://a..b/x", "gs:///x", "s3://bucket/x"}) {
    EXPECT_FALSE(ParseGcsName(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseGcsName("gs://bucket/a\r\nHost: evil").status().message(),
            "gs://bucket/a  Host: evil: a GCS object's name is at most 1024 bytes, without a "
            "line break");
  EXPECT_FALSE(ParseGcsName("gs://bucket/" + std::string(1025, 'x')).ok());
  EXPECT_TRUE(ParseGcsName("gs://bucket/" + std::string(1024, 'x')).ok());
}

TEST(Gcs, AnObjectsNameIsOneSegmentOfItsUrl) {
  GcsConfig config;
  config.endpoint = "http://127.0.0.1:4443/";
  EXPECT_EQ(GcsObjectUrl(config, {"models", "a dir/../m#1?.safetensors"}),
            "http://127.0.0.1:4443/storage/v1/b/models/o/"
            "a%20dir%2F..%2Fm%231%3F.safetensors?alt=media");
  EXPECT_EQ(GcsListUrl(config, "models", "a dir/", ""),
            "http://127.0.0.1:4443/storage/v1/b/models/o?delimiter=%2F&prefix=a%20dir%2F");
  EXPECT_EQ(
      GcsListUrl(config, "models", "", "tok/en="),
      "http://127.0.0.1:4443/storage/v1/b/models/o?delimiter=%2F&prefix=&pageToken=tok%2Fen%3D");
}

TEST(Gcs, ListingsAreReadOrRefused) {
  auto listing = ParseGcsListing(
      R"({"kind":"storage#objects","items":[{"name":"d/a.safetensors","size":"3"}],
          "prefixes":["d/sub/"],"nextPageToken":"next"})");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_EQ(listing->keys, std::vector<std::string>{"d/a.safetensors"});
  EXPECT_EQ(listing->prefixes, std::vector<std::string>{"d/sub/"});
  EXPECT_EQ(listing->next_token, "next");
  listing = ParseGcsListing(R"({"kind":"storage#objects"})");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->keys.empty());
  EXPECT_EQ(listing->next_token, "");
  for (const char* bad :
       {"", "[]", "<ListBucketResult/>", R"({"items":{}})", R"({"items":[{"size":"1"}]})",
        R"({"items":[{"name":7}]})", R"({"prefixes":[1]})", R"({"nextPageToken":2})"}) {
    EXPECT_EQ(ParseGcsListing(bad).status().code(), Code::kIoError) << bad;
  }
  EXPECT_EQ(GcsErrorSummary(R"({"error":{"code":403,"message":"denied"}})"), "denied");
  EXPECT_EQ(GcsErrorSummary("<Error><Code>x</Code></Error>"), "");
  EXPECT_EQ(GcsErrorSummary(R"({"error":"invalid_grant"})"), "");
}

TEST(GcpCredentials, Base64UrlIsRfc4648sWithoutPadding) {
  EXPECT_EQ(Base64Url(""), "");
  EXPECT_EQ(Base64Url("f"), "Zg");
  EXPECT_EQ(Base64Url("fo"), "Zm8");
  EXPECT_EQ(Base64Url("foo"), "Zm9v");
  EXPECT_EQ(Base64Url("foob"), "Zm9vYg");
  EXPECT_EQ(Base64Url("fooba"), "Zm9vYmE");
  EXPECT_EQ(Base64Url("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Url("\xfb\xff\xfe"), "-__-");
}

// The metadata server through a fake: what it is asked, and what its answers make.
class MetadataServerTest : public ::testing::Test {
 protected:
  Result<std::shared_ptr<BearerTokenSource>> Find() {
    GcpChainInput input;
    input.metadata_host = "127.0.0.1:9";
    input.ask = [this](const ServiceRequest& r) -> Result<ServiceAnswer> {
      requests.push_back(r);
      return answer(r);
    };
    return FindGcpCredentials(input);
  }
  std::function<Result<ServiceAnswer>(const ServiceRequest&)> answer;
  std::vector<ServiceRequest> requests;
};

TEST_F(MetadataServerTest, ATokenComesFromAServerThatSaysItIsOne) {
  answer = [](const ServiceRequest&) -> Result<ServiceAnswer> {
    return ServiceAnswer{200, "OK", R"({"access_token":"ya29.x","expires_in":3599})", "Google"};
  };
  auto found = Find();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_NE(*found, nullptr);
  EXPECT_EQ((*found)->name(), "the metadata server (127.0.0.1:9)");
  EXPECT_EQ((*found)->Current()->access_token, "ya29.x");
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].url,
            "http://127.0.0.1:9/computeMetadata/v1/instance/service-accounts/default/token");
  EXPECT_EQ(requests[0].headers, std::vector<std::string>{"Metadata-Flavor: Google"});
  EXPECT_TRUE(requests[0].direct);
}

TEST_F(MetadataServerTest, NoServerOrAnotherOnItsAddressIsNoCredentials) {
  answer = [](const ServiceRequest& r) -> Result<ServiceAnswer> {
    return Status::IoError(r.url + ": Connection timed out");
  };
  auto found = Find();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, nullptr);
  // A firewall's refusal, even one shaped as a token, says no Metadata-Flavor.
  answer = [](const ServiceRequest&) -> Result<ServiceAnswer> {
    return ServiceAnswer{200, "OK", R"({"access_token":"planted","expires_in":3599})", ""};
  };
  found = Find();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, nullptr);
}

TEST_F(MetadataServerTest, ATokenThatWouldAddAHeaderOrLiesAboutItsLifeIsRefused) {
  std::string body;
  answer = [&](const ServiceRequest&) -> Result<ServiceAnswer> {
    return ServiceAnswer{200, "OK", body, "Google"};
  };
  const std::string source = "GCS credentials from the metadata server (127.0.0.1:9): ";
  body = R"({"access_token":"ya29.x\r\nX-Injected: 1","expires_in":3599})";
  EXPECT_EQ(Find().status().message(),
            source + "the access token holds a control character: refused");
  body = R"({"access_token":"ya29.x","expires_in":-5})";
  EXPECT_EQ(
      Find().status().message(),
      source + "the token's expires_in '-5' is not a count of seconds from 1 to a year ahead");
  body = R"({"token":"ya29.x"})";
  EXPECT_EQ(Find().status().message(),
            source + "the answer is not a token (a JSON object with access_token)");
  answer = [](const ServiceRequest&) -> Result<ServiceAnswer> {
    return ServiceAnswer{404, "Not Found", "no service account", "Google"};
  };
  EXPECT_EQ(Find().status().message(),
            source +
                "http://127.0.0.1:9/computeMetadata/v1/instance/service-accounts/default/token "
                "answered 404 Not Found: no service account");
  std::string host = "127.0.0.1:9/evil?";
  GcpChainInput input;
  input.metadata_host = host;
  input.ask = answer;
  EXPECT_EQ(FindGcpCredentials(input).status().message(),
            "GCE_METADATA_HOST '127.0.0.1:9/evil?' is not a host[:port]");
}

}  // namespace
}  // namespace hoist
