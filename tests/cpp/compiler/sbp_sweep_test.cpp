// The SBP sweep: every registered op, through each of its SBP signatures, on 1, 2, 3 and 4
// ranks and on a 2x2 hierarchy, must compute what the op computes on one device. A signature
// that passes here is mathematically valid (for the sampled shapes, including uneven splits);
// one that fails is a bug in the op's FSbpSignatures.
//
// Note [Forcing a signature]: for each candidate the graph declares every input with exactly
// the SBP the candidate consumes and hints the candidate's outputs, so the candidate costs
// nothing and needs no boxing while every other candidate with those outputs needs some: SBP
// inference has to pick it. Inputs cannot be partial sums, so a P input is made by reduce_sum
// over a leading axis split S(0) where the candidate has P (each rank sums its rows; the
// ranks' sums add up to the value). That gives every rank a different addend, which tests P
// harder than a B -> P boxing would (one rank holding the value, the others zeros), and it
// avoids ties: with B -> P boxing, mul's "B x P -> P" and "P x B -> P" cost the same and the
// first would always win. Tensors an op writes in place (optimizer updates) are variables.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"
#include "tests/cpp/compiler/sbp_sweep_cases.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::random_tensor;
using testing::values_of;

using sweep::floats;
using sweep::InputSpec;
using sweep::OpCase;
using sweep::sweep_cases;

// ---- Candidates ----

// The op's 1-d signatures as N-d products over the placement's hierarchy, written as SBP
// inference writes them (B on hierarchy dimensions of one rank) and without repeats. When there
// are more than kMaxCandidates, an evenly spaced deterministic sample of them.
constexpr size_t kMaxCandidates = 30;

std::vector<NdSbpSignature> candidates(const std::vector<SbpSignature>& one_d,
                                       const Placement& placement) {
  const Shape& hierarchy = placement.hierarchy();
  const int ndim = hierarchy.ndim();
  std::vector<NdSbpSignature> all;
  std::set<std::string> seen;
  std::vector<size_t> index(ndim, 0);
  for (bool more = !one_d.empty(); more;) {
    NdSbpSignature sig;
    sig.inputs.assign(one_d[0].inputs.size(), NdSbp(ndim));
    sig.outputs.assign(one_d[0].outputs.size(), NdSbp(ndim));
    for (int d = 0; d < ndim; ++d) {
      const SbpSignature& s = one_d[index[d]];
      for (size_t k = 0; k < s.inputs.size(); ++k)
        sig.inputs[k][d] = hierarchy[d] == 1 ? B() : s.inputs[k];
      for (size_t k = 0; k < s.outputs.size(); ++k) {
        sig.outputs[k][d] = hierarchy[d] == 1 ? B() : s.outputs[k];
      }
    }
    if (seen.insert(sig.to_string()).second) all.push_back(std::move(sig));
    int d = ndim - 1;
    while (d >= 0 && ++index[d] == one_d.size()) index[d--] = 0;
    more = d >= 0;
  }
  if (all.size() <= kMaxCandidates) return all;
  std::vector<NdSbpSignature> sample;
  for (size_t j = 0; j < kMaxCandidates; ++j)
    sample.push_back(all[j * all.size() / kMaxCandidates]);
  return sample;
}

bool has_partial_sum(const NdSbp& sbp) {
  return std::any_of(sbp.begin(), sbp.end(), [](const Sbp& s) { return s.is_partial_sum(); });
}

// Flat (row-major) indices of a region of a tensor, in row-major order of the region.
std::vector<int64_t> flat_indices(const Shape& shape, const std::vector<Range>& region) {
  std::vector<int64_t> out;
  for (const Range& r : region) {
    if (r.size() <= 0) return out;
  }
  const std::vector<int64_t> strides = shape.strides();
  std::vector<int64_t> at(region.size());
  for (size_t d = 0; d < region.size(); ++d) at[d] = region[d].begin;
  for (;;) {
    int64_t flat = 0;
    for (size_t d = 0; d < at.size(); ++d) flat += at[d] * strides[d];
    out.push_back(flat);
    int d = static_cast<int>(at.size()) - 1;
    while (d >= 0 && ++at[d] == region[d].end) {
      at[d] = region[d].begin;
      --d;
    }
    if (d < 0) return out;
  }
}

