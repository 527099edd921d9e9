// The UCX transport's tagged transfers: the collective engine's sends and receives, and the
// fetch of a piece another rank exposed.

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "comm/ucx_internal.h"
#include "comm/ucx_transport.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

namespace ofl::comm {

// A tagged transfer in flight: the UCX request of a send, or the posted receive. Dropped
// unfinished (a failed collective), a receive is cancelled and a send left to UCX to free.
struct UcxTransport::TaggedState {
  UcxTransport* self = nullptr;
  bool is_send = false;
  void* send_request = nullptr;
  Posted posted;
  ~TaggedState() {
    if (is_send) {
      if (send_request != nullptr) {
        std::lock_guard<std::recursive_mutex> ucx(self->ucx_mu_);
        ucp_request_free(send_request);  // UCX frees it once it completes
      }
    } else if (posted.request != nullptr) {
      self->cancel_receive(posted, 1'000'000'000);
    }
  }
};

Transport::TaggedRequest UcxTransport::send_tagged(int64_t dst_rank, uint64_t tag, const void* data,
                                                   size_t bytes) {
  const Peer& peer = *peers_.at(dst_rank);
  OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
                 " must send transfer ", tag, " to rank ", dst_rank, " (", peer.host,
                 "). However, that rank failed.");
  auto state = std::make_shared<TaggedState>();
  state->self = this;
  state->is_send = true;
  ucp_request_param_t param{};
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_send_nbx(peer.ep, data, bytes, tag, &param);
  ucx.unlock();
  TaggedRequest out;
  out.peer = dst_rank;
  out.tag = tag;
  out.bytes = bytes;
  if (UCS_PTR_IS_PTR(request)) {
    state->send_request = request;
    out.state = state;
  } else {
    OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ",
                   env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                   ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
    out.done = true;
  }
  return out;
}

Transport::TaggedRequest UcxTransport::receive_tagged(int64_t src_rank, uint64_t tag, void* dst,
                                                      size_t bytes) {
  auto state = std::make_shared<TaggedState>();
  state->self = this;
  state->posted = post_receive(tag, dst, bytes);
  TaggedRequest out;
  out.peer = src_rank;
  out.tag = tag;
  out.bytes = bytes;
  out.state = state;
  return out;
}

bool UcxTransport::test(TaggedRequest& request) {
  if (request.done) return true;
  auto* state = static_cast<TaggedState*>(request.state.get());
  const Peer& peer = *peers_.at(request.peer);
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_, std::try_to_lock);
  if (!ucx.owns_lock()) return false;  // another thread is progressing the worker
  ucp_worker_progress(worker_);
  if (state->is_send) {
    const ucs_status_t status = ucp_request_check_status(state->send_request);
    if (status == UCS_INPROGRESS) {
      ucx.unlock();
      OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kUcxTag, "rank ", request.peer, " (",
                     peer.host, ") failed while rank ", env_.rank, " sent it transfer ",
                     request.tag, ".");
      return false;
    }
    ucp_request_free(state->send_request);
    state->send_request = nullptr;
    ucx.unlock();
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
                   " must send transfer ", request.tag, " to rank ", request.peer,
                   ". However, UCX says ", ucs_status_string(status), ".");
  } else {
    if (!receive_done(state->posted)) {
      ucx.unlock();
      OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kUcxTag, "rank ", request.peer, " (",
                     peer.host, ") failed while rank ", env_.rank, " waited for transfer ",
                     request.tag, ".");
      return false;
    }
    ucx.unlock();
    const auto status = static_cast<ucs_status_t>(state->posted.status);
    OFL_CHECK_CODE(status == UCS_OK && state->posted.length == request.bytes,
                   ErrorCode::kUnavailable, kUcxTag, "transfer ", request.tag, " from rank ",
                   request.peer, " must deliver ", request.bytes, " bytes. However, got ",
                   state->posted.length, " (", ucs_status_string(status), ").");
  }
  request.done = true;
  request.state.reset();
  return true;
}

