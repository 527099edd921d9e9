#include "compiler/physical/boxing.h"

#include <algorithm>
#include <map>
#include <utility>

#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {

const char* boxing_kind_name(BoxingKind kind) {
  switch (kind) {
    case BoxingKind::kIdentity:
      return "identity";
    case BoxingKind::kAllReduce:
      return "all_reduce";
    case BoxingKind::kReduceScatter:
      return "reduce_scatter";
    case BoxingKind::kAllGather:
      return "all_gather";
    case BoxingKind::kLocalSlice:
      return "local_slice";
    case BoxingKind::kBroadcastToPartial:
      return "broadcast_to_partial";
    case BoxingKind::kGeneric:
      return "generic";
  }
  return "?";
}

namespace {

using Region = std::vector<Range>;  // one range per axis

bool is_empty(const Region& region) {
  return std::any_of(region.begin(), region.end(), [](const Range& r) { return r.size() <= 0; });
}

int64_t numel(const Region& region) {
  int64_t n = 1;
  for (const Range& r : region) n *= std::max<int64_t>(r.size(), 0);
  return n;
}

Region intersect(const Region& a, const Region& b) {
  OFL_ASSERT(a.size() == b.size());
  Region out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t begin = std::max(a[i].begin, b[i].begin);
    out[i] = Range{begin, std::max(begin, std::min(a[i].end, b[i].end))};
  }
  return out;
}

/// `region` in the local coordinates of a tensor holding `frame`.
Region relative_to(const Region& region, const Region& frame) {
  Region out(region.size());
  for (size_t i = 0; i < region.size(); ++i) {
    out[i] = Range{region[i].begin - frame[i].begin, region[i].end - frame[i].begin};
  }
  return out;
}

Region whole(const Shape& shape) {
  Region out(shape.ndim());
  for (int i = 0; i < shape.ndim(); ++i) out[i] = Range{0, shape[i]};
  return out;
}

Shape shape_of(const Region& region) {
  std::vector<int64_t> dims(region.size());
  for (size_t i = 0; i < region.size(); ++i) dims[i] = region[i].size();
  return Shape(std::move(dims));
}

int64_t positive_mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

/// Emits the elementary tasks of one boxing op. Each returns the register it produced (or the
/// given one when nothing needs doing), so callers chain steps without special cases.
class StepEmitter {
 public:
  StepEmitter(PlanBuilder& builder, std::string name, DataType dtype, int thread)
      : builder_(builder), name_(std::move(name)), dtype_(dtype), thread_(thread) {}

  PlanBuilder& builder() { return builder_; }

  /// The part `local` of `reg` (in reg's coordinates), on reg's rank.
  int64_t slice(int64_t reg, const Region& local) {
    if (local == whole(builder_.register_shape(reg))) return reg;
    proto::TaskProto* t = task(builder_.register_rank(reg), proto::TaskProto::SLICE, "slice");
    builder_.add_input(t, reg);
    add_ranges(local, t->mutable_slice());
    return output(t, shape_of(local));
  }

  /// `reg` on `rank`: a SEND/RECV pair when it lives elsewhere.
  int64_t move(int64_t reg, int64_t rank) {
    const int64_t from = builder_.register_rank(reg);
    if (from == rank) return reg;
    const int64_t transfer = builder_.new_transfer_id();
    proto::TaskProto* send = task(from, proto::TaskProto::SEND, "send", /*thread=*/1);
    builder_.add_input(send, reg);
    send->set_peer(rank);
    send->set_transfer_id(transfer);
    proto::TaskProto* recv = task(rank, proto::TaskProto::RECV, "recv", /*thread=*/1);
    recv->set_peer(from);
    recv->set_transfer_id(transfer);
    return output(recv, builder_.register_shape(reg));
  }

  /// The elementwise sum of same-shaped registers on one rank.
  int64_t add(const std::vector<int64_t>& regs) {
    OFL_ASSERT(!regs.empty());
    if (regs.size() == 1) return regs[0];
    proto::TaskProto* t = task(builder_.register_rank(regs[0]), proto::TaskProto::ADD, "add");
    for (int64_t reg : regs) {
      OFL_ASSERT(builder_.register_shape(reg) == builder_.register_shape(regs[0]));
      builder_.add_input(t, reg);
    }
    return output(t, builder_.register_shape(regs[0]));
  }

