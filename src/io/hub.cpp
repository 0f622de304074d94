#include "io/hub.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/platform.h"
#include "base/units.h"
#include "io/http_storage.h"

namespace hoist {
namespace {

bool IsCommit(std::string_view revision) {
  return revision.size() == 40 && std::all_of(revision.begin(), revision.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsAsciiAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A repo name's half: a letter or digit, then letters, digits, '_', '.' and '-'.
bool IsRepoPart(std::string_view part) {
  return !part.empty() && IsAsciiAlnum(part[0]) &&
         std::all_of(part.begin(), part.end(),
                     [](char c) { return IsAsciiAlnum(c) || c == '_' || c == '.' || c == '-'; });
}

// A branch, tag or commit: parts of letters, digits, '_', '.' and '-' joined by '/' (as
// "refs/pr/1"), none empty, "." or "..": it becomes a path in the cache and a URL's segment.
bool IsRevision(std::string_view revision) {
  size_t begin = 0;
  for (;;) {
    const size_t slash = revision.find('/', begin);
    const std::string_view part = revision.substr(begin, slash - begin);
    if (part.empty() || part == "." || part == ".." ||
        !std::all_of(part.begin(), part.end(),
                     [](char c) { return IsAsciiAlnum(c) || c == '_' || c == '.' || c == '-'; })) {
      return false;
    }
    if (slash == std::string_view::npos) return true;
    begin = slash + 1;
  }
}

// huggingface_hub's reading of HF_HUB_OFFLINE: 1, on, yes or true in any case; anything else
// (unset, 0, a typo) is online, as the hub's own tools take it.
bool HubOffline() {
  constexpr std::string_view kOn[] = {"1", "on", "yes", "true"};
  const std::string value = EnvironmentVariable("HF_HUB_OFFLINE");
  return std::any_of(std::begin(kOn), std::end(kOn),
                     [&](std::string_view on) { return EqualsIgnoreCase(value, on); });
}

}  // namespace

bool IsHubRepoId(std::string_view name) {
  const size_t slash = name.find('/');
  return slash != std::string_view::npos && IsRepoPart(name.substr(0, slash)) &&
         IsRepoPart(name.substr(slash + 1));
}

Result<std::optional<HubName>> ParseHubName(std::string_view name) {
  if (name.rfind("hf://", 0) != 0) return std::optional<HubName>();
  const std::string_view rest = name.substr(5);
  const size_t at = rest.find('@');
  const std::string_view repo = rest.substr(0, at);
  if (!IsHubRepoId(repo) || (at != std::string_view::npos && !IsRevision(rest.substr(at + 1)))) {
    return Status::InvalidArgument(std::string(name) +
                                   ": not a Hugging Face repo id (hf://ORG/NAME[@REVISION])");
  }
  HubName hub;
  hub.repo = std::string(repo);
  if (at != std::string_view::npos) hub.revision = std::string(rest.substr(at + 1));
  return std::optional<HubName>(hub);
}

std::string HubCacheDir() {
  if (std::string cache = EnvironmentVariable("HF_HUB_CACHE"); !cache.empty()) return cache;
  if (std::string home = EnvironmentVariable("HF_HOME"); !home.empty()) return home + "/hub";
  const std::string home = EnvironmentVariable("HOME");
  return home.empty() ? std::string() : home + "/.cache/huggingface/hub";
}

std::string CachedSnapshot(Storage& local, const std::string& repo, const std::string& revision) {
  const std::string cache = HubCacheDir();
  const size_t slash = repo.find('/');
  if (cache.empty() || slash == std::string::npos) return "";
  // The cache's layout: models--ORG--NAME/refs/REVISION holds the commit whose snapshot is
  // models--ORG--NAME/snapshots/COMMIT/.
  const std::string dir =
      cache + "/models--" + repo.substr(0, slash) + "--" + repo.substr(slash + 1);
  std::string commit = revision;
  if (!IsCommit(revision)) {
    Result<std::string> ref = ReadSmallFile(local, dir + "/refs/" + revision);
    if (!ref.ok()) return "";
    commit = *ref;
    commit.erase(commit.find_last_not_of(" \n\r\t") + 1);
    // A ref holds a commit id; anything else (a path, say) is not followed.
    if (!IsCommit(commit)) return "";
  }
  const std::string snapshot = dir + "/snapshots/" + commit;
  Result<EntryType> type = local.Type(snapshot);
  return type.ok() && *type == EntryType::kDirectory ? snapshot : "";
}

Result<ModelLocation> LocateHubModel(const HubName& name, double stall_timeout_s) {
  if (std::string snapshot = CachedSnapshot(*LocalStorage(), name.repo, name.revision);
      !snapshot.empty()) {
    return ModelLocation{LocalStorage(), snapshot, std::nullopt};
  }
  if (HubOffline()) {
    const std::string cache = HubCacheDir();
    return Status::NotFound(
        "hf://" + name.repo + "@" + name.revision + ": not in the Hugging Face cache (" +
        (cache.empty() ? std::string("none: HF_HUB_CACHE, HF_HOME and HOME are unset") : cache) +
        ") and HF_HUB_OFFLINE is set, so the hub is not asked: download it while online "
        "(huggingface-cli download " +
        name.repo + " --revision " + name.revision + ") or unset HF_HUB_OFFLINE");
  }
  std::string endpoint = EnvironmentVariable("HF_ENDPOINT");
  if (endpoint.empty()) endpoint = "https://huggingface.co";
  endpoint = WithoutTrailingSlash(endpoint);
  HOIST_ASSIGN_OR_RETURN(HttpOptions options, HttpOptionsFromEnvironment(stall_timeout_s));
  std::string token = EnvironmentVariable("HF_TOKEN");
  if (token.empty()) token = EnvironmentVariable("HUGGING_FACE_HUB_TOKEN");
  options.endpoint = MakePlainEndpoint("", token, UrlAuthority(endpoint));
  std::shared_ptr<Storage> http = MakeHttpStorage(options);
  // The revision as one segment ("refs/pr/1" as refs%2Fpr%2F1), as the hub's own client sends it.
  const std::string listing = endpoint + "/api/models/" + name.repo + "/revision/" +
                              PercentEncode(name.revision, /*keep_slash=*/false);
  Result<std::string> read = ReadSmallFile(*http, listing);
  if (!read.ok()) return Status(read.status().code(), RedactSecrets(read.status().message()));
  const std::string& text = read.value();
  const nlohmann::json info = nlohmann::json::parse(text, nullptr, false);
  if (info.is_discarded() || !info.is_object()) {
    return Status::IoError(RedactUrl(listing) + ": the hub's answer is not a JSON object");
  }
  std::vector<std::string> files;
  if (info.contains("siblings") && info["siblings"].is_array()) {
    for (const nlohmann::json& s : info["siblings"]) {
      if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
        files.push_back(s["rfilename"].get<std::string>());
      }
    }
  }
  // The commit the listing answered for, so that every file comes from one revision.
  std::string commit = name.revision;
  if (info.contains("sha")) {
    commit = info["sha"].is_string() ? info["sha"].get<std::string>() : std::string();
    if (!IsCommit(commit)) {
      return Status::IoError(RedactUrl(listing) + ": the hub's answer names the commit '" +
                             Printable(commit) + "', not 40 hex digits: refused");
    }
  }
  ModelLocation snapshot{
      http, endpoint + "/" + name.repo + "/resolve/" + PercentEncode(commit, /*keep_slash=*/false),
      std::vector<std::string>()};
  for (const std::string& file : files) {
    if (file.find('/') != std::string::npos) continue;  // the repo's top level only
    snapshot.listing->push_back(
        http->Join(snapshot.path, PercentEncode(file, /*keep_slash=*/false)));
  }
  return snapshot;
}

}  // namespace hoist
