#pragma once
// Several runtimes in one process over one transport. Every nn.Graph and every cached eager op
// on global tensors is a runtime of its own, and a process has one UCX worker: each runtime
// gets a view of the shared transport for its session, which stamps the session on the
// runtime's messages (ActorMessage::session) and transfer tags, and one demultiplexer hands
// each incoming message to the runtime of its session.
//
//   auto sessions = std::make_shared<TransportSessions>(ucx, std::vector<int64_t>{rank});
//   RuntimeOptions options;
//   options.transport = sessions->open(graph_session_id);  // same id in every process
//
// Note [Session ids]: a session id names one runtime in every process of the job, so the
// processes must agree on it without talking: the Python front end derives it from the
// compiled job and how many runtimes of that job it created before. Ids are never reused in a
// process: a message for a closed session (a late ack) is dropped, one for a session not yet
// open is kept until it opens (another process may load the same plan sooner).
//
// Note [Departures]: a process whose program has ended (Python's exit, before the job's final
// barrier) tells every other rank how far it got: for each of its sessions, the iterations its
// runtime ran (kDepartureProgress), then kDeparture. A session's runtime on another process
// that is in, or later starts, an iteration the departed rank never ran can never finish it:
// it ends at once naming the rank and where it stopped (Runtime::on_rank_departure), instead
// of waiting for its watchdog. Sessions the departed rank never opened count as 0 iterations.
// A departure that comes before a session's runtime asks is handed to it when it does.
//
// Program positions (Note [Program positions] in actor/program_positions.h): begin_run and the
// kRunPosition messages.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actor/message.h"
#include "actor/program_positions.h"
#include "comm/transport.h"

namespace ofl::actor {

class TransportSessions : public std::enable_shared_from_this<TransportSessions> {
 public:
  /// Serves `ranks` (those this process hosts) on `base` from now on, so a message for a
  /// session not open yet is kept here until it opens.
  TransportSessions(std::shared_ptr<comm::Transport> base, const std::vector<int64_t>& ranks);
  ~TransportSessions();
  TransportSessions(const TransportSessions&) = delete;
  TransportSessions& operator=(const TransportSessions&) = delete;

  /// The transport of runtime `session`. Raises ofl::Error when the id is open already or was
  /// used before in this process.
  std::shared_ptr<comm::Transport> open(uint32_t session);

  comm::Transport& base() { return *base_; }
  /// Note [Departures]: tells every rank of `ranks` not hosted here that this process's program
  /// has ended after `iterations` iterations of each session (sessions not listed: none).
  void announce_departure(const std::map<uint32_t, int64_t>& iterations,
                          const std::vector<int64_t>& ranks);
  /// Note [Program positions]: session `session`'s runtime starts a run exchanging data with
  /// `peers`. Returns why it must not, or "".
  std::string begin_run(uint32_t session, const std::vector<int64_t>& peers);
  /// ProgramPositions::abandon for session `session`'s runtime.
  void abandon_runs_after(uint32_t session, int64_t iteration, const std::vector<int64_t>& peers);

  /// Sessions whose messages arrived before they opened, and messages dropped as late: for
  /// tests and diagnostics.
  size_t dropped_messages() const;

 private:
  friend class SessionTransport;
  void serve(uint32_t session, int64_t rank, comm::MessageHandler handler);
  void stop_serving(uint32_t session, int64_t rank);
  void set_fault_handler(uint32_t session, comm::Transport::FaultHandler handler);
  void set_departure_handler(uint32_t session, comm::Transport::DepartureHandler handler);
  void set_position_handler(uint32_t session, comm::Transport::PositionHandler handler,
                            const std::string& job);
  // A departure message from another process (Note [Departures]); called under mu_.
  void on_departure(const comm::MessageBytes& message);
  // A peer's kRunPosition (Note [Program positions]); called under mu_. Returns the answer to
  // send it, if any.
  std::optional<ActorMessage> on_run_position(const ActorMessage& message);
  void close(uint32_t session);
  void dispatch(int64_t rank, const comm::MessageBytes& message);

  std::shared_ptr<comm::Transport> base_;
  mutable std::recursive_mutex mu_;
  std::map<std::pair<int64_t, uint32_t>, comm::MessageHandler> handlers_;  // (rank, session)
  std::map<std::pair<int64_t, uint32_t>, std::vector<comm::MessageBytes>> early_;
  std::set<int64_t> base_ranks_;  // ranks served on the base transport
  std::set<uint32_t> open_;
  std::set<uint32_t> closed_;
  std::map<uint32_t, comm::Transport::FaultHandler> fault_handlers_;
  std::map<uint32_t, comm::Transport::DepartureHandler> departure_handlers_;
  // By departed rank: the iterations it ran of each session (Note [Departures]).
  std::map<int64_t, std::map<uint32_t, int64_t>> departure_progress_;
  std::set<int64_t> departed_;
  ProgramPositions positions_;
  std::map<uint32_t, comm::Transport::PositionHandler> position_handlers_;
  size_t dropped_ = 0;
};

}  // namespace ofl::actor
