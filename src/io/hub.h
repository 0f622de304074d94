// Models named by Hugging Face repo id, hf://ORG/NAME[@REVISION]: the snapshot in the local
// Hugging Face cache when it holds the revision, else the model's file on the hub, read through
// the HTTP source.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/storage.h"

namespace hoist {

struct HubName {
  std::string repo;               // "ORG/NAME"
  std::string revision = "main";  // a branch, a tag or a commit
};

// ORG/NAME as the hub spells repo ids: each half a letter or digit, then letters, digits, '_',
// '.' and '-'.
bool IsHubRepoId(std::string_view name);

// The repo and revision of an hf:// name; nullopt for another name. kInvalidArgument for an
// hf:// name that is not ORG/NAME[@REVISION].
Result<std::optional<HubName>> ParseHubName(std::string_view name);

// The Hugging Face cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; empty
// when none can be told.
std::string HubCacheDir();

// The snapshot directory of repo at revision in the cache (models--ORG--NAME/snapshots/COMMIT,
// COMMIT read from refs/REVISION unless the revision is a commit), or "" when the cache does
// not hold it.
std::string CachedSnapshot(Storage& local, const std::string& repo, const std::string& revision);

struct ModelLocation {
  std::shared_ptr<Storage> storage;
  std::string path;  // the name in storage: a directory, a file or an index
  // For a directory its storage cannot list (the hub's snapshot over HTTP): the files directly
  // in it, each as storage->Join(path, name). Which of them make the model is format/'s choice,
  // as for any directory.
  std::optional<std::vector<std::string>> listing;
};

// Where hf://name's model is: the cached snapshot (a local directory), else, asked of the hub
// at HF_ENDPOINT (default https://huggingface.co, with HF_TOKEN as the bearer token to that host
// only), the revision's commit: its snapshot directory over HTTP with the hub's listing of its
// top-level files. stall_timeout_s: as LocateModel's.
Result<ModelLocation> LocateHubModel(const HubName& name, double stall_timeout_s = 0);

// The schemes of the names hoist reads from elsewhere than the local file system, in the order
// messages list them: "http://", "https://", the object stores' ("s3://", "gs://"), "hf://".
const std::vector<std::string_view>& RemoteSchemes();
// Whether `name` starts with one of RemoteSchemes (http and https in any case).
bool IsRemoteName(std::string_view name);

// Where a model name's bytes are (sources.cpp): hf://… as LocateHubModel says, an http:// or
// https:// URL in the HTTP source (one for the process, its options from the environment), an
// object store's name (s3://BUCKET/KEY, gs://BUCKET/OBJECT) in an HTTP source with that
// store's endpoint (S3ConfigFromEnvironment, GcsConfigFromEnvironment), anything else in the
// local file system. stall_timeout_s, when above 0, bounds every remote request
// (opening, parsing, listing and reading) below the environment's HOIST_HTTP_STALL_TIMEOUT.
Result<ModelLocation> LocateModel(const std::string& name, double stall_timeout_s = 0);

}  // namespace hoist
