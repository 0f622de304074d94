// Which Storage a name belongs to: a Hugging Face repo id to the local cache or the hub, a URL
// to the HTTP source, an s3:// name to the HTTP source signing for S3, anything else to the
// local file system.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/platform.h"
#include "io/http_storage.h"
#include "io/hub.h"
#include "io/s3.h"
#include "io/storage.h"

namespace hoist {

bool IsHttpUrl(std::string_view name) {
  return name.rfind("http://", 0) == 0 || name.rfind("https://", 0) == 0;
}

std::string RedactUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t host = scheme + 3;
  const size_t end = url.find_first_of("/?#", host);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < host) return url;
  return url.substr(0, host) + "***" + url.substr(at);
}

HttpOptions HttpOptionsFromEnvironment() {
  HttpOptions o;
  o.ca_file = EnvironmentVariable("CURL_CA_BUNDLE");
  if (o.ca_file.empty()) o.ca_file = EnvironmentVariable("SSL_CERT_FILE");
  if (const std::string retries = EnvironmentVariable("HOIST_HTTP_RETRIES"); !retries.empty()) {
    o.retries = std::clamp(std::atoi(retries.c_str()), 0, 20);
  }
  if (const std::string stall = EnvironmentVariable("HOIST_HTTP_STALL_TIMEOUT"); !stall.empty()) {
    const double seconds = std::atof(stall.c_str());
    if (seconds > 0) o.stall_timeout_s = seconds;
  }
  return o;
}

Result<ModelLocation> LocateModel(const std::string& name) {
  HOIST_ASSIGN_OR_RETURN(const std::optional<HubName> hub, ParseHubName(name));
  if (hub) return LocateHubModel(*hub);
  if (IsS3Url(name)) {
    if (Result<S3Object> object = ParseS3Name(name); !object.ok()) return object.status();
    // The configuration is read for every model, so credentials that change between loads
    // (rotated, or a test's) take effect.
    HOIST_ASSIGN_OR_RETURN(S3Config s3, S3ConfigFromEnvironment());
    HttpOptions options = HttpOptionsFromEnvironment();
    options.s3 = std::move(s3);
    return ModelLocation{MakeHttpStorage(options), name};
  }
  if (!IsHttpUrl(name)) return ModelLocation{LocalStorage(), name};
  static const std::shared_ptr<Storage> http = MakeHttpStorage(HttpOptionsFromEnvironment());
  return ModelLocation{http, name};
}

}  // namespace hoist
