#include "comm/in_process_transport.h"

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

}  // namespace ofl::comm
