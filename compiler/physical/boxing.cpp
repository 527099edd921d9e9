#include "compiler/physical/boxing.h"

#include <algorithm>
#include <map>
#include <utility>

#include "compiler/physical/boxing_steps.h"
#include "oneflowlike/collective.h"
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
    case BoxingKind::kAllToAll:
      return "all_to_all";
    case BoxingKind::kLocalSlice:
      return "local_slice";
    case BoxingKind::kBroadcastToPartial:
      return "broadcast_to_partial";
    case BoxingKind::kBroadcast:
      return "broadcast";
    case BoxingKind::kSendRecv:
      return "send_recv";
    case BoxingKind::kGeneric:
      return "generic";
  }
  return "?";
}

namespace {

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
  if (from.is_split() && to.is_split() && from.axis != to.axis &&
      split_nests(spec.in_sbp, k, from) && split_nests(spec.out_sbp, k, to)) {
    return BoxingKind::kAllToAll;
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

bool has_partial_sum(const NdSbp& nd_sbp) {
  return std::any_of(nd_sbp.begin(), nd_sbp.end(), [](const Sbp& s) { return s.is_partial_sum(); });
}

/// What is left when no collective of one dimension makes the conversion.
BoxingKind grouped_kind(const BoxingSpec& spec) {
  const Placement& src = spec.in_placement;
  const Placement& dst = spec.out_placement;
  if (src.device_type() != dst.device_type() || dst.num_ranks() < 2) return BoxingKind::kGeneric;
  const bool all_broadcast = std::all_of(spec.out_sbp.begin(), spec.out_sbp.end(),
                                         [](const Sbp& s) { return s.is_broadcast(); });
  if (src.num_ranks() == 1 && dst.contains(src.rank(0)) && all_broadcast) {
    return BoxingKind::kBroadcast;
  }
  std::vector<int64_t> a = src.ranks(), b = dst.ranks();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b || has_partial_sum(spec.in_sbp) || has_partial_sum(spec.out_sbp)) {
    return BoxingKind::kGeneric;
  }
  return BoxingKind::kSendRecv;
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
      const BoxingKind kind = collective_kind(spec, logical_shape, changed[0]);
      if (kind != BoxingKind::kGeneric) return {BoxingStep{spec, kind}};
    }
    // Nested splits make the order matter: (S(0), S(0)) -> (B, B) gathers the inner
    // dimension first.
    std::vector<int> reversed(changed.rbegin(), changed.rend());
    for (const std::vector<int>& order : {changed, reversed}) {
      std::vector<BoxingStep> steps = steps_in_order(spec, logical_shape, order);
      if (!steps.empty()) return steps;
    }
  }
  return {BoxingStep{spec, grouped_kind(spec)}};
}

std::vector<int64_t> expand_boxing(const BoxingSpec& spec, const TensorMeta& logical,
                                   const std::vector<int64_t>& in_registers, PlanBuilder& builder,
                                   const std::string& name, int thread,
                                   const std::string& location) {
  OFL_CHECK(static_cast<int>(spec.in_sbp.size()) == spec.in_placement.hierarchy().ndim() &&
                static_cast<int>(spec.out_sbp.size()) == spec.out_placement.hierarchy().ndim(),
            "[boxing] '", name,
            "' needs one SBP per placement dimension on both sides. However, got ",
            nd_sbp_to_string(spec.in_sbp), " on ", spec.in_placement.to_string(), " -> ",
            nd_sbp_to_string(spec.out_sbp), " on ", spec.out_placement.to_string(), ".");
  OFL_ASSERT(static_cast<int64_t>(in_registers.size()) == spec.in_placement.num_ranks());
  StepEmitter emitter(builder, name, logical.dtype, thread, location);
  // Note [Transfers between GPUs] in boxing_steps.h: between pipeline stages (disjoint rank
  // sets of one hierarchy), where each rank sends to one peer, not into a gather onto fewer
  // ranks or among the ranks of one placement (a pair communicator per pair).
  bool disjoint = true;
  for (int64_t r : spec.in_placement.ranks())
    disjoint = disjoint && !spec.out_placement.contains(r);
  emitter.set_device_transfers(spec.in_placement.device_type() == DeviceType::kCUDA &&
                               spec.out_placement.device_type() == DeviceType::kCUDA &&
                               spec.in_placement.hierarchy() == spec.out_placement.hierarchy() &&
                               disjoint);
  std::vector<int64_t> registers = in_registers;
  for (const BoxingStep& step : plan_boxing(spec, logical.shape)) {
    switch (step.kind) {
      case BoxingKind::kGeneric:
        registers = expand_generic(step.spec, logical.shape, registers, emitter);
        break;
      case BoxingKind::kBroadcast:
        registers = expand_broadcast(step.spec, logical.shape, registers, emitter);
        break;
      case BoxingKind::kSendRecv:
        registers = expand_send_recv(step.spec, logical.shape, registers, emitter);
        break;
      default:
        registers = expand_same_placement(step, logical.shape, registers, emitter);
    }
  }
  OFL_ASSERT(static_cast<int64_t>(registers.size()) == spec.out_placement.num_ranks());
  return registers;
}

}  // namespace ofl::compiler::physical
