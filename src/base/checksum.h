// XXH3-64 checksums of tensor bytes, as 16 lowercase hex digits where shown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hoist {

uint64_t Xxh3(const void* data, size_t n);
std::string HexDigest(uint64_t digest);

// A running XXH3-64 over pieces fed in order. Not thread safe.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(Xxh3Stream&&) noexcept;
  Xxh3Stream& operator=(Xxh3Stream&&) noexcept;
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hoist
