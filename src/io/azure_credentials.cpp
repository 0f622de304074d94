#include "io/azure_credentials.h"

#include <optional>
#include <utility>

#include "base/units.h"
#include "io/http_storage.h"
#include "io/storage.h"

namespace hoist {

namespace {

constexpr const char* kService = "Azure";
constexpr const char* kScope = "https://storage.azure.com/.default";
constexpr const char* kResource = "https://storage.azure.com/";

// Workload identity: the federated token (re-read at every fetch: the kubelet rotates it)
// exchanged at the tenant's token endpoint as a client assertion (RFC 7523).
Result<std::shared_ptr<BearerTokenSource>> WorkloadIdentity(const AzureEnvironment& e,
                                                            const AskServiceFn& ask) {
  if (e.client_id.empty() || e.tenant_id.empty()) {
    return Status::InvalidArgument(
        "AZURE_FEDERATED_TOKEN_FILE is set, so workload identity needs AZURE_CLIENT_ID and "
        "AZURE_TENANT_ID too");
  }
  if (e.tenant_id.find_first_of("/?#@ ") != std::string::npos || HasControlCharacter(e.tenant_id)) {
    return Status::InvalidArgument("AZURE_TENANT_ID '" + Printable(e.tenant_id) +
                                   "' is not a tenant's id");
  }
  std::string authority = WithoutTrailingSlash(
      e.authority_host.empty() ? "https://login.microsoftonline.com" : e.authority_host);
  if (authority.find("://") == std::string::npos) authority = "https://" + authority;
  if (authority.rfind("https://", 0) != 0 && !IsLoopbackHttpUrl(authority)) {
    return Status::InvalidArgument("AZURE_AUTHORITY_HOST '" + RedactUrl(authority) +
                                   "' is not https (nor http on loopback): no token is sent there");
  }
  const std::string url = authority + "/" + e.tenant_id + "/oauth2/v2.0/token";
  const std::string source = "workload identity (" + e.federated_token_file + ")";
  auto form = [source, file = e.federated_token_file,
               client = e.client_id]() -> Result<std::string> {
    Result<std::string> assertion = ReadSmallFile(*LocalStorage(), file, 64u << 10);
    if (!assertion.ok()) {
      return CredentialSourceError(kService, source, assertion.status().message());
    }
    while (!assertion->empty() && (assertion->back() == '\n' || assertion->back() == '\r')) {
      assertion->pop_back();
    }
    return "grant_type=client_credentials&client_id=" + PercentEncode(client, false) +
           "&client_assertion_type=" +
           PercentEncode("urn:ietf:params:oauth:client-assertion-type:jwt-bearer", false) +
           "&client_assertion=" + PercentEncode(*assertion, false) +
           "&scope=" + PercentEncode(kScope, false);
  };
  return std::make_shared<BearerTokenSource>(
      source, TokenExchange(kService, ask, source, url, std::move(form)));
}

// App Service's, Container Apps' and Functions' identity endpoint, which answers requests that
// carry its secret header.
Result<std::shared_ptr<BearerTokenSource>> IdentityEndpoint(const AzureEnvironment& e,
                                                            const AskServiceFn& ask) {
  if (e.identity_endpoint.rfind("https://", 0) != 0 &&
      e.identity_endpoint.rfind("http://", 0) != 0) {
    return Status::InvalidArgument("IDENTITY_ENDPOINT '" + RedactUrl(e.identity_endpoint) +
                                   "' is not an http(s) URL");
  }
  if (HasControlCharacter(e.identity_header)) {
    return Status::InvalidArgument("IDENTITY_HEADER holds a control character: refused");
  }
  std::string url = e.identity_endpoint +
                    (e.identity_endpoint.find('?') == std::string::npos ? "?" : "&") +
                    "api-version=2019-08-01&resource=" + PercentEncode(kResource, false);
  if (!e.client_id.empty()) url += "&client_id=" + PercentEncode(e.client_id, false);
  const std::string source = "the managed identity endpoint (IDENTITY_ENDPOINT)";
  auto fetch = [ask, url, source, secret = e.identity_header]() -> Result<BearerToken> {
    ServiceRequest request;
    request.url = url;
    request.headers = {"X-IDENTITY-HEADER: " + secret};
    request.direct = true;
    HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer,
                           CheckedTokenAnswer(kService, source, url, ask(request)));
    return ParseTokenAnswer(kService, source, answer.body);
  };
  return std::make_shared<BearerTokenSource>(source, fetch);
}

// A token from the instance metadata service; nullopt when it gives none (no VM here, or no
// identity assigned to it: the service answers 400 then).
Result<std::optional<BearerToken>> FromImds(const AskServiceFn& ask, const std::string& url,
                                            const std::string& source, double timeout_s) {
  ServiceRequest request;
  request.url = url;
  request.headers = {"Metadata: true"};
  request.timeout_s = timeout_s;
  request.direct = true;
  Result<ServiceAnswer> answer = ask(request);
  if (!answer.ok() || answer->code != 200) return std::optional<BearerToken>();
  HOIST_ASSIGN_OR_RETURN(BearerToken token, ParseTokenAnswer(kService, source, answer->body));
  return std::optional<BearerToken>(std::move(token));
}

Result<std::shared_ptr<BearerTokenSource>> Imds(const AzureEnvironment& e, const std::string& host,
                                                const AskServiceFn& ask) {
  if (host.find_first_of("/@?# ") != std::string::npos || HasControlCharacter(host)) {
    return Status::InvalidArgument("AZURE_POD_IDENTITY_AUTHORITY_HOST '" + Printable(host) +
                                   "' is not a host[:port]");
  }
  std::string url = "http://" + host +
                    "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=" +
                    PercentEncode(kResource, false);
  if (!e.client_id.empty()) url += "&client_id=" + PercentEncode(e.client_id, false);
  const std::string source = "the managed identity (" + host + ")";
  // A second, as the other metadata services are asked: a machine that is no VM finds out at
  // once.
  HOIST_ASSIGN_OR_RETURN(std::optional<BearerToken> first,
                         FromImds(ask, url, source, /*timeout_s=*/1));
  if (!first) return std::shared_ptr<BearerTokenSource>();
  auto pending = std::make_shared<std::optional<BearerToken>>(std::move(first));
  auto fetch = [ask, url, source, pending]() -> Result<BearerToken> {
    if (*pending) {  // the first fetch, made to find the service
      BearerToken t = std::move(**pending);
      pending->reset();
      return t;
    }
    HOIST_ASSIGN_OR_RETURN(std::optional<BearerToken> t,
                           FromImds(ask, url, source, /*timeout_s=*/5));
    if (!t) return CredentialSourceError(kService, source, "the service no longer gives a token");
    return std::move(*t);
  };
  return std::make_shared<BearerTokenSource>(source, fetch);
}

}  // namespace

Result<std::shared_ptr<BearerTokenSource>> FindAzureToken(const AzureEnvironment& environment,
                                                          const std::string& imds_host,
                                                          const AskServiceFn& ask) {
  std::shared_ptr<BearerTokenSource> found;
  if (!environment.federated_token_file.empty()) {
    HOIST_ASSIGN_OR_RETURN(found, WorkloadIdentity(environment, ask));
  } else if (!environment.identity_endpoint.empty() && !environment.identity_header.empty()) {
    HOIST_ASSIGN_OR_RETURN(found, IdentityEndpoint(environment, ask));
  } else if (!imds_host.empty()) {
    HOIST_ASSIGN_OR_RETURN(found, Imds(environment, imds_host, ask));
  }
  if (found) {
    // Fetched once now, so that a source that fails says so before any blob is asked for.
    if (Result<BearerToken> first = found->Current(); !first.ok()) return first.status();
  }
  return found;
}

}  // namespace hoist
