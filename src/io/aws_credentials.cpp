#include "io/aws_credentials.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <ctime>
#include <utility>

#include "base/platform.h"
#include "base/units.h"
#include "io/http_storage.h"
#include "io/s3.h"
#include "io/signing.h"
#include "io/storage.h"

namespace hoist {

std::optional<std::chrono::system_clock::time_point> ParseIsoTime(const std::string& text) {
  std::tm tm{};
  int year = 0;
  int month = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  std::string_view rest = std::string_view(text).substr(static_cast<size_t>(consumed));
  if (!rest.empty() && rest.front() == '.') {  // fractions of a second: dropped
    rest.remove_prefix(1);
    while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest.front())) != 0) {
      rest.remove_prefix(1);
    }
  }
  if (rest != "Z" && rest != "+00:00") return std::nullopt;
  if (month < 1 || month > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil):
  // timegm is not on every platform hoist builds for.
  const int y = year - (month <= 2 ? 1 : 0);
  const int era = (y >= 0 ? y : y - 399) / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + tm.tm_mday - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + doe - 719468;
  const int64_t seconds =
      days * 86400 + int64_t{tm.tm_hour} * 3600 + int64_t{tm.tm_min} * 60 + tm.tm_sec;
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

namespace {

Status SourceError(const std::string& source, const std::string& what) {
  return Status::IoError("S3 credentials from " + source + ": " + what);
}

// `answer` to `request` when it is a success, else an error naming the source, the URL and what
// the service said (its error document's code and message, never the request's token).
Result<ServiceAnswer> Checked(const std::string& source, const ServiceRequest& request,
                              Result<ServiceAnswer> answer) {
  if (!answer.ok()) return SourceError(source, answer.status().message());
  if (answer->code < 200 || answer->code > 299) {
    std::string what = request.url + " answered " + std::to_string(answer->code) +
                       (answer->reason.empty() ? "" : " " + Printable(answer->reason));
    if (const std::string summary = S3ErrorSummary(answer->body); !summary.empty()) {
      what += ": " + Printable(summary);
    } else if (!answer->body.empty()) {
      what += ": " + Printable(answer->body, 200);
    }
    return SourceError(source, what);
  }
  return answer;
}

Result<ServiceAnswer> Ask(const AskServiceFn& ask, const std::string& source,
                          const ServiceRequest& request) {
  return Checked(source, request, ask(request));
}

// Credentials from a JSON document (the container endpoint's and the instance metadata
// service's "Token", credential_process's "SessionToken").
Result<AwsCredentials> FromJson(const std::string& source, const std::string& text,
                                const char* token_key) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto field = [&](const char* key) -> std::string {
    if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) return "";
    return doc[key].get<std::string>();
  };
  AwsCredentials c{field("AccessKeyId"), field("SecretAccessKey"), field(token_key), std::nullopt};
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return SourceError(source,
                       "the answer is not credentials (a JSON object with AccessKeyId "
                       "and SecretAccessKey)");
  }
  if (const std::string expiration = field("Expiration"); !expiration.empty()) {
    c.expiration = ParseIsoTime(expiration);
    if (!c.expiration) {
      return SourceError(source, "the credentials' Expiration '" + Printable(expiration) +
                                     "' is not an ISO 8601 UTC time");
    }
  }
  return c;
}

bool HasLineBreak(std::string_view text) { return text.find_first_of("\r\n") != text.npos; }

// STS's AssumeRoleWithWebIdentity: the token file read again at every fetch (Kubernetes
// rotates it).
AwsCredentialSource::FetchFn WebIdentity(const AskServiceFn& ask, const std::string& source,
                                         const std::string& token_file, const std::string& role_arn,
                                         const std::string& endpoint) {
  return [=]() -> Result<AwsCredentials> {
    Result<std::string> token = ReadSmallFile(*LocalStorage(), token_file, 64u << 10);
    if (!token.ok()) return SourceError(source, token.status().message());
    std::string session = EnvironmentVariable("AWS_ROLE_SESSION_NAME");
    if (session.empty()) session = "hoist-" + std::to_string(std::time(nullptr));
    ServiceRequest request;
    request.method = "POST";
    request.url = endpoint + "/";
    request.body = "Action=AssumeRoleWithWebIdentity&RoleArn=" + PercentEncode(role_arn, false) +
                   "&RoleSessionName=" + PercentEncode(session, false) +
                   "&Version=2011-06-15&WebIdentityToken=" + PercentEncode(Trim(*token), false);
    HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer, Ask(ask, source, request));
    const std::string& xml = answer.body;
    AwsCredentials c{XmlElementText(xml, "AccessKeyId").value_or(""),
                     XmlElementText(xml, "SecretAccessKey").value_or(""),
                     XmlElementText(xml, "SessionToken").value_or(""), std::nullopt};
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      return SourceError(source, request.url + " answered with no Credentials");
    }
    if (const auto expiration = XmlElementText(xml, "Expiration")) {
      c.expiration = ParseIsoTime(*expiration);
      if (!c.expiration) {
        return SourceError(source, "the credentials' Expiration '" + Printable(*expiration) +
                                       "' is not an ISO 8601 UTC time");
      }
    }
    return c;
  };
}

