// HttpStorage on libcurl's easy interface: each reader thread's read is one blocking ranged
// GET on a handle taken from the source's pool, so the load's readers are the requests in
// flight and every handle keeps its connection alive for the next.
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/platform.h"
#include "base/stall.h"
#include "io/http_storage.h"

namespace hoist {
namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// What one response said, headers of the last hop (redirects reset it).
struct Response {
  long code = 0;
  std::string reason;
  std::string error_body;  // the start of an error answer's body (an S3 error document)
  std::string etag;
  std::string last_modified;
  std::string metadata_flavor;
  // A hub's redirect to the server that holds a file (the Hugging Face hub's to its CDN) says
  // which file it is: X-Linked-Etag (its content's hash) and X-Linked-Size. Follow keeps them
  // from the first origin's redirect on the final answer.
  std::string linked_etag;
  uint64_t linked_size = UINT64_MAX;
  uint64_t content_length = UINT64_MAX;
  // Content-Range: bytes FIRST-LAST/TOTAL
  uint64_t range_first = UINT64_MAX;
  uint64_t range_last = UINT64_MAX;
  uint64_t range_total = UINT64_MAX;
};

std::string Trimmed(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == '\r' || text[end - 1] == '\n' || text[end - 1] == ' ')) {
    --end;
  }
  return std::string(text.substr(begin, end - begin));
}

bool HeaderIs(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

uint64_t Number(std::string_view text) {
  uint64_t value = 0;
  size_t digits = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || digits == 19) break;
    value = value * 10 + static_cast<uint64_t>(c - '0');
    ++digits;
  }
  return digits == 0 ? UINT64_MAX : value;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string_view line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or a 100)
    *r = Response{};
    const size_t space = line.find(' ');
    if (space != std::string_view::npos)
      r->code = static_cast<long>(Number(line.substr(space + 1)));
    const size_t second = space == std::string_view::npos ? space : line.find(' ', space + 1);
    if (second != std::string_view::npos) r->reason = Trimmed(line.substr(second + 1));
  } else if (HeaderIs(line, "etag")) {
    r->etag = Trimmed(line.substr(5));
  } else if (HeaderIs(line, "last-modified")) {
    r->last_modified = Trimmed(line.substr(14));
  } else if (HeaderIs(line, "x-linked-etag")) {
    r->linked_etag = Trimmed(line.substr(14));
  } else if (HeaderIs(line, "x-linked-size")) {
    r->linked_size = Number(Trimmed(line.substr(14)));
  } else if (HeaderIs(line, "metadata-flavor")) {
    r->metadata_flavor = Trimmed(line.substr(16));
  } else if (HeaderIs(line, "content-length")) {
    r->content_length = Number(Trimmed(line.substr(15)));
  } else if (HeaderIs(line, "content-range")) {
    const std::string value = Trimmed(line.substr(14));
    const size_t slash = value.rfind('/');
    if (slash != std::string::npos) r->range_total = Number(value.substr(slash + 1));
    if (value.rfind("bytes ", 0) == 0) {
      const size_t dash = value.find('-');
      r->range_first = Number(std::string_view(value).substr(6));
      if (dash != std::string::npos)
        r->range_last = Number(std::string_view(value).substr(dash + 1));
    }
  }
  return size * count;
}

// Where a GET's body goes: at most `capacity` bytes into dst (more is the server ignoring the
// range), or with `text` set all of it there (a listing, at most kMaxText). An error answer's
// body goes to its Response instead.
struct Sink {
  unsigned char* dst = nullptr;
  size_t capacity = 0;
  size_t received = 0;
  bool overflowed = false;
  std::string* text = nullptr;
  Response* response = nullptr;  // set by the request
};

constexpr size_t kMaxText = size_t{16} << 20;
// A model's prefix holds a few files: a listing longer than a million objects is not one.
constexpr int kMaxListPages = 1000;
constexpr size_t kMaxErrorBody = size_t{16} << 10;

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->response != nullptr && sink->response->code >= 300) {
    std::string& body = sink->response->error_body;
    body.append(data, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, body.size())));
    return n;
  }
  if (sink->text != nullptr) {
    if (n > kMaxText - sink->text->size()) {
      sink->overflowed = true;
      return 0;
    }
    sink->text->append(data, n);
    sink->received += n;
    return n;
  }
  if (n > sink->capacity - sink->received) {
    sink->overflowed = true;
    return 0;  // aborts the transfer
  }
  std::memcpy(sink->dst + sink->received, data, n);
  sink->received += n;
  return n;
}