  /// A tensor of `shape` on `rank` assembled from (register, its region in the result).
  int64_t concat(int64_t rank, const std::vector<std::pair<int64_t, Region>>& pieces,
                 const Shape& shape) {
    proto::TaskProto* t = task(rank, proto::TaskProto::CONCAT, "concat");
    for (const auto& [reg, region] : pieces) {
      OFL_ASSERT(builder_.register_shape(reg) == shape_of(region));
      builder_.add_input(t, reg);
      add_ranges(region, t->mutable_concat_regions());
    }
    return output(t, shape);
  }

  int64_t zeros(int64_t rank, const Shape& shape) {
    return output(task(rank, proto::TaskProto::ZEROS, "zeros"), shape);
  }

  int64_t copy(int64_t reg) {
    proto::TaskProto* t = task(builder_.register_rank(reg), proto::TaskProto::COPY, "copy");
    builder_.add_input(t, reg);
    return output(t, builder_.register_shape(reg));
  }

 private:
  // Steps other than SEND / RECV run on the boxing op's thread (Note [Gradient boxing on the
  // communication thread] in boxing.h).
  proto::TaskProto* task(int64_t rank, proto::TaskProto::Kind kind, const char* what,
                         int thread = -1) {
    if (thread < 0) thread = thread_;
    // Tasks of ranks not compiled here are only numbered: skip building their text.
    const bool kept = builder_.kept(rank);
    proto::TaskProto* t = builder_.add_task(
        rank, kind, kept ? str_cat(name_, "/", what, counter_) : std::string(), thread);
    ++counter_;
    if (kept) t->set_logical_op(name_);
    return t;
  }
  int64_t output(proto::TaskProto* t, const Shape& shape) {
    return builder_.add_output(t, t->name(), shape, dtype_);
  }

  PlanBuilder& builder_;
  std::string name_;
  DataType dtype_;
  int thread_;
  int64_t counter_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Choosing the decomposition (Note [Boxing decompositions]).

/// Whether a split `sbp` in dimension k is a balanced chunk of the group's tensor: no later
/// dimension splits the same axis again (`nd_sbp` holds the dimensions shared by both sides).
bool split_nests(const NdSbp& nd_sbp, int k, const Sbp& sbp) {
  for (size_t j = k + 1; j < nd_sbp.size(); ++j) {
    if (nd_sbp[j].is_split() && nd_sbp[j].axis == sbp.axis) return false;
  }
  return true;
}

/// The collective for a change in dimension k only, on one placement.
BoxingKind collective_kind(const BoxingSpec& spec, const Shape& shape, int k) {
  if (spec.in_placement.hierarchy()[k] == 1) return BoxingKind::kIdentity;
  const Sbp& from = spec.in_sbp[k];
  const Sbp& to = spec.out_sbp[k];
  if (from.is_partial_sum() && to.is_broadcast()) {
    return shape.ndim() > 0 ? BoxingKind::kAllReduce : BoxingKind::kGeneric;
  }
  if (from.is_partial_sum() && to.is_split() && split_nests(spec.in_sbp, k, to)) {
    return BoxingKind::kReduceScatter;
  }
  if (from.is_split() && to.is_broadcast() && split_nests(spec.in_sbp, k, from)) {
    return BoxingKind::kAllGather;
  }
  if (from.is_broadcast() && to.is_split() && split_nests(spec.in_sbp, k, to)) {
    return BoxingKind::kLocalSlice;
  }
  if (from.is_broadcast() && to.is_partial_sum()) return BoxingKind::kBroadcastToPartial;
  return BoxingKind::kGeneric;
}

/// Converts the changed dimensions one at a time in `dims` order; empty when some step would
/// need the generic decomposition.
std::vector<BoxingStep> steps_in_order(const BoxingSpec& spec, const Shape& shape,
                                       const std::vector<int>& dims) {
  std::vector<BoxingStep> steps;
  NdSbp current = spec.in_sbp;
  for (int k : dims) {
    NdSbp next = current;
    next[k] = spec.out_sbp[k];
    BoxingStep step{BoxingSpec{spec.in_placement, current, spec.out_placement, next},
                    BoxingKind::kGeneric};
    step.kind = collective_kind(step.spec, shape, k);
    if (step.kind == BoxingKind::kGeneric) return {};
    steps.push_back(std::move(step));
    current = std::move(next);
  }
  return steps;
}

// ---------------------------------------------------------------------------------------------
// Collectives within the groups of one hierarchy dimension.

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
  std::vector<Region> chunks;
  for (int64_t j = 0; j < n; ++j) {
    Region r = whole(shape);
    r[axis] = balanced_range(shape[axis], n, j);
    chunks.push_back(std::move(r));
  }
  return chunks;
}

