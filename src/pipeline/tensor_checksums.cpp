#include "pipeline/tensor_checksums.h"

#include <utility>

namespace hoist {

void TensorChecksums::Add(const Chunk& c, const unsigned char* data,
                          const std::shared_ptr<HashTicket>& ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket->unhashed = 0;
    for (const Segment& s : c.segments) {
      if (!Wanted(s.tensor)) continue;
      ++ticket->unhashed;
      tensors_[s.tensor].pending[s.tensor_offset] = {data + s.chunk_offset, s.length, ticket};
    }
    if (ticket->unhashed == 0) ticket->hashed.store(true, std::memory_order_release);
  }
  for (const Segment& s : c.segments) {
    if (Wanted(s.tensor)) Drain(s.tensor);
  }
}

void TensorChecksums::Drain(uint32_t t) {
  std::unique_lock<std::mutex> lock(mutex_);
  Tensor& h = tensors_[t];
  if (h.busy) return;
  h.busy = true;
  for (;;) {
    auto it = h.pending.find(h.next);
    if (it == h.pending.end()) break;
    Piece piece = std::move(it->second);
    h.pending.erase(it);
    lock.unlock();
    h.stream.Update(piece.data, piece.length);  // only the busy thread touches the stream
    lock.lock();
    h.next += piece.length;
    if (--piece.ticket->unhashed == 0) piece.ticket->hashed.store(true, std::memory_order_release);
  }
  h.busy = false;
}

void TensorChecksums::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Tensor& h : tensors_) h.pending.clear();
}

}  // namespace hoist
