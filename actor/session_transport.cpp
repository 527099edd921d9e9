// TransportSessions and the per-session view of the shared transport (see the header).

#include "actor/session_transport.h"

#include <glog/logging.h>

#include "actor/message.h"
#include "oneflowlike/common/error.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = "[transport sessions] ";

// Transfer tags of a session: the 32-bit session above the plan's transfer id (below 2^32).
constexpr int kSessionShift = 32;

uint64_t session_tag(uint32_t session, uint64_t tag) {
  OFL_ASSERT(tag < (uint64_t{1} << kSessionShift)) << "transfer id " << tag << " too large";
  return (uint64_t{session} << kSessionShift) | tag;
}

}  // namespace

class SessionTransport final : public comm::Transport {
 public:
  SessionTransport(std::shared_ptr<TransportSessions> sessions, uint32_t session)
      : sessions_(std::move(sessions)), session_(session) {}
  ~SessionTransport() override { sessions_->close(session_); }

  const comm::Transport* network() const override { return sessions_->base().network(); }

  void serve_rank(int64_t rank, comm::MessageHandler handler) override {
    sessions_->serve(session_, rank, std::move(handler));
  }
  void stop_serving_rank(int64_t rank) override { sessions_->stop_serving(session_, rank); }
  void send(int64_t dst_rank, const comm::MessageBytes& message) override {
    ActorMessage m = from_bytes(message);
    m.session = session_;
    sessions_->base().send(dst_rank, to_bytes(m));
  }
  void send_with_data(int64_t dst_rank, const comm::MessageBytes& message, uint64_t tag,
                      const void* data, size_t bytes) override {
    ActorMessage m = from_bytes(message);
    m.session = session_;
    sessions_->base().send_with_data(dst_rank, to_bytes(m), session_tag(session_, tag), data,
                                     bytes);
  }
  void expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) override {
    sessions_->base().expose(dst_rank, session_tag(session_, tag), data, bytes);
  }
  void fetch(int64_t src_rank, uint64_t tag, uint64_t address, void* dst, size_t bytes) override {
    sessions_->base().fetch(src_rank, session_tag(session_, tag), address, dst, bytes);
  }
  void prepare_fetch(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) override {
    sessions_->base().prepare_fetch(src_rank, session_tag(session_, tag), dst, bytes);
  }
  TaggedRequest send_tagged(int64_t dst_rank, uint64_t tag, const void* data,
                            size_t bytes) override {
    return sessions_->base().send_tagged(dst_rank, session_tag(session_, tag), data, bytes);
  }
  TaggedRequest receive_tagged(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) override {
    return sessions_->base().receive_tagged(src_rank, session_tag(session_, tag), dst, bytes);
  }
  bool test(TaggedRequest& request) override { return sessions_->base().test(request); }
  bool progress() override { return sessions_->base().progress(); }
  void set_fault_handler(FaultHandler handler) override {
    sessions_->set_fault_handler(session_, std::move(handler));
  }
  void set_departure_handler(DepartureHandler handler) override {
    sessions_->set_departure_handler(session_, std::move(handler));
  }
  std::string begin_run(const std::vector<int64_t>& peers) override {
    return sessions_->begin_run(session_, peers);
  }
  void abandon_runs_after(int64_t iteration, const std::vector<int64_t>& peers) override {
    sessions_->abandon_runs_after(session_, iteration, peers);
  }
  void set_position_handler(PositionHandler handler, const std::string& job) override {
    sessions_->set_position_handler(session_, std::move(handler), job);
  }

 private:
  std::shared_ptr<TransportSessions> sessions_;
  uint32_t session_;
};

TransportSessions::TransportSessions(std::shared_ptr<comm::Transport> base,
                                     const std::vector<int64_t>& ranks)
    : base_(std::move(base)) {
  OFL_CHECK(base_ != nullptr, kTag, "needs a transport.");
  for (int64_t rank : ranks) {
    base_->serve_rank(rank, [this, rank](const comm::MessageBytes& m) { dispatch(rank, m); });
    base_ranks_.insert(rank);
  }
  // Handlers run under the lock, so once a session clears its handler (a runtime shutting
  // down) it is never called again.
  base_->set_fault_handler([this](int64_t rank, const std::string& why) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    for (const auto& [session, handler] : fault_handlers_) handler(rank, why);
  });
}