/// Ring reduce-scatter over `members` (parallel ids) whose registers `in` hold same-shaped
/// partial sums: at step t member m sends its running sum of chunk (m - t - 1) to member m + 1,
/// which adds its own slice. After n - 1 steps member m holds the full sum of chunk m.
std::vector<int64_t> ring_reduce_scatter(const std::vector<int64_t>& members,
                                         const Placement& placement, const std::vector<int64_t>& in,
                                         const std::vector<Region>& chunks, StepEmitter& e) {
  const int64_t n = static_cast<int64_t>(members.size());
  std::vector<int64_t> sums(n, -1);
  for (int64_t t = 0; t + 1 < n; ++t) {
    std::vector<int64_t> next(n, -1);
    for (int64_t m = 0; m < n; ++m) {
      const int64_t c = positive_mod(m - t - 1, n);
      const int64_t to = (m + 1) % n;
      const int64_t outgoing = t == 0 ? e.slice(in[members[m]], chunks[c]) : sums[m];
      const int64_t received = e.move(outgoing, placement.rank(members[to]));
      const int64_t own = e.slice(in[members[to]], chunks[c]);
      next[to] = e.add({received, own});
    }
    sums = std::move(next);
  }
  return sums;
}

/// Ring all-gather: member m starts with chunk m (`own[m]`); at step t it forwards chunk
/// (m - t) to member m + 1. Each member then concatenates the n chunks into `shape`.
std::vector<int64_t> ring_all_gather(const std::vector<int64_t>& members,
                                     const Placement& placement, const std::vector<int64_t>& own,
                                     const std::vector<Region>& chunks, const Shape& shape,
                                     StepEmitter& e) {
  const int64_t n = static_cast<int64_t>(members.size());
  std::vector<std::vector<int64_t>> have(n, std::vector<int64_t>(n, -1));  // [member][chunk]
  for (int64_t m = 0; m < n; ++m) have[m][m] = own[m];
  for (int64_t t = 0; t + 1 < n; ++t) {
    for (int64_t m = 0; m < n; ++m) {
      const int64_t c = positive_mod(m - t, n);
      const int64_t to = (m + 1) % n;
      have[to][c] = e.move(have[m][c], placement.rank(members[to]));
    }
  }
  std::vector<int64_t> full(n);
  for (int64_t m = 0; m < n; ++m) {
    std::vector<std::pair<int64_t, Region>> pieces;
    for (int64_t c = 0; c < n; ++c) pieces.emplace_back(have[m][c], chunks[c]);
    full[m] = e.concat(placement.rank(members[m]), pieces, shape);
  }
  return full;
}

/// The axis a ring all-reduce chunks: the first one with at least n elements, else the longest.
int all_reduce_axis(const Shape& shape, int64_t n) {
  int longest = 0;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (shape[i] >= n) return i;
    if (shape[i] > shape[longest]) longest = i;
  }
  return longest;
}