// Posts the receive of `tag` into `dst`.
UcxTransport::Posted UcxTransport::post_receive(uint64_t tag, void* dst, size_t bytes) {
  Posted posted;
  posted.dst = dst;
  posted.bytes = bytes;
  // UCX 1.13 does not fill the length on an immediate completion; a message of another size
  // would have completed with UCS_ERR_MESSAGE_TRUNCATED.
  ucp_tag_recv_info_t info{0, bytes};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
  param.recv_info.tag_info = &info;
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, dst, bytes, tag, ~uint64_t{0}, &param);
  if (UCS_PTR_IS_PTR(request)) {
    posted.request = request;
  } else {  // done at once (an eager message that had come unexpected), or failed
    posted.status = UCS_PTR_STATUS(request);
    posted.length = info.length;
  }
  return posted;
}

bool UcxTransport::receive_done(Posted& posted) {
  if (posted.request == nullptr) return true;
  ucp_tag_recv_info_t info{};
  const ucs_status_t status = ucp_tag_recv_request_test(posted.request, &info);
  if (status == UCS_INPROGRESS) return false;
  posted.status = status;
  posted.length = info.length;
  ucp_request_free(posted.request);
  posted.request = nullptr;
  return true;
}

void UcxTransport::cancel_receive(Posted& posted, int64_t wait_ns) {
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  if (posted.request == nullptr) return;
  ucp_request_cancel(worker_, posted.request);
  const int64_t deadline = now_ns() + wait_ns;
  while (!receive_done(posted) && now_ns() < deadline) ucp_worker_progress(worker_);
  if (posted.request != nullptr) {  // given up on: UCX frees it when it completes
    ucp_request_free(posted.request);
    posted.request = nullptr;
  }
}

void UcxTransport::prepare_fetch(int64_t /*src_rank*/, uint64_t tag, void* dst, size_t bytes) {
  // Small messages: taking an eager message that came unexpected is cheaper than keeping a
  // request posted for it (measured: 4 KiB transfers 12-17 GB/s unposted, 4 GB/s posted).
  if (bytes < kPrepareMinBytes) return;
  Posted posted = post_receive(tag, dst, bytes);
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  prepared_[tag].push_back(posted);
}

void UcxTransport::fetch(int64_t src_rank, uint64_t tag, uint64_t /*address*/, void* dst,
                         size_t bytes) {
  if (bytes <= kInlineTransferBytes) {  // it came with its message (send_with_data)
    if (void* token = inline_.take(tag, src_rank, dst, bytes)) {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      ucp_am_data_release(worker_, token);
    }
    return;
  }
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  Posted posted;
  auto it = prepared_.find(tag);
  if (it != prepared_.end() && !it->second.empty()) {
    // Posted ahead by prepare_fetch (Note [Receives posted ahead] in transport.h).
    posted = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) prepared_.erase(it);
    OFL_ASSERT(posted.dst == dst && posted.bytes == bytes)
        << "transfer " << tag << " was prepared for another buffer";
  } else {
    posted = post_receive(tag, dst, bytes);
  }
  const Peer& peer = *peers_.at(src_rank);
  // Progress the worker here too: the data arrives sooner than the progress thread's next turn.
  // The lock is let go every turn, so the progress thread (heartbeats) is never shut out.
  while (!receive_done(posted)) {
    const unsigned progressed = ucp_worker_progress(worker_);
    if (receive_done(posted)) break;
    if (peer.failed) {
      // A receive already matched (a rendezvous under way) may not cancel: wait a little, then
      // leave the request to UCX (cancel_receive).
      cancel_receive(posted, 1'000'000'000);
      throw_error(ErrorCode::kUnavailable,
                  str_cat(kUcxTag, "rank ", src_rank, " (", peer.host, ") failed while rank ",
                          env_.rank, " waited for transfer ", tag, "."));
    }
    ucx.unlock();
    if (progressed == 0) std::this_thread::yield();
    ucx.lock();
  }
  ucx.unlock();
  const auto status = static_cast<ucs_status_t>(posted.status);
  OFL_CHECK_CODE(status == UCS_OK && posted.length == bytes, ErrorCode::kUnavailable, kUcxTag,
                 "transfer ", tag, " from rank ", src_rank, " must deliver ", bytes,
                 " bytes. However, got ", posted.length, " (", ucs_status_string(status), ").");
}

}  // namespace ofl::comm
