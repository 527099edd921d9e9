#pragma once
// InlineData: the receiving side of small transfers (Note [Small transfers travel with their
// message] in transport.h). A transport puts each piece that came with a message here before
// it hands the message on; the RECV's fetch takes it out. Pieces of one transfer are taken in
// the order they were put. A piece is either copied in or borrowed: left where the transport
// received it, with a token the transport uses to give that memory back once it is taken.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace ofl::comm {

class InlineData {
 public:
  /// Keeps a copy of `bytes` at `data` as the next piece of transfer `tag`.
  void put(uint64_t tag, const void* data, size_t bytes);
  /// Keeps `data` itself (valid until `token` is given back) as the next piece of `tag`.
  void put_borrowed(uint64_t tag, const void* data, size_t bytes, void* token);
  /// Copies the oldest piece of transfer `tag` into `dst` and forgets it; returns its token
  /// (null for a copied piece). Raises ofl::Error (kInternal) when there is none or it has
  /// another size: the message protocol was broken.
  void* take(uint64_t tag, int64_t src_rank, void* dst, size_t bytes);
  /// Forgets every piece (a runtime that will not take them is going away); returns the tokens
  /// of the borrowed ones.
  std::vector<void*> clear();

 private:
  struct Piece {
    uint64_t tag = 0;
    std::vector<char> copy;
    const char* data = nullptr;
    size_t bytes = 0;
    void* token = nullptr;
  };
  std::mutex mu_;
  // In arrival order: a RECV usually takes the oldest piece, so one queue (searched from the
  // front) costs no allocation per transfer, where a queue per tag did.
  std::deque<Piece> pieces_;              // GUARDED_BY(mu_)
  std::vector<std::vector<char>> spare_;  // taken copies' buffers, reused; GUARDED_BY(mu_)
};

}  // namespace ofl::comm
