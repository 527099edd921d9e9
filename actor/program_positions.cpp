// ProgramPositions (see the header, Note [Program positions]).

#include "actor/program_positions.h"

#include <algorithm>

#include "oneflowlike/common/error.h"

namespace ofl::actor {

namespace {

// How many past runs with a peer are kept to compare with late announcements, and how many
// announcements ahead of this process; a peer further off is not checked.
constexpr size_t kKeptPositions = 4096;
// How many of the runs since the last agreed position an error names.
constexpr int64_t kNamedRuns = 10;

}  // namespace

ProgramPositions::Start ProgramPositions::start(int64_t rank, uint32_t session,
                                                const std::vector<int64_t>& peers) {
  Start out;
  out.run = Run{session, started_[session]++};
  for (int64_t peer : peers) {
    Peer& p = peers_[peer];
    p.rank = rank;
    const int64_t position = p.next++;
    out.positions[peer] = position;
    p.mine.push_back(out.run);
    if (p.mine.size() > kKeptPositions) p.mine.pop_front();
    for (auto it = p.theirs.begin(); it != p.theirs.end();) {
      const auto& [at, theirs] = *it;
      if (at == position) {  // came first
        if (theirs.session == session && theirs.iteration == out.run.iteration) {
          p.agreed = std::max(p.agreed, position);
        } else {
          differ(p, peer, position, out.run, theirs, position);
        }
        it = p.theirs.erase(it);
        continue;
      }
      // The peer started this iteration at a later position: its data for this run may be
      // here already.
      if (theirs.session == session && theirs.iteration == out.run.iteration) {
        differ(p, peer, position, out.run, theirs, at);
      }
      ++it;
    }
  }
  return out;
}

void ProgramPositions::abandon(uint32_t session, int64_t iteration,
                               const std::vector<int64_t>& peers) {
  auto [it, fresh] = abandoned_.emplace(session, iteration);
  if (!fresh) it->second = std::min(it->second, iteration);
  const auto gone = [&](const Run& run) {
    return run.session == session && run.iteration > iteration;
  };
  for (int64_t peer : peers) {
    Peer& p = peers_[peer];
    while (!p.mine.empty() && gone(p.mine.back())) {
      p.mine.pop_back();
      --p.next;
    }
    for (auto at = p.theirs.begin(); at != p.theirs.end();) {
      at = gone(at->second) ? p.theirs.erase(at) : std::next(at);
    }
  }
}

std::optional<ProgramPositions::Mine> ProgramPositions::hear(int64_t peer, int64_t position,
                                                             const Run& theirs) {
  auto abandoned = abandoned_.find(theirs.session);
  if (abandoned != abandoned_.end() && theirs.iteration > abandoned->second) return std::nullopt;
  Peer& p = peers_[peer];
  const int64_t oldest = p.next - static_cast<int64_t>(p.mine.size());
  // Where this rank started the same iteration of the same session, if it did: the newest
  // starts are at the back.
  for (int64_t k = p.next - 1; k >= oldest; --k) {
    const Run& run = p.mine[k - oldest];
    if (run.session != theirs.session || run.iteration > theirs.iteration) continue;
    if (run.iteration < theirs.iteration || k == position) break;  // k == position: below
    differ(p, peer, k, run, theirs, position);
    return Mine{k, run};
  }
  if (position >= p.next) {  // ahead of this process: compared when it gets there
    p.theirs[position] = theirs;
    if (p.theirs.size() > kKeptPositions) p.theirs.erase(p.theirs.begin());
    return std::nullopt;
  }
  if (position < oldest) return std::nullopt;  // too far behind to check
  const Run mine = p.mine[position - oldest];
  if (mine.session == theirs.session && mine.iteration == theirs.iteration) {
    p.agreed = std::max(p.agreed, position);
    return std::nullopt;
  }
  differ(p, peer, position, mine, theirs, position);
  return Mine{position, mine};
}

std::string ProgramPositions::what(uint32_t session, int64_t rank, int64_t runner) const {
  auto it = names_.find(session);
  if (it != names_.end()) return str_cat("'", it->second, "'");
  return str_cat("a graph or op that rank ", rank, " has not loaded (rank ", runner,
                 "'s error names it)");
}

void ProgramPositions::differ(Peer& p, int64_t peer, int64_t position, const Run& mine,
                              const Run& theirs, int64_t peer_position) {
  if (!p.failure.empty()) return;
  const int64_t rank = p.rank;
  // The runs this rank started with the peer since the position they last agreed on.
  const int64_t oldest = p.next - static_cast<int64_t>(p.mine.size());
  const int64_t first = std::max(p.agreed + 1, oldest);
  std::string runs;
  for (int64_t k = first; k < position; ++k) {
    if (k - first == kNamedRuns) {
      runs += str_cat(" and ", position - k, " more");
      break;
    }
    runs += str_cat(runs.empty() ? "" : ", ", what(p.mine[k - oldest].session, rank, rank));
  }
  const std::string since = runs.empty() ? std::string()
                                         : str_cat(" Before it, since they last agreed, rank ",
                                                   rank, " ran ", runs, " with rank ", peer, ".");
  if (peer_position != position) {
    p.failure =
        str_cat("[runtime] ranks ", rank, " and ", peer, " run ", what(mine.session, rank, rank),
                " at different points of their programs: rank ", rank, " as its run ", position + 1,
                " exchanging data with rank ", peer, ", rank ", peer, " as its run ",
                peer_position + 1, " (the run ", mine.iteration + 1, " of it on both).", since);
  } else {
    p.failure =
        str_cat("[runtime] ranks ", rank, " and ", peer, " run different things as their run ",
                position + 1, " exchanging data with each other: rank ", rank, " runs ",
                what(mine.session, rank, rank),
                mine.session == theirs.session ? str_cat(" (its run ", mine.iteration + 1, ")")
                                               : std::string(),
                ", rank ", peer, " runs ", what(theirs.session, rank, peer),
                mine.session == theirs.session ? str_cat(" (its run ", theirs.iteration + 1, ")")
                                               : std::string(),
                ".", since);
  }
  p.failure += str_cat(
      " Every rank must run the graphs and ops on global tensors it shares with others in the "
      "same order (a branch on the rank, an op run on one rank only, an exception caught on one "
      "rank only, or ops on global tensors from two threads at once?). Rank ",
      rank, " runs nothing more with rank ", peer, " in this process (Note [Program positions]).");
}

}  // namespace ofl::actor
