#pragma once
// ProgramPositions: the runs a process started over each set of ranks, in order, compared with
// what the other processes say they ran (TransportSessions keeps one, under its lock).
//
// Note [Program positions]: the ranks of a job (the ranks of its placements) must start its runs
// (an nn.Graph call, an eager op on global tensors) in the same order relative to the other
// jobs over those same ranks: the k-th run that ranks {0, 1} start together is one job's on
// both. Ranks that disagree (a branch on the rank, an op run on one rank only, an exception
// caught on one rank only) would otherwise wait in different sessions for data never sent,
// until the watchdog's report minutes later, or, worse, pair one job's data with another's: a
// sum on one rank and a mean on the other, each of its own piece, then the same all-reduce on
// both, gave a wrong value and no error.
//
// So each process counts the runs it starts over each set of members, and chains them: run k's
// chain is a hash of run k - 1's chain and run k's session. At the start of a run that
// exchanges data with other processes it tells those peers its position, session and chain
// (kRunPosition, one message per peer, not waited for; sent before the run's own messages, on
// the same connection). Runs needing no other process announce nothing: one message per run
// woke the ranks' UCX progress threads more often and made the eager DP2 GPT step 8% slower
// (docs/benchmarks.md). Their sessions are in the chain all the same, so a difference among
// them shows at the next run that exchanges data, before any of its data is taken.
//
// Whichever comes first, its own start or the peer's message, the two chains at that position
// are compared; and a peer's announcement of a session's iteration that this rank started at
// another position differs at once (the data of that iteration is about to pair the two runs,
// and the announcement comes before it). On a difference, the run at the latest position over those
// ranks ends at once, every later run over them in this process is refused, and the error names
// both ranks and what each runs there, or, where both run the same job, the runs this rank started
// since the position they last agreed on. The process answers the peer with its own entry at that
// position (the peer may be waiting for it while it runs something that needs nothing of the
// peer), so the peer finds the difference too; answers are not answered.
//
// Limit: a run that one rank adds of the same job as the others' next one, with nothing before
// it to tell them apart, pairs with it; the difference shows at the next position where the
// programs differ (or at the program's end: Note [Departures] in session_transport.h).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ofl::actor {

class ProgramPositions {
 public:
  /// What a rank started at a position.
  struct Run {
    uint32_t session = 0;
    int64_t iteration = 0;  // of the session: how many runs of it this rank started before
    uint64_t chain = 0;     // of this run and every run before it over the same ranks
  };

  /// Names session `session`'s job in errors.
  void name(uint32_t session, const std::string& job) { names_[session] = job; }

  /// Hosted rank `rank` starts a run of `session` over `members` (digest `digest`): its
  /// position and entry, and the ranks whose earlier announcement of that position differs
  /// (they hear of this start: they may be waiting for it). Sets failure() on a difference.
  struct Start {
    int64_t position = 0;
    Run run;
    std::vector<int64_t> differing;
  };
  Start start(uint64_t digest, const std::vector<int64_t>& members, int64_t rank, uint32_t session);

  /// Rank `peer` announced `theirs` at `position` over the members of `digest`. Returns this
  /// rank's entry there (or where it started that iteration of that session) when it differs,
  /// and sets failure(); nullopt when it matches or is not known here yet (kept until this rank
  /// gets there) or any more.
  struct Mine {
    int64_t position = 0;
    Run run;
  };
  std::optional<Mine> hear(uint64_t digest, int64_t peer, int64_t position, const Run& theirs);

  /// Why no more runs over the members of `digest` may start, or "".
  const std::string& failure(uint64_t digest) { return sets_[digest].failure; }
  /// The session of the latest run started over the members of `digest` (0: none).
  uint32_t latest(uint64_t digest) {
    const Set& set = sets_[digest];
    return set.mine.empty() ? 0 : set.mine.back().session;
  }

 private:
  struct Set {
    std::vector<int64_t> members;
    int64_t rank = -1;  // the hosted member that speaks for this process
    int64_t next = 0;   // runs started here
    uint64_t chain = 0;
    int64_t agreed = -1;                               // last position a peer matched
    std::deque<Run> mine;                              // the latest runs started
    std::map<int64_t, std::map<int64_t, Run>> theirs;  // announced ahead: position -> rank
    std::string failure;
  };
  // Sets `set.failure` from the first difference: this rank's `mine` at `position` against
  // `peer`'s `theirs` at `peer_position`.
  void differ(Set& set, int64_t position, const Run& mine, int64_t peer, const Run& theirs,
              int64_t peer_position);
  std::string what(uint32_t session, int64_t rank, int64_t runner) const;

  std::map<uint64_t, Set> sets_;
  std::map<uint32_t, int64_t> started_;    // by session: its runs started here
  std::map<uint32_t, std::string> names_;  // kept after a session closes
};

/// The digest naming a set of ranks (ascending) in kRunPosition messages.
uint64_t ranks_digest(const std::vector<int64_t>& ranks);

}  // namespace ofl::actor