// SIGINT/SIGTERM, or the file's Abort, end a transfer at once. user: the file's flag, or null.
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* aborted = static_cast<const std::atomic<bool>*>(user);
  return StopSignalReceived() != 0 || (aborted != nullptr && aborted->load()) ? 1 : 0;
}

struct HandleDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
using Handle = std::unique_ptr<CURL, HandleDeleter>;

bool Transient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

// A key's part under a listed prefix: names an object there (no empty, "." or ".." part, so no
// server or client that normalises paths reads another object for it).
bool IsPlainKeyTail(std::string_view tail) {
  size_t begin = 0;
  for (;;) {
    const size_t slash = tail.find('/', begin);
    const std::string_view part = tail.substr(begin, slash - begin);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    begin = slash + 1;
  }
}

bool TransientAnswer(long code) {
  return code == 429 || code == 408 || (code >= 500 && code != 501);
}

// Which of an answer's headers says what version of a file it holds.
enum class VersionHeader {
  kLinkedEtag,    // a hub's redirect's X-Linked-Etag, which every answer must carry
  kEtag,          // the answer's ETag, which every answer must carry
  kLastModified,  // where a server gives no ETag
};

VersionHeader VersionHeaderOf(const Response& r) {
  if (!r.linked_etag.empty()) return VersionHeader::kLinkedEtag;
  return r.etag.empty() ? VersionHeader::kLastModified : VersionHeader::kEtag;
}

const std::string& VersionIn(const Response& r, VersionHeader header) {
  switch (header) {
    case VersionHeader::kLinkedEtag:
      return r.linked_etag;
    case VersionHeader::kEtag:
      return r.etag;
    case VersionHeader::kLastModified:
      break;
  }
  return r.last_modified;
}

class HttpSource;

class HttpFile final : public File {
 public:
  HttpFile(std::shared_ptr<HttpSource> source, std::string name, std::string url, uint64_t size,
           const Response& opened)
      : source_(std::move(source)),
        name_(std::move(name)),
        url_(std::move(url)),
        size_(size),
        version_header_(VersionHeaderOf(opened)),
        etag_(VersionIn(opened, version_header_)) {}

  const std::string& path() const override { return name_; }
  uint64_t size() const override { return size_; }
  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override;
  void Abort() override { aborted_ = true; }
  // Its size and version as its open saw them: a load that opens it again refuses another.
  FileIdentity identity() const override {
    FileIdentity id;
    id.known = true;
    id.size = size_;
    id.version = etag_;
    return id;
  }
  Status Advise(AccessHint /*hint*/, uint64_t /*offset*/, uint64_t /*length*/) override {
    return Status::Ok();
  }

 private:
  std::shared_ptr<HttpSource> source_;
  std::string name_;  // what the caller named: a URL, or the endpoint's name (s3://, gs://)
  std::string url_;   // what is fetched
  uint64_t size_;
  VersionHeader version_header_;
  std::string etag_;  // the version as version_header_ gave it at open; empty: none
  std::atomic<bool> aborted_{false};
};

class HttpSource final : public Storage, public std::enable_shared_from_this<HttpSource> {
 public:
  explicit HttpSource(HttpOptions options)
      : options_(std::move(options)),
        endpoint_(options_.endpoint ? options_.endpoint : MakePlainEndpoint()) {
    InitCurlOnce();
  }

  std::string description() const override { return endpoint_->description(); }
  StorageCapabilities capabilities() const override {
    StorageCapabilities c;
    c.random_access = true;  // ranged GETs
    c.preferred_reads_in_flight = 16;
    return c;
  }