/// Runs a collective (any kind but kGeneric) for a change in exactly one dimension.
std::vector<int64_t> expand_collective(const BoxingStep& step, const Shape& logical,
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
      case BoxingKind::kAllReduce: {
        const std::vector<Region> chunks = chunks_along(in_shape, all_reduce_axis(in_shape, n), n);
        const std::vector<int64_t> sums = ring_reduce_scatter(members, placement, in, chunks, e);
        const std::vector<int64_t> full =
            ring_all_gather(members, placement, sums, chunks, in_shape, e);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = full[m];
        break;
      }
      case BoxingKind::kReduceScatter: {
        const std::vector<Region> chunks = chunks_along(in_shape, spec.out_sbp[k].axis, n);
        const std::vector<int64_t> sums = ring_reduce_scatter(members, placement, in, chunks, e);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = sums[m];
        break;
      }
      case BoxingKind::kAllGather: {
        const std::vector<Region> chunks = chunks_along(out_shape, spec.in_sbp[k].axis, n);
        std::vector<int64_t> own(n);
        for (int64_t m = 0; m < n; ++m) own[m] = in[members[m]];
        const std::vector<int64_t> full =
            ring_all_gather(members, placement, own, chunks, out_shape, e);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = full[m];
        break;
      }
      case BoxingKind::kLocalSlice: {
        const std::vector<Region> chunks = chunks_along(in_shape, spec.out_sbp[k].axis, n);
        for (int64_t m = 0; m < n; ++m) out[members[m]] = e.slice(in[members[m]], chunks[m]);
        break;
      }
      case BoxingKind::kBroadcastToPartial: {
        out[members[0]] = e.copy(in[members[0]]);
        for (int64_t m = 1; m < n; ++m) {
          out[members[m]] = e.zeros(placement.rank(members[m]), out_shape);
        }
        break;
      }
      case BoxingKind::kIdentity:
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

// ---------------------------------------------------------------------------------------------
// The generic decomposition: any placements, any SBPs.

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
    if (!receives || is_empty(target)) {
      out.push_back(e.zeros(rank, shape));
      continue;
    }
    std::vector<std::pair<int64_t, Region>> pieces;
    int64_t covered = 0;
    int64_t choice = d;  // spreads the destinations over the replicas
    for (const auto& [split_key, group] : sources) {
      const Region overlap = intersect(group.region, target);
      if (is_empty(overlap)) continue;
      std::vector<int64_t> addends;
      for (const auto& [partial_key, replicas] : group.replicas_by_partial) {
        int64_t pick = replicas[choice % static_cast<int64_t>(replicas.size())];
        for (int64_t pid : replicas) {
          if (src.rank(pid) == rank) pick = pid;
        }
        addends.push_back(e.move(e.slice(in[pick], relative_to(overlap, group.region)), rank));
      }
      ++choice;
      pieces.emplace_back(e.add(addends), relative_to(overlap, target));
      covered += numel(overlap);
    }
    OFL_ASSERT(covered == numel(target));
    if (pieces.size() == 1 && pieces[0].second == whole(shape)) {
      out.push_back(pieces[0].first);
    } else {
      out.push_back(e.concat(rank, pieces, shape));
    }
  }
  return out;
}

}  // namespace

std::vector<BoxingStep> plan_boxing(const BoxingSpec& spec, const Shape& logical_shape) {
  if (spec.in_placement == spec.out_placement) {
    std::vector<int> changed;
    for (size_t d = 0; d < spec.in_sbp.size(); ++d) {
      if (spec.in_sbp[d] != spec.out_sbp[d]) changed.push_back(static_cast<int>(d));
    }
    if (changed.empty()) return {BoxingStep{spec, BoxingKind::kIdentity}};
    if (changed.size() == 1) {
      return {BoxingStep{spec, collective_kind(spec, logical_shape, changed[0])}};
    }
    // Nested splits make the order matter: (S(0), S(0)) -> (B, B) gathers the inner
    // dimension first.
    std::vector<int> reversed(changed.rbegin(), changed.rend());
    for (const std::vector<int>& order : {changed, reversed}) {
      std::vector<BoxingStep> steps = steps_in_order(spec, logical_shape, order);
      if (!steps.empty()) return steps;
    }
  }
  return {BoxingStep{spec, BoxingKind::kGeneric}};
}

std::vector<int64_t> expand_boxing(const BoxingSpec& spec, const TensorMeta& logical,
                                   const std::vector<int64_t>& in_registers, PlanBuilder& builder,
                                   const std::string& name, int thread) {
  OFL_CHECK(static_cast<int>(spec.in_sbp.size()) == spec.in_placement.hierarchy().ndim() &&
                static_cast<int>(spec.out_sbp.size()) == spec.out_placement.hierarchy().ndim(),
            "[boxing] '", name,
            "' needs one SBP per placement dimension on both sides. However, got ",
            nd_sbp_to_string(spec.in_sbp), " on ", spec.in_placement.to_string(), " -> ",
            nd_sbp_to_string(spec.out_sbp), " on ", spec.out_placement.to_string(), ".");
  OFL_ASSERT(static_cast<int64_t>(in_registers.size()) == spec.in_placement.num_ranks());
  StepEmitter emitter(builder, name, logical.dtype, thread);
  std::vector<int64_t> registers = in_registers;
  for (const BoxingStep& step : plan_boxing(spec, logical.shape)) {
    registers = step.kind == BoxingKind::kGeneric
                    ? expand_generic(step.spec, logical.shape, registers, emitter)
                    : expand_collective(step, logical.shape, registers, emitter);
  }
  OFL_ASSERT(static_cast<int64_t>(registers.size()) == spec.out_placement.num_ranks());
  return registers;
}

}  // namespace ofl::compiler::physical