// A view (reshape) copies its input piece's bytes as its output piece, so a signature is valid
// exactly when every rank's input piece holds the same logical elements, in the same order, as
// its output piece. Decided from regions alone, independently of the compiler's own rule.
bool view_keeps_pieces(const Shape& in, const NdSbp& in_sbp, const Shape& out, const NdSbp& out_sbp,
                       const Placement& placement) {
  for (int64_t pid = 0; pid < placement.num_ranks(); ++pid) {
    if (flat_indices(in, logical_region(in, in_sbp, placement, pid)) !=
        flat_indices(out, logical_region(out, out_sbp, placement, pid))) {
      return false;
    }
  }
  return true;
}

// An op with TAlignedSplits reads each rank's pieces of its tensors as one unit, so a signature
// is valid exactly when tensors split alike are cut at proportional places along their split
// axes on every rank (query heads [a, b) of H with key heads [a', b') of Hk: a / H = a' / Hk,
// b / H = b' / Hk). Decided from regions alone, independently of the compiler's own rule.
bool splits_align(const std::vector<Shape>& shapes, const std::vector<NdSbp>& sbps,
                  const Placement& placement) {
  for (int64_t pid = 0; pid < placement.num_ranks(); ++pid) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (size_t j = i + 1; j < shapes.size(); ++j) {
        if (sbps[i] != sbps[j]) continue;
        const auto ri = logical_region(shapes[i], sbps[i], placement, pid);
        const auto rj = logical_region(shapes[j], sbps[j], placement, pid);
        for (const Sbp& s : sbps[i]) {
          if (!s.is_split()) continue;
          const int64_t ei = shapes[i][s.axis], ej = shapes[j][s.axis];
          const Range a = ri[s.axis], b = rj[s.axis];
          if (a.begin * ej != b.begin * ei || a.end * ej != b.end * ei) return false;
        }
      }
    }
  }
  return true;
}

// ---- Values ----

Tensor sample_values(const Shape& shape, const InputSpec& spec, uint64_t seed, double scale) {
  if (spec.lo == spec.hi) {  // a constant (lr, step)
    return testing::make_tensor(std::vector<double>(shape.numel(), spec.lo * scale), shape,
                                spec.dtype);
  }
  if (is_floating(spec.dtype))
    return random_tensor(shape, spec.dtype, seed, spec.lo * scale, spec.hi * scale);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(spec.lo),
                                              static_cast<int64_t>(spec.hi) - 1);
  std::vector<double> values(shape.numel());
  for (double& v : values) v = static_cast<double>(dist(gen));
  return testing::make_tensor(values, shape, spec.dtype);
}

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= 1e-5 * std::max(1.0, std::abs(expected));
}

// Expects `actual` == `expected` within 1e-5 relative; reports the first difference only.
bool expect_values(const std::vector<double>& actual, const std::vector<double>& expected,
                   const Shape& shape, const std::string& what) {
  if (actual.size() != expected.size()) {
    ADD_FAILURE() << what << ": got " << actual.size() << " elements, expected " << expected.size()
                  << " (logical shape " << shape.to_string() << ")";
    return false;
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close(actual[i], expected[i])) {
      ADD_FAILURE() << what << ": element " << i << " of " << shape.to_string() << " is "
                    << actual[i] << ", expected " << expected[i];
      return false;
    }
  }
  return true;
}

// ---- One candidate ----

// What the sweep saw for one op case (tests assert that the interesting paths ran).
struct SweepStats {
  int compiled = 0;  // candidates compiled, chosen and checked numerically
  int avoided = 0;   // view candidates invalid for the split, which the compiler must avoid
};

constexpr int64_t kPartialRows = 4;  // leading extent of the tensors reduce_sum makes P from