TransportSessions::~TransportSessions() {
  for (int64_t rank : base_ranks_) base_->stop_serving_rank(rank);
  base_->set_fault_handler(nullptr);
}

std::shared_ptr<comm::Transport> TransportSessions::open(uint32_t session) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  OFL_CHECK(open_.count(session) == 0 && closed_.count(session) == 0, kTag, "session ", session,
            open_.count(session) ? " is open already" : " was used before in this process",
            ": every runtime of a process needs its own id (Note [Session ids]).");
  open_.insert(session);
  return std::make_shared<SessionTransport>(shared_from_this(), session);
}

size_t TransportSessions::dropped_messages() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return dropped_;
}

void TransportSessions::serve(uint32_t session, int64_t rank, comm::MessageHandler handler) {
  std::vector<comm::MessageBytes> early;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    OFL_CHECK(handlers_.emplace(std::make_pair(rank, session), handler).second, kTag, "rank ", rank,
              " is served already in session ", session, ".");
    auto it = early_.find({rank, session});
    if (it != early_.end()) {
      early = std::move(it->second);
      early_.erase(it);
    }
    // Delivered under the lock, before any later message of the session can be.
    for (const auto& message : early) handler(message);
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (base_ranks_.insert(rank).second) {
    base_->serve_rank(rank, [this, rank](const comm::MessageBytes& m) { dispatch(rank, m); });
  }
}

void TransportSessions::stop_serving(uint32_t session, int64_t rank) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  handlers_.erase({rank, session});
}

void TransportSessions::set_fault_handler(uint32_t session, comm::Transport::FaultHandler handler) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (handler) {
    fault_handlers_[session] = std::move(handler);
  } else {
    fault_handlers_.erase(session);
  }
}

void TransportSessions::set_departure_handler(uint32_t session,
                                              comm::Transport::DepartureHandler handler) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!handler) {
    departure_handlers_.erase(session);
    return;
  }
  departure_handlers_[session] = handler;
  for (int64_t rank : departed_) {  // departures that came first
    const auto& progress = departure_progress_[rank];
    auto it = progress.find(session);
    handler(rank, it == progress.end() ? 0 : it->second);
  }
}

void TransportSessions::set_position_handler(uint32_t session,
                                             comm::Transport::PositionHandler handler,
                                             const std::string& job) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!job.empty()) positions_.name(session, job);
  if (handler) {
    position_handlers_[session] = std::move(handler);
  } else {
    position_handlers_.erase(session);
  }
}

std::string TransportSessions::begin_run(uint32_t session, const std::vector<int64_t>& peers) {
  int64_t from = -1;  // the hosted rank that speaks for this process
  std::vector<int64_t> told;
  std::string refused;
  ProgramPositions::Start start;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    for (int64_t peer : peers) {
      if (base_ranks_.count(peer)) continue;
      const std::string& failure = positions_.failure(peer);
      if (failure.empty()) {
        told.push_back(peer);
      } else if (refused.empty()) {
        refused = str_cat("[runtime] refused: '", positions_.name_of(session),
                          "' exchanges data with rank ", peer,
                          ", and an earlier run found: ", failure.substr(failure.find(']') + 2));
      }
    }
    if (told.empty() || base_ranks_.empty()) return refused;
    from = *base_ranks_.begin();
    // Refused or not, the run takes its position with the other peers, which count theirs.
    start = positions_.start(from, session, told);
  }
  // Sent outside the lock: in one process, a peer's sessions may be sending to these at once.
  for (int64_t peer : told) {
    try {
      base_->send(peer, to_bytes(ActorMessage::run_position(from, peer, start.positions.at(peer),
                                                            session, start.run.iteration,
                                                            /*answer=*/false)));
    } catch (const Error& e) {  // a peer gone: its fault or departure ends the run
      VLOG(1) << kTag << "no run position sent to rank " << peer << ": " << e.what();
    }
  }
  if (!refused.empty()) return refused;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  for (int64_t peer : told) {
    const std::string& failure = positions_.failure(peer);
    if (!failure.empty()) return failure;
  }
  return {};
}

void TransportSessions::abandon_runs_after(uint32_t session, int64_t iteration,
                                           const std::vector<int64_t>& peers) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  positions_.abandon(session, iteration, peers);
}

