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
#include <thread>
#include <vector>

#include "base/platform.h"
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
  std::string etag;
  std::string last_modified;
  uint64_t content_length = UINT64_MAX;
  uint64_t range_total = UINT64_MAX;  // Content-Range: bytes a-b/TOTAL
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
    const size_t second = space == std::string_view::npos ? space : line.find(' ', space + 1);
    if (second != std::string_view::npos) r->reason = Trimmed(line.substr(second + 1));
  } else if (HeaderIs(line, "etag")) {
    r->etag = Trimmed(line.substr(5));
  } else if (HeaderIs(line, "last-modified")) {
    r->last_modified = Trimmed(line.substr(14));
  } else if (HeaderIs(line, "content-length")) {
    r->content_length = Number(Trimmed(line.substr(15)));
  } else if (HeaderIs(line, "content-range")) {
    const std::string value = Trimmed(line.substr(14));
    const size_t slash = value.rfind('/');
    if (slash != std::string::npos) r->range_total = Number(value.substr(slash + 1));
  }
  return size * count;
}

// Where a GET's body goes: at most `capacity` bytes; more is the server ignoring the range.
struct Sink {
  unsigned char* dst = nullptr;
  size_t capacity = 0;
  size_t received = 0;
  bool overflowed = false;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
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

bool TransientAnswer(long code) {
  return code == 429 || code == 408 || (code >= 500 && code != 501);
}

class HttpSource;

class HttpFile final : public File {
 public:
  HttpFile(std::shared_ptr<HttpSource> source, std::string url, uint64_t size, std::string etag)
      : source_(std::move(source)), url_(std::move(url)), size_(size), etag_(std::move(etag)) {}

  const std::string& path() const override { return url_; }
  uint64_t size() const override { return size_; }
  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override;
  void Abort() override { aborted_ = true; }
  Status Advise(AccessHint /*hint*/, uint64_t /*offset*/, uint64_t /*length*/) override {
    return Status::Ok();
  }

 private:
  std::shared_ptr<HttpSource> source_;
  std::string url_;
  uint64_t size_;
  std::string etag_;  // or Last-Modified where the server gives no ETag; empty: none
  std::atomic<bool> aborted_{false};
};

class HttpSource final : public Storage, public std::enable_shared_from_this<HttpSource> {
 public:
  explicit HttpSource(HttpOptions options) : options_(std::move(options)) { InitCurlOnce(); }

  std::string description() const override { return "HTTP"; }
  StorageCapabilities capabilities() const override {
    StorageCapabilities c;
    c.random_access = true;  // ranged GETs
    c.preferred_reads_in_flight = 16;
    return c;
  }

  Result<std::unique_ptr<File>> Open(const std::string& name,
                                     const OpenOptions& /*options*/) override {
    HOIST_ASSIGN_OR_RETURN(const Response r, Probe(name));
    uint64_t size = r.range_total != UINT64_MAX ? r.range_total : r.content_length;
    if (size == UINT64_MAX) {
      return Status::IoError(RedactUrl(name) + ": the server gives no length for it");
    }
    return std::unique_ptr<File>(std::make_unique<HttpFile>(
        shared_from_this(), name, size, r.etag.empty() ? r.last_modified : r.etag));
  }

  Result<EntryType> Type(const std::string& name) override {
    if (Result<Response> r = Probe(name); !r.ok()) return r.status();
    return EntryType::kFile;
  }

  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    return Status::InvalidArgument(RedactUrl(dir) +
                                   ": an HTTP server lists no directory; name the model's "
                                   ".safetensors, .gguf or index .json file");
  }

  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override {
    const std::string url = Join(dir, file);
    if (Result<Response> r = Probe(url); !r.ok()) return r.status();
    return url;
  }

  std::string Parent(const std::string& name) const override {
    const size_t scheme = name.find("://");
    const size_t slash = name.rfind('/');
    if (scheme == std::string::npos || slash <= scheme + 2) return name;
    return name.substr(0, slash);
  }
  std::string Join(const std::string& dir, const std::string& file) const override {
    return dir.ends_with('/') ? dir + file : dir + "/" + file;
  }

  // A GET of [offset, offset + n) into dst, or with dst null a HEAD (then a one-byte GET for a
  // server that refuses HEAD). Retries what can pass; the response of the last try.
  // aborted: set, the request ends (kCancelled); may be null.
  Result<Response> Request(const std::string& url, uint64_t offset, size_t n, Sink* sink,
                           const std::atomic<bool>* aborted = nullptr);

  SourceCounters counters() const override {
    return {requests_.load(), retries_.load(), bytes_.load()};
  }

