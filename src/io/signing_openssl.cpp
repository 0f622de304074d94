#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include <memory>

#include "io/signing.h"

namespace hoist {

Result<std::string> SignRs256(const std::string& pem_key, std::string_view data) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem_key.data(), static_cast<int>(pem_key.size())), BIO_free);
  if (!bio) return Status::IoError("out of memory reading a private key");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key || EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) {
    return Status::InvalidArgument("not a PEM RSA private key");
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  size_t size = 0;
  if (!context ||
      EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(context.get(), nullptr, &size,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return Status::InvalidArgument("the RSA key does not sign");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return Status::InvalidArgument("the RSA key does not sign");
  }
  signature.resize(size);
  return signature;
}

Result<std::string> HmacSha256(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest,
           &size) == nullptr) {
    return Status::IoError("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

void ReleaseThreadCryptoState() { OPENSSL_thread_stop(); }

Result<std::string> Sha1Hex(std::string_view data) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  if (SHA1(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest) == nullptr) {
    return Status::IoError("SHA-1 failed");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char byte : digest) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 15];
  }
  return hex;
}

}  // namespace hoist