std::optional<ActorMessage> TransportSessions::on_run_position(const ActorMessage& message) {
  const int64_t peer = message.src_rank;
  const bool failed = !positions_.failure(peer).empty();
  const auto mine = positions_.hear(peer, message.piece, {message.session, message.register_id});
  if (!mine.has_value()) return std::nullopt;
  if (!failed) {
    // The latest run with that rank may be waiting for it: it ends now.
    auto handler = position_handlers_.find(positions_.latest(peer));
    if (handler != position_handlers_.end()) handler->second(positions_.failure(peer));
  }
  // The sender may be waiting for this process: the answer ends that wait. Answers are not
  // answered.
  if (message.slot != 0) return std::nullopt;
  return ActorMessage::run_position(message.dst_rank, peer, mine->position, mine->run.session,
                                    mine->run.iteration, /*answer=*/true);
}

void TransportSessions::announce_departure(const std::map<uint32_t, int64_t>& iterations,
                                           const std::vector<int64_t>& ranks) {
  std::set<int64_t> hosted;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    hosted = base_ranks_;
  }
  OFL_CHECK(!hosted.empty(), kTag, "announce_departure needs a rank served here.");
  for (int64_t from : hosted) {  // each hosted rank departs: peers may know only one of them
    for (int64_t rank : ranks) {
      if (hosted.count(rank)) continue;
      try {
        for (const auto& [session, count] : iterations) {
          base_->send(rank, to_bytes(ActorMessage::departure_progress(from, rank, session, count)));
        }
        base_->send(rank, to_bytes(ActorMessage::departure(from, rank)));
      } catch (const Error& e) {  // a rank already gone needs no goodbye; the others still do
        VLOG(1) << kTag << "no departure sent to rank " << rank << ": " << e.what();
      }
    }
  }
}

void TransportSessions::on_departure(const comm::MessageBytes& bytes) {
  const ActorMessage message = from_bytes(bytes);
  const int64_t rank = message.src_rank;
  if (message.kind == ActorMessage::Kind::kDepartureProgress) {
    departure_progress_[rank][message.session] = message.piece;
    return;
  }
  if (!departed_.insert(rank).second) return;
  VLOG(1) << kTag << "rank " << rank << " has departed";
  const auto& progress = departure_progress_[rank];
  for (const auto& [session, handler] : departure_handlers_) {
    auto it = progress.find(session);
    handler(rank, it == progress.end() ? 0 : it->second);
  }
}

void TransportSessions::close(uint32_t session) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  open_.erase(session);
  closed_.insert(session);
  fault_handlers_.erase(session);
  departure_handlers_.erase(session);
  position_handlers_.erase(session);
  for (auto it = handlers_.begin(); it != handlers_.end();) {
    it = it->first.second == session ? handlers_.erase(it) : std::next(it);
  }
  for (auto it = early_.begin(); it != early_.end();) {
    if (it->first.second == session) {
      dropped_ += it->second.size();
      it = early_.erase(it);
    } else {
      ++it;
    }
  }
}

void TransportSessions::dispatch(int64_t rank, const comm::MessageBytes& message) {
  const ActorMessage decoded = from_bytes(message);
  const uint32_t session = decoded.session;
  if (decoded.kind == ActorMessage::Kind::kRunPosition) {
    std::optional<ActorMessage> answer;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      answer = on_run_position(decoded);
    }
    if (answer.has_value()) {  // outside the lock, as begin_run sends
      try {
        base_->send(answer->dst_rank, to_bytes(*answer));
      } catch (const Error& e) {
        VLOG(1) << kTag << "no run position answered to rank " << answer->dst_rank << ": "
                << e.what();
      }
    }
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (decoded.kind == ActorMessage::Kind::kDepartureProgress ||
      decoded.kind == ActorMessage::Kind::kDeparture) {
    on_departure(message);
    return;
  }
  auto it = handlers_.find({rank, session});
  if (it != handlers_.end()) {
    it->second(message);
    return;
  }
  if (closed_.count(session)) {
    ++dropped_;
    VLOG(1) << kTag << "dropped a late message for closed session " << session << " on rank "
            << rank;
    return;
  }
  early_[{rank, session}].push_back(message);
}

}  // namespace ofl::actor
