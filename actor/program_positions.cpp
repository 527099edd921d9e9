// ProgramPositions (see the header, Note [Program positions]).

#include "actor/program_positions.h"

#include <algorithm>

#include "oneflowlike/common/error.h"

namespace ofl::actor {

namespace {

// How many past runs of a set of ranks are kept to compare with late announcements, and how
// many announcements ahead of this process; a peer further off is not checked.
constexpr size_t kKeptPositions = 4096;
// How many of the runs since the last agreed position an error names.
constexpr int64_t kNamedRuns = 10;

uint64_t mix(uint64_t chain, uint32_t session) {  // splitmix64's finaliser
  uint64_t z = chain + 0x9E3779B97F4A7C15ull + session;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += str_cat(i ? ", " : "", ranks[i]);
  return s + "}";
}

}  // namespace

uint64_t ranks_digest(const std::vector<int64_t>& ranks) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ranks' bytes
  for (int64_t r : ranks) {
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<uint64_t>(r) >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

ProgramPositions::Start ProgramPositions::start(uint64_t digest,
                                                const std::vector<int64_t>& members, int64_t rank,
                                                uint32_t session) {
  Set& set = sets_[digest];
  set.members = members;
  set.rank = rank;
  Start out;
  out.position = set.next++;
  set.chain = mix(set.chain, session);
  out.run = Run{session, started_[session]++, set.chain};
  set.mine.push_back(out.run);
  if (set.mine.size() > kKeptPositions) set.mine.pop_front();
  // A peer that announced this iteration of this session at a later position (it is ahead):
  // its data for this run may be here already.
  for (const auto& [position, by_peer] : set.theirs) {
    if (position == out.position) continue;
    for (const auto& [peer, theirs] : by_peer) {
      if (theirs.session == session && theirs.iteration == out.run.iteration) {
        differ(set, out.position, out.run, peer, theirs, position);
        out.differing.push_back(peer);
      }
    }
  }
  auto it = set.theirs.find(out.position);  // announcements that came first
  if (it != set.theirs.end()) {
    for (const auto& [peer, theirs] : it->second) {
      if (theirs.chain == out.run.chain) {
        set.agreed = std::max(set.agreed, out.position);
      } else {
        differ(set, out.position, out.run, peer, theirs, out.position);
        out.differing.push_back(peer);
      }
    }
    set.theirs.erase(it);
  }
  return out;
}

std::optional<ProgramPositions::Mine> ProgramPositions::hear(uint64_t digest, int64_t peer,
                                                             int64_t position, const Run& theirs) {
  Set& set = sets_[digest];
  const int64_t oldest = set.next - static_cast<int64_t>(set.mine.size());
  // Where this rank started the same iteration of the same session, if it did: the newest
  // starts are at the back.
  for (int64_t k = set.next - 1; k >= oldest; --k) {
    const Run& run = set.mine[k - oldest];
    if (run.session != theirs.session || run.iteration > theirs.iteration) continue;
    if (run.iteration < theirs.iteration) break;
    if (k == position) break;  // compared by chain below
    differ(set, k, run, peer, theirs, position);
    return Mine{k, run};
  }
  if (position >= set.next) {  // ahead of this process: compared when it gets there
    set.theirs[position][peer] = theirs;
    if (set.theirs.size() > kKeptPositions) set.theirs.erase(set.theirs.begin());
    return std::nullopt;
  }
  if (position < oldest) return std::nullopt;  // too far behind to check
  const Run mine = set.mine[position - oldest];
  if (mine.chain == theirs.chain) {
    set.agreed = std::max(set.agreed, position);
    return std::nullopt;
  }
  differ(set, position, mine, peer, theirs, position);
  return Mine{position, mine};
}

std::string ProgramPositions::what(uint32_t session, int64_t rank, int64_t runner) const {
  auto it = names_.find(session);
  if (it != names_.end()) return str_cat("'", it->second, "'");
  return str_cat("a graph or op that rank ", rank, " has not loaded (rank ", runner,
                 "'s error names it)");
}

void ProgramPositions::differ(Set& set, int64_t position, const Run& mine, int64_t peer,
                              const Run& theirs, int64_t peer_position) {
  if (!set.failure.empty()) return;
  const int64_t rank = set.rank;
  const std::string over = str_cat(" over ranks ", rank_list(set.members));
  // The runs this rank started since the position the ranks last agreed on, up to `position`.
  const auto since = [&] {
    const int64_t oldest = set.next - static_cast<int64_t>(set.mine.size());
    const int64_t first = std::max(set.agreed + 1, oldest);
    std::string runs;
    for (int64_t k = first; k < position; ++k) {
      if (k - first == kNamedRuns) {
        runs += str_cat(" and ", position - k, " more");
        break;
      }
      runs += str_cat(runs.empty() ? "" : ", ", what(set.mine[k - oldest].session, rank, rank));
    }
    return str_cat("since run ", first + 1, " rank ", rank, " ran ",
                   runs.empty() ? "nothing" : runs, "; rank ", peer,
                   "'s error lists its own runs.");
  };
  if (peer_position != position) {
    set.failure =
        str_cat("[runtime] ranks ", rank, " and ", peer, " run ", what(mine.session, rank, rank),
                " at different points of their programs", over, ": rank ", rank, " as its run ",
                position + 1, " there, rank ", peer, " as its run ", peer_position + 1,
                " (the run ", mine.iteration + 1, " of it on both): ", since());
  } else if (mine.session != theirs.session) {
    set.failure =
        str_cat("[runtime] ranks ", rank, " and ", peer, " run different things as run ",
                position + 1, over, ": rank ", rank, " runs ", what(mine.session, rank, rank),
                ", rank ", peer, " runs ", what(theirs.session, rank, peer), ".");
  } else {
    // The same job here: they differ earlier, among runs that exchanged no data.
    set.failure = str_cat("[runtime] ranks ", rank, " and ", peer,
                          " ran different things before run ", position + 1, over,
                          ", where both run ", what(mine.session, rank, rank), ": ", since());
  }
  set.failure += str_cat(
      " Every rank of a placement must run the same graphs and ops on global tensors in the same "
      "order (a branch on the rank, an op run on one rank only, or an exception caught on one "
      "rank only?). Ranks ",
      rank_list(set.members),
      " run nothing more together in this process (Note [Program positions]).");
}

}  // namespace ofl::actor
