#include "io/s3.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "base/platform.h"
#include "io/http_storage.h"
#include "io/storage.h"

namespace hoist {
namespace {

// S3's rule for a bucket: 3 to 63 lowercase letters, digits, dots and hyphens, beginning and
// ending with a letter or digit.
bool IsBucketName(std::string_view name) {
  auto letter_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return name.size() >= 3 && name.size() <= 63 && letter_or_digit(name.front()) &&
         letter_or_digit(name.back()) && std::all_of(name.begin(), name.end(), [&](char c) {
           return letter_or_digit(c) || c == '.' || c == '-';
         });
}

std::string TrimBlanks(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

// `key` of section `section` in an AWS ini file (credentials or config), or nullopt.
std::optional<std::string> IniValue(std::string_view text, std::string_view section,
                                    std::string_view key) {
  std::string current;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string line = TrimBlanks(text.substr(at, end - at));
    at = end + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      current = TrimBlanks(std::string_view(line).substr(1, line.size() - 2));
      continue;
    }
    const size_t equals = line.find('=');
    if (current != section || equals == std::string::npos) continue;
    if (TrimBlanks(std::string_view(line).substr(0, equals)) == key) {
      return TrimBlanks(std::string_view(line).substr(equals + 1));
    }
  }
  return std::nullopt;
}

// An AWS file named by `variable`, else ~/.aws/`file`; "" when there is none or it cannot be
// read (the SDKs pass over such a file too).
// The AWS CLI's directory, ~/.aws (%USERPROFILE%\.aws on Windows); "" without a home.
std::string AwsDirectory() {
  std::string home = EnvironmentVariable("HOME");
  if (home.empty()) home = EnvironmentVariable("USERPROFILE");
  return home.empty() ? "" : home + "/.aws";
}

std::string AwsFile(const char* variable, const char* file) {
  std::string path = EnvironmentVariable(variable);
  if (path.empty()) {
    const std::string dir = AwsDirectory();
    if (dir.empty()) return "";
    path = dir + "/" + file;
  }
  Result<std::string> text = ReadSmallFile(*LocalStorage(), path, 1u << 20);
  return text.ok() ? std::move(text).value() : std::string();
}

std::string FirstOf(std::initializer_list<const char*> variables) {
  for (const char* v : variables) {
    if (std::string value = EnvironmentVariable(v); !value.empty()) return value;
  }
  return "";
}

// The text between <tag> and </tag> from `from`, XML's five entities decoded; nullopt when
// absent. `from` moves past the element.
std::optional<std::string> Element(std::string_view xml, std::string_view tag, size_t* from) {
  // Appended, not "<" + std::string(tag): GCC 12 at -O3 warns falsely (-Wrestrict) on that.
  const std::string open = std::string("<").append(tag).append(">");
  const std::string close = std::string("</").append(tag).append(">");
  const size_t begin = xml.find(open, *from);
  if (begin == std::string_view::npos) return std::nullopt;
  const size_t end = xml.find(close, begin + open.size());
  if (end == std::string_view::npos) return std::nullopt;
  *from = end + close.size();
  const std::string_view raw = xml.substr(begin + open.size(), end - begin - open.size());
  std::string text;
  for (size_t i = 0; i < raw.size(); ++i) {
    static constexpr std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool decoded = false;
    for (const auto& [entity, c] : kEntities) {
      if (raw.substr(i, entity.size()) == entity) {
        text += c;
        i += entity.size() - 1;
        decoded = true;
        break;
      }
    }
    if (!decoded) text += raw[i];
  }
  return text;
}

std::string Host(const S3Config& config, const std::string& bucket, bool* path_style) {
  if (!config.endpoint.empty()) {
    *path_style = true;
    return WithoutTrailingSlash(config.endpoint);
  }
  *path_style = bucket.find('.') != std::string::npos;
  const std::string aws = "s3." + config.region + ".amazonaws.com";
  return *path_style ? "https://" + aws : "https://" + bucket + "." + aws;
}

}  // namespace

