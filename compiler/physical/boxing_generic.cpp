// The generic boxing decomposition (Note [Boxing decompositions] in boxing.h): any pair of
// placements and SBPs, even or uneven, through region intersections (Note [Region overlap] in
// oneflowlike/sbp.h).

#include <map>

#include "compiler/physical/boxing_steps.h"

namespace ofl::compiler::physical {

SourcePieces::SourcePieces(const BoxingSpec& spec, const Shape& logical) : spec_(spec) {
  const Placement& src = spec.in_placement;
  for (int64_t pid = 0; pid < src.num_ranks(); ++pid) {
    const std::vector<int64_t> coord = src.coordinate(pid);
    std::vector<int64_t> split_key, partial_key;
    for (size_t d = 0; d < spec.in_sbp.size(); ++d) {
      if (spec.in_sbp[d].is_split()) split_key.push_back(coord[d]);
      if (spec.in_sbp[d].is_partial_sum()) partial_key.push_back(coord[d]);
    }
    Group& group = groups_[split_key];
    group.region = logical_region(logical, spec.in_sbp, src, pid);
    group.replicas_by_partial[partial_key].push_back(pid);
  }
}

std::vector<SourcePieces::Piece> SourcePieces::covering(const Region& target, int64_t d,
                                                        int64_t rank) const {
  std::vector<Piece> pieces;
  int64_t choice = d;  // spreads the destinations over the replicas
  for (const auto& [split_key, group] : groups_) {
    const Region overlap = region_intersection(group.region, target);
    if (region_is_empty(overlap)) continue;
    Piece piece{overlap, group.region, {}};
    for (const auto& [partial_key, replicas] : group.replicas_by_partial) {
      int64_t pick = replicas[choice % static_cast<int64_t>(replicas.size())];
      for (int64_t pid : replicas) {
        if (spec_.in_placement.rank(pid) == rank) pick = pid;
      }
      piece.addends.push_back(pick);
    }
    ++choice;
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::vector<int64_t> expand_generic(const BoxingSpec& spec, const Shape& logical,
                                    const std::vector<int64_t>& in, StepEmitter& e) {
  const Placement& dst = spec.out_placement;
  const SourcePieces sources(spec, logical);
  std::vector<int64_t> out;
  for (int64_t d = 0; d < dst.num_ranks(); ++d) {
    const int64_t rank = dst.rank(d);
    const std::vector<int64_t> coord = dst.coordinate(d);
    const Shape shape = physical_shape(logical, spec.out_sbp, dst, d);
    // A partial-sum output keeps the logical value when one holder has it and the rest zeros.
    bool receives = true;
    for (size_t k = 0; k < spec.out_sbp.size(); ++k) {
      if (spec.out_sbp[k].is_partial_sum() && coord[k] != 0) receives = false;
    }
    const Region target = logical_region(logical, spec.out_sbp, dst, d);
    if (!receives || region_is_empty(target)) {
      // Read where the output placement computes (Note [Local boxing steps on a GPU]).
      e.set_device(plan_device(dst));
      out.push_back(e.zeros(rank, shape));
      e.set_device(proto::PLAN_DEVICE_CPU);
      continue;
    }
    std::vector<std::pair<int64_t, Region>> pieces;
    int64_t covered = 0;
    for (const SourcePieces::Piece& piece : sources.covering(target, d, rank)) {
      std::vector<int64_t> addends;
      for (int64_t pick : piece.addends) {
        addends.push_back(
            e.move(e.slice(in[pick], region_relative_to(piece.overlap, piece.source)), rank));
      }
      pieces.emplace_back(e.add(addends), region_relative_to(piece.overlap, target));
      covered += region_shape(piece.overlap).numel();
    }
    OFL_ASSERT(covered == region_shape(target).numel());
    if (pieces.size() == 1 && pieces[0].second == whole_region(shape)) {
      out.push_back(pieces[0].first);
    } else {
      out.push_back(e.concat(rank, pieces, shape));
    }
  }
  return out;
}

}  // namespace ofl::compiler::physical