class CandidateCheck {
 public:
  CandidateCheck(const OpCase& c, const Placement& placement, const NdSbpSignature& candidate,
                 SweepStats* stats)
      : case_(c),
        op_(OpRegistry::global().find(c.op)),
        placement_(placement),
        candidate_(candidate),
        stats_(stats),
        where_(str_cat("op '", c.op, "' (case ", c.name, ") on placement ", placement.to_string(),
                       " with signature ", candidate.to_string())) {
    const std::vector<int> mutated =
        mutated_inputs(op_, c.params, static_cast<int>(c.inputs.size()));
    mutated_.insert(mutated.begin(), mutated.end());
  }

  /// Runs checks (1)-(4); an exception (a kernel or the compiler raising) fails the candidate.
  void run() {
    try {
      check();
    } catch (const std::exception& e) {
      ADD_FAILURE() << where_ << ": " << e.what();
    }
  }

 private:
  void check() {
    build();
    if (!built_) return;  // an ASSERT in build() failed
    compute_eager();
    // Note [Forcing a signature]: run the logical passes on a copy to see what they chose.
    Graph logical = builder_.graph();
    std::optional<std::string> rejection;
    try {
      run_logical_passes(logical);
    } catch (const Error& e) {
      rejection = e.what();
    }
    const bool valid = candidate_is_valid();
    if (rejection) {
      // Only a signature that cannot hold for this split may be refused (a view's uneven one,
      // when no other signature gives the hinted output).
      EXPECT_FALSE(valid) << where_ << ": compiling failed: " << *rejection;
      EXPECT_NE(rejection->find("no SBP signature"), std::string::npos)
          << where_ << ": " << *rejection;
      ++stats_->avoided;
      return;
    }
    const LogicalOp* target = nullptr;
    int boxings = 0;
    for (int i = 0; i < logical.num_ops(); ++i) {
      if (logical.op(i).name == "target") target = &logical.op(i);
      if (logical.op(i).kind == OpKind::kBoxing) ++boxings;
    }
    ASSERT_NE(target, nullptr) << where_;
    chosen_ = target->signature;
    const bool chose_candidate = same(chosen_, candidate_);
    if (valid) {
      EXPECT_TRUE(chose_candidate) << where_ << ": SBP inference chose " << chosen_.to_string();
      EXPECT_EQ(boxings, 0) << where_
                            << ": the inputs have the candidate's SBP, so nothing needs "
                               "boxing; chose "
                            << chosen_.to_string();
      if (!chose_candidate) return;
    } else {
      // The compiler must avoid it (and still compute the right values another way).
      EXPECT_FALSE(chose_candidate) << where_
                                    << ": this view signature does not keep each rank's "
                                       "elements for this split, yet it was chosen";
      ++stats_->avoided;
    }
    const proto::PlanProto plan = compile_graph(builder_.graph());
    check_register_shapes(plan);
    run_plan(plan);
    if (valid) ++stats_->compiled;
  }

  static bool same(const NdSbpSignature& a, const NdSbpSignature& b) {
    return a.inputs == b.inputs && a.outputs == b.outputs;
  }

  bool candidate_is_valid() const {
    if (op_.has<TAlignedSplits>()) {
      std::vector<Shape> shapes;
      for (const TensorMeta& m : metas_) shapes.push_back(m.shape);
      for (const TensorMeta& m : out_metas_) shapes.push_back(m.shape);
      std::vector<NdSbp> sbps = candidate_.inputs;
      sbps.insert(sbps.end(), candidate_.outputs.begin(), candidate_.outputs.end());
      return splits_align(shapes, sbps, placement_);
    }
    const int* view_of = op_.get<TViewOfInput>();
    if (view_of == nullptr) return true;
    return view_keeps_pieces(metas_[*view_of].shape, candidate_.inputs[*view_of],
                             out_metas_[0].shape, candidate_.outputs[0], placement_);
  }

