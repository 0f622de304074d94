// Which Storage a name belongs to: a Hugging Face repo id to the local cache or the hub, a URL
// to the HTTP source, an object store's name (s3://, gs://, az://) to the HTTP source with that
// store's endpoint, anything else to the local file system.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <string>

#include "base/platform.h"
#include "base/units.h"
#include "io/azure.h"
#include "io/gcs.h"
#include "io/http_storage.h"
#include "io/hub.h"
#include "io/s3.h"
#include "io/storage.h"

namespace hoist {

bool IsHttpUrl(std::string_view name) {
  // Schemes are case-insensitive: HTTP://host/x is a URL, not a local path.
  auto starts = [&](std::string_view scheme) {
    if (name.size() < scheme.size()) return false;
    for (size_t i = 0; i < scheme.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) != scheme[i]) return false;
    }
    return true;
  };
  return starts("http://") || starts("https://");
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += c;
    } else {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

std::string Printable(std::string_view text, size_t max_bytes) {
  std::string out;
  for (const char c : text.substr(0, max_bytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else if (byte == '\n' || byte == '\r' || byte == '\t') {
      out += ' ';
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

namespace {

// Where a URL's user information (user:password@) lies: [scheme + 3, at); npos when it has none.
size_t UserInfoEnd(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string_view::npos;
  const size_t host = scheme + 3;
  const size_t end = url.find_first_of("/?#", host);
  const size_t at = url.rfind('@', end == std::string_view::npos ? url.size() : end);
  return at == std::string_view::npos || at < host ? std::string_view::npos : at;
}

}  // namespace

namespace {

// Query parameters whose values are secrets: Azure SAS's signature, S3's and GCS's presigned
// URLs' signature, credential and session token, OAuth2's access token.
bool IsSecretParameter(std::string_view name) {
  static constexpr std::string_view kSecrets[] = {"sig",
                                                  "signature",
                                                  "x-amz-signature",
                                                  "x-amz-credential",
                                                  "x-amz-security-token",
                                                  "x-goog-signature",
                                                  "x-goog-credential",
                                                  "access_token",
                                                  "token",
                                                  "api_key",
                                                  "apikey",
                                                  "password"};
  for (const std::string_view secret : kSecrets) {
    if (EqualsIgnoreCase(name, secret)) return true;
  }
  return false;
}

// `url` with the values of its secret query parameters as "***".
std::string RedactQuery(const std::string& url) {
  const size_t query = url.find('?');
  if (query == std::string::npos) return url;
  const size_t fragment = url.find('#', query);
  const size_t end = fragment == std::string::npos ? url.size() : fragment;
  std::string out = url.substr(0, query + 1);
  for (size_t at = query + 1; at <= end;) {
    size_t next = url.find('&', at);
    if (next == std::string::npos || next > end) next = end;
    const std::string_view part = std::string_view(url).substr(at, next - at);
    const size_t eq = part.find('=');
    if (eq != std::string_view::npos && IsSecretParameter(part.substr(0, eq))) {
      out.append(part.substr(0, eq + 1)).append("***");
    } else {
      out.append(part);
    }
    if (next < end) out += '&';
    at = next + 1;
  }
  return out + url.substr(end);
}

}  // namespace

std::string RedactUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t host = scheme + 3;
  const size_t end = url.find_first_of("/?#", host);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < host) return RedactQuery(url);
  return url.substr(0, host) + "***" + RedactQuery(url.substr(at));
}

std::string RedactSecrets(std::string_view text) {
  auto is_scheme = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
  };
  auto ends_url = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '"' || c == '\'' || c == '<' ||
           c == '>' || c == '`';
  };
  std::string out;
  size_t copied = 0;
  for (size_t mark = text.find("://"); mark != std::string_view::npos;
       mark = text.find("://", mark + 3)) {
    size_t begin = mark;
    while (begin > copied && is_scheme(text[begin - 1])) --begin;
    if (begin == mark) continue;  // no scheme before it
    size_t end = mark + 3;
    while (end < text.size() && !ends_url(text[end])) ++end;
    out.append(text.substr(copied, begin - copied));
    out += RedactUrl(std::string(text.substr(begin, end - begin)));
    copied = end;
    mark = end - 3;
  }
  out.append(text.substr(copied));
  return out;
}

bool IsRedactedUrl(std::string_view url) {
  const size_t at = UserInfoEnd(url);
  return at != std::string_view::npos && url.substr(0, at).ends_with("://***");
}

std::string UnredactedUrl(std::string_view url) {
  if (!IsRedactedUrl(url)) return std::string(url);
  const size_t host = url.find("://") + 3;
  return std::string(url.substr(0, host)) + std::string(url.substr(UserInfoEnd(url) + 1));
}

std::string CaFileFromEnvironment() {
  std::string file = EnvironmentVariable("CURL_CA_BUNDLE");
  return file.empty() ? EnvironmentVariable("SSL_CERT_FILE") : file;
}

Result<HttpOptions> HttpOptionsFromEnvironment(double stall_timeout_s) {
  constexpr int kMostRetries = 20;
  constexpr double kLongestStallSeconds = 86400;
  HttpOptions o;
  o.ca_file = CaFileFromEnvironment();
  if (const std::string retries = EnvironmentVariable("HOIST_HTTP_RETRIES"); !retries.empty()) {
    char* end = nullptr;
    const long n = std::strtol(retries.c_str(), &end, 10);
    if (end == retries.c_str() || *end != '\0' || n < 0 || n > kMostRetries) {
      return Status::InvalidArgument("HOIST_HTTP_RETRIES='" + retries +
                                     "': expected a count from 0 to " +
                                     std::to_string(kMostRetries));
    }
    o.retries = static_cast<int>(n);
  }
  if (const std::string stall = EnvironmentVariable("HOIST_HTTP_STALL_TIMEOUT"); !stall.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(stall.c_str(), &end);
    if (end == stall.c_str() || *end != '\0' || !(seconds > 0 && seconds <= kLongestStallSeconds)) {
      return Status::InvalidArgument("HOIST_HTTP_STALL_TIMEOUT='" + stall +
                                     "': expected seconds above 0, at most 86400");
    }
    o.stall_timeout_s = seconds;
  }
  if (stall_timeout_s > 0) o.stall_timeout_s = std::min(o.stall_timeout_s, stall_timeout_s);
  return o;
}

namespace {

// An object store: the scheme of its names, what a name must be, its endpoint as the
// environment configures it.
struct ObjectStore {
  std::string_view scheme;
  Status (*check_name)(const std::string& name);
  Result<std::shared_ptr<const Endpoint>> (*endpoint)();
};

template <typename T>
Status StatusOf(const Result<T>& result) {
  return result.ok() ? Status::Ok() : result.status();
}

const ObjectStore kObjectStores[] = {
    {"s3://", [](const std::string& name) { return StatusOf(ParseS3Name(name)); },
     []() -> Result<std::shared_ptr<const Endpoint>> {
       HOIST_ASSIGN_OR_RETURN(S3Config config, S3ConfigFromEnvironment());
       return MakeS3Endpoint(std::move(config));
     }},
    {"gs://", [](const std::string& name) { return StatusOf(ParseGcsName(name)); },
     []() -> Result<std::shared_ptr<const Endpoint>> {
       HOIST_ASSIGN_OR_RETURN(GcsConfig config, GcsConfigFromEnvironment());
       return MakeGcsEndpoint(std::move(config));
     }},
    {"az://", [](const std::string& name) { return StatusOf(ParseAzureName(name)); },
     []() -> Result<std::shared_ptr<const Endpoint>> {
       HOIST_ASSIGN_OR_RETURN(AzureConfig config,
                              AzureConfigFrom(AzureEnvironmentVariables(), AskService));
       return MakeAzureEndpoint(std::move(config));
     }},
};

}  // namespace

const std::vector<std::string_view>& RemoteSchemes() {
  static const std::vector<std::string_view> schemes = [] {
    std::vector<std::string_view> all = {"http://", "https://"};
    for (const ObjectStore& store : kObjectStores) all.push_back(store.scheme);
    all.emplace_back("hf://");
    return all;
  }();
  return schemes;
}

bool IsRemoteName(std::string_view name) {
  if (IsHttpUrl(name)) return true;  // any case
  return std::any_of(RemoteSchemes().begin(), RemoteSchemes().end(),
                     [&](std::string_view scheme) { return name.starts_with(scheme); });
}

namespace {

// An object store's name read through the HTTP source with the endpoint `make` gives.
Result<ModelLocation> ObjectStoreLocation(
    const std::string& name, double stall_timeout_s,
    const std::function<Result<std::shared_ptr<const Endpoint>>()>& make) {
  // The configuration is read for every model, so credentials that change between loads
  // (rotated, or a test's) take effect.
  HOIST_ASSIGN_OR_RETURN(HttpOptions options, HttpOptionsFromEnvironment(stall_timeout_s));
  // After the settings: finding credentials may ask services (STS, a metadata server) over
  // the network.
  Result<std::shared_ptr<const Endpoint>> endpoint = make();
  if (!endpoint.ok()) {
    return Status(endpoint.status().code(), name + ": " + endpoint.status().message());
  }
  options.endpoint = std::move(endpoint).value();
  return ModelLocation{MakeHttpStorage(options), name, std::nullopt};
}

}  // namespace

Result<ModelLocation> LocateModel(const std::string& name, double stall_timeout_s) {
  HOIST_ASSIGN_OR_RETURN(const std::optional<HubName> hub, ParseHubName(name));
  if (hub) return LocateHubModel(*hub, stall_timeout_s);
  for (const ObjectStore& store : kObjectStores) {
    if (name.rfind(store.scheme, 0) != 0) continue;
    HOIST_RETURN_IF_ERROR(store.check_name(name));
    return ObjectStoreLocation(name, stall_timeout_s, store.endpoint);
  }
  // A blob's URL in Azure (without a SAS, which any URL may carry): the Azure endpoint, so
  // that the environment's credentials for its account authorise it.
  if (IsAzureBlobUrl(name)) {
    HOIST_ASSIGN_OR_RETURN(const AzureBlob blob, ParseAzureName(name));
    return ObjectStoreLocation(
        name, stall_timeout_s, [&]() -> Result<std::shared_ptr<const Endpoint>> {
          HOIST_ASSIGN_OR_RETURN(AzureConfig config, AzureConfigFrom(AzureEnvironmentVariables(),
                                                                     AskService, blob.account));
          return MakeAzureEndpoint(std::move(config));
        });
  }
  if (!IsHttpUrl(name)) return ModelLocation{LocalStorage(), name, std::nullopt};
  HOIST_ASSIGN_OR_RETURN(HttpOptions options, HttpOptionsFromEnvironment(stall_timeout_s));
  if (const std::string shown = RedactUrl(name); shown != name) {
    // The credentials leave the name here, where the source is made: the name every message,
    // report and JSON document shows is scheme://***@host/...?sig=***, the source sends a
    // user:password to that URL's origin alone, and the secret query to that URL alone.
    const size_t at = UserInfoEnd(name);
    const size_t host = name.find("://") + 3;
    const std::string user_password = at == std::string::npos ? "" : name.substr(host, at - host);
    const std::string url =
        at == std::string::npos ? name : name.substr(0, host) + name.substr(at + 1);
    options.endpoint = MakePlainEndpoint(user_password, "", "", {shown, url});
    return ModelLocation{MakeHttpStorage(options), shown, std::nullopt};
  }
  // One source for the process, its connections kept, unless this open has a stall timeout
  // of its own.
  HOIST_ASSIGN_OR_RETURN(const HttpOptions plain, HttpOptionsFromEnvironment());
  static const std::shared_ptr<Storage> http = MakeHttpStorage(plain);
  if (options.stall_timeout_s != plain.stall_timeout_s) {
    return ModelLocation{MakeHttpStorage(options), name, std::nullopt};
  }
  return ModelLocation{http, name, std::nullopt};
}

}  // namespace hoist
