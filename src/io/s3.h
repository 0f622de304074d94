// Models in S3 or an S3-compatible store (MinIO, Ceph, R2, ...), named s3://BUCKET/KEY: read
// through the HTTP source (http_storage.h) with every request signed with AWS Signature V4 and
// a prefix listed as a directory. This file is the part without libcurl: names, where the
// configuration comes from, the URLs, the listing's XML.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/aws_credentials.h"
#include "io/endpoint.h"

namespace hoist {

struct S3Config {
  std::string region = "us-east-1";
  // Empty: AWS itself (https://BUCKET.s3.REGION.amazonaws.com/KEY, or path-style for a bucket
  // with dots, which TLS's wildcard names cannot match). Set: an S3-compatible endpoint such as
  // "http://127.0.0.1:9000", addressed path-style (ENDPOINT/BUCKET/KEY) as MinIO and Ceph expect.
  std::string endpoint;
  // Null: requests go unsigned (public buckets). Secrets are never printed; the source's name
  // is, in a refusal's message.
  std::shared_ptr<AwsCredentialSource> credentials;
};

struct S3Object {
  std::string bucket;
  std::string key;  // may be empty (the bucket's top) or end in '/' (a prefix)
};

bool IsS3Url(std::string_view name);

// The bucket and key of s3://BUCKET/KEY; kInvalidArgument naming the rule a name breaks (a
// bucket is 3 to 63 lowercase letters, digits, dots and hyphens).
Result<S3Object> ParseS3Name(std::string_view name);

// The configuration the AWS SDKs would use: region from AWS_REGION, AWS_DEFAULT_REGION, else
// the profile's `region`; endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else the
// profile's `endpoint_url`; credentials from the chain (aws_credentials.h), the profile being
// AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then in
// AWS_CONFIG_FILE (~/.aws/config). kInvalidArgument when only one of a pair is given; a source
// that fails, its error.
Result<S3Config> S3ConfigFromEnvironment();

// The text of the first <tag> element of `xml`, XML's five entities decoded; nullopt when absent.
std::optional<std::string> XmlElementText(std::string_view xml, std::string_view tag);
// The <child> text of every <parent> element, in order, each looked for inside its parent
// only; kIoError naming the parent that has none.
Result<std::vector<std::string>> XmlChildOfEach(std::string_view xml, std::string_view parent,
                                                std::string_view child);

// The URL that serves an object, its key percent-encoded as S3's signatures expect.
std::string S3ObjectUrl(const S3Config& config, const S3Object& object);

// The URL of one page of ListObjectsV2 for the keys directly under `prefix` (delimiter "/"),
// its query in the sorted order a signature's canonical request needs.
std::string S3ListUrl(const S3Config& config, const std::string& bucket, const std::string& prefix,
                      const std::string& continuation_token);

// One page of a ListObjectsV2 answer; kIoError when it is not one.
Result<ObjectListing> ParseS3Listing(std::string_view xml);

// "CODE: MESSAGE" from an S3 error document (<Error><Code>…</Code><Message>…</Message>), or ""
// when `body` is not one.
std::string S3ErrorSummary(std::string_view body);

// The S3 endpoint (endpoint.h): s3://BUCKET/KEY names, each request signed with Signature V4
// when `config` has credentials (unsigned, as for a public bucket, when not), a prefix listed
// as a directory with ListObjectsV2.
std::shared_ptr<const Endpoint> MakeS3Endpoint(S3Config config);

}  // namespace hoist
