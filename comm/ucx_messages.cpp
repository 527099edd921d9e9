// The UCX transport's active messages: the handler of every AM id, delivery to the rank's
// runtime, and sending (actor messages, with their data packed from the register, Note [Pieces
// packed by us]).

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "comm/proto/bootstrap.pb.h"
#include "comm/ucx_internal.h"
#include "comm/ucx_transport.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

namespace ofl::comm {

namespace {

// A message in flight: UCX reads header and data until the send completes, so both live on the
// heap until the completion callback (or an immediate completion) frees them.
struct Outgoing {
  int64_t sender = 0;  // the AM header: the sending rank
  std::vector<char> data;
  Outstanding* outstanding = nullptr;
};

void free_outgoing(void* request, ucs_status_t /*status*/, void* user_data) {
  auto* out = static_cast<Outgoing*>(user_data);
  out->outstanding->count.fetch_sub(1, std::memory_order_relaxed);
  delete out;
  if (request != nullptr) ucp_request_free(request);
}

void free_request(void* request, ucs_status_t /*status*/, void* /*user_data*/) {
  ucp_request_free(request);
}

// Note [Pieces packed by us]: send_with_data hands UCX a PieceSource through a generic datatype
// whose pack copies from the source's `data`, so UCX copies the piece straight from the SEND's
// register slot into the peer's queue. A send given up on (the peer failed while its queue was
// full) may still be packed later: UCX 1.13 ran such a pending send once the stopped peer
// resumed, even after its endpoint was closed by force. So a given-up source is pointed at
// zeros (under ucx_mu_, which every pack runs under) and never freed: the slot is never read
// after send_with_data returns.
struct PieceSource {
  const char* data = nullptr;  // null: pack zeros
  size_t bytes = 0;
};

void* piece_start_pack(void* /*context*/, const void* buffer, size_t /*count*/) {
  return const_cast<void*>(buffer);
}
void* piece_start_unpack(void* /*context*/, void* buffer, size_t /*count*/) { return buffer; }
size_t piece_packed_size(void* state) { return static_cast<PieceSource*>(state)->bytes; }
size_t piece_pack(void* state, size_t offset, void* dest, size_t max_length) {
  const auto* source = static_cast<PieceSource*>(state);
  const size_t n = std::min(max_length, source->bytes - offset);
  if (source->data != nullptr) {
    std::memcpy(dest, source->data + offset, n);
  } else {
    std::memset(dest, 0, n);
  }
  return n;
}
ucs_status_t piece_unpack(void* /*state*/, size_t /*offset*/, const void* /*src*/,
                          size_t /*length*/) {
  return UCS_ERR_UNSUPPORTED;  // pieces arrive as active-message data, never unpacked
}
void piece_finish(void* /*state*/) {}
const ucp_generic_dt_ops_t kPieceOps{piece_start_pack, piece_start_unpack, piece_packed_size,
                                     piece_pack,       piece_unpack,       piece_finish};

}  // namespace

ucs_status_t create_piece_datatype(ucp_datatype_t* datatype) {
  return ucp_dt_create_generic(&kPieceOps, nullptr, datatype);
}

// Exceptions must not unwind through UCX's C frames: every callback body is caught.
ucs_status_t UcxTransport::on_am(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  try {
    return handle_am(arg, header, header_length, data, length, param);
  } catch (const std::exception& e) {
    LOG(ERROR) << kUcxTag << "an active message could not be handled: " << e.what();
  }
  return UCS_OK;
}

ucs_status_t UcxTransport::handle_am(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
  const auto* a = static_cast<HandlerArg*>(arg);
  UcxTransport* self = a->self;
  int64_t sender = -1;
  if (header_length == sizeof(int64_t)) std::memcpy(&sender, header, sizeof(sender));
  // Liveness comes from the heartbeats (several per fault timeout); stamping every actor
  // message with the clock as well would only slow the message path.
  if (a->id != kActorMessage && a->id != kActorMessageWithData && sender >= 0 &&
      sender < self->env_.world_size) {
    self->peers_[sender]->last_heard_ns.store(now_ns(), std::memory_order_relaxed);
  }
  // The bootstrap messages are protobufs; actor messages are used in place (no copy).
  auto bytes = [&] { return std::string(static_cast<const char*>(data), length); };
  switch (a->id) {
    case kActorMessage: {
      MessageBytes message{};
      if (length != message.size()) break;
      std::memcpy(message.data(), data, length);
      self->deliver_message(message);
      break;
    }
    case kActorMessageWithData: {
      // Note [Small transfers travel with their message]: the piece is kept before the message
      // goes on, so the RECV that acts on the message finds it.
      WithDataHeader head;
      if (header_length != sizeof(head)) break;
      std::memcpy(&head, header, sizeof(head));
      if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        // UCX lets us keep its buffer: the RECV copies out of it, then it is given back
        // (ucp_am_data_release in fetch), one copy fewer than keeping a copy of our own.
        self->inline_.put_borrowed(head.tag, data, length, data);
        self->deliver_message(head.message);
        return UCS_INPROGRESS;
      }
      self->inline_.put(head.tag, data, length);
      self->deliver_message(head.message);
      break;
    }
    case kHello: {
      proto::HelloProto hello;
      std::lock_guard<std::mutex> lock(self->mu_);
      const bool parsed = hello.ParseFromArray(data, static_cast<int>(length));
      if (!parsed || hello.secret() != self->env_.secret) {
        LOG(WARNING) << kUcxTag << "refused a connection from " << (parsed ? hello.host() : "?")
                     << " claiming rank " << (parsed ? hello.rank() : -1)
                     << ": it did not present the job secret (OFL_JOB_SECRET)";
        proto::WelcomeProto refused;
        refused.set_refused("the job secret does not match (OFL_JOB_SECRET)");
        const std::string answer = refused.SerializeAsString();
        if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
          self->send_am(param->reply_ep, kWelcome, answer.data(), answer.size());
        }
        break;
      }
      if (hello.world_size() != self->env_.world_size) {
        self->bootstrap_error_ =
            str_cat(kUcxTag, "every rank must have the master's WORLD_SIZE ", self->env_.world_size,
                    ". However, rank ", hello.rank(), " on ", hello.host(), " has WORLD_SIZE ",
                    hello.world_size(), ".");
      } else if (hello.rank() <= 0 || hello.rank() >= self->env_.world_size ||
                 self->joined_.count(hello.rank())) {
        self->bootstrap_error_ =
            str_cat(kUcxTag, "each rank in [1, ", self->env_.world_size,
                    ") must join once. However, rank ", hello.rank(), " on ", hello.host(),
                    self->joined_.count(hello.rank()) ? " joined twice." : " is out of range.");
      } else if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        self->joined_[hello.rank()] = {param->reply_ep, bytes()};
      }
      if (!self->bootstrap_error_.empty() && (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        // The offender learns too: the master's answer to every joined rank follows.
        proto::WelcomeProto refused;
        refused.set_refused(self->bootstrap_error_);
        const std::string answer = refused.SerializeAsString();
        self->send_am(param->reply_ep, kWelcome, answer.data(), answer.size());
      }
      self->cv_.notify_all();
      break;
    }
    case kWelcome: {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (!self->welcome_.has_value()) self->welcome_ = bytes();
      self->cv_.notify_all();
      break;
    }
    case kBarrier: {
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->barrier_arrivals_;
      self->cv_.notify_all();
      break;
    }
    case kBarrierRelease: {
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->barrier_released_;
      self->cv_.notify_all();
      break;
    }
    case kGoodbye:
      if (sender >= 0 && sender < self->env_.world_size) self->peers_[sender]->left = true;
      break;
    default:  // kHeartbeat: last_heard above is all
      break;
  }
  return UCS_OK;
}

