// Models in Google Cloud Storage, named gs://BUCKET/OBJECT: read through the HTTP source
// (http_storage.h) from the JSON API (an object's media with ranges, a prefix listed as a
// directory), each request carrying an OAuth2 access token from the Application Default
// Credentials chain (gcp_credentials.h). This file is the part without libcurl: names, where
// the configuration comes from, the URLs, the listing's JSON.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/endpoint.h"
#include "io/gcp_credentials.h"

namespace hoist {

struct GcsConfig {
  // Google's JSON API, or an emulator's (STORAGE_EMULATOR_HOST).
  std::string endpoint = "https://storage.googleapis.com";
  // Null: requests go without a token (public buckets). Tokens are never printed; the source's
  // name is, in a refusal's message.
  std::shared_ptr<BearerTokenSource> credentials;
};

struct GcsObject {
  std::string bucket;
  std::string object;  // may be empty (the bucket's top) or end in '/' (a prefix)
};

bool IsGcsUrl(std::string_view name);

// The bucket and object of gs://BUCKET/OBJECT; kInvalidArgument naming the rule a name breaks
// (a bucket is 3 to 63 lowercase letters, digits, '-', '_' and '.', starting and ending with a
// letter or digit; an object's name is at most 1024 bytes, without a line break).
Result<GcsObject> ParseGcsName(std::string_view name);

// The configuration Google's client libraries would use: the endpoint from
// STORAGE_EMULATOR_HOST (http:// when it names no scheme), else Google's; credentials from
// GOOGLE_APPLICATION_CREDENTIALS, gcloud's application_default_credentials.json (under
// CLOUDSDK_CONFIG, else ~/.config/gcloud), else the metadata server (GCE_METADATA_HOST, else
// 169.254.169.254; not asked when NO_GCE_CHECK is true, nor for an emulator unless
// GCE_METADATA_HOST names one). A source that fails, its error.
Result<GcsConfig> GcsConfigFromEnvironment();

// The URL that serves an object's bytes (the JSON API's alt=media).
std::string GcsObjectUrl(const GcsConfig& config, const GcsObject& object);

// The URL of one page of the listing of the objects directly under `prefix` (delimiter "/").
std::string GcsListUrl(const GcsConfig& config, const std::string& bucket,
                       const std::string& prefix, const std::string& page_token);

// One page of an objects.list answer; kIoError when it is not one.
Result<ObjectListing> ParseGcsListing(std::string_view json);

// The message of a JSON API error ({"error": {"code", "message"}}), or "" when `body` is not one.
std::string GcsErrorSummary(std::string_view body);

// The GCS endpoint (endpoint.h): gs://BUCKET/OBJECT names, each request with
// "Authorization: Bearer" when `config` has credentials, a prefix listed as a directory.
std::shared_ptr<const Endpoint> MakeGcsEndpoint(GcsConfig config);

}  // namespace hoist