  Result<std::unique_ptr<File>> Open(const std::string& name,
                                     const OpenOptions& /*options*/) override {
    HOIST_ASSIGN_OR_RETURN(const std::string url, UrlOf(name));
    HOIST_ASSIGN_OR_RETURN(const Response r, Probe(name, url));
    uint64_t size = r.range_total != UINT64_MAX ? r.range_total : r.content_length;
    if (size == UINT64_MAX) {
      return Status::IoError(RedactUrl(name) + ": the server gives no length for it");
    }
    if (r.linked_size != UINT64_MAX && r.linked_size != size) {
      return Status::IoError(RedactUrl(name) + ": the redirect says the file holds " +
                             std::to_string(r.linked_size) +
                             " bytes (X-Linked-Size), the server it leads to serves " +
                             std::to_string(size) + ": refused");
    }
    return std::unique_ptr<File>(
        std::make_unique<HttpFile>(shared_from_this(), name, url, size, r));
  }

  Result<EntryType> Type(const std::string& name) override {
    HOIST_ASSIGN_OR_RETURN(const std::string url, UrlOf(name));
    if (!endpoint_->lists() || !endpoint_->IsPrefixOnly(name)) {
      Result<Response> r = Probe(name, url);
      if (r.ok()) return EntryType::kFile;
      if (r.status().code() != Code::kNotFound || !endpoint_->lists()) return r.status();
    }
    // Object stores have no directories: a prefix with anything under it is one.
    HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> files, List(name, /*any=*/true));
    if (files.empty()) return Status::NotFound(name + ": no such object, nor objects under it");
    return EntryType::kDirectory;
  }

  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    if (!endpoint_->lists()) {
      return Status::InvalidArgument(RedactUrl(dir) +
                                     ": an HTTP server lists no directory; name the model's "
                                     ".safetensors, .gguf or index .json file");
    }
    return List(dir, /*any=*/false);
  }

  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override {
    const std::string name = Join(dir, file);
    HOIST_ASSIGN_OR_RETURN(const std::string url, UrlOf(name));
    if (Result<Response> r = Probe(name, url); !r.ok()) return r.status();
    return name;
  }

  std::string Parent(const std::string& name) const override {
    const size_t scheme = name.find("://");
    const size_t slash = name.rfind('/');
    if (scheme == std::string::npos || slash <= scheme + 2) return name;
    return name.substr(0, slash);
  }
  std::string Join(const std::string& dir, const std::string& file) const override {
    return endpoint_->Join(dir, file);
  }

  // A GET of [offset, offset + n) into sink, or with sink null a HEAD (Probe turns a refused
  // HEAD into a one-byte GET). `name` is what messages show, `url` what is fetched. Retries
  // what can pass; the response of the last try. aborted: set, the request ends (kCancelled);
  // may be null.
  Result<Response> Request(const std::string& name, const std::string& url, uint64_t offset,
                           size_t n, Sink* sink, const std::atomic<bool>* aborted = nullptr);

  SourceCounters counters() const override {
    return {requests_.load(), retries_.load(), bytes_.load()};
  }

 private:
  Result<std::string> UrlOf(const std::string& name) const { return endpoint_->UrlOf(name); }

  // What `request`, for `name`, sends to authorise itself, now.
  Result<RequestAuth> AuthorizationFor(const std::string& name,
                                       const OutgoingRequest& request) const {
    Result<RequestAuth> auth = endpoint_->Authorize(request);
    if (!auth.ok()) {
      return Status(auth.status().code(), RedactUrl(name) + ": " + auth.status().message());
    }
    return auth;
  }

  Result<Response> Probe(const std::string& name, const std::string& url) {
    if (endpoint_->answers_head()) {
      Result<Response> head = Request(name, url, 0, 0, nullptr);
      if (!head.ok() || (head->code != 405 && head->code != 403 && head->code != 501)) return head;
    }
    unsigned char byte = 0;  // HEAD refused: ask for the first byte, whose answer has the size
    Sink sink{&byte, 1};
    return Request(name, url, 0, 1, &sink);
  }

  // The objects directly under the prefix `dir` (as names, sorted); with `any`, stops at the
  // first page that shows anything, objects or deeper prefixes.
  Result<std::vector<std::string>> List(const std::string& dir, bool any) {
    HOIST_ASSIGN_OR_RETURN(const std::string prefix, endpoint_->PrefixKey(dir));
    std::vector<std::string> names;
    std::string token;
    for (int page = 0; page < kMaxListPages; ++page) {
      std::string text;
      Sink sink;
      sink.text = &text;
      HOIST_ASSIGN_OR_RETURN(const std::string url, endpoint_->ListUrl(dir, prefix, token));
      if (Result<Response> r = Request(dir, url, 0, 0, &sink); !r.ok()) return r.status();
      Result<ObjectListing> listing = endpoint_->ParseListing(text);
      if (!listing.ok()) return Status::IoError(dir + ": " + listing.status().message());
      for (const std::string& key : listing->keys) {
        if (key.size() <= prefix.size()) continue;
        if (key.compare(0, prefix.size(), prefix) != 0 ||
            !IsPlainKeyTail(key.substr(prefix.size()))) {
          return Status::IoError(RedactUrl(dir) + ": the listing names the object '" +
                                 Printable(key) +
                                 "', which does not lie plainly under the prefix (an empty, '.' or "
                                 "'..' part, or another prefix): refused");
        }
        names.push_back(Join(dir, key.substr(prefix.size())));
      }
      if (any && (!names.empty() || !listing->prefixes.empty())) {
        if (names.empty()) names.push_back(Join(dir, listing->prefixes.front()));
        return Sorted(std::move(names));
      }
      if (listing->next_token.empty()) return Sorted(std::move(names));
      if (listing->next_token == token) {
        return Status::IoError(RedactUrl(dir) +
                               ": the listing gives the same continuation token twice: refused");
      }
      token = listing->next_token;
    }
    return Status::IoError(RedactUrl(dir) + ": the listing goes on past " +
                           std::to_string(kMaxListPages) + " pages: refused");
  }

  static std::vector<std::string> Sorted(std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    return names;
  }

  Handle Take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        Handle h = std::move(idle_.back());
        idle_.pop_back();
        return h;
      }
    }
    return Handle(curl_easy_init());
  }
  void Give(Handle h) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(h));
  }

  // The last try's answer: the request's error when it is one, else counted and given back.
  Result<Response> Answered(const std::string& name, const Response& r, const Sink* sink,
                            int attempt);
  // One request to url, no redirect followed; auth: what it sends to authorise itself, or null.
  Response Once(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                const std::atomic<bool>* aborted, const RequestAuth* auth, CURLcode* code);
  // Once, following redirects by hand: auth goes to the first URL's origin only, so no token,
  // key or password reaches another host.
  Response Follow(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                  const std::atomic<bool>* aborted, const RequestAuth& auth, CURLcode* code,
                  std::string* refused);

  const HttpOptions options_;
  const std::shared_ptr<const Endpoint> endpoint_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> bytes_{0};
  std::mutex mutex_;
  std::vector<Handle> idle_;
};