void UcxTransport::deliver_message(const MessageBytes& message) {
  {
    // Called under the lock: stop_serving_rank then waits for a call under way, so the
    // runtime behind the handler is not freed in the middle of it. Handlers do not block.
    std::shared_lock<std::shared_mutex> lock(handler_mu_);
    auto it = handlers_.find(env_.rank);
    if (it != handlers_.end()) {
      it->second(message);
      return;
    }
  }
  // Another rank's runtime may start before this one's: keep its messages for serve_rank.
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  auto it = handlers_.find(env_.rank);
  if (it != handlers_.end()) {
    it->second(message);
  } else {
    early_messages_.push_back(message);
  }
}

// ---- sending -----------------------------------------------------------------------------

void UcxTransport::send_am(ucp_ep_h ep, AmId id, const void* data, size_t bytes, bool reply) {
  {
    // Fast path: most small messages leave at once (shared memory, eager), and then the
    // caller's buffers can be used as they are. FORCE_IMM_CMPL makes UCX say when they cannot.
    const int64_t sender = env_.rank;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    ucs_status_ptr_t request =
        ucp_am_send_nbx(ep, id, &sender, sizeof(sender), data, bytes, &param);
    if (UCS_PTR_STATUS(request) == UCS_OK) return;
    OFL_ASSERT(!UCS_PTR_IS_PTR(request));
    OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_ERR_NO_RESOURCE, ErrorCode::kUnavailable, kUcxTag,
                   "rank ", env_.rank, " must send to its peer. However, UCX says ",
                   ucs_status_string(UCS_PTR_STATUS(request)), ".");
  }
  auto* out = new Outgoing{
      env_.rank,
      std::vector<char>(static_cast<const char*>(data), static_cast<const char*>(data) + bytes),
      outstanding_.get()};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
  param.cb.send = &free_outgoing;
  param.user_data = out;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_am_send_nbx(ep, id, &out->sender, sizeof(out->sender),
                                             out->data.data(), out->data.size(), &param);
  if (UCS_PTR_IS_PTR(request)) {
    outstanding_->count.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  delete out;
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ",
                 env_.rank, " must send to its peer. However, UCX says ",
                 ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

void UcxTransport::serve_rank(int64_t rank, MessageHandler handler) {
  OFL_CHECK(rank == env_.rank, kUcxTag, "a process serves its own rank (", env_.rank,
            "). However, got rank ", rank, ".");
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  auto [it, inserted] = handlers_.emplace(rank, std::move(handler));
  OFL_CHECK(inserted, kUcxTag, "rank ", rank, " is served already.");
  for (const MessageBytes& message : early_messages_) it->second(message);
  early_messages_.clear();
}

void UcxTransport::stop_serving_rank(int64_t rank) {
  {
    std::unique_lock<std::shared_mutex> lock(handler_mu_);
    handlers_.erase(rank);
    early_messages_.clear();  // a later runtime on this transport must not see them
  }
  {
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    for (void* token : inline_.clear()) ucp_am_data_release(worker_, token);
  }
  // The receives the runtime posted ahead point into its registers, which are about to go.
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  for (auto& [tag, queue] : prepared_) {
    for (Posted& posted : queue) cancel_receive(posted, 100'000'000);
  }
  prepared_.clear();
}

void UcxTransport::set_fault_handler(FaultHandler handler) {
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  fault_handler_ = std::move(handler);
}

const UcxTransport::Peer& UcxTransport::reachable_peer(int64_t dst_rank) const {
  OFL_CHECK_CODE(dst_rank >= 0 && dst_rank < env_.world_size && dst_rank != env_.rank,
                 ErrorCode::kUnavailable, kUcxTag,
                 "a message must go to another rank of the job. However, got rank ", dst_rank,
                 " (world size ", env_.world_size, ").");
  const Peer& peer = *peers_[dst_rank];
  OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kUcxTag, "rank ", dst_rank, " (", peer.host,
                 ") failed; no message can reach it.");
  return peer;
}

