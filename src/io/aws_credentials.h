// S3 credentials where the AWS SDKs find them, in their order: the environment's keys, a web
// identity (EKS IRSA: a token file exchanged at STS), the profile (its keys, its
// credential_process, or its IAM Identity Center sign-in cached by `aws sso login`), the
// container endpoint (ECS, EKS Pod Identity), the instance's role (IMDSv2). Credentials that expire
// are fetched again before they do, during a load.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/endpoint.h"
#include "io/refreshing_credentials.h"

namespace hoist {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials' x-amz-security-token; may be empty
  // When they stop working; nullopt: they do not expire.
  std::optional<std::chrono::system_clock::time_point> expiration;
};

// S3 credentials from one source, refreshed before they expire.
using AwsCredentialSource = RefreshingCredentials<AwsCredentials>;

// Where the chain looks, as the SDKs' environment variables and files give it.
struct AwsChainInput {
  std::string profile = "default";
  std::string region;
  // The profile's settings (the credentials file's section first, then the config file's).
  std::function<std::string(const char* key)> setting;
  // A setting of another section of the config file (an "sso-session NAME").
  std::function<std::string(const std::string& section, const char* key)> config_setting;
  // Where `aws sso login` caches its sign-ins (~/.aws/sso/cache).
  std::string sso_cache_dir;
  AskServiceFn ask;
};

// The first source of the chain that has credentials (fetched once, so that a source that
// fails says so before any object is asked for), or null when none has: requests then go
// unsigned, as for a public bucket. An error names the source and what it refused or lacked,
// never a secret or a token.
Result<std::shared_ptr<AwsCredentialSource>> FindAwsCredentials(const AwsChainInput& input);

// Exposed for the tests: an ISO 8601 UTC time ("2026-12-06T04:05:06Z", fractions allowed) as
// a time point; nullopt when it is not one.
std::optional<std::chrono::system_clock::time_point> ParseIsoTime(const std::string& text);

}  // namespace hoist
