// S3's names, URLs and answers, without a server.
#include "io/s3.h"

#include <gtest/gtest.h>

namespace hoist {
namespace {

TEST(S3Names, BucketAndKeyFollowS3sRules) {
  auto object = ParseS3Name("s3://my-models/llama/model.safetensors");
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->bucket, "my-models");
  EXPECT_EQ(object->key, "llama/model.safetensors");
  auto top = ParseS3Name("s3://my-models");
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->key, "");
  for (const char* bad :
       {"s3://", "s3://ab/k", "s3://Upper/k", "s3://under_score/k", "s3://-dash/k", "s3:/x/y"}) {
    EXPECT_EQ(ParseS3Name(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(S3Names, UrlsAreVirtualHostedOnAwsAndPathStyleElsewhere) {
  S3Config aws;
  aws.region = "eu-west-1";
  EXPECT_EQ(S3ObjectUrl(aws, {"models", "a b/m+1.safetensors"}),
            "https://models.s3.eu-west-1.amazonaws.com/a%20b/m%2B1.safetensors");
  // A bucket with dots cannot match the wildcard certificate: path-style.
  EXPECT_EQ(S3ObjectUrl(aws, {"my.models", "m.gguf"}),
            "https://s3.eu-west-1.amazonaws.com/my.models/m.gguf");
  S3Config local;
  local.endpoint = "http://127.0.0.1:9000/";
  EXPECT_EQ(S3ObjectUrl(local, {"models", "x/y.gguf"}), "http://127.0.0.1:9000/models/x/y.gguf");
  EXPECT_EQ(S3ListUrl(local, "models", "x/", ""),
            "http://127.0.0.1:9000/models/?delimiter=%2F&list-type=2&prefix=x%2F");
  EXPECT_EQ(S3ListUrl(local, "models", "x/", "a+b="),
            "http://127.0.0.1:9000/models/?continuation-token=a%2Bb%3D&delimiter=%2F&"
            "list-type=2&prefix=x%2F");
}

TEST(S3Answers, ListingsAndErrorsAreRead) {
  auto page = ParseS3Listing(
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
      "<Contents><Key>m/a&amp;b.safetensors</Key><Size>1</Size></Contents>"
      "<Contents><Key>m/c.json</Key></Contents>"
      "<CommonPrefixes><Prefix>m/sub/</Prefix></CommonPrefixes>"
      "<NextContinuationToken>tok</NextContinuationToken></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->keys, (std::vector<std::string>{"m/a&b.safetensors", "m/c.json"}));
  EXPECT_EQ(page->prefixes, (std::vector<std::string>{"m/sub/"}));
  EXPECT_EQ(page->next_token, "tok");
  EXPECT_EQ(ParseS3Listing("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
                .status()
                .code(),
            Code::kIoError);
  EXPECT_EQ(ParseS3Listing("<html>").status().code(), Code::kIoError);
  // A <Contents> without its <Key> is refused, not given the next one's.
  EXPECT_EQ(ParseS3Listing("<ListBucketResult><Contents><Size>1</Size></Contents>"
                           "<Contents><Key>m/c.json</Key></Contents></ListBucketResult>")
                .status()
                .message(),
            "a listing's <Contents> has no <Key>");
  EXPECT_EQ(
      ParseS3Listing("<ListBucketResult><CommonPrefixes><Prefix>p/</Prefix>").status().message(),
      "a listing's <CommonPrefixes> has no <Prefix>");
  EXPECT_EQ(S3ErrorSummary("<Error><Code>NoSuchKey</Code><Message>The specified key does not "
                           "exist.</Message></Error>"),
            "NoSuchKey: The specified key does not exist.");
  EXPECT_EQ(S3ErrorSummary("Not Found"), "");
}

}  // namespace
}  // namespace hoist
