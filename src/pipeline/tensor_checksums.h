// XXH3-64 of every loaded tensor, computed over its staged bytes while they are in staging, in
// tensor order, by whichever reader holds the next piece; no reader waits for another.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/checksum.h"
#include "plan/load_plan.h"

namespace hoist {

// A staged chunk's claim on the checksums: `hashed` turns true once every piece of it has been
// fed. Whoever holds a ticket keeps the chunk's staging buffer alive (the load's InFlight
// derives from it), so a piece that arrives early can wait for its turn without a copy.
struct HashTicket {
  size_t unhashed = 0;  // guarded by the TensorChecksums' mutex
  std::atomic<bool> hashed{false};
};

// Thread safety: Add may run on any thread, concurrently; Digest and Clear once no Add runs.
class TensorChecksums {
 public:
  // Hashes the tensors `wanted` marks (empty: every tensor); the others' segments pass by.
  explicit TensorChecksums(size_t tensors, std::vector<bool> wanted = {})
      : tensors_(tensors), wanted_(std::move(wanted)) {}

  // Feeds chunk c's segments (data: where the chunk's first byte lies in staging). The
  // ticket is marked hashed once every segment has been fed, which may be on another thread.
  void Add(const Chunk& c, const unsigned char* data, const std::shared_ptr<HashTicket>& ticket);
  uint64_t Digest(uint32_t tensor) const { return tensors_[tensor].stream.Digest(); }
  // Drops the pieces still waiting, and with them the staging buffers they hold.
  void Clear();

 private:
  struct Piece {
    const unsigned char* data = nullptr;
    uint64_t length = 0;
    std::shared_ptr<HashTicket> ticket;
  };
  struct Tensor {
    Xxh3Stream stream;
    uint64_t next = 0;                  // next tensor offset to feed
    bool busy = false;                  // a thread is feeding it now
    std::map<uint64_t, Piece> pending;  // by tensor offset
  };
  // Feeds tensor t with every piece that is next in line, unless another thread already does
  // (it will find the pieces registered meanwhile).
  void Drain(uint32_t t);

  bool Wanted(uint32_t t) const { return wanted_.empty() || wanted_[t]; }

  std::mutex mutex_;
  std::vector<Tensor> tensors_;
  const std::vector<bool> wanted_;
};

}  // namespace hoist