AwsCredentialSource::FetchFn CredentialProcess(const std::string& source,
                                               const std::string& command) {
  return [=]() -> Result<AwsCredentials> {
    // The SDKs give a process a minute; its standard error goes to the user's.
    Result<CommandOutput> run = RunCommand(command, 1u << 20, 60);
    if (!run.ok()) return SourceError(source, run.status().message());
    if (run->exit_code != 0) {
      return SourceError(source, "the command exited with status " +
                                     std::to_string(run->exit_code) +
                                     " (its error output is above)");
    }
    const nlohmann::json doc = nlohmann::json::parse(run->output, nullptr, false);
    if (!doc.is_object() || doc.value("Version", 0) != 1) {
      return SourceError(source, "the command's output is not a JSON object with \"Version\": 1");
    }
    return FromJson(source, run->output, "SessionToken");
  };
}

// Whether the container endpoint at `url` may be sent its authorization token: over https
// anywhere; over http only on loopback or the container agents' link-local addresses, as the
// SDKs allow.
bool ContainerEndpointAllowed(const std::string& url) {
  if (url.rfind("https://", 0) == 0 || IsLoopbackHttpUrl(url)) return true;
  const std::string host = HttpUrlHost(url);
  return host == "169.254.170.2" || host == "169.254.170.23" || host == "[fd00:ec2::23]";
}

