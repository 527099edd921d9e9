#pragma once
// InProcessTransport: every rank lives in this process, so a message is a call into the
// serving runtime's handler and a read is a memcpy (small pieces are copied when sent, as
// between processes: the sender may reuse its memory at once).

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "comm/inline_data.h"
#include "comm/transport.h"

namespace ofl::comm {

class InProcessTransport final : public Transport {
 public:
  void serve_rank(int64_t rank, MessageHandler handler) override;
  void stop_serving_rank(int64_t rank) override;
  void send(int64_t dst_rank, const MessageBytes& message) override;
  void send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag, const void* data,
                      size_t bytes) override;
  void expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) override;
  void fetch(int64_t src_rank, uint64_t tag, uint64_t address, void* dst, size_t bytes) override;
  // Tagged transfers (Note [Tagged transfers] in transport.h): a send copies into the oldest
  // receive posted for its tag, or into the mailbox until one is posted.
  TaggedRequest send_tagged(int64_t dst_rank, uint64_t tag, const void* data,
                            size_t bytes) override;
  TaggedRequest receive_tagged(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) override;
  bool test(TaggedRequest& request) override;

 private:
  struct PostedReceive;
  struct ReceiveHandle;
  struct Mailbox {
    std::deque<std::vector<char>> arrived;                // sent before a receive was posted
    std::deque<std::shared_ptr<PostedReceive>> receives;  // posted before their data came
  };
  std::mutex tagged_mu_;
  std::map<uint64_t, Mailbox> mailboxes_;  // by tag; GUARDED_BY(tagged_mu_)

  // Readers (send) vastly outnumber writers (serve/stop, at load and teardown).
  mutable std::shared_mutex mu_;
  std::map<int64_t, MessageHandler> handlers_;  // GUARDED_BY(mu_)
  InlineData inline_;                           // pieces that came with their messages
};

}  // namespace ofl::comm