// What a server that ignores ranges is told to be instead.
constexpr const char* kRangeServers =
    "; serve the model with one that answers Range requests (nginx, Apache, caddy, or "
    "`npx http-server`; Python's http.server does not)";

// An answer that is an error whatever the retries: a status naming the file and the server's
// reason, with `summary` the one its body gives (an S3 error document's, say).
// credentials: where the request's credentials came from, for a refusal's message.
Status AnswerError(const std::string& name, const Response& r, const std::string& summary,
                   const std::string& credentials) {
  std::string what = RedactUrl(name) + ": " + std::to_string(r.code) +
                     (r.reason.empty() ? "" : " " + Printable(r.reason));
  if (!summary.empty()) what += ": " + Printable(summary);
  // A directory's URL: servers refuse (403) or miss (404) it, whatever the credentials.
  if ((r.code == 403 || r.code == 404) && name.ends_with("/")) {
    what += " (a directory's URL: name the model's file, or the .index.json of a sharded model)";
    return r.code == 404 ? Status::NotFound(what) : Status::IoError(what);
  }
  if (r.code == 404 || r.code == 410) return Status::NotFound(what);
  if (r.code == 401 || r.code == 403) {
    return Status::IoError(what + " (the server refused the request: check the credentials" +
                           (credentials.empty() ? "" : ", " + credentials) + ")");
  }
  return Status::IoError(what);
}

