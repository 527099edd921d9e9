// Boxing within one placement when one hierarchy dimension changes (Note [Boxing
// decompositions] in boxing.h): collectives over the dimension's communicators (Note
// [Collective tasks] in oneflowlike/collective.h), local slices and B -> P.

#include <map>

#include "compiler/physical/boxing_steps.h"

namespace ofl::compiler::physical {

namespace {

/// Parallel ids grouped by every coordinate except dimension k, each group ordered by its
/// coordinate in k (the ring order).
std::vector<std::vector<int64_t>> groups_along(const Placement& placement, int k) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_key;
  const int64_t n = placement.hierarchy()[k];
  for (int64_t pid = 0; pid < placement.num_ranks(); ++pid) {
    std::vector<int64_t> coord = placement.coordinate(pid);
    const int64_t member = coord[k];
    coord[k] = 0;
    std::vector<int64_t>& group = by_key[coord];
    group.resize(n, -1);
    group[member] = pid;
  }
  std::vector<std::vector<int64_t>> groups;
  for (auto& [key, group] : by_key) groups.push_back(std::move(group));
  return groups;
}

/// The n balanced chunks of a local tensor of `shape` along `axis`.
std::vector<Region> chunks_along(const Shape& shape, int axis, int64_t n) {
  return collective_chunks(shape, axis, n);
}

}  // namespace

std::vector<int64_t> expand_same_placement(const BoxingStep& step, const Shape& logical,
                                           const std::vector<int64_t>& in, StepEmitter& e) {
  const BoxingSpec& spec = step.spec;
  const Placement& placement = spec.in_placement;
  if (step.kind == BoxingKind::kIdentity) return in;
  int k = -1;
  for (size_t d = 0; d < spec.in_sbp.size(); ++d) {
    if (spec.in_sbp[d] != spec.out_sbp[d]) k = static_cast<int>(d);
  }
  OFL_ASSERT(k >= 0);
  const int64_t n = placement.hierarchy()[k];
  std::vector<int64_t> out(placement.num_ranks(), -1);
  for (const std::vector<int64_t>& members : groups_along(placement, k)) {
    const Shape in_shape = physical_shape(logical, spec.in_sbp, placement, members[0]);
    const Shape out_shape = physical_shape(logical, spec.out_sbp, placement, members[0]);
    switch (step.kind) {
      case BoxingKind::kAllReduce:
      case BoxingKind::kReduceScatter:
      case BoxingKind::kAllGather:
      case BoxingKind::kAllToAll: {
        using Op = proto::CollectiveProto;
        const Op::Op op = step.kind == BoxingKind::kAllReduce       ? Op::ALL_REDUCE
                          : step.kind == BoxingKind::kReduceScatter ? Op::REDUCE_SCATTER
                          : step.kind == BoxingKind::kAllGather     ? Op::ALL_GATHER
                                                                    : Op::ALL_TO_ALL;
        const int axis = step.kind == BoxingKind::kAllReduce       ? -1
                         : step.kind == BoxingKind::kReduceScatter ? spec.out_sbp[k].axis
                                                                   : spec.in_sbp[k].axis;
        // An all-to-all's output is split along the other axis.
        const int out_axis = step.kind == BoxingKind::kAllToAll ? spec.out_sbp[k].axis : 0;
        std::vector<Shape> out_shapes;
        for (int64_t pid : members) {
          out_shapes.push_back(physical_shape(logical, spec.out_sbp, placement, pid));
        }
        const std::vector<int64_t> results =
            e.collective(op, placement, k, members, in, out_shapes, axis, out_axis);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = results[m];
        break;
      }
      case BoxingKind::kLocalSlice: {  // Note [Local boxing steps on a GPU] in expansion.h
        e.set_device(plan_device(placement));
        const std::vector<Region> chunks = chunks_along(in_shape, spec.out_sbp[k].axis, n);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = e.slice(in[members[m]], chunks[m]);
        e.set_device(proto::PLAN_DEVICE_CPU);
        break;
      }
      case BoxingKind::kBroadcastToPartial: {
        e.set_device(plan_device(placement));
        out[members[0]] = e.copy(in[members[0]]);
        for (int64_t m = 1; m < n; ++m) {
          out[members[m]] = e.zeros(placement.rank(members[m]), out_shape);
        }
        e.set_device(proto::PLAN_DEVICE_CPU);
        break;
      }
      case BoxingKind::kIdentity:
      case BoxingKind::kBroadcast:
      case BoxingKind::kSendRecv:
      case BoxingKind::kGeneric:
        OFL_ASSERT(false);
    }
  }
  // Every result must have the shape the output SBP gives its parallel id.
  for (int64_t pid = 0; pid < placement.num_ranks(); ++pid) {
    OFL_ASSERT(e.builder().register_shape(out[pid]) ==
               physical_shape(logical, spec.out_sbp, placement, pid));
  }
  return out;
}

}  // namespace ofl::compiler::physical
