#include "io/gcp_credentials.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <utility>

#include "base/units.h"
#include "io/http_storage.h"
#include "io/storage.h"

namespace hoist {

namespace {

constexpr const char* kGoogleTokenUri = "https://oauth2.googleapis.com/token";
// Google's libraries ask for an hour; the token endpoint refuses more.
constexpr int kAssertionSeconds = 3600;

Status GcpSourceError(const std::string& source, const std::string& what) {
  return CredentialSourceError("GCS", source, what);
}

std::string JsonString(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) return "";
  return doc[key].get<std::string>();
}

// Whether a token endpoint may be sent a signed assertion or a refresh token: over https, or
// over http on loopback (an emulator's or a test's).
Result<std::string> CheckedTokenUri(const std::string& path, const std::string& uri) {
  if (uri.rfind("https://", 0) == 0 || IsLoopbackHttpUrl(uri)) return uri;
  return Status::InvalidArgument(path + ": its token_uri '" + RedactUrl(uri) +
                                 "' is not https (nor http on loopback): no key is sent there");
}

// A service account's key: each fetch signs a new JWT (RFC 7523) and exchanges it.
Result<std::shared_ptr<BearerTokenSource>> ServiceAccount(const GcpChainInput& input,
                                                          const std::string& path,
                                                          const nlohmann::json& doc) {
  const std::string email = JsonString(doc, "client_email");
  const std::string key = JsonString(doc, "private_key");
  if (email.empty() || key.empty() || HasControlCharacter(email)) {
    return Status::InvalidArgument(path +
                                   ": a service_account key needs client_email and private_key");
  }
  std::string uri = JsonString(doc, "token_uri");
  HOIST_ASSIGN_OR_RETURN(const std::string token_uri,
                         CheckedTokenUri(path, uri.empty() ? kGoogleTokenUri : uri));
  const std::string source = "the service account " + email + " (" + path + ")";
  nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (const std::string id = JsonString(doc, "private_key_id"); !id.empty()) header["kid"] = id;
  auto body = [sign = input.sign, source, email, key, token_uri, scope = input.scope,
               head = Base64Url(header.dump())]() -> Result<std::string> {
    const int64_t now = std::time(nullptr);
    const nlohmann::json claims = {{"iss", email},
                                   {"scope", scope},
                                   {"aud", token_uri},
                                   {"iat", now},
                                   {"exp", now + kAssertionSeconds}};
    const std::string signed_part = head + "." + Base64Url(claims.dump());
    Result<std::string> signature = sign(key, signed_part);
    if (!signature.ok()) {
      return GcpSourceError(source, "its private_key: " + signature.status().message());
    }
    return "grant_type=" + PercentEncode("urn:ietf:params:oauth:grant-type:jwt-bearer", false) +
           "&assertion=" + signed_part + "." + Base64Url(*signature);
  };
  return std::make_shared<BearerTokenSource>(
      source, TokenExchange("GCS", input.ask, source, token_uri, std::move(body)));
}

// gcloud's user login: a refresh token exchanged for access tokens.
Result<std::shared_ptr<BearerTokenSource>> AuthorizedUser(const GcpChainInput& input,
                                                          const std::string& path,
                                                          const nlohmann::json& doc) {
  const std::string id = JsonString(doc, "client_id");
  const std::string secret = JsonString(doc, "client_secret");
  const std::string refresh = JsonString(doc, "refresh_token");
  if (id.empty() || secret.empty() || refresh.empty()) {
    return Status::InvalidArgument(
        path + ": an authorized_user needs client_id, client_secret and refresh_token");
  }
  std::string uri = JsonString(doc, "token_uri");
  HOIST_ASSIGN_OR_RETURN(const std::string token_uri,
                         CheckedTokenUri(path, uri.empty() ? kGoogleTokenUri : uri));
  const std::string source = "the authorized user of " + path;
  const std::string form = "grant_type=refresh_token&client_id=" + PercentEncode(id, false) +
                           "&client_secret=" + PercentEncode(secret, false) +
                           "&refresh_token=" + PercentEncode(refresh, false);
  return std::make_shared<BearerTokenSource>(
      source, TokenExchange("GCS", input.ask, source, token_uri,
                            [form]() -> Result<std::string> { return form; }));
}

Result<std::shared_ptr<BearerTokenSource>> FromKeyFile(const GcpChainInput& input,
                                                       const std::string& path,
                                                       const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string type = JsonString(doc, "type");
  if (type == "service_account") return ServiceAccount(input, path, doc);
  if (type == "authorized_user") return AuthorizedUser(input, path, doc);
  if (!doc.is_object()) return Status::InvalidArgument(path + ": not a JSON credentials file");
  return Status::InvalidArgument(
      path + ": credentials of type '" + Printable(type) +
      "' are not read by hoist (it reads service_account and authorized_user keys, and the "
      "metadata server's tokens)");
}

// A token from the metadata server; nullopt when none answers at all (no VM here).
Result<std::optional<BearerToken>> FromMetadata(const AskServiceFn& ask, const std::string& url,
                                                const std::string& source, double timeout_s) {
  ServiceRequest request;
  request.url = url;
  request.headers = {"Metadata-Flavor: Google"};
  request.timeout_s = timeout_s;
  request.direct = true;
  Result<ServiceAnswer> answer = ask(request);
  // No answer, or one from something else on the address: no metadata server here.
  if (!answer.ok() || answer->metadata_flavor != "Google") return std::optional<BearerToken>();
  HOIST_ASSIGN_OR_RETURN(const ServiceAnswer token,
                         CheckedTokenAnswer("GCS", source, url, std::move(answer)));
  HOIST_ASSIGN_OR_RETURN(BearerToken t, ParseTokenAnswer("GCS", source, token.body));
  return std::optional<BearerToken>(std::move(t));
}

Result<std::shared_ptr<BearerTokenSource>> Metadata(const GcpChainInput& input) {
  const std::string& host = input.metadata_host;
  if (host.find_first_of("/@?# ") != std::string::npos || HasControlCharacter(host)) {
    return Status::InvalidArgument("GCE_METADATA_HOST '" + Printable(host) +
                                   "' is not a host[:port]");
  }
  const std::string url =
      "http://" + host + "/computeMetadata/v1/instance/service-accounts/default/token";
  const std::string source = "the metadata server (" + host + ")";
  // A second, as the AWS instance metadata service is asked: a machine that is no VM finds
  // out at once.
  HOIST_ASSIGN_OR_RETURN(std::optional<BearerToken> first,
                         FromMetadata(input.ask, url, source, /*timeout_s=*/1));
  if (!first) return std::shared_ptr<BearerTokenSource>();
  auto pending = std::make_shared<std::optional<BearerToken>>(std::move(first));
  auto fetch = [ask = input.ask, url, source, pending]() -> Result<BearerToken> {
    if (*pending) {  // the first fetch, made to find the server
      BearerToken t = std::move(**pending);
      pending->reset();
      return t;
    }
    HOIST_ASSIGN_OR_RETURN(std::optional<BearerToken> t,
                           FromMetadata(ask, url, source, /*timeout_s=*/5));
    if (!t) return GcpSourceError(source, url + " no longer answers");
    return std::move(*t);
  };
  return std::make_shared<BearerTokenSource>(source, fetch);
}

}  // namespace

