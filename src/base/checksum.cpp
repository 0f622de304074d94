#include "base/checksum.h"

#include <cstdio>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hoist {

struct Xxh3Stream::State {
  XXH3_state_t state;
};

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string HexDigest(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->state); }
Xxh3Stream::~Xxh3Stream() = default;
Xxh3Stream::Xxh3Stream(Xxh3Stream&&) noexcept = default;
Xxh3Stream& Xxh3Stream::operator=(Xxh3Stream&&) noexcept = default;
void Xxh3Stream::Update(const void* data, size_t n) { XXH3_64bits_update(&state_->state, data, n); }
uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(&state_->state); }

}  // namespace hoist
