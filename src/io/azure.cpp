#include "io/azure.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include "base/platform.h"
#include "base/units.h"
#include "io/azure_credentials.h"
#include "io/http_storage.h"
#include "io/s3.h"
#include "io/signing.h"

namespace hoist {

namespace {

constexpr size_t kLongestBlobName = 1024;
// A version that takes bearer tokens (2017-11-09 on) and that Azurite serves.
constexpr const char* kApiVersion = "2021-08-06";
// Azurite's account and its well-known key (UseDevelopmentStorage=true).
constexpr const char* kEmulatorAccount = "devstoreaccount1";
constexpr const char* kEmulatorKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

bool IsContainerName(std::string_view name) {
  if (name.size() < 3 || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '-' && name[i + 1] == '-') return false;
    if (!alnum(name[i]) && name[i] != '-') return false;
  }
  return true;
}

// An account name: 3 to 24 lowercase letters and digits.
bool IsAccountName(std::string_view name) {
  if (name.size() < 3 || name.size() > 24) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

// The value of `key` in a connection string ("K1=V1;K2=V2"; keys case-insensitive); "" when
// absent. A value may hold '=' (a key's base64 padding, a SAS's query).
std::string ConnectionValue(std::string_view text, std::string_view key) {
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(';', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(at, end - at);
    const size_t eq = part.find('=');
    if (eq != std::string_view::npos && EqualsIgnoreCase(part.substr(0, eq), key)) {
      return std::string(part.substr(eq + 1));
    }
    at = end + 1;
  }
  return "";
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
        HexValue(text[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// RFC 1123's date in GMT, as x-ms-date is written. The civil date from the day count by
// arithmetic (Hinnant's days_from_civil inverse): gmtime is neither thread-safe nor spelled
// the same on every platform.
std::string HttpDate() {
  static const char* const kDays[] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const int64_t now = std::time(nullptr);
  const int64_t days = now / 86400;
  const int64_t seconds = now % 86400;
  const int64_t z = days + 719468;
  const int64_t era = z / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  char text[64];
  std::snprintf(text, sizeof text, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[days % 7],
                static_cast<int>(day), kMonths[month - 1], static_cast<int>(year),
                static_cast<int>(seconds / 3600), static_cast<int>(seconds / 60 % 60),
                static_cast<int>(seconds % 60));
  return text;
}

class AzureEndpoint final : public Endpoint {
 public:
  explicit AzureEndpoint(AzureConfig config) : config_(std::move(config)) {}

  std::string description() const override { return "Azure"; }
  Result<std::string> UrlOf(const std::string& name) const override {
    HOIST_ASSIGN_OR_RETURN(const AzureBlob blob, ParseAzureName(name));
    return WithSas(AzureBlobUrl(config_, blob));
  }
  // A blob URL's file is one path segment, percent-encoded (its name is decoded when parsed);
  // an az:// name's is encoded whole when its URL is made.
  std::string Join(const std::string& dir, const std::string& file) const override {
    const std::string segment =
        IsAzureBlobUrl(dir) ? PercentEncode(file, /*keep_slash=*/false) : file;
    return dir.ends_with('/') ? dir + segment : dir + "/" + segment;
  }
  Result<RequestAuth> Authorize(const OutgoingRequest& request) const override {
    RequestAuth auth;
    std::vector<std::string> ms = {"x-ms-date:" + HttpDate(),
                                   std::string("x-ms-version:") + kApiVersion};
    for (const std::string& header : ms) {
      auth.headers.push_back(header.substr(0, header.find(':')) + ": " +
                             header.substr(header.find(':') + 1));
    }
    if (!config_.shared_key.empty()) {
      HOIST_ASSIGN_OR_RETURN(
          const std::string mac,
          HmacSha256(config_.shared_key, AzureStringToSign(config_.account, request, ms)));
      auth.headers.push_back("Authorization: SharedKey " + config_.account + ":" + Base64(mac));
    } else if (config_.token) {
      HOIST_ASSIGN_OR_RETURN(const BearerToken live, config_.token->Current());
      auth.headers.push_back("Authorization: Bearer " + live.access_token);
    }
    return auth;
  }
  std::string CredentialsOrigin() const override { return config_.credentials_origin; }
  // The Blob service writes S3's error document: <Error><Code/><Message/></Error>.
  std::string ErrorSummary(std::string_view body) const override { return S3ErrorSummary(body); }

  bool lists() const override { return true; }
  // Blob storage has no directories: a container, or a name ending in '/', can only be a prefix.
  bool IsPrefixOnly(const std::string& name) const override {
    const Result<AzureBlob> blob = ParseAzureName(name);
    return blob.ok() && (blob->blob.empty() || blob->blob.ends_with('/'));
  }
  Result<std::string> PrefixKey(const std::string& dir) const override {
    HOIST_ASSIGN_OR_RETURN(AzureBlob blob, ParseAzureName(dir));
    if (!blob.blob.empty() && !blob.blob.ends_with('/')) blob.blob += '/';
    return blob.blob;
  }
  Result<std::string> ListUrl(const std::string& dir, const std::string& prefix_key,
                              const std::string& token) const override {
    HOIST_ASSIGN_OR_RETURN(const AzureBlob blob, ParseAzureName(dir));
    return WithSas(AzureListUrl(config_, blob.container, prefix_key, token));
  }
  Result<ObjectListing> ParseListing(std::string_view body) const override {
    return ParseAzureListing(body);
  }

 private:
  std::string WithSas(std::string url) const {
    if (config_.sas.empty()) return url;
    return url + (url.find('?') == std::string::npos ? "?" : "&") + config_.sas;
  }

  const AzureConfig config_;
};

// The credentials a connection string carries, or an error naming what it lacks.
Status FromConnectionString(const std::string& text, AzureConfig* config) {
  constexpr const char* kWhat = "AZURE_STORAGE_CONNECTION_STRING";
  if (EqualsIgnoreCase(ConnectionValue(text, "UseDevelopmentStorage"), "true")) {
    config->account = kEmulatorAccount;
    config->blob_endpoint = std::string("http://127.0.0.1:10000/") + kEmulatorAccount;
    config->shared_key = *DecodeBase64(kEmulatorKey);
    config->credentials_origin = std::string("the emulator's key (") + kWhat + ")";
    return Status::Ok();
  }
  config->account = ConnectionValue(text, "AccountName");
  config->blob_endpoint = WithoutTrailingSlash(ConnectionValue(text, "BlobEndpoint"));
  if (config->blob_endpoint.empty()) {
    if (config->account.empty()) {
      return Status::InvalidArgument(std::string(kWhat) +
                                     ": names neither AccountName nor BlobEndpoint");
    }
    std::string protocol = ConnectionValue(text, "DefaultEndpointsProtocol");
    std::string suffix = ConnectionValue(text, "EndpointSuffix");
    config->blob_endpoint = (protocol.empty() ? "https" : protocol) + "://" + config->account +
                            ".blob." + (suffix.empty() ? "core.windows.net" : suffix);
  }
  if (const std::string key = ConnectionValue(text, "AccountKey"); !key.empty()) {
    std::optional<std::string> bytes = DecodeBase64(key);
    if (!bytes || bytes->empty()) {
      return Status::InvalidArgument(std::string(kWhat) + ": its AccountKey is not base64");
    }
    if (config->account.empty()) {
      return Status::InvalidArgument(std::string(kWhat) + ": an AccountKey needs an AccountName");
    }
    config->shared_key = std::move(*bytes);
    config->credentials_origin = std::string("the account key of ") + kWhat;
  } else if (std::string sas = ConnectionValue(text, "SharedAccessSignature"); !sas.empty()) {
    config->sas = sas.starts_with('?') ? sas.substr(1) : sas;
    config->credentials_origin = std::string("the SAS token of ") + kWhat;
  }
  return Status::Ok();
}

// The credentials AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN give.
Status FromAccountVariables(const AzureEnvironment& environment, AzureConfig* config) {
  config->account = environment.account;
  if (config->account.empty()) {
    return Status::InvalidArgument(
        "az:// names need the storage account: set AZURE_STORAGE_ACCOUNT (or "
        "AZURE_STORAGE_CONNECTION_STRING)");
  }
  if (!IsAccountName(config->account)) {
    return Status::InvalidArgument("AZURE_STORAGE_ACCOUNT='" + Printable(config->account) +
                                   "' is not a storage account's name (3 to 24 lowercase "
                                   "letters and digits)");
  }
  config->blob_endpoint = "https://" + config->account + ".blob.core.windows.net";
  if (!environment.key.empty()) {
    std::optional<std::string> bytes = DecodeBase64(environment.key);
    if (!bytes || bytes->empty()) return Status::InvalidArgument("AZURE_STORAGE_KEY is not base64");
    config->shared_key = std::move(*bytes);
    config->credentials_origin = "the account key (AZURE_STORAGE_KEY)";
  } else if (!environment.sas.empty()) {
    config->sas = environment.sas.starts_with('?') ? environment.sas.substr(1) : environment.sas;
    config->credentials_origin = "the SAS token (AZURE_STORAGE_SAS_TOKEN)";
  }
  return Status::Ok();
}

}  // namespace

bool IsAzureUrl(std::string_view name) { return name.rfind("az://", 0) == 0; }

bool IsAzureBlobUrl(std::string_view name) {
  constexpr std::string_view kSuffix = ".blob.core.windows.net";
  if (name.size() < 8 || !EqualsIgnoreCase(name.substr(0, 8), "https://") ||
      name.find_first_of("?#") != std::string_view::npos) {
    return false;
  }
  const std::string_view host = name.substr(8, name.find('/', 8) - 8);
  if (host.size() <= kSuffix.size() || host.find_first_of("@:") != std::string_view::npos ||
      !EqualsIgnoreCase(host.substr(host.size() - kSuffix.size()), kSuffix)) {
    return false;
  }
  std::string account(host.substr(0, host.size() - kSuffix.size()));
  for (char& c : account) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return IsAccountName(account);
}

Result<AzureBlob> ParseAzureName(std::string_view name) {
  const std::string text(name);
  AzureBlob blob;
  std::string rest;
  if (IsAzureBlobUrl(name)) {
    const size_t path = name.find('/', 8);
    blob.account = std::string(name.substr(8, name.find('.', 8) - 8));
    for (char& c : blob.account) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rest = path == std::string_view::npos ? "" : PercentDecode(name.substr(path + 1));
  } else if (IsAzureUrl(name)) {
    rest = std::string(name.substr(5));
  } else {
    return Status::InvalidArgument(text + ": not an az:// name");
  }
  const size_t slash = rest.find('/');
  blob.container = rest.substr(0, slash);
  if (slash != std::string::npos) blob.blob = rest.substr(slash + 1);
  if (!IsContainerName(blob.container)) {
    return Status::InvalidArgument(
        Printable(text) + ": '" + Printable(blob.container) +
        "' is not an Azure container name (3 to 63 lowercase letters, digits and single "
        "hyphens, starting and ending with a letter or digit; az://CONTAINER/BLOB)");
  }
  if (blob.blob.size() > kLongestBlobName || blob.blob.find_first_of("\r\n") != std::string::npos) {
    return Status::InvalidArgument(Printable(text) +
                                   ": a blob's name is at most 1024 bytes, without a line break");
  }
  return blob;
}

AzureEnvironment AzureEnvironmentVariables() {
  AzureEnvironment e;
  e.connection_string = EnvironmentVariable("AZURE_STORAGE_CONNECTION_STRING");
  e.account = EnvironmentVariable("AZURE_STORAGE_ACCOUNT");
  e.key = EnvironmentVariable("AZURE_STORAGE_KEY");
  e.sas = EnvironmentVariable("AZURE_STORAGE_SAS_TOKEN");
  e.federated_token_file = EnvironmentVariable("AZURE_FEDERATED_TOKEN_FILE");
  e.client_id = EnvironmentVariable("AZURE_CLIENT_ID");
  e.tenant_id = EnvironmentVariable("AZURE_TENANT_ID");
  e.authority_host = EnvironmentVariable("AZURE_AUTHORITY_HOST");
  e.identity_endpoint = EnvironmentVariable("IDENTITY_ENDPOINT");
  e.identity_header = EnvironmentVariable("IDENTITY_HEADER");
  e.imds_host = EnvironmentVariable("AZURE_POD_IDENTITY_AUTHORITY_HOST");
  return e;
}

Result<AzureConfig> AzureConfigFrom(const AzureEnvironment& environment, const AskServiceFn& ask,
                                    const std::string& url_account) {
  AzureConfig config;
  if (!environment.connection_string.empty()) {
    HOIST_RETURN_IF_ERROR(FromConnectionString(environment.connection_string, &config));
  } else if (url_account.empty() || !environment.account.empty()) {
    HOIST_RETURN_IF_ERROR(FromAccountVariables(environment, &config));
  }
  if (!url_account.empty()) {
    // A blob URL names its account: another account's key or SAS is never sent to it.
    if (config.account != url_account) config = AzureConfig{};
    config.account = url_account;
    config.blob_endpoint = "https://" + url_account + ".blob.core.windows.net";
  }
  if (HasControlCharacter(config.sas) || config.sas.find_first_of(" #") != std::string::npos) {
    return Status::InvalidArgument("the SAS token is not a URL's query: refused");
  }
  if (config.shared_key.empty() && config.sas.empty()) {
    // A loopback endpoint (http or https) is an emulator's: no metadata service is asked for
    // it unless named.
    const bool emulator = IsLoopbackHttpUrl("http://" + UrlAuthority(config.blob_endpoint));
    std::string imds = environment.imds_host;
    if (imds.empty() && !emulator) imds = "169.254.169.254";
    HOIST_ASSIGN_OR_RETURN(config.token, FindAzureToken(environment, imds, ask));
    if (config.token) {
      config.credentials_origin = "a token from " + config.token->name();
    } else {
      config.credentials_origin = "none found: the requests went anonymous";
    }
  }
  return config;
}

std::string AzureBlobUrl(const AzureConfig& config, const AzureBlob& blob) {
  return WithoutTrailingSlash(config.blob_endpoint) + "/" + blob.container + "/" +
         PercentEncode(blob.blob, /*keep_slash=*/true);
}

std::string AzureListUrl(const AzureConfig& config, const std::string& container,
                         const std::string& prefix, const std::string& marker) {
  std::string url =
      WithoutTrailingSlash(config.blob_endpoint) + "/" + container +
      "?restype=container&comp=list&delimiter=%2F&prefix=" + PercentEncode(prefix, false);
  if (!marker.empty()) url += "&marker=" + PercentEncode(marker, false);
  return url;
}

Result<ObjectListing> ParseAzureListing(std::string_view xml) {
  if (xml.find("<EnumerationResults") == std::string_view::npos) {
    return Status::IoError("the answer to a listing is not an EnumerationResults");
  }
  ObjectListing listing;
  HOIST_ASSIGN_OR_RETURN(listing.keys, XmlChildOfEach(xml, "Blob", "Name"));
  HOIST_ASSIGN_OR_RETURN(listing.prefixes, XmlChildOfEach(xml, "BlobPrefix", "Name"));
  listing.next_token = XmlElementText(xml, "NextMarker").value_or("");
  return listing;
}

std::string AzureStringToSign(const std::string& account, const OutgoingRequest& request,
                              const std::vector<std::string>& ms_headers) {
  // VERB, then Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-Modified-Since,
  // If-Match, If-None-Match, If-Unmodified-Since (none sent), Range.
  std::string text = request.method + "\n\n\n\n\n\n\n\n\n\n\n" + request.range + "\n";
  for (const std::string& header : ms_headers) text += header + "\n";
  // The canonicalised resource: /ACCOUNT/PATH as sent, then each query parameter decoded, names
  // lower-case and sorted.
  const size_t scheme = request.url.find("://");
  const size_t path_at = request.url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const size_t query_at = request.url.find('?');
  const std::string path =
      path_at == std::string::npos
          ? "/"
          : request.url.substr(
                path_at, query_at == std::string::npos ? std::string::npos : query_at - path_at);
  text += "/" + account + path;
  if (query_at == std::string::npos) return text;
  std::vector<std::pair<std::string, std::string>> parameters;
  const std::string_view query = std::string_view(request.url).substr(query_at + 1);
  for (size_t at = 0; at <= query.size();) {
    size_t end = query.find('&', at);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view part = query.substr(at, end - at);
    if (!part.empty()) {
      const size_t eq = part.find('=');
      std::string name = PercentDecode(part.substr(0, eq));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      parameters.emplace_back(
          name, eq == std::string_view::npos ? "" : PercentDecode(part.substr(eq + 1)));
    }
    at = end + 1;
  }
  std::sort(parameters.begin(), parameters.end());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (i > 0 && parameters[i].first == parameters[i - 1].first) {
      text += "," + parameters[i].second;
    } else {
      text += "\n" + parameters[i].first + ":" + parameters[i].second;
    }
  }
  return text;
}

std::shared_ptr<const Endpoint> MakeAzureEndpoint(AzureConfig config) {
  return std::make_shared<AzureEndpoint>(std::move(config));
}

}  // namespace hoist