Response HttpSource::Once(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                          const std::atomic<bool>* aborted, const RequestAuth* auth,
                          CURLcode* code) {
  curl_easy_reset(h);
  Response response;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // The path as it was built (percent-encoded), never normalised: "a/../b" names that object.
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout_s * 1000));
  // Below 1 KiB/s for the stall timeout is a stall: a server that drips bytes is one too.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(options_.stall_timeout_s)));
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, aborted);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "hoist");
  // Larger receive buffers: fewer callbacks and copies per 4 MiB range (the default is 16 KiB).
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L << 10);
  if (!options_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_slist* headers = nullptr;
  if (auth != nullptr) {
    if (!auth->basic.empty()) curl_easy_setopt(h, CURLOPT_USERPWD, auth->basic.c_str());
    if (!auth->sigv4_provider.empty()) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, auth->sigv4_provider.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, auth->sigv4_key_id.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, auth->sigv4_secret.c_str());
    }
    for (const std::string& header : auth->headers) {
      headers = curl_slist_append(headers, header.c_str());
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  std::string range;
  Sink error_sink;  // a HEAD's error answer has no body, but a redirect's may
  Sink* body = sink != nullptr ? sink : &error_sink;
  body->response = &response;
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
  if (sink == nullptr) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (sink->text == nullptr) {
    range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
    curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
  }
  ++requests_;
  *code = curl_easy_perform(h);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  response.code = status;
  body->response = nullptr;
  return response;
}

namespace {

bool IsRedirect(long code) {
  return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

// Where the redirect just received leads, or "" (with *refused saying why, when it is
// refused): only to http(s), at most 10 hops.
std::string RedirectLocation(CURL* h, int hop, std::string* refused) {
  char* next = nullptr;
  curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &next);
  if (next == nullptr) return "";
  std::string location = next;
  if (location.rfind("http://", 0) != 0 && location.rfind("https://", 0) != 0) {
    *refused = "a redirect to a URL that is not http(s)";
    return "";
  }
  if (hop == 10) {
    *refused = "more than 10 redirects";
    return "";
  }
  return location;
}

}  // namespace

Response HttpSource::Follow(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                            const std::atomic<bool>* aborted, const RequestAuth& auth,
                            CURLcode* code, std::string* refused) {
  const std::string origin = UrlOrigin(url);
  std::string target = url;
  bool credentials = true;
  std::string linked_etag;  // from the first origin's redirects only
  uint64_t linked_size = UINT64_MAX;
  for (int hop = 0;; ++hop) {
    Response r = Once(h, target, offset, n, sink, aborted, credentials ? &auth : nullptr, code);
    const bool redirect = IsRedirect(r.code);
    if (credentials && redirect && !r.linked_etag.empty()) {
      linked_etag = r.linked_etag;
      linked_size = r.linked_size;
    }
    if (*code != CURLE_OK || !redirect) {
      if (hop > 0) {  // the last hop's own X-Linked headers, if any, are not the hub's
        r.linked_etag = linked_etag;
        r.linked_size = linked_size;
      }
      return r;
    }
    const std::string location = RedirectLocation(h, hop, refused);
    if (location.empty()) return r;
    credentials = credentials && UrlOrigin(location) == origin;
    target = location;
    if (sink != nullptr) {
      sink->received = 0;
      if (sink->text != nullptr) sink->text->clear();
    }
  }
}

