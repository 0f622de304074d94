#include "io/gcs.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <utility>

#include "base/platform.h"
#include "base/units.h"
#include "io/http_storage.h"
#include "io/signing.h"

namespace hoist {

namespace {

constexpr size_t kLongestObjectName = 1024;

bool IsGcsBucketName(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 222) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) return false;
  size_t part = 0;  // the dot-separated component's length so far
  for (const char c : bucket) {
    if (c == '.') {
      if (part == 0) return false;  // an empty component: "a..b"
      part = 0;
      continue;
    }
    if (!alnum(c) && c != '-' && c != '_') return false;
    if (++part > 63) return false;
  }
  return bucket.find('.') != std::string_view::npos || bucket.size() <= 63;
}

std::string ApiRoot(const GcsConfig& config) { return WithoutTrailingSlash(config.endpoint); }

// gcloud's configuration directory: CLOUDSDK_CONFIG, else %APPDATA%\gcloud on Windows,
// ~/.config/gcloud elsewhere; "" when none can be found.
std::string GcloudConfigDirectory() {
  if (std::string dir = EnvironmentVariable("CLOUDSDK_CONFIG"); !dir.empty()) return dir;
  if (std::string appdata = EnvironmentVariable("APPDATA"); !appdata.empty()) {
    return appdata + "/gcloud";
  }
  const std::string home = EnvironmentVariable("HOME");
  return home.empty() ? "" : home + "/.config/gcloud";
}

bool IsTrueSetting(const std::string& value) {
  return value == "1" || EqualsIgnoreCase(value, "true") || EqualsIgnoreCase(value, "yes");
}

class GcsEndpoint final : public Endpoint {
 public:
  explicit GcsEndpoint(GcsConfig config) : config_(std::move(config)) {}

  std::string description() const override { return "GCS"; }
  Result<std::string> UrlOf(const std::string& name) const override {
    HOIST_ASSIGN_OR_RETURN(const GcsObject object, ParseGcsName(name));
    return GcsObjectUrl(config_, object);
  }
  // An object's name is encoded whole when its URL is made.
  std::string Join(const std::string& dir, const std::string& file) const override {
    return dir.ends_with('/') ? dir + file : dir + "/" + file;
  }
  Result<RequestAuth> Authorize(const OutgoingRequest& /*request*/) const override {
    RequestAuth auth;
    if (!config_.credentials) return auth;
    HOIST_ASSIGN_OR_RETURN(const BearerToken live, config_.credentials->Current());
    auth.headers.push_back("Authorization: Bearer " + live.access_token);
    return auth;
  }
  std::string CredentialsOrigin() const override {
    if (!config_.credentials) return "none found: the requests went without a token";
    return "a token from " + config_.credentials->name();
  }
  std::string ErrorSummary(std::string_view body) const override { return GcsErrorSummary(body); }
  // The JSON API answers a HEAD of alt=media with no length: a first byte is asked for.
  bool answers_head() const override { return false; }

  bool lists() const override { return true; }
  // GCS has no directories: a bucket, or a name ending in '/', can only be a prefix.
  bool IsPrefixOnly(const std::string& name) const override {
    return name.ends_with('/') || name.find('/', 5) == std::string::npos;
  }
  Result<std::string> PrefixKey(const std::string& dir) const override {
    HOIST_ASSIGN_OR_RETURN(GcsObject object, ParseGcsName(dir));
    if (!object.object.empty() && !object.object.ends_with('/')) object.object += '/';
    return object.object;
  }
  Result<std::string> ListUrl(const std::string& dir, const std::string& prefix_key,
                              const std::string& token) const override {
    HOIST_ASSIGN_OR_RETURN(const GcsObject object, ParseGcsName(dir));
    return GcsListUrl(config_, object.bucket, prefix_key, token);
  }
  Result<ObjectListing> ParseListing(std::string_view body) const override {
    return ParseGcsListing(body);
  }

 private:
  const GcsConfig config_;
};

}  // namespace

bool IsGcsUrl(std::string_view name) { return name.rfind("gs://", 0) == 0; }

