// Boxing between layouts of one set of ranks that no collective of one hierarchy dimension
// makes (Note [Boxing decompositions] in boxing.h): a broadcast from one rank (Note [Broadcast]
// in oneflowlike/collective.h) and the grouped send/recv (Note [Grouped send/recv] there).

#include <algorithm>

#include "compiler/physical/boxing_steps.h"

namespace ofl::compiler::physical {

namespace {

// Every parallel id of `placement`, in order: the members of a collective over all its ranks.
std::vector<int64_t> all_members(const Placement& placement) {
  std::vector<int64_t> members(placement.num_ranks());
  for (int64_t pid = 0; pid < placement.num_ranks(); ++pid) members[pid] = pid;
  return members;
}

std::vector<Shape> out_shapes(const BoxingSpec& spec, const Shape& logical) {
  std::vector<Shape> shapes;
  for (int64_t pid = 0; pid < spec.out_placement.num_ranks(); ++pid) {
    shapes.push_back(physical_shape(logical, spec.out_sbp, spec.out_placement, pid));
  }
  return shapes;
}

}  // namespace

std::vector<int64_t> expand_broadcast(const BoxingSpec& spec, const Shape& logical,
                                      const std::vector<int64_t>& in, StepEmitter& e) {
  const Placement& dst = spec.out_placement;
  OFL_ASSERT(spec.in_placement.num_ranks() == 1 && in.size() == 1);
  const int64_t root = dst.parallel_id_of(spec.in_placement.rank(0)).value();
  std::vector<int64_t> inputs(dst.num_ranks(), -1);
  inputs[root] = in[0];
  std::vector<int64_t> members = all_members(dst);
  if (dst.device_type() == DeviceType::kCUDA) {
    // Member 0 of a GPU communicator decides the order of its collectives as their inputs become
    // ready there (Note [Device collectives] in actor/device_collectives.h): a member that reads
    // nothing would be ready at once. So on GPUs the root comes first (a communicator per root).
    std::rotate(members.begin(), members.begin() + root, members.end());
    const std::vector<Shape> shapes = out_shapes(spec, logical);
    std::vector<Shape> rotated;
    for (int64_t pid : members) rotated.push_back(shapes[pid]);
    std::vector<int64_t> results =
        e.collective(proto::CollectiveProto::BROADCAST, dst, /*k=*/-1, members, inputs, rotated,
                     /*axis=*/-1, /*out_axis=*/0, /*root=*/0);
    std::vector<int64_t> out(dst.num_ranks());
    for (size_t m = 0; m < members.size(); ++m) out[members[m]] = results[m];
    return out;
  }
  return e.collective(proto::CollectiveProto::BROADCAST, dst, /*k=*/-1, members, inputs,
                      out_shapes(spec, logical), /*axis=*/-1, /*out_axis=*/0, root);
}

std::vector<int64_t> expand_send_recv(const BoxingSpec& spec, const Shape& logical,
                                      const std::vector<int64_t>& in, StepEmitter& e) {
  const Placement& src = spec.in_placement;
  const Placement& dst = spec.out_placement;
  const int64_t n = dst.num_ranks();
  // The generic decomposition's pieces, as blocks (Note [Grouped send/recv]); member d is out
  // parallel id d.
  const SourcePieces sources(spec, logical);
  std::vector<CollectiveBlocks> blocks(n);
  bool crosses = false;
  for (int64_t d = 0; d < n; ++d) {
    const Region target = logical_region(logical, spec.out_sbp, dst, d);
    if (region_is_empty(target)) continue;
    for (const SourcePieces::Piece& piece : sources.covering(target, d, dst.rank(d))) {
      OFL_ASSERT(piece.addends.size() == 1);  // no partial sums
      const int64_t q = dst.parallel_id_of(src.rank(piece.addends[0])).value();
      blocks[q].sends.push_back({d, region_relative_to(piece.overlap, piece.source)});
      blocks[d].receives.push_back({q, region_relative_to(piece.overlap, target)});
      crosses = crosses || q != d;
    }
  }
  // Local slices and concats when nothing crosses ranks. On GPUs member 0 must read an input
  // (as for a broadcast above): when it sends nothing, the generic moves instead.
  if (!crosses || (dst.device_type() == DeviceType::kCUDA && blocks[0].sends.empty())) {
    return expand_generic(spec, logical, in, e);
  }
  // A member reads the input its rank holds, if it sends any of it (an empty piece, or a
  // replica no destination picked, sends nothing).
  std::vector<int64_t> inputs(n, -1);
  for (int64_t d = 0; d < n; ++d) {
    if (!blocks[d].sends.empty()) inputs[d] = in[src.parallel_id_of(dst.rank(d)).value()];
  }
  return e.collective(proto::CollectiveProto::SEND_RECV, dst, /*k=*/-1, all_members(dst), inputs,
                      out_shapes(spec, logical), /*axis=*/-1, /*out_axis=*/0, /*root=*/0, &blocks);
}

}  // namespace ofl::compiler::physical
