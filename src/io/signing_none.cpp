#include "io/signing.h"

namespace hoist {

namespace {
constexpr const char* kBuild =
    "this hoist was built without OpenSSL's libcrypto, so it cannot sign with ";
}  // namespace

Result<std::string> SignRs256(const std::string& /*pem_key*/, std::string_view /*data*/) {
  return Status::Unavailable(std::string(kBuild) +
                             "a service account's key: build it with libssl-dev installed, or "
                             "use the metadata server or gcloud's user credentials");
}

Result<std::string> HmacSha256(std::string_view /*key*/, std::string_view /*data*/) {
  return Status::Unavailable(std::string(kBuild) +
                             "a storage account's shared key: build it with libssl-dev "
                             "installed, or use a SAS token or a managed identity");
}

void ReleaseThreadCryptoState() {}

Result<std::string> Sha1Hex(std::string_view /*data*/) {
  return Status::Unavailable(
      "this hoist was built without OpenSSL's libcrypto, so it cannot find the AWS CLI's cached "
      "IAM Identity Center sign-in: build it with libssl-dev installed, or export the "
      "credentials (aws configure export-credentials --format env)");
}

}  // namespace hoist