namespace {

std::string Bytes(uint64_t offset, size_t n) {
  return "bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1);
}

std::string Tries(int attempt) {
  return attempt > 0 ? " after " + std::to_string(attempt + 1) + " tries" : std::string();
}

Status Stopped(const std::string& name) {
  HOIST_RETURN_IF_ERROR(StopRequested());  // a signal: its own status (exit 128 + N)
  return Status::Cancelled(RedactUrl(name) + ": the load stopped while it was read");
}

// Waits `wait` before a retry, ending early (with the reason) when the load stops.
Status Backoff(std::chrono::milliseconds wait, const std::atomic<bool>* aborted,
               const std::string& name) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (StopSignalReceived() != 0 || (aborted != nullptr && aborted->load())) return Stopped(name);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

// A sink that got more than it holds: a ranged read's server ignored the range.
Status OverflowError(const std::string& name, bool ranged, uint64_t offset, size_t n) {
  if (!ranged) return Status::IoError(RedactUrl(name) + ": the answer is too large");
  return Status::IoError(RedactUrl(name) + ": the server answered a request for " +
                         Bytes(offset, n) + " with more than those (it ignores byte ranges)" +
                         kRangeServers);
}

// What a try got that no retry mends: a redirect refused, an answer larger than asked for.
Status Unmendable(const std::string& name, const std::string& refused, const Sink* sink,
                  bool ranged, uint64_t offset, size_t n) {
  if (!refused.empty()) return Status::IoError(RedactUrl(name) + ": " + refused + ": refused");
  if (sink != nullptr && sink->overflowed) return OverflowError(name, ranged, offset, n);
  return Status::Ok();
}

// Empties a sink for another try.
void ResetSink(Sink* sink) {
  if (sink == nullptr) return;
  sink->received = 0;
  if (sink->text != nullptr) sink->text->clear();
}

// A transfer that failed for good (code not OK) after `attempt` retries: a stall when it moved
// under 1 KiB/s for the stall timeout, else curl's reason.
Status TransferError(const std::string& name, CURLcode code, double stall_timeout_s, bool ranged,
                     uint64_t offset, size_t n, int attempt) {
  if (code == CURLE_OPERATION_TIMEDOUT) {
    return Status::Stalled(RedactUrl(name) + ": no progress for " + StallSeconds(stall_timeout_s) +
                           " (under 1 KiB/s)" +
                           (ranged ? " reading " + Bytes(offset, n) : std::string()) +
                           Tries(attempt));
  }
  return Status::IoError(RedactUrl(name) + ": " + curl_easy_strerror(code) +
                         (ranged ? " (" + Bytes(offset, n) + ")" : std::string()) + Tries(attempt));
}

}  // namespace

Result<Response> HttpSource::Request(const std::string& name, const std::string& url,
                                     uint64_t offset, size_t n, Sink* sink,
                                     const std::atomic<bool>* aborted) {
  Handle h = Take();
  if (!h) return Status::IoError("libcurl could not make a handle");
  std::chrono::milliseconds wait(200);
  const bool ranged = sink != nullptr && sink->text == nullptr;
  // Tries go on for the stall timeout at most: a server that stalls every try (a HEAD that
  // never answers, a header dripped a byte a second) ends the request then, not after every
  // retry's own timeout.
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(options_.stall_timeout_s));
  // As Once sends it: a HEAD without a sink, a GET of the range into a sink of bytes.
  const OutgoingRequest request{
      sink == nullptr ? "HEAD" : "GET", url,
      ranged ? "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1) : ""};
  for (int attempt = 0;; ++attempt) {
    ResetSink(sink);
    // Asked at every try: credentials that expire are fetched again before they do.
    HOIST_ASSIGN_OR_RETURN(const RequestAuth auth, AuthorizationFor(name, request));
    CURLcode code = CURLE_OK;
    std::string refused;
    const Response r = Follow(h.get(), url, offset, n, sink, aborted, auth, &code, &refused);
    if (code == CURLE_ABORTED_BY_CALLBACK || (aborted != nullptr && aborted->load())) {
      return Stopped(name);
    }
    HOIST_RETURN_IF_ERROR(Unmendable(name, refused, sink, ranged, offset, n));
    const bool retry = code != CURLE_OK ? Transient(code) : TransientAnswer(r.code);
    if (retry && attempt < options_.retries && std::chrono::steady_clock::now() + wait < give_up) {
      ++retries_;
      HOIST_RETURN_IF_ERROR(Backoff(wait, aborted, name));
      wait *= 2;
      continue;
    }
    if (code != CURLE_OK) {
      return TransferError(name, code, options_.stall_timeout_s, ranged, offset, n, attempt);
    }
    Give(std::move(h));
    return Answered(name, r, sink, attempt);
  }
}

Result<Response> HttpSource::Answered(const std::string& name, const Response& r, const Sink* sink,
                                      int attempt) {
  // A refused HEAD comes back as an answer: Probe asks again with a GET.
  const bool head_refused = sink == nullptr && (r.code == 405 || r.code == 403 || r.code == 501);
  if (r.code >= 400 && !head_refused) {
    const Status error =
        AnswerError(name, r, endpoint_->ErrorSummary(r.error_body), endpoint_->CredentialsOrigin());
    return Status(error.code(), error.message() + Tries(attempt));
  }
  if (sink != nullptr) bytes_ += sink->received;
  return r;
}

