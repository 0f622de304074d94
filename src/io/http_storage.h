// Models served over HTTP(S): every read is a ranged GET, so a model loads straight from a web
// server or an object store's HTTP endpoint into the devices, without a copy on local disk.
// Built on libcurl (http_storage_curl.cpp); a build without it has http_storage_none.cpp,
// whose sources say so.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "io/endpoint.h"
#include "io/storage.h"

namespace hoist {

// Whether `name` is a URL that HttpStorage reads (http:// or https://).
bool IsHttpUrl(std::string_view name);

// `url` with any user:password@ replaced by "***@", and the values of query parameters that
// are secrets (a SAS's or a presigned URL's signature, credential and session token; an access
// token) by "***": what messages show.
std::string RedactUrl(const std::string& url);
// `text` (a message) with every URL in it redacted as RedactUrl does: what every front end
// shows of a status, so that no path a message took can carry a secret out.
std::string RedactSecrets(std::string_view text);
// Whether `url` is one RedactUrl made (scheme://***@...), and the URL without its "***@".
bool IsRedactedUrl(std::string_view url);
std::string UnredactedUrl(std::string_view url);

// Text a server sent (a reason, an ETag, a listing's name), as one printable line for a
// message: control bytes and bytes outside ASCII as \xNN, line breaks as spaces, cut after
// max_bytes with "...". A terminal shows it as it is, never as escapes.
std::string Printable(std::string_view text, size_t max_bytes = 200);

// Every byte of `text` but the unreserved ones (letters, digits, "-._~") and, with keep_slash,
// '/' as %XX: a name made safe as one path segment (or, keeping '/', as a path).
std::string PercentEncode(std::string_view text, bool keep_slash);

struct HttpOptions {
  double connect_timeout_s = 10;
  // A transfer that moves no byte for this long is given up and retried (the load's watchdog
  // names the stall first when its own timeout is shorter).
  double stall_timeout_s = 30;
  // Tries after the first, for what can pass: 5xx and 429 answers, refused or reset
  // connections, transfers cut short or stalled. 0.2 s before the first, doubling.
  int retries = 4;
  // A PEM file of certificate authorities to trust besides none (empty: the system's). TLS
  // peers are always verified.
  std::string ca_file;
  // The kind of server and its credentials (endpoint.h); null: plain HTTP(S) without any.
  std::shared_ptr<const Endpoint> endpoint;
};

// The certificate authorities' file the environment names (CURL_CA_BUNDLE, else SSL_CERT_FILE),
// or "" for the system's.
std::string CaFileFromEnvironment();

// The options the environment gives: CURL_CA_BUNDLE or SSL_CERT_FILE for ca_file,
// HOIST_HTTP_RETRIES, HOIST_HTTP_STALL_TIMEOUT; a stall_timeout_s above 0 (a load's) lowers
// the last. kInvalidArgument naming the variable when one of hoist's holds something else than
// what it takes.
Result<HttpOptions> HttpOptionsFromEnvironment(double stall_timeout_s = 0);

// A source over HTTP(S). Names are URLs, or the endpoint's (s3://, gs://); Parent and Join work
// on their paths. Open asks for the file's size and ETag (HEAD, else a one-byte GET); each read
// is one ranged GET whose ETag must match, so a file replaced while it is read is kFileChanged,
// never mixed bytes. 404 is kNotFound and 401/403 kIoError, each naming the URL and the server's
// reason; ListFiles is refused (a web server lists no directory: name the file or the index) but
// for object stores. counters() totals its requests, retries and bytes.
std::shared_ptr<Storage> MakeHttpStorage(const HttpOptions& options);

// One request to a credentials service (endpoint.h): no redirect followed, no retry, the
// whole of it within the request's timeout, the CA bundle the environment names trusted; ends
// at once on a stop signal. kIoError naming the URL when no answer came.
Result<ServiceAnswer> AskService(const ServiceRequest& request);

}  // namespace hoist
