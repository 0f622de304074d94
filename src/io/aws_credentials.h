// S3 credentials where the AWS SDKs find them, in their order: the environment's keys, a web
// identity (EKS IRSA: a token file exchanged at STS), the profile (its keys, or its
// credential_process), the container endpoint (ECS, EKS Pod Identity), the instance's role
// (IMDSv2). Credentials that expire are fetched again before they do, during a load.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace hoist {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials' x-amz-security-token; may be empty
  // When they stop working; nullopt: they do not expire.
  std::optional<std::chrono::system_clock::time_point> expiration;
};

// One request to a credentials service (STS, the container endpoint, the instance metadata
// service) and its answer. No redirect is followed: a credentials service answers itself.
struct ServiceRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent as application/x-www-form-urlencoded when not empty
  double timeout_s = 5;              // the whole request, connection included
};
struct ServiceAnswer {
  long code = 0;
  std::string reason;
  std::string body;  // at most 1 MiB
};
using AskServiceFn = std::function<Result<ServiceAnswer>(const ServiceRequest&)>;

// Credentials from one source, fetched again once they come within five minutes of their
// expiration (the SDKs' window), so that a load longer than their life signs every request
// with live ones. Thread safety: every method may be called from any thread; one thread
// fetches while the others wait for it.
class AwsCredentialSource {
 public:
  using FetchFn = std::function<Result<AwsCredentials>()>;
  // `name` says where they come from in messages ("web identity (role ARN)"); never a secret.
  AwsCredentialSource(std::string name, FetchFn fetch);
  // Credentials that do not expire and need no fetch.
  static std::shared_ptr<AwsCredentialSource> Fixed(std::string name,
                                                    const AwsCredentials& credentials);

  // Live credentials: the last ones fetched, or new ones when those expire within the window.
  // A failed fetch is the source's error, naming it.
  Result<AwsCredentials> Current();
  const std::string& name() const { return name_; }
  // How many fetches were made (the first included).
  int fetches() const;

 private:
  const std::string name_;
  const FetchFn fetch_;
  mutable Mutex mutex_;
  std::optional<AwsCredentials> current_ HOIST_GUARDED_BY(mutex_);
  std::chrono::system_clock::time_point last_fetch_ HOIST_GUARDED_BY(mutex_);
  int fetches_ HOIST_GUARDED_BY(mutex_) = 0;
};

// Where the chain looks, as the SDKs' environment variables and files give it.
struct AwsChainInput {
  std::string profile = "default";
  std::string region;
  // The profile's settings (the credentials file's section first, then the config file's).
  std::function<std::string(const char* key)> setting;
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