  // The graph of Note [Forcing a signature], and the logical input values.
  void build() {
    builder_ = GraphBuilder(str_cat("sweep_", case_.name));
    builder_.set_placement(placement_);
    std::vector<int> ids;
    for (size_t k = 0; k < case_.inputs.size(); ++k) {
      const InputSpec& spec = case_.inputs[k];
      const NdSbp& sbp = candidate_.inputs[k];
      const std::string name = str_cat("in", k);
      const uint64_t seed = 1000 * (k + 1) + 17;
      metas_.push_back(TensorMeta{spec.shape, spec.dtype});
      if (mutated_.count(static_cast<int>(k))) {
        ASSERT_FALSE(has_partial_sum(sbp)) << where_ << ": a variable cannot be partial-sum";
        values_.push_back(sample_values(spec.shape, spec, seed, 1.0));
        ids.push_back(builder_.variable(name, spec.shape, Initializer{}, sbp, /*trainable=*/false,
                                        spec.dtype));
        variables_[k] = name;
      } else if (has_partial_sum(sbp)) {
        ASSERT_TRUE(is_floating(spec.dtype))
            << where_ << ": a partial sum of " << dtype_name(spec.dtype);
        // parts (kPartialRows, *shape) split S(0) where sbp has P: reduce_sum gives sbp.
        std::vector<int64_t> dims = spec.shape.dims();
        dims.insert(dims.begin(), kPartialRows);
        NdSbp parts_sbp;
        for (const Sbp& s : sbp) {
          parts_sbp.push_back(s.is_partial_sum() ? S(0) : s.is_split() ? S(s.axis + 1) : B());
        }
        const Tensor parts = sample_values(Shape(dims), spec, seed, 1.0 / kPartialRows);
        feed_[name + "_parts"] = parts;
        values_.push_back(
            apply_op1(OpRegistry::global().find("reduce_sum"), ReduceParams{{0}, false}, {parts}));
        const int parts_id = builder_.input(name + "_parts", Shape(dims), spec.dtype, parts_sbp);
        ids.push_back(builder_.op1("reduce_sum", ReduceParams{{0}, false}, {parts_id}, name, sbp));
      } else {
        values_.push_back(sample_values(spec.shape, spec, seed, 1.0));
        feed_[name] = values_.back();
        ids.push_back(builder_.input(name, spec.shape, spec.dtype, sbp));
      }
    }
    outputs_ = builder_.op(case_.op, case_.params, ids, "target", candidate_.outputs);
    for (int t : outputs_) {
      out_metas_.push_back(builder_.meta(t));
      builder_.fetch(t);
    }
    // Fetching a variable reads it before this iteration's update (Note [In-place updates wait
    // for readers]), so the second run shows each rank's piece after one update.
    for (const auto& [k, name] : variables_) builder_.fetch(ids[k]);
    built_ = true;
  }

  void compute_eager() {
    eager_inputs_.clear();
    for (const Tensor& v : values_) eager_inputs_.push_back(v.clone());
    eager_outputs_ = apply_op(op_, case_.params, eager_inputs_);  // updates write eager_inputs_
  }

  // (3) Each rank's task of the op reads and writes registers of the physical shapes of the
  // chosen signature.
  void check_register_shapes(const proto::PlanProto& plan) {
    std::map<int64_t, Shape> shapes;
    for (const auto& rank : plan.ranks()) {
      for (const auto& reg : rank.registers()) shapes[reg.id()] = from_proto(reg.shape());
    }
    int tasks = 0;
    for (const auto& rank : plan.ranks()) {
      for (const auto& task : rank.tasks()) {
        // A host slice or concat of contiguous runs is a SLICE or CONCAT task (Note [Slices
        // in a plan] in physical/expansion.h).
        const bool kernel_or_move =
            task.kind() == proto::TaskProto::COMPUTE || task.kind() == proto::TaskProto::COPY ||
            task.kind() == proto::TaskProto::SLICE || task.kind() == proto::TaskProto::CONCAT;
        if (logical_op_of(task) != "target" || !kernel_or_move) continue;
        ++tasks;
        const auto pid = placement_.parallel_id_of(task.rank());
        ASSERT_TRUE(pid.has_value()) << where_ << ": a task on rank " << task.rank();
        const std::string at = str_cat(where_, ", rank ", task.rank());
        if (task.kind() != proto::TaskProto::COPY) {
          ASSERT_EQ(task.inputs_size(), static_cast<int>(metas_.size())) << at;
          for (int k = 0; k < task.inputs_size(); ++k) {
            EXPECT_EQ(shapes.at(task.inputs(k)),
                      physical_shape(metas_[k].shape, chosen_.inputs[k], placement_, *pid))
                << at << ", input " << k;
          }
        }
        ASSERT_EQ(task.outputs_size(), static_cast<int>(out_metas_.size())) << at;
        for (int k = 0; k < task.outputs_size(); ++k) {
          EXPECT_EQ(shapes.at(task.outputs(k)),
                    physical_shape(out_metas_[k].shape, chosen_.outputs[k], placement_, *pid))
              << at << ", output " << k;
        }
      }
    }
    EXPECT_EQ(tasks, placement_.num_ranks()) << where_ << ": tasks of the op in the plan";
  }

