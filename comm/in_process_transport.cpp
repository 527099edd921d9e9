#include "comm/in_process_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "oneflowlike/common/error.h"

namespace ofl::comm {

void InProcessTransport::serve_rank(int64_t rank, MessageHandler handler) {
  std::unique_lock lock(mu_);
  OFL_CHECK(handlers_.emplace(rank, std::move(handler)).second, "[in_process_transport] ",
            "each rank must be served by one runtime. However, rank ", rank, " is served already.");
}

void InProcessTransport::stop_serving_rank(int64_t rank) {
  std::unique_lock lock(mu_);
  handlers_.erase(rank);
}

void InProcessTransport::send(int64_t dst_rank, const MessageBytes& message) {
  std::shared_lock lock(mu_);
  auto it = handlers_.find(dst_rank);
  OFL_CHECK_CODE(it != handlers_.end(), ErrorCode::kUnavailable, "[in_process_transport] ",
                 "a message must go to a rank that a runtime serves. However, rank ", dst_rank,
                 " is served by none (served: ", handlers_.size(), " ranks).");
  it->second(message);
}

// One address space: the data is already where the sender says; the receiver copies it.
void InProcessTransport::expose(int64_t /*dst_rank*/, uint64_t /*tag*/, const void* /*data*/,
                                size_t /*bytes*/) {}

void InProcessTransport::send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag,
                                        const void* data, size_t bytes) {
  inline_.put(tag, data, bytes);
  send(dst_rank, message);
}

void InProcessTransport::fetch(int64_t src_rank, uint64_t tag, uint64_t address, void* dst,
                               size_t bytes) {
  if (bytes <= kInlineTransferBytes) {
    inline_.take(tag, src_rank, dst, bytes);  // copied when sent: no token
    return;
  }
  std::memcpy(dst, reinterpret_cast<const void*>(address), bytes);
}

struct InProcessTransport::PostedReceive {
  void* dst = nullptr;
  size_t bytes = 0;
  int64_t src_rank = -1;
  std::atomic<bool> done{false};
};

// The caller's handle on a posted receive: dropped before its data came (a collective given up
// after a failure), it takes the receive out of its mailbox, so no later send writes into
// memory the caller no longer owns.
struct InProcessTransport::ReceiveHandle {
  InProcessTransport* transport = nullptr;
  uint64_t tag = 0;
  std::shared_ptr<PostedReceive> receive;
  ~ReceiveHandle() {
    if (receive->done.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(transport->tagged_mu_);
    auto it = transport->mailboxes_.find(tag);
    if (it == transport->mailboxes_.end()) return;
    auto& receives = it->second.receives;
    receives.erase(std::remove(receives.begin(), receives.end(), receive), receives.end());
  }
};

namespace {

void check_size(size_t sent, size_t expected, int64_t src_rank, uint64_t tag) {
  OFL_CHECK_CODE(sent == expected, ErrorCode::kInternal, "[in_process_transport] transfer ", tag,
                 " from rank ", src_rank, " must deliver ", expected, " bytes. However, got ", sent,
                 ".");
}

}  // namespace

Transport::TaggedRequest InProcessTransport::send_tagged(int64_t dst_rank, uint64_t tag,
                                                         const void* data, size_t bytes) {
  {
    // Copied under the lock: a receive's handle dropped meanwhile (ReceiveHandle) waits for it.
    std::lock_guard<std::mutex> lock(tagged_mu_);
    Mailbox& box = mailboxes_[tag];
    if (box.receives.empty()) {
      const char* begin = static_cast<const char*>(data);
      box.arrived.emplace_back(begin, begin + bytes);
    } else {
      std::shared_ptr<PostedReceive> receive = std::move(box.receives.front());
      box.receives.pop_front();
      check_size(bytes, receive->bytes, receive->src_rank, tag);
      std::memcpy(receive->dst, data, bytes);
      receive->done.store(true, std::memory_order_release);
    }
  }
  TaggedRequest request;
  request.peer = dst_rank;
  request.tag = tag;
  request.bytes = bytes;
  request.done = true;  // copied
  return request;
}

Transport::TaggedRequest InProcessTransport::receive_tagged(int64_t src_rank, uint64_t tag,
                                                            void* dst, size_t bytes) {
  // A tag names its receiving rank (Note [Collective tags] in oneflowlike/collective.h), so
  // mailboxes are keyed by the tag alone.
  auto receive = std::make_shared<PostedReceive>();
  receive->dst = dst;
  receive->bytes = bytes;
  receive->src_rank = src_rank;
  std::vector<char> arrived;
  bool came = false;
  {
    std::lock_guard<std::mutex> lock(tagged_mu_);
    Mailbox& box = mailboxes_[tag];
    if (box.arrived.empty()) {
      box.receives.push_back(receive);
    } else {
      arrived = std::move(box.arrived.front());
      box.arrived.pop_front();
      came = true;
    }
  }
  if (came) {
    check_size(arrived.size(), bytes, src_rank, tag);
    std::memcpy(dst, arrived.data(), bytes);
    receive->done.store(true, std::memory_order_relaxed);
  }
  auto handle = std::make_shared<ReceiveHandle>();
  handle->transport = this;
  handle->tag = tag;
  handle->receive = receive;
  TaggedRequest request;
  request.state = handle;
  request.peer = src_rank;
  request.tag = tag;
  request.bytes = bytes;
  request.done = receive->done.load(std::memory_order_acquire);
  return request;
}

bool InProcessTransport::test(TaggedRequest& request) {
  if (!request.done) {
    request.done = static_cast<ReceiveHandle*>(request.state.get())
                       ->receive->done.load(std::memory_order_acquire);
  }
  return request.done;
}

}  // namespace ofl::comm