Result<std::shared_ptr<AwsCredentialSource>> Container(const AskServiceFn& ask) {
  const std::string relative = EnvironmentVariable("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = EnvironmentVariable("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (relative.empty() && full.empty()) return std::shared_ptr<AwsCredentialSource>();
  const std::string url = !relative.empty() ? "http://169.254.170.2" + relative : full;
  if (!ContainerEndpointAllowed(url)) {
    return Status::InvalidArgument(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI '" + RedactUrl(url) +
        "': a container credentials endpoint over http must be on loopback or the container "
        "agent's address (169.254.170.2, 169.254.170.23), else https: its token is not sent "
        "there");
  }
  const std::string source = "the container credentials endpoint (" + RedactUrl(url) + ")";
  auto fetch = [ask, url, source]() -> Result<AwsCredentials> {
    ServiceRequest request;
    request.url = url;
    std::string token;
    if (const std::string file = EnvironmentVariable("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
        !file.empty()) {
      Result<std::string> text = ReadSmallFile(*LocalStorage(), file, 64u << 10);
      if (!text.ok()) return SourceError(source, text.status().message());
      token = Trim(*text);
    } else {
      token = EnvironmentVariable("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    }
    if (HasLineBreak(token)) {
      return SourceError(source, "the authorization token holds a line break: refused");
    }
    if (!token.empty()) request.headers.push_back("Authorization: " + token);
    HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer, Ask(ask, source, request));
    return FromJson(source, answer.body, "Token");
  };
  return std::make_shared<AwsCredentialSource>(source, fetch);
}

// The instance's role through IMDSv2: a session token (PUT), the role's name, its credentials.
// nullopt when no instance metadata service answers or the instance has no role.
Result<std::optional<AwsCredentials>> FromInstance(const AskServiceFn& ask,
                                                   const std::string& endpoint,
                                                   const std::string& source, std::string* role) {
  // The SDKs' second: a machine that is no cloud instance finds out at once.
  constexpr double kImdsSeconds = 1;
  ServiceRequest put;
  put.method = "PUT";
  put.url = endpoint + "/latest/api/token";
  put.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
  put.timeout_s = kImdsSeconds;
  put.direct = true;
  Result<ServiceAnswer> token = ask(put);
  // No answer, or a refusal of the token's PUT (403, 404, 405: a firewall or proxy on the
  // address, or IMDS turned off), is no instance metadata service, as botocore takes them.
  if (!token.ok() || token->code == 403 || token->code == 404 || token->code == 405) {
    return std::optional<AwsCredentials>();
  }
  if (token->code != 200) {
    return SourceError(source, put.url + " answered " + std::to_string(token->code));
  }
  const std::string session(Trim(token->body));
  if (HasLineBreak(session)) return SourceError(source, "the session token holds a line break");
  ServiceRequest get;
  get.url = endpoint + "/latest/meta-data/iam/security-credentials/";
  get.headers = {"X-aws-ec2-metadata-token: " + session};
  get.timeout_s = kImdsSeconds;
  get.direct = true;
  Result<ServiceAnswer> roles = ask(get);
  if (roles.ok() && roles->code == 404) return std::optional<AwsCredentials>();  // no role
  HOIST_ASSIGN_OR_RETURN(const ServiceAnswer listed, Checked(source, get, std::move(roles)));
  *role = Trim(std::string_view(listed.body).substr(0, listed.body.find('\n')));
  if (role->empty() || PercentEncode(*role, false) != *role) {
    return SourceError(source, "the role's name '" + Printable(*role) + "' is not one");
  }
  get.url += *role;
  HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer, Ask(ask, source, get));
  HOIST_ASSIGN_OR_RETURN(AwsCredentials c, FromJson(source, answer.body, "Token"));
  return std::optional<AwsCredentials>(std::move(c));
}

Result<std::shared_ptr<AwsCredentialSource>> Instance(const AskServiceFn& ask) {
  if (EqualsIgnoreCase(EnvironmentVariable("AWS_EC2_METADATA_DISABLED"), "true")) {
    return std::shared_ptr<AwsCredentialSource>();
  }
  std::string endpoint = EnvironmentVariable("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (endpoint.empty()) endpoint = "http://169.254.169.254";
  endpoint = WithoutTrailingSlash(endpoint);
  std::string role;
  HOIST_ASSIGN_OR_RETURN(std::optional<AwsCredentials> first,
                         FromInstance(ask, endpoint, "the instance metadata service", &role));
  if (!first) return std::shared_ptr<AwsCredentialSource>();
  const std::string source = "the instance metadata service (role " + role + ")";
  auto pending = std::make_shared<std::optional<AwsCredentials>>(std::move(first));
  auto fetch = [ask, endpoint, source, pending]() -> Result<AwsCredentials> {
    if (*pending) {  // the first fetch, made to find the role
      AwsCredentials c = std::move(**pending);
      pending->reset();
      return c;
    }
    std::string role;
    HOIST_ASSIGN_OR_RETURN(std::optional<AwsCredentials> c,
                           FromInstance(ask, endpoint, source, &role));
    if (!c) return SourceError(source, "the instance no longer answers with a role");
    return std::move(*c);
  };
  return std::make_shared<AwsCredentialSource>(source, fetch);
}

// The STS endpoint a web identity is exchanged at: the SDKs' AWS_ENDPOINT_URL_STS, then
// AWS_ENDPOINT_URL (every service's), else the region's.
std::string StsEndpoint(const std::string& region) {
  std::string endpoint = EnvironmentVariable("AWS_ENDPOINT_URL_STS");
  if (endpoint.empty()) endpoint = EnvironmentVariable("AWS_ENDPOINT_URL");
  if (endpoint.empty())
    endpoint = "https://sts." + (region.empty() ? "us-east-1" : region) + ".amazonaws.com";
  endpoint = WithoutTrailingSlash(endpoint);
  return endpoint;
}

// The environment's keys, else a web identity the environment names; null when neither.
Result<std::shared_ptr<AwsCredentialSource>> FromEnvironment(const AwsChainInput& input) {
  const std::string key = EnvironmentVariable("AWS_ACCESS_KEY_ID");
  const std::string secret = EnvironmentVariable("AWS_SECRET_ACCESS_KEY");
  if (!key.empty() || !secret.empty()) {
    if (key.empty() || secret.empty()) {
      return Status::InvalidArgument(
          std::string(key.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
          " is set without " + (key.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
          ": S3 requests need both or neither");
    }
    return AwsCredentialSource::Fixed(
        "AWS_ACCESS_KEY_ID", {key, secret, EnvironmentVariable("AWS_SESSION_TOKEN"), std::nullopt});
  }
  const std::string token_file = EnvironmentVariable("AWS_WEB_IDENTITY_TOKEN_FILE");
  const std::string role = EnvironmentVariable("AWS_ROLE_ARN");
  if (token_file.empty() != role.empty()) {
    return Status::InvalidArgument(
        std::string(token_file.empty() ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE") +
        " is set without " + (token_file.empty() ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN") +
        ": a web identity needs both");
  }
  if (token_file.empty()) return std::shared_ptr<AwsCredentialSource>();
  const std::string source = "web identity (role " + role + ", AWS_WEB_IDENTITY_TOKEN_FILE)";
  return std::make_shared<AwsCredentialSource>(
      source, WebIdentity(input.ask, source, token_file, role, StsEndpoint(input.region)));
}

// The token of the sign-in `aws sso login` cached in `cache`, while it lives.
Result<std::string> CachedSsoToken(const std::string& source, const std::string& cache,
                                   const std::string& login) {
  Result<std::string> text = ReadSmallFile(*LocalStorage(), cache, 1u << 20);
  if (!text.ok()) return SourceError(source, "no sign-in cached at " + cache + ": " + login);
  const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto field = [&](const char* key) -> std::string {
    if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) return "";
    return doc[key].get<std::string>();
  };
  const std::string token = field("accessToken");
  std::string expires = field("expiresAt");
  if (expires.ends_with("UTC")) expires = expires.substr(0, expires.size() - 3) + "Z";
  const auto expiry = ParseIsoTime(expires);
  if (token.empty() || HasLineBreak(token) || !expiry) {
    return SourceError(source, cache + " is not a cached sign-in (accessToken, expiresAt)");
  }
  if (*expiry <= std::chrono::system_clock::now()) {
    return SourceError(source, "the sign-in cached at " + cache + " expired at " +
                                   Printable(field("expiresAt")) + ": " + login);
  }
  return token;
}

// The keys of the SSO portal's GetRoleCredentials answer ({"roleCredentials": {...}}).
Result<AwsCredentials> FromRoleCredentials(const std::string& source, const std::string& body) {
  const nlohmann::json reply = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object() || !reply.contains("roleCredentials") ||
      !reply["roleCredentials"].is_object()) {
    return SourceError(source, "the portal's answer has no roleCredentials");
  }
  const nlohmann::json& role = reply["roleCredentials"];
  auto text_of = [&](const char* key) -> std::string {
    if (!role.contains(key) || !role[key].is_string()) return "";
    return role[key].get<std::string>();
  };
  AwsCredentials c{text_of("accessKeyId"), text_of("secretAccessKey"), text_of("sessionToken"),
                   std::nullopt};
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return SourceError(source, "the portal's roleCredentials lack accessKeyId or secretAccessKey");
  }
  if (role.contains("expiration")) {
    if (!role["expiration"].is_number_integer()) {
      return SourceError(source, "the portal's expiration is not milliseconds since the epoch");
    }
    c.expiration = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(role["expiration"].get<int64_t>()));
  }
  return c;
}

// IAM Identity Center: the sign-in `aws sso login` cached (its file named by the SHA-1 of the
// sso-session's name, or of the legacy profile's start URL) exchanged at the SSO portal for the
// role's credentials. The cache is read again at every fetch: a new login takes effect.
Result<std::shared_ptr<AwsCredentialSource>> FromSso(const AwsChainInput& input,
                                                     const std::string& profile) {
  const std::string session = input.setting("sso_session");
  std::string region = input.setting("sso_region");
  std::string start_url = input.setting("sso_start_url");
  if (!session.empty() && input.config_setting) {
    const std::string section = "sso-session " + session;
    if (region.empty()) region = input.config_setting(section, "sso_region");
    if (start_url.empty()) start_url = input.config_setting(section, "sso_start_url");
  }
  const std::string account = input.setting("sso_account_id");
  const std::string role = input.setting("sso_role_name");
  if (account.empty() || role.empty() || region.empty()) {
    return Status::InvalidArgument(
        "AWS " + profile +
        " signs in through IAM Identity Center but lacks sso_account_id, sso_role_name or "
        "sso_region (in the profile or its sso-session section)");
  }
  HOIST_ASSIGN_OR_RETURN(const std::string digest, Sha1Hex(session.empty() ? start_url : session));
  const std::string cache = input.sso_cache_dir + "/" + digest + ".json";
  std::string portal = EnvironmentVariable("AWS_ENDPOINT_URL_SSO");
  if (portal.empty()) portal = "https://portal.sso." + region + ".amazonaws.com";
  portal = WithoutTrailingSlash(portal);
  if (portal.rfind("https://", 0) != 0 && !IsLoopbackHttpUrl(portal)) {
    return Status::InvalidArgument("the SSO portal '" + RedactUrl(portal) +
                                   "' is not https (nor http on loopback): no sign-in is sent "
                                   "there");
  }
  const std::string source = "IAM Identity Center (" + profile + ", role " + role + ")";
  const std::string login = "run `aws sso login --profile " + input.profile + "`";
  const std::string url = portal +
                          "/federation/credentials?account_id=" + PercentEncode(account, false) +
                          "&role_name=" + PercentEncode(role, false);
  auto fetch = [ask = input.ask, source, cache, login, url]() -> Result<AwsCredentials> {
    HOIST_ASSIGN_OR_RETURN(const std::string token, CachedSsoToken(source, cache, login));
    ServiceRequest request;
    request.url = url;
    request.headers = {"x-amz-sso_bearer_token: " + token};
    HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer, Ask(ask, source, request));
    return FromRoleCredentials(source, answer.body);
  };
  return std::make_shared<AwsCredentialSource>(source, fetch);
}

// The profile's keys, web identity, credential_process or IAM Identity Center sign-in; null
// when it has none of them.
Result<std::shared_ptr<AwsCredentialSource>> FromProfile(const AwsChainInput& input) {
  const std::string profile = "profile '" + input.profile + "'";
  const std::string key = input.setting("aws_access_key_id");
  const std::string secret = input.setting("aws_secret_access_key");
  if (key.empty() != secret.empty()) {
    return Status::InvalidArgument("AWS " + profile +
                                   " has only one of aws_access_key_id and "
                                   "aws_secret_access_key: S3 requests need both or neither");
  }
  if (!key.empty()) {
    return AwsCredentialSource::Fixed(
        profile, {key, secret, input.setting("aws_session_token"), std::nullopt});
  }
  const std::string role = input.setting("role_arn");
  if (const std::string token_file = input.setting("web_identity_token_file");
      !token_file.empty() && !role.empty()) {
    const std::string source = "web identity (role " + role + ", " + profile + ")";
    return std::make_shared<AwsCredentialSource>(
        source, WebIdentity(input.ask, source, token_file, role, StsEndpoint(input.region)));
  }
  if (const std::string command = input.setting("credential_process"); !command.empty()) {
    const std::string source = "the credential_process of " + profile;
    return std::make_shared<AwsCredentialSource>(source, CredentialProcess(source, command));
  }
  if (!input.setting("sso_session").empty() || !input.setting("sso_start_url").empty()) {
    return FromSso(input, profile);
  }
  // What the profile asks for and hoist does not do: said, rather than requests going
  // unsigned and refused.
  if (!role.empty()) {
    return Status::Unavailable("AWS " + profile + " assumes role " + role +
                               " from another profile, which hoist does not do: export the "
                               "role's credentials (aws configure export-credentials --profile " +
                               input.profile + " --format env) and load again");
  }
  return std::shared_ptr<AwsCredentialSource>();
}

}  // namespace

Result<std::shared_ptr<AwsCredentialSource>> FindAwsCredentials(const AwsChainInput& input) {
  using Step = Result<std::shared_ptr<AwsCredentialSource>> (*)(const AwsChainInput&);
  static constexpr Step kChain[] = {
      FromEnvironment,
      FromProfile,
      [](const AwsChainInput& in) { return Container(in.ask); },
      [](const AwsChainInput& in) { return Instance(in.ask); },
  };
  for (const Step step : kChain) {
    HOIST_ASSIGN_OR_RETURN(std::shared_ptr<AwsCredentialSource> source, step(input));
    if (!source) continue;
    // Fetched now, so that a source that refuses says so before any object is asked for.
    if (Result<AwsCredentials> first = source->Current(); !first.ok()) return first.status();
    return source;
  }
  return std::shared_ptr<AwsCredentialSource>();
}

}  // namespace hoist