 private:
  Result<Response> Probe(const std::string& url) {
    Result<Response> head = Request(url, 0, 0, nullptr);
    if (!head.ok() || (head->code != 405 && head->code != 403 && head->code != 501)) return head;
    unsigned char byte = 0;  // HEAD refused: ask for the first byte, whose answer has the size
    Sink sink{&byte, 1};
    return Request(url, 0, 1, &sink);
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

  Response Once(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                const std::atomic<bool>* aborted, CURLcode* code);

  HttpOptions options_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> bytes_{0};
  std::mutex mutex_;
  std::vector<Handle> idle_;
};

// An answer that is an error whatever the retries: a status naming the URL.
Status AnswerError(const std::string& url, const Response& r) {
  const std::string what =
      RedactUrl(url) + ": " + std::to_string(r.code) + (r.reason.empty() ? "" : " " + r.reason);
  if (r.code == 404 || r.code == 410) return Status::NotFound(what);
  if (r.code == 401 || r.code == 403) {
    return Status::IoError(what + " (the server refused the request: check the credentials)");
  }
  return Status::IoError(what);
}

Response HttpSource::Once(CURL* h, const std::string& url, uint64_t offset, size_t n, Sink* sink,
                          const std::atomic<bool>* aborted, CURLcode* code) {
  curl_easy_reset(h);
  Response response;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout_s * 1000));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
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
  std::string auth;
  if (!options_.bearer_token.empty() && !options_.token_host.empty()) {
    // A custom Authorization header is not sent after a redirect to another host (libcurl
    // >= 7.58), so a hub's token never reaches its CDN.
    const size_t scheme = url.find("://");
    const size_t host = scheme == std::string::npos ? scheme : scheme + 3;
    if (host != std::string::npos &&
        url.substr(host, url.find('/', host) - host) == options_.token_host) {
      auth = "Authorization: Bearer " + options_.bearer_token;
      headers = curl_slist_append(headers, auth.c_str());
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  std::string range;
  if (sink == nullptr) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else {
    range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
    curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
  }
  ++requests_;
  *code = curl_easy_perform(h);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  response.code = status;
  return response;
}

namespace {

std::string Bytes(uint64_t offset, size_t n) {
  return "bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1);
}

std::string Tries(int attempt) {
  return attempt > 0 ? " after " + std::to_string(attempt + 1) + " tries" : std::string();
}

Status Stopped(const std::string& url) {
  HOIST_RETURN_IF_ERROR(StopRequested());  // a signal: its own status (exit 128 + N)
  return Status::Cancelled(RedactUrl(url) + ": the load stopped while it was read");
}

// Waits `wait` before a retry, ending early (with the reason) when the load stops.
Status Backoff(std::chrono::milliseconds wait, const std::atomic<bool>* aborted,
               const std::string& url) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (StopSignalReceived() != 0 || (aborted != nullptr && aborted->load())) return Stopped(url);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

}  // namespace

Result<Response> HttpSource::Request(const std::string& url, uint64_t offset, size_t n, Sink* sink,
                                     const std::atomic<bool>* aborted) {
  Handle h = Take();
  if (!h) return Status::IoError("libcurl could not make a handle");
  std::chrono::milliseconds wait(200);
  for (int attempt = 0;; ++attempt) {
    if (sink != nullptr) sink->received = 0;
    CURLcode code = CURLE_OK;
    const Response r = Once(h.get(), url, offset, n, sink, aborted, &code);
    if (code == CURLE_ABORTED_BY_CALLBACK || (aborted != nullptr && aborted->load())) {
      return Stopped(url);
    }
    if (sink != nullptr && sink->overflowed) {
      return Status::IoError(RedactUrl(url) + ": the server answered a request for " +
                             Bytes(offset, n) + " with more than those (it ignores byte ranges)");
    }
    const bool retry = code != CURLE_OK ? Transient(code) : TransientAnswer(r.code);
    if (retry && attempt < options_.retries) {
      ++retries_;
      HOIST_RETURN_IF_ERROR(Backoff(wait, aborted, url));
      wait *= 2;
      continue;
    }
    if (code != CURLE_OK) {
      return Status::IoError(RedactUrl(url) + ": " + curl_easy_strerror(code) +
                             (sink != nullptr ? " (" + Bytes(offset, n) + ")" : std::string()) +
                             Tries(attempt));
    }
    Give(std::move(h));
    if (r.code >= 400) {
      const Status error = AnswerError(url, r);
      return Status(error.code(), error.message() + Tries(attempt));
    }
    if (sink != nullptr) bytes_ += sink->received;
    return r;
  }
}

Result<RawRead> HttpFile::ReadSome(uint64_t offset, void* dst, size_t n) {
  if (n == 0 || offset >= size_) return RawRead{0, false};
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
  Sink sink{static_cast<unsigned char*>(dst), n};
  HOIST_ASSIGN_OR_RETURN(const Response r, source_->Request(url_, offset, n, &sink, &aborted_));
  const std::string& now = r.etag.empty() ? r.last_modified : r.etag;
  if (!etag_.empty() && !now.empty() && now != etag_) {
    return Status(Code::kFileChanged, RedactUrl(url_) + " changed while it was read (ETag was " +
                                          etag_ + ", now " + now + ")");
  }
  if (r.code == 200 && !(offset == 0 && sink.received == size_)) {
    return Status::IoError(RedactUrl(url_) + ": the server answered a request for bytes " +
                           std::to_string(offset) + "-" + std::to_string(offset + n - 1) +
                           " with the whole file (it ignores byte ranges)");
  }
  if (r.code != 200 && r.code != 206) {
    return Status::IoError(RedactUrl(url_) + ": unexpected answer " + std::to_string(r.code) +
                           " to a ranged GET");
  }
  return RawRead{sink.received, false};
}

}  // namespace

std::shared_ptr<Storage> MakeHttpStorage(const HttpOptions& options) {
  return std::make_shared<HttpSource>(options);
}

}  // namespace hoist