void UcxTransport::send(int64_t dst_rank, const MessageBytes& message) {
  send_am(reachable_peer(dst_rank).ep, kActorMessage, message.data(), message.size());
}

void UcxTransport::send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag,
                                  const void* data, size_t bytes) {
  OFL_ASSERT(bytes <= kInlineTransferBytes) << "transfer " << tag << " is too large to inline";
  const Peer& peer = reachable_peer(dst_rank);
  // One active message: the actor message and the tag in its header, the piece as its data,
  // packed by UCX from `data` itself (Note [Pieces packed by us]). UCX sends at once when the
  // peer's queue has room (eager bcopy); otherwise the request stays in flight, and this waits
  // for it, driving the worker (the peer drains its queue).
  struct Outbox {
    WithDataHeader header;
    PieceSource source;
  };
  thread_local std::unique_ptr<Outbox> outbox;
  if (outbox == nullptr) outbox = std::make_unique<Outbox>();
  outbox->header = WithDataHeader{env_.rank, message, tag};
  outbox->source = PieceSource{static_cast<const char*>(data), bytes};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.datatype = piece_datatype_;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_am_send_nbx(peer.ep, kActorMessageWithData, &outbox->header,
                                             sizeof(outbox->header), &outbox->source, 1, &param);
  if (UCS_PTR_IS_PTR(request)) {
    // The lock is let go every turn, as in fetch: the progress thread's heartbeats are what
    // find a peer that stopped draining its queue failed (holding the lock, this waited forever).
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !peer.failed) {
      const unsigned progressed = ucp_worker_progress(worker_);
      ucx.unlock();
      if (progressed == 0) std::this_thread::yield();
      ucx.lock();
    }
    const ucs_status_t status = ucp_request_check_status(request);
    if (status == UCS_INPROGRESS) {  // given up on: UCX may still pack it
      outbox->source.data = nullptr;
      (void)outbox.release();
    }
    ucp_request_free(request);
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
                   " must send transfer ", tag, " to rank ", dst_rank, ". However, ",
                   status == UCS_INPROGRESS ? "that rank failed" : ucs_status_string(status), ".");
    return;
  }
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ",
                 env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                 ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

void UcxTransport::expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) {
  const Peer& peer = *peers_.at(dst_rank);
  ucp_request_param_t param{};
  // Not counted as outstanding: a rendezvous send completes only when the receiver reads it,
  // and the progress thread must not spin all that while (the RECV's thread drives UCX).
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
  param.cb.send = &free_request;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_send_nbx(peer.ep, data, bytes, tag, &param);
  ucx.unlock();
  if (UCS_PTR_IS_PTR(request)) return;
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ",
                 env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                 ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

}  // namespace ofl::comm
