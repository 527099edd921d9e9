// SBP signature inference. Ops are visited in topological order; each offers its 1-d
// signatures (FSbpSignatures), the N-d candidates are their products over the placement's
// hierarchy, and the candidate that moves the fewest bytes to get its inputs from their
// producers wins (greedy, as OneFlow's default). User hints on outputs are obeyed.

#include <algorithm>
#include <limits>
#include <set>

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

// Outputs up to this size are computed whole when that costs no boxing (Note [Replicate when
// it costs nothing]).
constexpr double kReplicateBytes = 64 * 1024;

double tensor_bytes(const TensorMeta& m) {
  return static_cast<double>(m.shape.numel()) * static_cast<double>(dtype_size(m.dtype));
}

// Bytes one hierarchy dimension of n ranks moves in total to turn `from` into `to` for a tensor
// of `bytes` (the part this dimension sees), with the decompositions the boxing expansion uses.
double one_dim_cost(const Sbp& from, const Sbp& to, int64_t n, double bytes) {
  if (from == to || n == 1) return 0;
  const double k = static_cast<double>(n);
  if (from.is_broadcast()) return 0;  // B -> S is a local slice; B -> P keeps one copy
  if (from.is_partial_sum()) {
    if (to.is_broadcast()) return 2 * (k - 1) * bytes;  // ring all-reduce
    return (k - 1) * bytes;                             // reduce-scatter (or reduce to P)
  }
  // from is a split
  if (to.is_broadcast()) return (k - 1) * bytes;  // all-gather
  return (k - 1) / k * bytes;                     // all-to-all, or gather for S -> P
}

int64_t split_factor(const NdSbp& sbp, const Placement& placement, size_t except) {
  int64_t f = 1;
  for (size_t d = 0; d < sbp.size(); ++d) {
    if (d != except && sbp[d].is_split()) f *= placement.hierarchy()[static_cast<int>(d)];
  }
  return f;
}

}  // namespace

/// Estimated bytes moved per iteration to turn (from_placement, from) into (to_placement, to).
double boxing_cost(const TensorMeta& meta, const Placement& from_placement, const NdSbp& from,
                   const Placement& to_placement, const NdSbp& to) {
  const double bytes = tensor_bytes(meta);
  if (from_placement != to_placement) {
    // Every destination receives its region; partial sources each send theirs.
    double replicas = 1, partials = 1;
    for (size_t d = 0; d < to.size(); ++d) {
      // B copies go to every rank of the dimension; a P destination receives only at
      // coordinate 0 (the others hold zeros), like a split one piece per rank.
      if (to[d].is_broadcast()) replicas *= static_cast<double>(to_placement.hierarchy()[d]);
    }
    for (size_t d = 0; d < from.size(); ++d) {
      if (from[d].is_partial_sum()) partials *= static_cast<double>(from_placement.hierarchy()[d]);
    }
    return bytes * replicas * partials;
  }
  double cost = 0;
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] == to[d]) continue;
    const int64_t n = from_placement.hierarchy()[static_cast<int>(d)];
    const int64_t groups = from_placement.num_ranks() / n;
    // The other dimensions' splits shrink what each group moves.
    const double part = bytes / static_cast<double>(std::max(split_factor(from, from_placement, d),
                                                             split_factor(to, to_placement, d)));
    cost += static_cast<double>(groups) * one_dim_cost(from[d], to[d], n, part);
  }
  return cost;
}

