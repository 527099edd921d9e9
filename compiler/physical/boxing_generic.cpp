// The generic boxing decomposition (Note [Boxing decompositions] in boxing.h): any pair of
// placements and SBPs, even or uneven, through region intersections (Note [Region overlap] in
// oneflowlike/sbp.h).

#include <map>

#include "compiler/physical/boxing_steps.h"

namespace ofl::compiler::physical {

std::vector<int64_t> expand_generic(const BoxingSpec& spec, const Shape& logical,
                                    const std::vector<int64_t>& in, StepEmitter& e) {
  const Placement& src = spec.in_placement;
  const Placement& dst = spec.out_placement;
  // Sources grouped by the region they hold (their split coordinates), then by their
  // partial-sum coordinates (addends to sum); the parallel ids left in a group are replicas.
  struct SourceGroup {
    Region region;
    std::map<std::vector<int64_t>, std::vector<int64_t>> replicas_by_partial;
  };
  std::map<std::vector<int64_t>, SourceGroup> sources;
  for (int64_t pid = 0; pid < src.num_ranks(); ++pid) {
    const std::vector<int64_t> coord = src.coordinate(pid);
    std::vector<int64_t> split_key, partial_key;
    for (size_t d = 0; d < spec.in_sbp.size(); ++d) {
      if (spec.in_sbp[d].is_split()) split_key.push_back(coord[d]);
      if (spec.in_sbp[d].is_partial_sum()) partial_key.push_back(coord[d]);
    }
    SourceGroup& group = sources[split_key];
    group.region = logical_region(logical, spec.in_sbp, src, pid);
    group.replicas_by_partial[partial_key].push_back(pid);
  }

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
      out.push_back(e.zeros(rank, shape));
      continue;
    }
    std::vector<std::pair<int64_t, Region>> pieces;
    int64_t covered = 0;
    int64_t choice = d;  // spreads the destinations over the replicas
    for (const auto& [split_key, group] : sources) {
      const Region overlap = region_intersection(group.region, target);
      if (region_is_empty(overlap)) continue;
      std::vector<int64_t> addends;
      for (const auto& [partial_key, replicas] : group.replicas_by_partial) {
        int64_t pick = replicas[choice % static_cast<int64_t>(replicas.size())];
        for (int64_t pid : replicas) {
          if (src.rank(pid) == rank) pick = pid;
        }
        addends.push_back(
            e.move(e.slice(in[pick], region_relative_to(overlap, group.region)), rank));
      }
      ++choice;
      pieces.emplace_back(e.add(addends), region_relative_to(overlap, target));
      covered += shape_of(overlap).numel();
    }
    OFL_ASSERT(covered == shape_of(target).numel());
    if (pieces.size() == 1 && pieces[0].second == whole(shape)) {
      out.push_back(pieces[0].first);
    } else {
      out.push_back(e.concat(rank, pieces, shape));
    }
  }
  return out;
}

}  // namespace ofl::compiler::physical