bool IsS3Url(std::string_view name) { return name.rfind("s3://", 0) == 0; }

Result<S3Object> ParseS3Name(std::string_view name) {
  const std::string text(name);
  if (!IsS3Url(name)) return Status::InvalidArgument(text + ": not an s3:// name");
  const std::string_view rest = name.substr(5);
  const size_t slash = rest.find('/');
  S3Object object;
  object.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) object.key = std::string(rest.substr(slash + 1));
  if (!IsBucketName(object.bucket)) {
    return Status::InvalidArgument(text + ": '" + object.bucket +
                                   "' is not an S3 bucket name (3 to 63 lowercase letters, "
                                   "digits, dots and hyphens; s3://BUCKET/KEY)");
  }
  return object;
}

Result<S3Config> S3ConfigFromEnvironment() {
  S3Config config;
  AwsChainInput chain;
  chain.profile = EnvironmentVariable("AWS_PROFILE");
  if (chain.profile.empty()) chain.profile = "default";
  const std::string credentials = AwsFile("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string settings = AwsFile("AWS_CONFIG_FILE", "config");
  const std::string section =
      chain.profile == "default" ? chain.profile : "profile " + chain.profile;
  chain.setting = [credentials, settings, section, profile = chain.profile](const char* key) {
    if (auto v = IniValue(credentials, profile, key)) return *v;
    return IniValue(settings, section, key).value_or("");
  };
  chain.config_setting = [settings](const std::string& section, const char* key) {
    return IniValue(settings, section, key).value_or("");
  };
  if (const std::string dir = AwsDirectory(); !dir.empty())
    chain.sso_cache_dir = dir + "/sso/cache";
  config.region = FirstOf({"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (config.region.empty()) config.region = chain.setting("region");
  if (config.region.empty()) config.region = "us-east-1";
  config.endpoint = FirstOf({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  if (config.endpoint.empty()) config.endpoint = chain.setting("endpoint_url");
  chain.region = config.region;
  chain.ask = AskService;
  HOIST_ASSIGN_OR_RETURN(config.credentials, FindAwsCredentials(chain));
  return config;
}

std::optional<std::string> XmlElementText(std::string_view xml, std::string_view tag) {
  size_t from = 0;
  return Element(xml, tag, &from);
}

Result<std::vector<std::string>> XmlChildOfEach(std::string_view xml, std::string_view parent,
                                                std::string_view child) {
  const std::string open = std::string("<").append(parent).append(">");
  const std::string close = std::string("</").append(parent).append(">");
  std::vector<std::string> values;
  for (size_t at = xml.find(open); at != std::string_view::npos; at = xml.find(open, at)) {
    const size_t end = xml.find(close, at);
    size_t from = 0;
    std::optional<std::string> value = end == std::string_view::npos
                                           ? std::nullopt
                                           : Element(xml.substr(at, end - at), child, &from);
    if (!value) {
      return Status::IoError(
          std::string("a listing's ").append(open).append(" has no <").append(child).append(">"));
    }
    values.push_back(std::move(*value));
    at = end + close.size();
  }
  return values;
}

std::string S3ObjectUrl(const S3Config& config, const S3Object& object) {
  bool path_style = false;
  const std::string host = Host(config, object.bucket, &path_style);
  return host + (path_style ? "/" + object.bucket : "") + "/" + PercentEncode(object.key, true);
}

std::string S3ListUrl(const S3Config& config, const std::string& bucket, const std::string& prefix,
                      const std::string& continuation_token) {
  bool path_style = false;
  const std::string host = Host(config, bucket, &path_style);
  std::string url = host + (path_style ? "/" + bucket : "") + "/?";
  if (!continuation_token.empty()) {
    url += "continuation-token=" + PercentEncode(continuation_token, false) + "&";
  }
  return url + "delimiter=%2F&list-type=2&prefix=" + PercentEncode(prefix, false);
}

Result<ObjectListing> ParseS3Listing(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Status::IoError("the answer to a listing is not a ListBucketResult");
  }
  ObjectListing listing;
  HOIST_ASSIGN_OR_RETURN(listing.keys, XmlChildOfEach(xml, "Contents", "Key"));
  HOIST_ASSIGN_OR_RETURN(listing.prefixes, XmlChildOfEach(xml, "CommonPrefixes", "Prefix"));
  size_t from = 0;
  if (Element(xml, "IsTruncated", &from).value_or("false") == "true") {
    from = 0;
    listing.next_token = Element(xml, "NextContinuationToken", &from).value_or("");
    if (listing.next_token.empty()) {
      return Status::IoError("a truncated listing gives no NextContinuationToken");
    }
  }
  return listing;
}

std::string S3ErrorSummary(std::string_view body) {
  if (body.find("<Error>") == std::string_view::npos) return "";
  size_t from = 0;
  const std::string code = Element(body, "Code", &from).value_or("");
  from = 0;
  std::string message = Element(body, "Message", &from).value_or("");
  if (code.empty()) return message;
  return message.empty() ? code : code + ": " + message;
}

namespace {

// The SHA-256 of an empty body, which every GET and HEAD sends: S3 wants the payload's hash in
// x-amz-content-sha256, and libcurl before 8.1 neither adds the header nor reads it.
constexpr const char* kEmptyPayloadHash =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

class S3Endpoint final : public Endpoint {
 public:
  explicit S3Endpoint(S3Config config) : config_(std::move(config)) {}

  std::string description() const override { return "S3"; }
  Result<std::string> UrlOf(const std::string& name) const override {
    HOIST_ASSIGN_OR_RETURN(const S3Object object, ParseS3Name(name));
    return S3ObjectUrl(config_, object);
  }
  // A key's part is encoded when its URL is made.
  std::string Join(const std::string& dir, const std::string& file) const override {
    return dir.ends_with('/') ? dir + file : dir + "/" + file;
  }
  Result<RequestAuth> Authorize(const OutgoingRequest& /*request*/) const override {
    RequestAuth auth;
    if (!config_.credentials) return auth;
    HOIST_ASSIGN_OR_RETURN(const AwsCredentials live, config_.credentials->Current());
    auth.sigv4_provider = "aws:amz:" + config_.region + ":s3";
    auth.sigv4_key_id = live.access_key_id;
    auth.sigv4_secret = live.secret_access_key;
    auth.headers.emplace_back(kEmptyPayloadHash);
    if (!live.session_token.empty()) {
      auth.headers.push_back("x-amz-security-token: " + live.session_token);
    }
    return auth;
  }
  std::string CredentialsOrigin() const override {
    if (!config_.credentials) return "none found: the requests went unsigned";
    const Result<AwsCredentials> c = config_.credentials->Current();
    return (c.ok() ? "access key " + c->access_key_id + " from " : std::string("from ")) +
           config_.credentials->name();
  }
  std::string ErrorSummary(std::string_view body) const override { return S3ErrorSummary(body); }

  bool lists() const override { return true; }
  // S3 has no directories: a bucket, or a name ending in '/', can only be a prefix.
  bool IsPrefixOnly(const std::string& name) const override {
    return name.ends_with('/') || name.find('/', 5) == std::string::npos;
  }
  Result<std::string> PrefixKey(const std::string& dir) const override {
    HOIST_ASSIGN_OR_RETURN(S3Object object, ParseS3Name(dir));
    if (!object.key.empty() && !object.key.ends_with('/')) object.key += '/';
    return object.key;
  }
  Result<std::string> ListUrl(const std::string& dir, const std::string& prefix_key,
                              const std::string& token) const override {
    HOIST_ASSIGN_OR_RETURN(const S3Object object, ParseS3Name(dir));
    return S3ListUrl(config_, object.bucket, prefix_key, token);
  }
  Result<ObjectListing> ParseListing(std::string_view body) const override {
    return ParseS3Listing(body);
  }

 private:
  const S3Config config_;
};

}  // namespace

std::shared_ptr<const Endpoint> MakeS3Endpoint(S3Config config) {
  return std::make_shared<S3Endpoint>(std::move(config));
}

}  // namespace hoist