  struct Piece {
    std::string tensor;
    int64_t rank = 0;
    NdSbp sbp;
    bool contributes = false;
  };

  // (4) Every fetched tensor (every rank's piece on its own, by giving each OUTPUT task its own
  // name) against the single-device result.
  void run_plan(proto::PlanProto plan) {
    std::map<std::string, Piece> pieces;  // renamed output -> piece
    for (auto& rank : *plan.mutable_ranks()) {
      for (auto& task : *rank.mutable_tasks()) {
        if (task.kind() != proto::TaskProto::OUTPUT) continue;
        const std::string name = str_cat(logical_op_of(task), "#", task.rank());
        pieces[name] =
            Piece{logical_op_of(task), task.rank(), from_proto(task.sbp()), task.contributes()};
        task.set_logical_op(name);
        task.set_contributes(true);
      }
    }
    actor::ReferenceExecutor executor(std::move(plan));
    for (const auto& [k, name] : variables_) executor.write_variable(name, values_[k]);
    auto fetched = executor.run(feed_);
    if (variables_.empty()) {
      for (size_t k = 0; k < outputs_.size(); ++k) {
        const std::string tensor = builder_.graph().tensor(outputs_[k]).name;
        check_pieces(fetched, pieces, tensor, eager_outputs_[k], str_cat("output ", k));
      }
      return;
    }
    for (const auto& [k, name] : variables_) {
      expect_values(values_of(executor.read_variable(name)), values_of(eager_inputs_[k]),
                    metas_[k].shape,
                    str_cat(where_, ": variable '", name, "' (input ", k, ") after the update"));
    }
    fetched = executor.run(feed_);
    for (const auto& [k, name] : variables_) {
      check_pieces(fetched, pieces, name, eager_inputs_[k], str_cat("updated input ", k));
    }
  }