namespace {

// All N-d products of the 1-d signatures.
std::vector<NdSbpSignature> nd_candidates(const std::vector<SbpSignature>& one_d, int ndim) {
  std::vector<NdSbpSignature> out;
  if (one_d.empty()) return out;
  const size_t inputs = one_d[0].inputs.size(), outputs = one_d[0].outputs.size();
  std::vector<size_t> idx(ndim, 0);
  for (;;) {
    NdSbpSignature s;
    s.inputs.assign(inputs, NdSbp(ndim));
    s.outputs.assign(outputs, NdSbp(ndim));
    for (int d = 0; d < ndim; ++d) {
      const SbpSignature& sig = one_d[idx[d]];
      for (size_t i = 0; i < inputs; ++i) s.inputs[i][d] = sig.inputs[i];
      for (size_t i = 0; i < outputs; ++i) s.outputs[i][d] = sig.outputs[i];
    }
    out.push_back(std::move(s));
    int d = ndim - 1;
    while (d >= 0 && ++idx[d] == one_d.size()) idx[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// On a hierarchy dimension of one rank every SBP means the same (one piece, the whole value),
// so it is written B: equal layouts then compare equal and need no boxing.
void normalize(NdSbp& sbp, const Placement& placement) {
  for (size_t d = 0; d < sbp.size(); ++d) {
    if (placement.hierarchy()[static_cast<int>(d)] == 1) sbp[d] = B();
  }
}

void normalize(NdSbpSignature& sig, const Placement& placement) {
  for (NdSbp& s : sig.inputs) normalize(s, placement);
  for (NdSbp& s : sig.outputs) normalize(s, placement);
}

bool nd_sbp_fits(const NdSbp& sbp, const Shape& shape) {
  for (const Sbp& s : sbp) {
    if (s.is_split() && (s.axis < 0 || s.axis >= shape.ndim())) return false;
  }
  return true;
}

// A view (reshape) maps S(i) to S(j) by where the flat buffer is cut. When the two axes differ
// in extent, that cut agrees only if each split extent divides evenly among its parts.
bool view_split_is_even(const Graph& graph, const LogicalOp& op, const NdSbpSignature& cand) {
  const Shape& x = graph.tensor(op.inputs[0]).meta.shape;
  const Shape& y = graph.tensor(op.outputs[0]).meta.shape;
  const NdSbp& in = cand.inputs[0];
  const NdSbp& out = cand.outputs[0];
  for (size_t d = 0; d < in.size(); ++d) {
    if (!in[d].is_split() || !out[d].is_split()) continue;
    if (x[in[d].axis] == y[out[d].axis]) continue;
    int64_t parts_in = 1, parts_out = 1;
    for (size_t e = 0; e < in.size(); ++e) {
      const int64_t n = op.placement.hierarchy()[static_cast<int>(e)];
      if (in[e].is_split() && in[e].axis == in[d].axis) parts_in *= n;
      if (out[e].is_split() && out[e].axis == out[d].axis) parts_out *= n;
    }
    if (x[in[d].axis] % parts_in != 0 || y[out[d].axis] % parts_out != 0) return false;
  }
  return true;
}

// Note [Aligned splits]: an op with TAlignedSplits reads piece r of each of its tensors as one
// unit (query heads [r H/n, (r+1) H/n) with key heads [r Hk/n, (r+1) Hk/n)). Balanced splits
// of different extents cut at corresponding places only when every extent divides evenly.
bool aligned_splits_are_even(const Graph& graph, const LogicalOp& op, const NdSbpSignature& cand) {
  const Shape& h = op.placement.hierarchy();
  for (size_t d = 0; d < static_cast<size_t>(h.ndim()); ++d) {
    std::vector<std::pair<int64_t, int64_t>> extent_parts;
    auto collect = [&](const NdSbp& sbp, const Shape& shape) {
      if (!sbp[d].is_split()) return;
      int64_t parts = 1;
      for (size_t e = 0; e < sbp.size(); ++e) {
        if (sbp[e].is_split() && sbp[e].axis == sbp[d].axis) parts *= h[static_cast<int>(e)];
      }
      extent_parts.emplace_back(shape[sbp[d].axis], parts);
    };
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      collect(cand.inputs[k], graph.tensor(op.inputs[k]).meta.shape);
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      collect(cand.outputs[k], graph.tensor(op.outputs[k]).meta.shape);
    }
    const bool differ = std::any_of(extent_parts.begin(), extent_parts.end(), [&](const auto& p) {
      return p.first != extent_parts.front().first;
    });
    if (!differ) continue;
    for (const auto& [extent, parts] : extent_parts) {
      if (extent % parts != 0) return false;
    }
  }
  return true;
}

class SbpInferencePass final : public Pass {
 public:
  std::string name() const override { return "sbp_inference"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }
  std::vector<std::string> provides() const override { return {"sbp"}; }

  void run(Graph& graph, const CompileOptions& options) override {
    for (int i : graph.topological_order()) {
      LogicalOp& op = graph.op(i);
      const int ndim = op.placement.hierarchy().ndim();
      if (op.kind == OpKind::kInput || op.kind == OpKind::kVariable) {
        NdSbp sbp = !op.output_sbp_hints.empty() && !op.output_sbp_hints[0].empty()
                        ? op.output_sbp_hints[0]
                        : NdSbp(ndim, B());
        const bool partial =
            std::any_of(sbp.begin(), sbp.end(), [](const Sbp& s) { return s.is_partial_sum(); });
        // An input may be partial-sum when it is fed by pieces (a global tensor's local
        // parts, Runtime::run_local); a variable holds whole values.
        OFL_CHECK(!partial || op.kind == OpKind::kInput, op.describe(),
                  " a variable cannot be partial-sum (P): it holds whole values. However, got ",
                  nd_sbp_to_string(sbp), ".");
        normalize(sbp, op.placement);
        op.signature = NdSbpSignature{{}, {sbp}};
        graph.tensor(op.outputs[0]).sbp = sbp;
        continue;
      }
      if (op.kind != OpKind::kCompute) continue;
      choose(graph, op, ndim, options);
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        graph.tensor(op.outputs[k]).sbp = op.signature.outputs[k];
      }
    }
  }

 private:
  void choose(Graph& graph, LogicalOp& op, int ndim, const CompileOptions& options) {
    std::vector<TensorMeta> in;
    for (int t : op.inputs) in.push_back(graph.tensor(t).meta);
    InferContext ctx(*op.schema, op.params, in);
    const SbpSignaturesFn* fn = op.schema->get<FSbpSignatures>();
    OFL_CHECK_CODE(fn != nullptr, ErrorCode::kUnimplemented, op.describe(),
                   " has no SBP signatures, so it cannot run on a placement.");
    std::vector<NdSbpSignature> candidates;
    {
      std::set<std::string> seen;
      for (NdSbpSignature& c : nd_candidates((*fn)(ctx), ndim)) {
        normalize(c, op.placement);
        if (seen.insert(c.to_string()).second) candidates.push_back(std::move(c));
      }
    }
    std::vector<NdSbp> hints = op.output_sbp_hints;
    for (NdSbp& h : hints) {
      if (!h.empty()) normalize(h, op.placement);
    }
    const std::vector<int> mutated =
        mutated_inputs(*op.schema, op.params, static_cast<int>(op.inputs.size()));

    struct Scored {
      double cost;
      int boxings;
      int unreplicated;  // output dimensions that are not B
      size_t order;
    };
    std::vector<std::pair<Scored, const NdSbpSignature*>> scored;
    for (size_t c = 0; c < candidates.size(); ++c) {
      const NdSbpSignature& cand = candidates[c];
      bool ok = true;
      for (size_t k = 0; k < hints.size() && ok; ++k) {
        ok = hints[k].empty() || hints[k] == cand.outputs[k];
      }
      for (size_t k = 0; k < cand.outputs.size() && ok; ++k) {
        ok = nd_sbp_fits(cand.outputs[k], graph.tensor(op.outputs[k]).meta.shape);
      }
      if (ok && op.schema->has<TViewOfInput>()) ok = view_split_is_even(graph, op, cand);
      if (ok && op.schema->has<TAlignedSplits>()) ok = aligned_splits_are_even(graph, op, cand);
      double cost = 0;
      int boxings = 0;
      std::vector<bool> scatters;  // per hierarchy dimension: a partial input taken as a split
      for (size_t k = 0; k < op.inputs.size() && ok; ++k) {
        const LogicalTensor& t = graph.tensor(op.inputs[k]);
        const LogicalOp& producer = graph.op(t.producer);
        const bool same = producer.placement == op.placement && t.sbp == cand.inputs[k];
        if (std::count(mutated.begin(), mutated.end(), static_cast<int>(k)) && !same) {
          ok = false;  // an op writing a tensor in place must get it as it is, not a copy
          break;
        }
        if (!same) {
          ++boxings;
          cost += boxing_cost(t.meta, producer.placement, t.sbp, op.placement, cand.inputs[k]);
          scatters.resize(t.sbp.size(), false);
          for (size_t d = 0; producer.placement == op.placement && d < t.sbp.size(); ++d) {
            if (t.sbp[d].is_partial_sum() && cand.inputs[k][d].is_split()) scatters[d] = true;
          }
        }
      }
      // Note [Replicate when it costs nothing]: only small outputs; a large constant (a
      // batch-shaped fill) stays split rather than cost every rank its memory.
      int unreplicated = 0;
      for (size_t k = 0; k < cand.outputs.size() && ok; ++k) {
        const NdSbp& out = cand.outputs[k];
        const TensorMeta& meta = graph.tensor(op.outputs[k]).meta;
        if (tensor_bytes(meta) > kReplicateBytes) continue;
        const int split = static_cast<int>(
            std::count_if(out.begin(), out.end(), [](const Sbp& s) { return !s.is_broadcast(); }));
        unreplicated += split;
        // Note [Small outputs are gathered later]: a candidate that reduce-scatters a partial
        // input to make a small split output (the residual add after a row-parallel product)
        // hands its consumers an all-gather the greedy choice cannot see: such a tensor is
        // mostly needed whole next (a norm over the split axis). The bytes match one
        // all-reduce, but each collective is a round trip between ranks (tens of microseconds
        // here), which a decoding step of tiny tensors paid 33 times instead of 17. So that
        // candidate is charged the gather too, on the dimensions it scatters only: splits that
        // flow without a reduce-scatter (data parallelism's batch, on its own dimension of a
        // 2-d placement) are not, nor the backward's (gradients reduce-scattered onto the
        // sequence or ZeRO's shards are meant to stay split). The ranking's cost (explain_sbp)
        // includes this charge.
        NdSbp gathered = out;
        for (size_t d = 0; d < scatters.size() && d < out.size(); ++d) {
          if (scatters[d] && out[d].is_split()) gathered[d] = B();
        }
        if (split > 0 && gathered != out && op.role == OpRole::kForward) {
          cost += boxing_cost(meta, op.placement, out, op.placement, gathered);
        }
      }
      if (ok) scored.push_back({{cost, boxings, unreplicated, c}, &cand});
    }
    OFL_CHECK(!scored.empty(), op.describe(),
              " has no SBP signature that fits its hints and "
              "inputs on placement ",
              op.placement.to_string(), ". Inputs: ", describe_inputs(graph, op), hints_text(op),
              ".");
    std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      if (a.first.cost != b.first.cost) return a.first.cost < b.first.cost;
      if (a.first.boxings != b.first.boxings) return a.first.boxings < b.first.boxings;
      // Note [Replicate when it costs nothing]: an op whose candidates cost the same (a
      // constant such as a GPT's position ids, or an op of broadcast inputs) computes a small
      // output (at most kReplicateBytes) whole. A split output saves a little compute but hands
      // a later op's greedy choice an all-gather it cannot avoid (GPT DP2: the position
      // embedding and the causal mask were split, then gathered at the start of every step,
      // stalling it 1-3 ms).
      if (a.first.unreplicated != b.first.unreplicated) {
        return a.first.unreplicated < b.first.unreplicated;
      }
      return a.first.order < b.first.order;
    });
    op.signature = *scored.front().second;
    if (options.explain_sbp) {
      std::string why = str_cat("chose ", op.signature.to_string(), " (", scored.front().first.cost,
                                " bytes of boxing); candidates:");
      for (size_t c = 0; c < scored.size() && c < 8; ++c) {
        why += str_cat(" [", scored[c].second->to_string(), ": ", scored[c].first.cost, " bytes, ",
                       scored[c].first.boxings, " boxing]");
      }
      op.sbp_reason = why;
    }
  }

  static std::string describe_inputs(const Graph& graph, const LogicalOp& op) {
    std::string s;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const LogicalTensor& t = graph.tensor(op.inputs[k]);
      s += str_cat(k ? ", " : "", t.name, " ", t.meta.shape.to_string(), " ",
                   nd_sbp_to_string(t.sbp), " on ", graph.op(t.producer).placement.to_string());
    }
    return s;
  }

  static std::string hints_text(const LogicalOp& op) {
    std::string s;
    for (size_t k = 0; k < op.output_sbp_hints.size(); ++k) {
      if (!op.output_sbp_hints[k].empty()) {
        s += str_cat("; hint for output ", k, ": ", nd_sbp_to_string(op.output_sbp_hints[k]));
      }
    }
    return s;
  }
};

}  // namespace

std::unique_ptr<Pass> make_sbp_inference_pass() { return std::make_unique<SbpInferencePass>(); }

}  // namespace ofl::compiler
