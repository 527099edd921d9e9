#pragma once
// ProgramPositions: the runs a process started that exchange data with each other process, in
// order, compared with what those processes say they ran (TransportSessions keeps one, under
// its lock).
//
// Note [Program positions]: two ranks that exchange data in their runs (nn.Graph calls, eager
// ops on global tensors) must start those runs in the same order: the k-th run in which ranks 0
// and 1 exchange data is one job's, and the same iteration of it, on both. Ranks that disagree
// (a branch on the rank, an op run on one rank only, an exception caught on one rank only)
// otherwise each waited in a different session for data never sent, until the watchdog's
// report minutes later, or paired one job's data with another's.
//
// So each process counts, per other rank, the runs it starts that exchange data with it, and at
// the start of each tells that rank its position there, the session and the iteration of the
// session (kRunPosition, one message per peer, not waited for, sent before the run's own
// messages on the same connection). Whichever comes first, its own start or the peer's message,
// the two are compared, and so is where each started that iteration of that session (the
// data of that iteration pairs the two runs whatever their positions). On a difference the
// run under way ends at once (or, if it has finished, the next run with that rank is refused),
// every later run exchanging data with that rank in this process is refused, and the error
// names both ranks and what each runs. The process answers the peer with its own entry (the
// peer may be waiting for it while it runs something else), so the peer finds the difference
// too; answers are not answered.
//
// Runs that exchange no data with a rank take no position with it: a rank-dependent op that
// needs no other process (logging a value on rank 0: `if rank == 0: print(loss.mean().item())`
// on a replicated loss) changes nothing of the others, and the ranks' programs may differ so.
// The first version chained every run, and refused exactly that (and announcing every run made
// the eager DP2 GPT step 8% slower: docs/benchmarks.md).
//
// Runs that fail (Note [Failed runs across processes] in runtime.cpp) keep the ranks in step: a
// run after a peer's failed iteration is refused before it takes a position, and one started
// before the notice came is taken back (abandon), as the failed rank ignores announcements of
// runs after its failed one.
//
// Limits:
//  - A run that one rank adds of the same job as the others' next one pairs with it; the
//    difference shows at the next run with those ranks where the programs differ (or at the
//    program's end: Note [Departures] in session_transport.h).
//  - Different values from rank-dependent runs that exchange no data (`y * 2` on one rank,
//    `y * 3` on the other, then the same all-reduce of the results) are not seen: the
//    all-reduce is the same run on both.
//  - Runs with one rank start one at a time per process: ops on global tensors from two threads
//    at once (Runtime::run lets go of the GIL) start in an order that differs between ranks, and
//    are refused (as collectives from two threads are unsafe in PyTorch and NCCL).
//  - An order that every pair of ranks agrees on can still form a cycle over three ranks (0
//    waits for 1, 1 for 2, 2 for 0): the watchdog reports it.
//  - One rank per process (UCX's): the lowest hosted rank speaks for a process hosting several.
//  - The announcement is an active message and is handled before the run's data only as far as
//    UCX keeps its order on a connection: active messages do; tagged transfers (collectives)
//    and NCCL's GPU transfers do not promise to come after it.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oneflowlike/common/error.h"

namespace ofl::actor {

class ProgramPositions {
 public:
  /// What a rank started at a position with another rank.
  struct Run {
    uint32_t session = 0;
    int64_t iteration = 0;  // of the session: how many runs of it this rank started before
  };

  /// Names session `session`'s job in errors.
  void name(uint32_t session, const std::string& job) { names_[session] = job; }
  std::string name_of(uint32_t session) const {
    auto it = names_.find(session);
    return it == names_.end() ? str_cat("session ", session) : it->second;
  }

  /// Hosted rank `rank` starts a run of `session` exchanging data with `peers` (ranks of other
  /// processes). Returns the position with each peer and this run's entry; a difference with an
  /// announcement that came first sets failure() for that peer.
  struct Start {
    Run run;
    std::map<int64_t, int64_t> positions;  // by peer
  };
  Start start(int64_t rank, uint32_t session, const std::vector<int64_t>& peers);

  /// Rank `peer` announced `theirs` at `position` with this process. Returns this rank's entry
  /// there (or where it started that iteration of that session) when it differs, and sets
  /// failure(peer); nullopt when it matches or is not known here yet (kept until this rank gets
  /// there) or any more.
  struct Mine {
    int64_t position = 0;
    Run run;
  };
  std::optional<Mine> hear(int64_t peer, int64_t position, const Run& theirs);

  /// Note [Failed runs across processes] in runtime.cpp: the runs of `session` after
  /// `iteration` never happen on some rank (it failed there). This process's latest start with
  /// each of `peers`, if it is one of them, is taken back, and peers' announcements of them are
  /// ignored, so the ranks' positions stay in step.
  void abandon(uint32_t session, int64_t iteration, const std::vector<int64_t>& peers);

  /// Why no more runs exchanging data with `peer` may start, or "".
  const std::string& failure(int64_t peer) { return peers_[peer].failure; }
  /// The session of the latest run started with `peer` (0: none).
  uint32_t latest(int64_t peer) {
    const Peer& p = peers_[peer];
    return p.mine.empty() ? 0 : p.mine.back().session;
  }

 private:
  struct Peer {
    int64_t rank = -1;              // the hosted rank that speaks for this process
    int64_t next = 0;               // runs started here with that peer
    int64_t agreed = -1;            // last position the peer matched
    std::deque<Run> mine;           // the latest runs started
    std::map<int64_t, Run> theirs;  // announced ahead of this process, by position
    std::string failure;
  };
  // Sets `p.failure` from the first difference: this rank's `mine` at `position` against
  // `peer`'s `theirs` at `peer_position`.
  void differ(Peer& p, int64_t peer, int64_t position, const Run& mine, const Run& theirs,
              int64_t peer_position);
  std::string what(uint32_t session, int64_t rank, int64_t runner) const;

  std::map<int64_t, Peer> peers_;
  std::map<uint32_t, int64_t> started_;    // by session: its runs started here
  std::map<uint32_t, int64_t> abandoned_;  // by session: runs after this iteration (abandon)
  std::map<uint32_t, std::string> names_;  // kept after a session closes
};

}  // namespace ofl::actor