  // Every rank's piece must hold its region of `expected` (pieces that differ only in their
  // coordinate on partial-sum dimensions sum to it), which also checks that broadcast replicas
  // agree; then the assembled value (contributing pieces summed) must equal `expected`.
  void check_pieces(const std::map<std::string, Tensor>& fetched,
                    const std::map<std::string, Piece>& pieces, const std::string& tensor,
                    const Tensor& expected, const std::string& what) {
    const std::vector<double> whole = values_of(expected);
    std::vector<double> assembled(whole.size(), 0.0);
    std::map<std::vector<int64_t>, std::vector<double>> sums;    // coordinate (P dims -1) -> sum
    std::map<std::vector<int64_t>, std::vector<int64_t>> ranks;  // coordinate -> ranks
    std::map<std::vector<int64_t>, NdSbp> sbps;
    int found = 0;
    for (const auto& [name, piece] : pieces) {
      if (piece.tensor != tensor) continue;
      ++found;
      const std::vector<double> values = values_of(fetched.at(name));
      if (values.size() != whole.size()) {
        ADD_FAILURE() << where_ << ", rank " << piece.rank << ": " << what << " has "
                      << values.size() << " elements, expected " << whole.size();
        return;
      }
      std::vector<int64_t> coordinate =
          placement_.coordinate(*placement_.parallel_id_of(piece.rank));
      for (size_t d = 0; d < coordinate.size(); ++d) {
        if (piece.sbp[d].is_partial_sum()) coordinate[d] = -1;
      }
      auto& sum = sums[coordinate];
      sum.resize(whole.size(), 0.0);
      for (size_t i = 0; i < values.size(); ++i) {
        sum[i] += values[i];
        if (piece.contributes) assembled[i] += values[i];
      }
      ranks[coordinate].push_back(piece.rank);
      sbps[coordinate] = piece.sbp;
    }
    ASSERT_EQ(found, placement_.num_ranks()) << where_ << ": OUTPUT pieces of " << what;
    const Shape& shape = expected.shape();
    for (const auto& [coordinate, sum] : sums) {
      const std::vector<int64_t>& group = ranks[coordinate];
      const int64_t pid = *placement_.parallel_id_of(group[0]);
      std::vector<double> region_only(whole.size(), 0.0);
      for (int64_t i :
           flat_indices(shape, logical_region(shape, sbps[coordinate], placement_, pid))) {
        region_only[i] = whole[i];
      }
      std::string who = group.size() == 1 ? str_cat("rank ", group[0]) : "ranks";
      if (group.size() > 1) {
        for (int64_t r : group) who += str_cat(" ", r);
        who += " (partial sums of one piece)";
      }
      if (!expect_values(sum, region_only, shape,
                         str_cat(where_, ", ", who, ": the piece of ", what, " as ",
                                 nd_sbp_to_string(sbps[coordinate])))) {
        return;
      }
    }
    expect_values(assembled, whole, shape, str_cat(where_, ": assembled ", what));
  }

  const OpCase& case_;
  const OpSchema& op_;
  Placement placement_;
  NdSbpSignature candidate_;
  SweepStats* stats_;
  std::string where_;
  std::set<int> mutated_;

  GraphBuilder builder_;
  std::vector<TensorMeta> metas_;
  std::vector<TensorMeta> out_metas_;
  std::vector<int> outputs_;
  std::vector<Tensor> values_;               // logical input values
  std::map<size_t, std::string> variables_;  // input index -> variable name
  std::map<std::string, Tensor> feed_;
  std::vector<Tensor> eager_inputs_;
  std::vector<Tensor> eager_outputs_;
  NdSbpSignature chosen_;
  bool built_ = false;
};

// ---- The sweep ----

std::vector<Placement> sweep_placements() {
  return {Placement::parse("cpu, [0]"), Placement::parse("cpu, [0, 1]"),
          Placement::parse("cpu, [0, 1, 2]"), Placement::parse("cpu, [0, 1, 2, 3]"),
          Placement::parse("cpu, [[0, 1], [2, 3]]")};
}

SweepStats sweep(const OpCase& c) {
  SweepStats stats;
  const OpSchema& op = OpRegistry::global().find(c.op);
  const SbpSignaturesFn* fn = op.get<FSbpSignatures>();
  EXPECT_NE(fn, nullptr) << "op '" << c.op << "' has no FSbpSignatures";
  if (fn == nullptr) return stats;
  std::vector<TensorMeta> metas;
  for (const InputSpec& spec : c.inputs) metas.push_back(TensorMeta{spec.shape, spec.dtype});
  const std::vector<SbpSignature> one_d = (*fn)(InferContext(op, c.params, metas));
  EXPECT_FALSE(one_d.empty()) << "op '" << c.op << "' offers no SBP signature";
  for (const SbpSignature& s : one_d) {
    EXPECT_EQ(s.inputs.size(), c.inputs.size())
        << "op '" << c.op << "' signature " << s.to_string();
  }
  for (const Placement& placement : sweep_placements()) {
    for (const NdSbpSignature& candidate : candidates(one_d, placement)) {
      CandidateCheck(c, placement, candidate, &stats).run();
    }
  }
  return stats;
}

class SbpSweep : public ::testing::TestWithParam<OpCase> {};

