// Google Cloud credentials where Google's client libraries find them (Application Default
// Credentials), in their order: the key file GOOGLE_APPLICATION_CREDENTIALS names, gcloud's
// application default credentials file, the metadata server of a Compute Engine VM or a GKE
// pod. A key file holds a service account's key (a JWT signed with it is exchanged at its
// token URI) or an authorized user's refresh token. Access tokens are fetched again before
// they expire, during a load.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/endpoint.h"
#include "io/oauth2.h"

namespace hoist {

// An RSA PKCS#1 v1.5 signature with SHA-256 (JWT's RS256) of `data` by the PEM private key
// `pem_key`; the signature's raw bytes.
using SignRs256Fn =
    std::function<Result<std::string>(const std::string& pem_key, std::string_view data)>;

// Where the chain looks, as Google's environment variables and files give it.
struct GcpChainInput {
  std::string key_file;         // GOOGLE_APPLICATION_CREDENTIALS; "" when unset
  std::string well_known_file;  // gcloud's application_default_credentials.json; may not exist
  // The metadata server's host[:port]; "": it is not asked.
  std::string metadata_host;
  std::string scope = "https://www.googleapis.com/auth/devstorage.read_only";
  AskServiceFn ask;
  SignRs256Fn sign;
};

// The first source of the chain that has credentials (a token fetched once, so that a source
// that fails says so before any object is asked for), or null when none has: requests then go
// without a token, as for a public bucket. An error names the source and what it refused or
// lacked, never a key or a token.
Result<std::shared_ptr<BearerTokenSource>> FindGcpCredentials(const GcpChainInput& input);

}  // namespace hoist
