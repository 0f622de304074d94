#include "io/endpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include "base/units.h"
#include "io/http_storage.h"

namespace hoist {

Result<std::string> Endpoint::PrefixKey(const std::string& dir) const {
  return Status::InvalidArgument(RedactUrl(dir) + ": " + description() + " lists no directory");
}

Result<std::string> Endpoint::ListUrl(const std::string& dir, const std::string& /*prefix_key*/,
                                      const std::string& /*token*/) const {
  return PrefixKey(dir).status();
}

Result<ObjectListing> Endpoint::ParseListing(std::string_view /*body*/) const {
  return Status::IoError(description() + " lists no directory");
}

std::string UrlAuthority(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  const size_t host = scheme + 3;
  const size_t end = std::min(url.find_first_of("/?#", host), url.size());
  std::string_view authority = url.substr(host, end - host);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    authority = authority.substr(at + 1);
  }
  std::string lower(authority);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string UrlOrigin(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  std::string origin(url.substr(0, scheme + 3));
  for (char& c : origin) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return origin + UrlAuthority(url);
}

std::string HttpUrlHost(std::string_view url) {
  if (url.size() < 7 || !EqualsIgnoreCase(url.substr(0, 7), "http://")) return "";
  const std::string_view rest = url.substr(7);
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) return "";
  std::string host(authority);
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host.resize(colon);
  }
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return host;
}

bool IsLoopbackHttpUrl(std::string_view url) {
  const std::string host = HttpUrlHost(url);
  if (host == "localhost" || host == "[::1]") return true;
  int a = 0;
  int b = 0;
  int c = 0;
  int d = 0;
  char tail = 0;
  return std::sscanf(host.c_str(), "%d.%d.%d.%d%c", &a, &b, &c, &d, &tail) == 4 && a == 127 &&
         b >= 0 && b < 256 && c >= 0 && c < 256 && d >= 0 && d < 256;
}

std::string WithoutTrailingSlash(std::string endpoint) {
  while (endpoint.ends_with('/')) endpoint.pop_back();
  return endpoint;
}

namespace {

class PlainEndpoint final : public Endpoint {
 public:
  PlainEndpoint(std::string user_password, const std::string& bearer_token, std::string token_host,
                RedactedUrl secret)
      : user_password_(std::move(user_password)),
        bearer_(bearer_token.empty() ? "" : "Authorization: Bearer " + bearer_token),
        token_host_(std::move(token_host)),
        secret_(std::move(secret)) {
    for (char& c : token_host_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }

  std::string description() const override { return "HTTP"; }
  Result<std::string> UrlOf(const std::string& name) const override {
    if (!secret_.shown.empty() && name == secret_.shown) return secret_.url;
    return UnredactedUrl(name);
  }
  // A file is one path segment, percent-encoded: an index's "..%2Fx" or "x#y" names that file,
  // not another.
  std::string Join(const std::string& dir, const std::string& file) const override {
    const std::string segment = PercentEncode(file, /*keep_slash=*/false);
    return dir.ends_with('/') ? dir + segment : dir + "/" + segment;
  }
  Result<RequestAuth> Authorize(const OutgoingRequest& request) const override {
    RequestAuth auth;
    auth.basic = user_password_;
    if (!bearer_.empty() && !token_host_.empty() && UrlAuthority(request.url) == token_host_) {
      auth.headers.push_back(bearer_);
    }
    return auth;
  }

 private:
  const std::string user_password_;
  const std::string bearer_;
  std::string token_host_;
  const RedactedUrl secret_;
};

}  // namespace

std::shared_ptr<const Endpoint> MakePlainEndpoint(std::string user_password,
                                                  const std::string& bearer_token,
                                                  std::string token_host, RedactedUrl secret) {
  return std::make_shared<PlainEndpoint>(std::move(user_password), bearer_token,
                                         std::move(token_host), std::move(secret));
}

}  // namespace hoist