TEST_P(SbpSweep, EverySignatureOnEveryPlacementComputesTheSingleDeviceResult) {
  const OpCase& c = GetParam();
  const SweepStats stats = sweep(c);
  EXPECT_GT(stats.compiled, 0) << c.name;
  // Views that change the shape (reshape) and grouped attention have signatures that hold only
  // for even splits; the uneven shapes must exercise the compiler's refusal of them. A view
  // that keeps the shape (stop_gradient) holds for every split.
  const OpSchema& op = OpRegistry::global().find(c.op);
  bool reshaping_view = false;
  if (op.has<TViewOfInput>()) {
    std::vector<TensorMeta> metas;
    for (const InputSpec& spec : c.inputs) metas.push_back(TensorMeta{spec.shape, spec.dtype});
    const auto outs = (*op.get<FInferMeta>())(InferContext(op, c.params, metas));
    reshaping_view = outs.at(0).shape != metas.at(0).shape;
  }
  if (reshaping_view || c.name.find("gqa") != std::string::npos) {
    EXPECT_GT(stats.avoided, 0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, SbpSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

TEST(SbpSweepTable, CoversEveryRegisteredOp) {
  std::set<std::string> covered;
  for (const OpCase& c : sweep_cases()) {
    EXPECT_NE(OpRegistry::global().try_find(c.op), nullptr)
        << "case " << c.name << ": no op " << c.op;
    covered.insert(c.op);
  }
  for (const std::string& name : OpRegistry::global().names()) {
    if (name.rfind("test_", 0) == 0) continue;
    if (!OpRegistry::global().find(name).defined()) continue;  // only kernels registered
    EXPECT_TRUE(covered.count(name)) << "op '" << name << "' has no case in the SBP sweep table";
  }
}

// The sweep itself must catch a wrong signature: reduce_mean's signatures plus S(0) -> P for a
// mean over axis 0 (each rank averages its own rows, and the ranks' means do not add up to the
// mean). The op is registered here, with reduce_mean's inference and kernel.
const OpCase& wrong_mean_case() {
  static const OpCase c = [] {
    const OpSchema& mean = OpRegistry::global().find("reduce_mean");
    OpSchema& op = OpRegistry::global().get_or_create("test_sweep_wrong_mean");
    op.inputs({"x"}).outputs({"out"}).params<ReduceParams>();
    op.set<FInferMeta>(*mean.get<FInferMeta>());
    op.set<FSbpSignatures>([fn = *mean.get<FSbpSignatures>()](const InferContext& ctx) {
      std::vector<SbpSignature> sigs = fn(ctx);
      sigs.push_back({{S(0)}, {P()}});
      return sigs;
    });
    op.add_kernel(DeviceType::kCPU, DataType::kFloat32,
                  mean.find_kernel(DeviceType::kCPU, DataType::kFloat32));
    return OpCase{
        "wrong_mean", "test_sweep_wrong_mean", ReduceParams{{0}, false}, {floats(Shape{5, 4})}};
  }();
  return c;
}

TEST(SbpSweepSelfTest, AWrongSignatureFailsNamingOpPlacementSignatureAndRanks) {
  const OpCase& c = wrong_mean_case();
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    sweep(c);
  }
  // Each candidate with S(0) -> P on a hierarchy dimension of more than one rank fails once.
  int one_d = 0;
  for (int i = 0; i < failures.size(); ++i) {
    const std::string message = failures.GetTestPartResult(i).message();
    EXPECT_NE(message.find("op 'test_sweep_wrong_mean'"), std::string::npos) << message;
    EXPECT_NE(message.find("on placement cpu, "), std::string::npos) << message;
    EXPECT_NE(message.find("with signature "), std::string::npos) << message;
    EXPECT_NE(message.find(", ranks "), std::string::npos) << message;
    if (message.find("with signature S(0) -> P, ranks 0 1") != std::string::npos) ++one_d;
  }
  EXPECT_EQ(one_d, 3) << "on 2, 3 and 4 ranks";
  EXPECT_GT(failures.size(), 3) << "and on the 2x2 hierarchy";
}

}  // namespace
}  // namespace ofl::compiler