Result<GcsObject> ParseGcsName(std::string_view name) {
  const std::string text(name);
  if (!IsGcsUrl(name)) return Status::InvalidArgument(text + ": not a gs:// name");
  const std::string_view rest = name.substr(5);
  const size_t slash = rest.find('/');
  GcsObject object;
  object.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) object.object = std::string(rest.substr(slash + 1));
  if (!IsGcsBucketName(object.bucket)) {
    return Status::InvalidArgument(
        Printable(text) + ": '" + Printable(object.bucket) +
        "' is not a GCS bucket name (3 to 63 lowercase letters, digits, '-', '_' and '.', "
        "starting and ending with a letter or digit; gs://BUCKET/OBJECT)");
  }
  if (object.object.size() > kLongestObjectName ||
      object.object.find_first_of("\r\n") != std::string::npos) {
    return Status::InvalidArgument(Printable(text) +
                                   ": a GCS object's name is at most 1024 bytes, without a line "
                                   "break");
  }
  return object;
}

Result<GcsConfig> GcsConfigFromEnvironment() {
  GcsConfig config;
  const std::string emulator = EnvironmentVariable("STORAGE_EMULATOR_HOST");
  if (!emulator.empty()) {
    config.endpoint = emulator.find("://") == std::string::npos ? "http://" + emulator : emulator;
  }
  GcpChainInput chain;
  chain.key_file = EnvironmentVariable("GOOGLE_APPLICATION_CREDENTIALS");
  if (const std::string dir = GcloudConfigDirectory(); !dir.empty()) {
    chain.well_known_file = dir + "/application_default_credentials.json";
  }
  chain.metadata_host = EnvironmentVariable("GCE_METADATA_HOST");
  if (chain.metadata_host.empty() && emulator.empty() &&
      !IsTrueSetting(EnvironmentVariable("NO_GCE_CHECK"))) {
    chain.metadata_host = "169.254.169.254";
  }
  chain.ask = AskService;
  chain.sign = SignRs256;
  HOIST_ASSIGN_OR_RETURN(config.credentials, FindGcpCredentials(chain));
  return config;
}

std::string GcsObjectUrl(const GcsConfig& config, const GcsObject& object) {
  return ApiRoot(config) + "/storage/v1/b/" + object.bucket + "/o/" +
         PercentEncode(object.object, /*keep_slash=*/false) + "?alt=media";
}

std::string GcsListUrl(const GcsConfig& config, const std::string& bucket,
                       const std::string& prefix, const std::string& page_token) {
  std::string url = ApiRoot(config) + "/storage/v1/b/" + bucket +
                    "/o?delimiter=%2F&prefix=" + PercentEncode(prefix, false);
  if (!page_token.empty()) url += "&pageToken=" + PercentEncode(page_token, false);
  return url;
}

Result<ObjectListing> ParseGcsListing(std::string_view json) {
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::IoError("the answer to a listing is not a JSON object");
  ObjectListing listing;
  if (doc.contains("items")) {
    if (!doc["items"].is_array()) return Status::IoError("a listing's items is not an array");
    for (const nlohmann::json& item : doc["items"]) {
      if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) {
        return Status::IoError("a listing's item has no name");
      }
      listing.keys.push_back(item["name"].get<std::string>());
    }
  }
  if (doc.contains("prefixes")) {
    if (!doc["prefixes"].is_array()) return Status::IoError("a listing's prefixes is not an array");
    for (const nlohmann::json& prefix : doc["prefixes"]) {
      if (!prefix.is_string()) return Status::IoError("a listing's prefix is not a string");
      listing.prefixes.push_back(prefix.get<std::string>());
    }
  }
  if (doc.contains("nextPageToken")) {
    if (!doc["nextPageToken"].is_string()) {
      return Status::IoError("a listing's nextPageToken is not a string");
    }
    listing.next_token = doc["nextPageToken"].get<std::string>();
  }
  return listing;
}

std::string GcsErrorSummary(std::string_view body) {
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("error") || !doc["error"].is_object()) return "";
  const nlohmann::json& error = doc["error"];
  if (!error.contains("message") || !error["message"].is_string()) return "";
  return error["message"].get<std::string>();
}

std::shared_ptr<const Endpoint> MakeGcsEndpoint(GcsConfig config) {
  return std::make_shared<GcsEndpoint>(std::move(config));
}

}  // namespace hoist
