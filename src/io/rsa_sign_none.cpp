#include "io/rsa_sign.h"

namespace hoist {

Result<std::string> SignRs256(const std::string& /*pem_key*/, std::string_view /*data*/) {
  return Status::Unavailable(
      "this hoist was built without OpenSSL's libcrypto, so it cannot sign with a service "
      "account's key: build it with libssl-dev installed, or use the metadata server or gcloud's "
      "user credentials");
}

}  // namespace hoist