Result<RawRead> HttpFile::ReadSome(uint64_t offset, void* dst, size_t n) {
  if (n == 0 || offset >= size_) return RawRead{0, false};
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  Sink sink{static_cast<unsigned char*>(dst), n};
  HOIST_ASSIGN_OR_RETURN(const Response r,
                         source_->Request(name_, url_, offset, n, &sink, &aborted_));
  const std::string asked =
      "bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1);
  // Every answer must be of the version the file was opened at: one without a version, or of
  // another, could be other bytes.
  const std::string& now = VersionIn(r, version_header_);
  if (!etag_.empty() && now != etag_) {
    return Status(
        Code::kFileChanged,
        RedactUrl(name_) +
            (now.empty() ? " answered a request for " + asked +
                               " without the version it had when opened (" + Printable(etag_) + ")"
                         : " changed while it was read (ETag was " + Printable(etag_) + ", now " +
                               Printable(now) + ")"));
  }
  if (r.code == 200 && !(offset == 0 && sink.received == size_)) {
    return Status::IoError(RedactUrl(name_) + ": the server answered a request for " + asked +
                           " with the whole file (it ignores byte ranges)" + kRangeServers);
  }
  if (r.code == 206) {
    // The bytes the answer says it holds must be the ones asked for, of a file of the size seen
    // at open.
    const bool same = r.range_first == offset && sink.received > 0 &&
                      r.range_last == offset + sink.received - 1 &&
                      (r.range_total == size_ || r.range_total == UINT64_MAX);
    if (!same) {
      const auto shown = [](uint64_t v) {
        return v == UINT64_MAX ? std::string("?") : std::to_string(v);
      };
      return Status::IoError(RedactUrl(name_) + ": the server answered a request for " + asked +
                             " of " + std::to_string(size_) + " with bytes " +
                             shown(r.range_first) + "-" + shown(r.range_last) + " of " +
                             shown(r.range_total) + " (" + std::to_string(sink.received) +
                             " received): refused");
    }
  } else if (r.code != 200) {
    return Status::IoError(RedactUrl(name_) + ": unexpected answer " + std::to_string(r.code) +
                           " to a ranged GET");
  }
  return RawRead{sink.received, false};
}

}  // namespace

std::shared_ptr<Storage> MakeHttpStorage(const HttpOptions& options) {
  return std::make_shared<HttpSource>(options);
}

namespace {

size_t OnServiceBody(char* data, size_t size, size_t count, void* user) {
  constexpr size_t kMostBytes = size_t{1} << 20;
  auto* body = static_cast<std::string*>(user);
  const size_t n = size * count;
  if (n > kMostBytes - body->size()) return 0;  // aborts: no credentials answer is this long
  body->append(data, n);
  return n;
}

}  // namespace

Result<ServiceAnswer> AskService(const ServiceRequest& request) {
  InitCurlOnce();
  const Handle h(curl_easy_init());
  if (!h) return Status::IoError("libcurl could not make a handle");
  ServiceAnswer answer;
  Response response;
  CURL* c = h.get();
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  const auto ms = static_cast<long>(request.timeout_s * 1000);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, nullptr);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnServiceBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "hoist");
  if (request.direct) curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  const std::string ca_file = CaFileFromEnvironment();
  if (!ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca_file.c_str());
  curl_slist* headers = nullptr;
  for (const std::string& header : request.headers) {
    headers = curl_slist_append(headers, header.c_str());
  }
  if (request.method != "GET") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  const CURLcode code = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (code == CURLE_ABORTED_BY_CALLBACK) {
    HOIST_RETURN_IF_ERROR(StopRequested());
  }
  if (code != CURLE_OK) {
    return Status::IoError(RedactUrl(request.url) + ": " + curl_easy_strerror(code));
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &answer.code);
  answer.reason = response.reason;
  answer.metadata_flavor = response.metadata_flavor;
  return answer;
}

}  // namespace hoist
