#include "tests/cpp/comm/transport_conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

namespace ofl::testing {

namespace {

// A conformance message: what it is, then three numbers; the rest of the 64 bytes is a pattern
// that must arrive intact.
struct Message {
  uint64_t kind = 0;
  uint64_t a = 0, b = 0, c = 0;
};
enum Kind : uint64_t { kSequence = 1, kData = 2, kDone = 3 };

comm::MessageBytes encode(const Message& m) {
  comm::MessageBytes bytes{};
  std::memcpy(bytes.data(), &m, sizeof(m));
  for (size_t i = sizeof(m); i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>((m.a * 31 + i) & 0xff);
  }
  return bytes;
}

Message decode(const comm::MessageBytes& bytes) {
  Message m;
  std::memcpy(&m, bytes.data(), sizeof(m));
  for (size_t i = sizeof(m); i < bytes.size(); ++i) {
    EXPECT_EQ(bytes[i], static_cast<std::byte>((m.a * 31 + i) & 0xff)) << "byte " << i;
  }
  return m;
}

// Messages a rank received, in arrival order.
class Inbox {
 public:
  void push(const comm::MessageBytes& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(bytes);
    cv_.notify_all();
  }
  std::optional<Message> pop(double seconds = 20) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                      [&] { return !messages_.empty(); })) {
      return std::nullopt;
    }
    const comm::MessageBytes bytes = messages_.front();
    messages_.pop_front();
    lock.unlock();
    return decode(bytes);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<comm::MessageBytes> messages_;
};

std::vector<uint8_t> pattern(size_t bytes, uint64_t tag) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>((i * 7 + tag * 13) & 0xff);
  return data;
}

// How the runtime's SEND hands a piece over: small ones inside the announcing message, larger
// ones exposed and announced (Note [Small transfers travel with their message]).
void hand_over(comm::Transport& t, int64_t peer, uint64_t tag, const std::vector<uint8_t>& data,
               const comm::MessageBytes& announcement) {
  if (data.size() <= comm::kInlineTransferBytes) {
    t.send_with_data(peer, announcement, tag, data.data(), data.size());
  } else {
    t.expose(peer, tag, data.data(), data.size());
    t.send(peer, announcement);
  }
}

}  // namespace

void run_transport_conformance(comm::Transport& t, int64_t rank,
                               const std::function<void()>& barrier) {
  ASSERT_TRUE(rank == 0 || rank == 1);
  const int64_t peer = 1 - rank;
  Inbox inbox;
  t.serve_rank(rank, [&](const comm::MessageBytes& bytes) { inbox.push(bytes); });
  barrier();

  // 1. Messages arrive whole and in the order one rank sent them, both ways at once.
  constexpr uint64_t kMessages = 2000;
  for (uint64_t i = 0; i < kMessages; ++i)
    t.send(peer, encode({kSequence, i, static_cast<uint64_t>(rank), 0}));
  for (uint64_t i = 0; i < kMessages; ++i) {
    const std::optional<Message> m = inbox.pop();
    ASSERT_TRUE(m.has_value()) << "message " << i << " of " << kMessages << " never came";
    EXPECT_EQ(m->kind, kSequence);
    EXPECT_EQ(m->a, i) << "out of order";
    EXPECT_EQ(m->b, static_cast<uint64_t>(peer));
  }
  barrier();

  // 2. Register data: the sender hands a buffer over under a tag and announces it (tag,
  //    address, size); the receiver fetches it, possibly in another order than sent, and acks.
  //    Every size from one byte to 16 MiB (the smallest inside their messages), in both
  //    directions at once.
  const std::vector<size_t> sizes = {1, 100, 4096, 4097, 65536, 1 << 20, 16 << 20};
  std::vector<std::vector<uint8_t>> exposed;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t tag = 1000 * (rank + 1) + i;  // unique across the job
    exposed.push_back(pattern(sizes[i], tag));
    hand_over(t, peer, tag, exposed.back(),
              encode({kData, tag, reinterpret_cast<uint64_t>(exposed.back().data()), sizes[i]}));
    // A piece sent inside its message is copied: the sender may change its buffer at once.
    if (sizes[i] <= comm::kInlineTransferBytes)
      std::fill(exposed.back().begin(), exposed.back().end(), 0);
  }
  std::vector<Message> announced;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::optional<Message> m = inbox.pop();
    ASSERT_TRUE(m.has_value() && m->kind == kData) << "announcement " << i << " never came";
    announced.push_back(*m);
  }
  // Fetch the largest first: the transport must match tags, not take the first exposed.
  for (auto it = announced.rbegin(); it != announced.rend(); ++it) {
    std::vector<uint8_t> got(it->c, 0);
    t.fetch(peer, it->a, it->b, got.data(), got.size());
    EXPECT_TRUE(got == pattern(it->c, it->a))
        << "transfer " << it->a << " of " << it->c << " bytes arrived corrupted";
  }
  t.send(peer, encode({kDone, 0, 0, 0}));
  const std::optional<Message> done = inbox.pop();
  ASSERT_TRUE(done.has_value() && done->kind == kDone);
  barrier();  // the peer has read every buffer of ours: they may go

  // 3. Note [Receives posted ahead]: a receive prepared before the sender exposes the data takes
  //    it, for sizes above and below where UCX posts ahead.
  for (size_t bytes : {size_t{4096}, size_t{1} << 20, size_t{8} << 20}) {
    const uint64_t mine = 9000 + 10 * rank + (bytes >> 12 & 7),
                   theirs = 9000 + 10 * peer + (bytes >> 12 & 7);
    std::vector<uint8_t> got(bytes, 0);
    t.prepare_fetch(peer, theirs, got.data(), bytes);
    barrier();  // prepared on both sides before anything is sent
    std::vector<uint8_t> data = pattern(bytes, mine);
    hand_over(t, peer, mine, data,
              encode({kData, mine, reinterpret_cast<uint64_t>(data.data()), bytes}));
    const std::optional<Message> m = inbox.pop();
    ASSERT_TRUE(m.has_value() && m->kind == kData && m->a == theirs);
    t.fetch(peer, theirs, m->b, got.data(), bytes);
    EXPECT_TRUE(got == pattern(bytes, theirs)) << "prepared transfer of " << bytes << " bytes";
    barrier();  // both read: the exposed buffers may go
  }

  // 4. Several small pieces under one tag (a transfer's pieces of successive iterations) are
  //    fetched in the order they were sent.
  constexpr int kPieces = 5;
  const uint64_t my_tag = 9500 + rank, their_tag = 9500 + peer;
  for (int i = 0; i < kPieces; ++i) {
    const std::vector<uint8_t> data = pattern(64, my_tag * 10 + i);
    hand_over(t, peer, my_tag, data, encode({kData, my_tag, 0, 64}));
  }
  for (int i = 0; i < kPieces; ++i) {
    const std::optional<Message> m = inbox.pop();
    ASSERT_TRUE(m.has_value() && m->kind == kData && m->a == their_tag);
    std::vector<uint8_t> got(64, 0);
    t.fetch(peer, their_tag, m->b, got.data(), got.size());
    EXPECT_TRUE(got == pattern(64, their_tag * 10 + i)) << "piece " << i << " out of order";
  }
  barrier();
  t.stop_serving_rank(rank);
}

}  // namespace ofl::testing
