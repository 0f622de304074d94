#include "io/oauth2.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>

#include "base/units.h"
#include "io/http_storage.h"

namespace hoist {

namespace {

// A token's stated life beyond which it is taken for a lie: a year.
constexpr int64_t kLongestTokenSeconds = int64_t{365} * 24 * 3600;

std::string TokenField(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) return "";
  return doc[key].get<std::string>();
}

// Seconds as a JSON number or a string of digits; nullopt when it is neither.
std::optional<int64_t> SecondsOf(const nlohmann::json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (!value.is_string()) return std::nullopt;
  const std::string text = value.get<std::string>();
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string Encode(std::string_view bytes, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    if (rest == 2) out += alphabet[(v >> 6) & 63];
    if (pad) out.append(rest == 2 ? 1 : 2, '=');
  }
  return out;
}

}  // namespace

Status CredentialSourceError(std::string_view service, const std::string& source,
                             const std::string& what) {
  return Status::IoError(std::string(service) + " credentials from " + source + ": " + what);
}

Result<ServiceAnswer> CheckedTokenAnswer(std::string_view service, const std::string& source,
                                         const std::string& url, Result<ServiceAnswer> answer) {
  if (!answer.ok()) return CredentialSourceError(service, source, answer.status().message());
  if (answer->code >= 200 && answer->code <= 299) return answer;
  // Appended, not " " + ...: GCC 12 at -O3 warns falsely (-Wrestrict) on that.
  std::string what = RedactUrl(url) + " answered " + std::to_string(answer->code);
  if (!answer->reason.empty()) what.append(" ").append(Printable(answer->reason));
  const nlohmann::json doc = nlohmann::json::parse(answer->body, nullptr, false);
  if (const std::string error = TokenField(doc, "error"); !error.empty()) {
    what.append(": ").append(Printable(error));
    if (const std::string description = TokenField(doc, "error_description");
        !description.empty()) {
      what.append(": ").append(Printable(description));
    }
  } else if (!answer->body.empty()) {
    what.append(": ").append(Printable(answer->body, 200));
  }
  return CredentialSourceError(service, source, what);
}

Result<BearerToken> ParseTokenAnswer(std::string_view service, const std::string& source,
                                     const std::string& body) {
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  BearerToken token{TokenField(doc, "access_token"), std::nullopt};
  if (token.access_token.empty()) {
    return CredentialSourceError(service, source,
                                 "the answer is not a token (a JSON object with access_token)");
  }
  if (HasControlCharacter(token.access_token)) {
    return CredentialSourceError(service, source,
                                 "the access token holds a control character: refused");
  }
  const int64_t now = std::time(nullptr);
  std::optional<int64_t> life;
  if (doc.contains("expires_in")) {
    life = SecondsOf(doc["expires_in"]);
    if (!life) life = -1;
  } else if (doc.contains("expires_on")) {
    const std::optional<int64_t> on = SecondsOf(doc["expires_on"]);
    life = on ? *on - now : -1;
  }
  if (life) {
    if (*life <= 0 || *life > kLongestTokenSeconds) {
      const char* field = doc.contains("expires_in") ? "expires_in" : "expires_on";
      return CredentialSourceError(service, source,
                                   std::string("the token's ") + field + " '" +
                                       Printable(doc[field].dump()) +
                                       "' is not a count of seconds from 1 to a year ahead");
    }
    token.expiration = std::chrono::system_clock::now() + std::chrono::seconds(*life);
  }
  return token;
}

BearerTokenSource::FetchFn TokenExchange(std::string_view service, AskServiceFn ask,
                                         std::string source, std::string url,
                                         std::function<Result<std::string>()> body) {
  return [service = std::string(service), ask = std::move(ask), source = std::move(source),
          url = std::move(url), body = std::move(body)]() -> Result<BearerToken> {
    ServiceRequest request;
    request.method = "POST";
    request.url = url;
    HOIST_ASSIGN_OR_RETURN(request.body, body());
    HOIST_ASSIGN_OR_RETURN(const ServiceAnswer answer,
                           CheckedTokenAnswer(service, source, url, ask(request)));
    return ParseTokenAnswer(service, source, answer.body);
  };
}

bool HasControlCharacter(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

std::string Base64Url(std::string_view bytes) {
  return Encode(bytes, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", false);
}

std::string Base64(std::string_view bytes) {
  return Encode(bytes, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", true);
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    if (c >= '0' && c <= '9') v = c - '0' + 52;
    if (c == '+') v = 62;
    if (c == '/') v = 63;
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out += static_cast<char>((bits >> 16) & 0xff);
      out += static_cast<char>((bits >> 8) & 0xff);
      out += static_cast<char>(bits & 0xff);
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {
    out += static_cast<char>((bits >> 10) & 0xff);
    out += static_cast<char>((bits >> 2) & 0xff);
  } else if (count == 2) {
    out += static_cast<char>((bits >> 4) & 0xff);
  }
  return out;
}

}  // namespace hoist
