// What the HTTP source needs from the kind of server it reads: how a name becomes a URL, what
// authorises a request, how a prefix is listed. The source (http_storage_curl.cpp) is the one
// ranged-transfer loop over libcurl; each kind of server is an endpoint of its own: plain
// HTTP(S) (below), S3 (s3.h), Google Cloud Storage (gcs.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hoist {

// One page of a listing of the objects directly under a prefix.
struct ObjectListing {
  std::vector<std::string> keys;      // the objects' whole keys
  std::vector<std::string> prefixes;  // "sub-directories", whole keys ending in '/'
  std::string next_token;             // empty on the last page
};

// A request to authorise: a signature may cover its method, URL and range.
struct OutgoingRequest {
  std::string method;  // "GET" or "HEAD"
  std::string url;
  std::string range;  // the Range header's value as sent ("bytes=FIRST-LAST"), or ""
};

// What one request sends to authorise itself. The source sends it to the origin of the URL it
// was made for only, never after a redirect to another origin.
struct RequestAuth {
  std::vector<std::string> headers;  // "Name: value"
  std::string basic;                 // "user:password" for HTTP basic authentication
  // Set: libcurl signs the request with AWS Signature V4 ("aws:amz:REGION:SERVICE"), the key's
  // id and secret these.
  std::string sigv4_provider;
  std::string sigv4_key_id;
  std::string sigv4_secret;
};

// One request to a credentials service (AWS STS, a container endpoint, an instance metadata
// service, an OAuth2 token endpoint) and its answer. No redirect is followed: a credentials service
// answers itself.
struct ServiceRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent as application/x-www-form-urlencoded when not empty
  double timeout_s = 5;              // the whole request, connection included
  // Never through a proxy the environment names: an instance metadata service answers on a
  // link-local address, which a proxy can only refuse.
  bool direct = false;
};
struct ServiceAnswer {
  long code = 0;
  std::string reason;
  std::string body;  // at most 1 MiB
  // Its Metadata-Flavor header: "Google" from a Google metadata server, which no other
  // server on its address (a firewall's refusal, say) sends.
  std::string metadata_flavor;
};
using AskServiceFn = std::function<Result<ServiceAnswer>(const ServiceRequest&)>;

// Thread safety: every method may be called from any reader thread at once.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // What the source says it reads: "HTTP", "S3", "GCS".
  virtual std::string description() const = 0;
  // The URL that serves the object `name` names; kInvalidArgument naming the rule it breaks.
  virtual Result<std::string> UrlOf(const std::string& name) const = 0;
  // The name of `file` under the name `dir`.
  virtual std::string Join(const std::string& dir, const std::string& file) const = 0;
  // What `request` sends to authorise itself; asked before every try, so credentials that
  // expire are fetched again first (and a signature's date is fresh). An error says which
  // credentials failed and why.
  virtual Result<RequestAuth> Authorize(const OutgoingRequest& request) const = 0;
  // Where the credentials come from, for a refusal's message ("" when nothing is to be said).
  virtual std::string CredentialsOrigin() const { return ""; }
  // The server's reason in an error answer's body, or "".
  virtual std::string ErrorSummary(std::string_view /*body*/) const { return ""; }
  // Whether a HEAD answers with an object's size and version; else the source asks for its
  // first byte instead.
  virtual bool answers_head() const { return true; }

  // Object stores, whose prefixes are the directories: whether names list at all.
  virtual bool lists() const { return false; }
  // Whether `name` can only be a prefix (a bucket's top, or a name ending in '/').
  virtual bool IsPrefixOnly(const std::string& /*name*/) const { return false; }
  // The key the prefix `dir` stands for inside its bucket: "" (the top) or ending in '/'.
  virtual Result<std::string> PrefixKey(const std::string& dir) const;
  // The URL of the listing's page after `token` ("" for the first) of the keys directly under
  // `prefix_key` of the bucket `dir` names.
  virtual Result<std::string> ListUrl(const std::string& dir, const std::string& prefix_key,
                                      const std::string& token) const;
  // One page of the listing from its answer's body; kIoError when it is not one.
  virtual Result<ObjectListing> ParseListing(std::string_view body) const;
};

// A URL as messages show it (RedactUrl's) and the URL it stands for.
struct RedactedUrl {
  std::string shown;
  std::string url;
};

// Plain HTTP(S). `user_password` ("user:password", taken out of a URL) goes as HTTP basic
// authentication; `bearer_token` as "Authorization: Bearer" to URLs on `token_host` (host[:port])
// only; the name `secret.shown` is fetched as `secret.url` (a query's secrets put back). None is
// ever printed.
std::shared_ptr<const Endpoint> MakePlainEndpoint(std::string user_password = "",
                                                  const std::string& bearer_token = "",
                                                  std::string token_host = "",
                                                  RedactedUrl secret = {});

// The authority of an http(s) URL: its host[:port], lower case, without user information; ""
// when `url` has none.
std::string UrlAuthority(std::string_view url);
// scheme://host[:port] of a URL, lower case, without user information; "" when it has none.
std::string UrlOrigin(std::string_view url);
// The host of an http:// URL without user information, lower case, its port dropped ("" when
// `url` is not one): "localhost", "127.0.0.1", "[::1]".
std::string HttpUrlHost(std::string_view url);
// Whether `url` is http:// to loopback (localhost, 127.0.0.0/8, [::1]): where a secret may go
// unencrypted (an emulator's, a test's).
bool IsLoopbackHttpUrl(std::string_view url);
// `endpoint` without the '/' it ends in, if any.
std::string WithoutTrailingSlash(std::string endpoint);

}  // namespace hoist
