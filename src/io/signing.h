// The signatures credentials make: RS256 (RSA PKCS#1 v1.5 with SHA-256), what a Google service
// account signs its token requests with; HMAC-SHA256, what an Azure storage account's shared key
// signs each request with; SHA-1, what names the AWS CLI's cached sign-ins. One file per library:
// signing_openssl.cpp (libcrypto), signing_none.cpp (a build without it, which says so).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace hoist {

// The signature's raw bytes of `data` by the PEM private key `pem_key` (PKCS#8 or PKCS#1).
// kInvalidArgument when the key is not an RSA private key; never prints the key.
Result<std::string> SignRs256(const std::string& pem_key, std::string_view data);

// The HMAC-SHA256 of `data` under `key` (raw bytes, both).
Result<std::string> HmacSha256(std::string_view key, std::string_view data);

// Frees what the crypto library holds for the calling thread (OpenSSL's error queue and random
// generators; it makes them again on next use). A thread that read through TLS or signed calls it
// before it reports its exit: the load's readers are detached, and one that ended after the
// process's exit handlers ran would leave its state behind.
void ReleaseThreadCryptoState();

// The SHA-1 of `data` as 40 lowercase hex digits: the name the AWS CLI gives a cached sign-in.
Result<std::string> Sha1Hex(std::string_view data);

}  // namespace hoist
