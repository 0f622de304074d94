// What the bearer-token credential sources share (Google's and Azure's): the token and its
// refresh, the checks on a token service's answer, base64. A token service's answer is
// OAuth2's (RFC 6749 section 5): {"access_token", "expires_in", ...} or {"error", ...}.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/endpoint.h"
#include "io/refreshing_credentials.h"

namespace hoist {

struct BearerToken {
  std::string access_token;  // sent as "Authorization: Bearer"
  // When it stops working; nullopt: it does not expire.
  std::optional<std::chrono::system_clock::time_point> expiration;
};

using BearerTokenSource = RefreshingCredentials<BearerToken>;

// "`service` credentials from `source`: `what`" as kIoError (service: "GCS", "Azure").
Status CredentialSourceError(std::string_view service, const std::string& source,
                             const std::string& what);

// `answer` when it is a success (2xx), else an error naming the service's URL and what it said
// (an OAuth2 error's code and description), never what the request sent.
Result<ServiceAnswer> CheckedTokenAnswer(std::string_view service, const std::string& source,
                                         const std::string& url, Result<ServiceAnswer> answer);

// The token of a token service's answer. Its life is expires_in (seconds, a number or a string
// of digits, as Azure's managed identity writes it), else expires_on (seconds since the epoch);
// neither: it does not expire. kIoError when the answer is not a token, its token holds a
// control character or its life is not from 1 s to a year.
Result<BearerToken> ParseTokenAnswer(std::string_view service, const std::string& source,
                                     const std::string& body);

// A fetch that POSTs the form `body` makes (asked at every fetch) to the token endpoint `url`
// and reads its answer as ParseTokenAnswer does; a refusal as CheckedTokenAnswer says it.
BearerTokenSource::FetchFn TokenExchange(std::string_view service, AskServiceFn ask,
                                         std::string source, std::string url,
                                         std::function<Result<std::string>()> body);

// Whether `text` holds a byte below 0x20 or 0x7f: never sent in a header.
bool HasControlCharacter(std::string_view text);

// base64url without padding (RFC 4648 section 5), as JWTs are written.
std::string Base64Url(std::string_view bytes);
// base64 with padding (RFC 4648 section 4).
std::string Base64(std::string_view bytes);
// The bytes of base64 text (padding optional); nullopt when it is not base64.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace hoist