Result<std::shared_ptr<BearerTokenSource>> FindGcpCredentials(const GcpChainInput& input) {
  std::shared_ptr<BearerTokenSource> found;
  if (!input.key_file.empty()) {
    Result<std::string> text = ReadSmallFile(*LocalStorage(), input.key_file, 1u << 20);
    if (!text.ok()) {
      return Status(text.status().code(),
                    "GOOGLE_APPLICATION_CREDENTIALS: " + text.status().message());
    }
    HOIST_ASSIGN_OR_RETURN(found, FromKeyFile(input, input.key_file, *text));
  } else if (Result<std::string> text =
                 input.well_known_file.empty()
                     ? Result<std::string>(Status::NotFound(""))
                     : ReadSmallFile(*LocalStorage(), input.well_known_file, 1u << 20);
             text.ok()) {
    HOIST_ASSIGN_OR_RETURN(found, FromKeyFile(input, input.well_known_file, *text));
  } else if (!input.metadata_host.empty()) {
    HOIST_ASSIGN_OR_RETURN(found, Metadata(input));
  }
  if (found) {
    // Fetched once now, so that a source that fails says so before any object is asked for.
    if (Result<BearerToken> first = found->Current(); !first.ok()) return first.status();
  }
  return found;
}

}  // namespace hoist
