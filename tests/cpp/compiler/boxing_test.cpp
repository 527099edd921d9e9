// Boxing decomposition: the generated steps are executed by a tiny interpreter and every
// destination's piece is compared with its region of a known logical tensor, over a sweep of
// placements, SBPs and even/uneven shapes. Collectives are checked for their shape: one task
// per member, over the communicator of the changed dimension.

#include "compiler/physical/boxing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {
namespace {

using Region = std::vector<Range>;

Region region_from(const google::protobuf::RepeatedPtrField<proto::RangeProto>& ranges, int begin,
                   int ndim) {
  Region r(ndim);
  for (int i = 0; i < ndim; ++i) r[i] = Range{ranges[begin + i].begin(), ranges[begin + i].end()};
  return r;
}

/// dst[dst_region] += or = src[src_region] (float64 tensors, regions of equal sizes).
void copy_region(const Tensor& src, const Region& src_region, const Tensor& dst,
                 const Region& dst_region, bool accumulate = false) {
  ASSERT_EQ(src_region.size(), dst_region.size());
  std::vector<int64_t> sizes(src_region.size());
  int64_t total = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sizes[i] = src_region[i].size();
    ASSERT_EQ(sizes[i], dst_region[i].size());
    total *= sizes[i];
  }
  const std::vector<int64_t> src_strides = src.shape().strides();
  const std::vector<int64_t> dst_strides = dst.shape().strides();
  const double* s = src.data<double>();
  double* d = dst.data<double>();
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat, src_offset = 0, dst_offset = 0;
    for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
      const int64_t index = rest % sizes[i];
      rest /= sizes[i];
      src_offset += (src_region[i].begin + index) * src_strides[i];
      dst_offset += (dst_region[i].begin + index) * dst_strides[i];
    }
    d[dst_offset] = accumulate ? d[dst_offset] + s[src_offset] : s[src_offset];
  }
}

Tensor slice_of(const Tensor& src, const Region& region) {
  std::vector<int64_t> dims;
  for (const Range& r : region) dims.push_back(r.size());
  Tensor out = Tensor::zeros(Shape(dims), DataType::kFloat64);
  copy_region(src, region, out, whole_region(out.shape()));
  return out;
}

/// Runs the boxing tasks of a plan in dependency order on float64 tensors, checking that every
/// task reads and writes registers of its own rank and that SEND/RECV pairs match.
class Interpreter {
 public:
  explicit Interpreter(const proto::PlanProto& plan) {
    for (const proto::RankPlanProto& rank : plan.ranks()) {
      for (const proto::RegisterProto& reg : rank.registers()) {
        registers_[reg.id()] = &reg;
        register_rank_[reg.id()] = rank.rank();
      }
      for (const proto::TaskProto& task : rank.tasks()) tasks_.push_back(&task);
    }
  }

  void set(int64_t reg, const Tensor& value) { values_[reg] = value; }
  const Tensor& value(int64_t reg) const { return values_.at(reg); }

  void run() {
    std::vector<const proto::TaskProto*> pending;
    for (const proto::TaskProto* task : tasks_) {
      if (task->kind() != proto::TaskProto::INPUT) pending.push_back(task);
    }
    while (!pending.empty()) {
      std::vector<const proto::TaskProto*> blocked;
      for (const proto::TaskProto* task : pending) {
        if (ready(*task)) {
          execute(*task);
        } else {
          blocked.push_back(task);
        }
      }
      if (blocked.size() == pending.size()) {
        ADD_FAILURE() << "no task can run; first blocked: " << blocked[0]->name();
        return;
      }
      pending = std::move(blocked);
    }
  }

 private:
  bool ready(const proto::TaskProto& task) const {
    for (int64_t reg : task.inputs()) {
      if (!values_.count(reg)) return false;
    }
    if (task.kind() == proto::TaskProto::COLLECTIVE) {  // every member's input is there
      for (const proto::TaskProto* member : members(task)) {
        for (int64_t reg : member->inputs()) {  // a broadcast's members but the root read none
          if (!values_.count(reg)) return false;
        }
      }
    }
    return task.kind() != proto::TaskProto::RECV || sent_.count(task.transfer_id());
  }

  // The tasks of `task`'s collective, by member index.
  std::vector<const proto::TaskProto*> members(const proto::TaskProto& task) const {
    const proto::CollectiveProto& c = task.collective();
    std::vector<const proto::TaskProto*> out(c.members_size(), nullptr);
    for (const proto::TaskProto* t : tasks_) {
      if (t->kind() != proto::TaskProto::COLLECTIVE ||
          t->collective().collective_id() != c.collective_id()) {
        continue;
      }
      const auto it = std::find(c.members().begin(), c.members().end(), t->rank());
      EXPECT_NE(it, c.members().end()) << t->name() << " is no member";
      EXPECT_EQ(out[it - c.members().begin()], nullptr) << t->name() << " is a member twice";
      out[it - c.members().begin()] = t;
    }
    for (const auto* t : out) EXPECT_NE(t, nullptr) << task.name() << " lacks a member";
    return out;
  }

  // The collective's result for `task`'s member, from the definitions: a sum over the
  // members, or their inputs side by side (Note [Collective tasks]).
  Tensor collective(const proto::TaskProto& task) const {
    const proto::CollectiveProto& c = task.collective();
    const int64_t n = c.members_size();
    const int64_t me =
        std::find(c.members().begin(), c.members().end(), task.rank()) - c.members().begin();
    const std::vector<const proto::TaskProto*> tasks = members(task);
    const Shape out_shape = register_shape(task.outputs(0));
    if (c.op() == proto::CollectiveProto::ALL_TO_ALL) {
      // The group's whole: the inputs side by side along axis; this member's chunk along
      // out_axis of it.
      Shape whole_shape = register_shape(task.inputs(0));
      whole_shape[c.axis()] = out_shape[c.axis()];
      Tensor all = Tensor::zeros(whole_shape, DataType::kFloat64);
      const auto in_chunks = collective_chunks(whole_shape, c.axis(), n);
      for (int64_t j = 0; j < n; ++j) {
        copy_region(values_.at(tasks[j]->inputs(0)),
                    whole_region(register_shape(tasks[j]->inputs(0))), all, in_chunks[j]);
      }
      return slice_of(all, collective_chunks(whole_shape, c.out_axis(), n)[me]);
    }
    if (c.op() == proto::CollectiveProto::BROADCAST) {  // the root's input, the root alone reads
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(tasks[j]->inputs_size(), j == c.root() ? 1 : 0);
      return values_.at(tasks[c.root()]->inputs(0)).clone();
    }
    if (c.op() == proto::CollectiveProto::SEND_RECV) {
      // Each receive from the block its sender sends this member; every element once.
      Tensor out = Tensor::zeros(out_shape, DataType::kFloat64);
      int64_t covered = 0;
      for (const proto::CollectiveBlockProto& r : c.receives()) {
        const proto::TaskProto& sender = *tasks[r.member()];
        int found = 0;
        for (const proto::CollectiveBlockProto& b : sender.collective().sends()) {
          if (b.member() != me) continue;
          ++found;
          const Tensor piece =
              slice_of(values_.at(sender.inputs(0)), region_from(b.region(), 0, b.region_size()));
          copy_region(piece, whole_region(piece.shape()), out,
                      region_from(r.region(), 0, r.region_size()));
          covered += piece.numel();
        }
        EXPECT_EQ(found, 1) << task.name() << " receives from member " << r.member();
      }
      EXPECT_EQ(covered, out.numel()) << task.name() << " leaves holes";
      return out;
    }
    if (c.op() == proto::CollectiveProto::ALL_GATHER) {
      Tensor out = Tensor::zeros(out_shape, DataType::kFloat64);
      const auto chunks = collective_chunks(out_shape, c.axis(), n);
      for (int64_t j = 0; j < n; ++j) {
        copy_region(values_.at(tasks[j]->inputs(0)),
                    whole_region(register_shape(tasks[j]->inputs(0))), out, chunks[j]);
      }
      return out;
    }
    const Shape in_shape = register_shape(task.inputs(0));
    Tensor sum = Tensor::zeros(in_shape, DataType::kFloat64);
    for (const proto::TaskProto* t : tasks) {
      copy_region(values_.at(t->inputs(0)), whole_region(in_shape), sum, whole_region(in_shape),
                  true);
    }
    if (c.op() == proto::CollectiveProto::ALL_REDUCE) return sum;
    EXPECT_EQ(c.op(), proto::CollectiveProto::REDUCE_SCATTER);
    return slice_of(sum, collective_chunks(in_shape, c.axis(), n)[me]);
  }

  Shape register_shape(int64_t reg) const { return from_proto(registers_.at(reg)->shape()); }

  void execute(const proto::TaskProto& task) {
    std::vector<Tensor> in;
    for (int64_t reg : task.inputs()) {
      EXPECT_EQ(register_rank_.at(reg), task.rank()) << task.name() << " reads another rank";
      in.push_back(values_.at(reg));
    }
    for (int64_t reg : task.outputs()) {
      EXPECT_EQ(register_rank_.at(reg), task.rank()) << task.name() << " writes another rank";
    }
    Tensor out;
    switch (task.kind()) {
      case proto::TaskProto::SLICE:
        out = slice_of(in.at(0), region_from(task.slice(), 0, in.at(0).ndim()));
        break;
      case proto::TaskProto::SEND:
        EXPECT_EQ(sent_.count(task.transfer_id()), 0u);
        sent_[task.transfer_id()] = {task.rank(), task.peer(), in.at(0).clone()};
        return;
      case proto::TaskProto::RECV: {
        const Sent& s = sent_.at(task.transfer_id());
        EXPECT_EQ(s.to, task.rank()) << task.name();
        EXPECT_EQ(s.from, task.peer()) << task.name();
        out = s.value;
        break;
      }
      case proto::TaskProto::ADD: {
        out = in.at(0).clone();
        for (size_t i = 1; i < in.size(); ++i) {
          EXPECT_EQ(in[i].shape(), out.shape()) << task.name();
          copy_region(in[i], whole_region(out.shape()), out, whole_region(out.shape()),
                      /*accumulate=*/true);
        }
        break;
      }
      case proto::TaskProto::CONCAT: {
        out = Tensor::zeros(register_shape(task.outputs(0)), DataType::kFloat64);
        EXPECT_EQ(task.concat_regions_size(), out.ndim() * static_cast<int>(in.size()));
        int64_t covered = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          copy_region(
              in[i], whole_region(in[i].shape()), out,
              region_from(task.concat_regions(), static_cast<int>(i) * out.ndim(), out.ndim()));
          covered += in[i].numel();
        }
        EXPECT_EQ(covered, out.numel()) << task.name() << " leaves holes";
        break;
      }
      case proto::TaskProto::ZEROS:
        out = Tensor::zeros(register_shape(task.outputs(0)), DataType::kFloat64);
        break;
      case proto::TaskProto::COPY:
        out = in.at(0).clone();
        break;
      case proto::TaskProto::COLLECTIVE:
        EXPECT_EQ(task.thread(), 1) << task.name() << " is not on the communication thread";
        out = collective(task);
        break;
      default:
        ADD_FAILURE() << "unexpected task kind in boxing: " << task.name();
        return;
    }
    ASSERT_EQ(task.outputs_size(), 1) << task.name();
    EXPECT_EQ(out.shape(), register_shape(task.outputs(0))) << task.name();
    values_[task.outputs(0)] = out;
  }

  struct Sent {
    int64_t from;
    int64_t to;
    Tensor value;
  };
  std::map<int64_t, const proto::RegisterProto*> registers_;
  std::map<int64_t, int64_t> register_rank_;
  std::vector<const proto::TaskProto*> tasks_;
  std::map<int64_t, Tensor> values_;
  std::map<int64_t, Sent> sent_;
};

Tensor random_integers(const Shape& shape, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> dist(-9, 9);
  Tensor t = Tensor::zeros(shape, DataType::kFloat64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = dist(gen);
  return t;
}

int64_t parallel_id_of_coordinate(const Placement& placement, const std::vector<int64_t>& coord) {
  int64_t pid = 0;
  for (int d = 0; d < placement.hierarchy().ndim(); ++d)
    pid = pid * placement.hierarchy()[d] + coord[d];
  return pid;
}

/// The piece parallel id `pid` holds of `logical` under `sbp`. Partial-sum holders get random
/// addends that depend only on their split and partial coordinates (so broadcast replicas
/// agree); the holder at partial coordinate 0 gets the rest, so they sum to the logical value.
Tensor piece_of(const Tensor& logical, const NdSbp& sbp, const Placement& placement, int64_t pid) {
  const Region region = logical_region(logical.shape(), sbp, placement, pid);
  const std::vector<int64_t> coord = placement.coordinate(pid);
  std::vector<int> partial_dims;
  uint64_t split_seed = 1;
  for (size_t d = 0; d < sbp.size(); ++d) {
    if (sbp[d].is_partial_sum()) partial_dims.push_back(static_cast<int>(d));
    if (sbp[d].is_split()) split_seed = split_seed * 31 + coord[d] + 1;
  }
  const Shape shape = physical_shape(logical.shape(), sbp, placement, pid);
  auto addend = [&](const std::vector<int64_t>& partial) {
    uint64_t seed = split_seed;
    for (int64_t c : partial) seed = seed * 17 + c + 1;
    return random_integers(shape, seed);
  };
  std::vector<int64_t> partial;
  for (int d : partial_dims) partial.push_back(coord[d]);
  const bool first = std::all_of(partial.begin(), partial.end(), [](int64_t c) { return c == 0; });
  if (!first) return addend(partial);
  Tensor out = slice_of(logical, region);
  // Subtract every other partial combination's addend.
  std::vector<int64_t> other(partial.size(), 0);
  while (true) {
    size_t i = 0;
    for (; i < other.size(); ++i) {
      if (++other[i] < placement.hierarchy()[partial_dims[i]]) break;
      other[i] = 0;
    }
    if (i == other.size()) break;
    const Tensor a = addend(other);
    for (int64_t k = 0; k < out.numel(); ++k) out.data<double>()[k] -= a.data<double>()[k];
  }
  return out;
}

std::string describe(const BoxingSpec& spec, const Shape& shape) {
  return str_cat(shape.to_string(), " ", nd_sbp_to_string(spec.in_sbp), " on ",
                 spec.in_placement.to_string(), " -> ", nd_sbp_to_string(spec.out_sbp), " on ",
                 spec.out_placement.to_string());
}

std::vector<int64_t> union_of_ranks(const Placement& a, const Placement& b) {
  std::set<int64_t> ranks(a.ranks().begin(), a.ranks().end());
  ranks.insert(b.ranks().begin(), b.ranks().end());
  return {ranks.begin(), ranks.end()};
}

/// Boxes a known logical tensor, runs the steps and checks every destination's piece.
void expect_boxing_delivers(const BoxingSpec& spec, const Shape& shape) {
  SCOPED_TRACE(describe(spec, shape));
  const Tensor logical = random_integers(shape, 7);
  PlanBuilder builder(union_of_ranks(spec.in_placement, spec.out_placement));
  std::vector<int64_t> in_registers;
  std::vector<Tensor> in_values;
  for (int64_t pid = 0; pid < spec.in_placement.num_ranks(); ++pid) {
    proto::TaskProto* task =
        builder.add_task(spec.in_placement.rank(pid), proto::TaskProto::INPUT, "in");
    in_values.push_back(piece_of(logical, spec.in_sbp, spec.in_placement, pid));
    in_registers.push_back(
        builder.add_output(task, "in", in_values.back().shape(), DataType::kFloat64));
  }
  const std::vector<int64_t> out =
      expand_boxing(spec, TensorMeta{shape, DataType::kFloat64}, in_registers, builder, "box");
  ASSERT_EQ(static_cast<int64_t>(out.size()), spec.out_placement.num_ranks());
  for (int64_t d = 0; d < spec.out_placement.num_ranks(); ++d) {
    EXPECT_EQ(builder.register_rank(out[d]), spec.out_placement.rank(d)) << "parallel id " << d;
  }
  const proto::PlanProto plan = builder.release();
  check_plan_contract(plan);  // matched transfers and collectives, members reading their inputs
  Interpreter interpreter(plan);
  for (size_t i = 0; i < in_registers.size(); ++i) interpreter.set(in_registers[i], in_values[i]);
  interpreter.run();
  if (::testing::Test::HasFailure()) return;

  // Assemble: pieces at coordinate 0 of every broadcast dimension are added at their regions
  // (which also sums partial pieces); broadcast replicas must equal that coordinate-0 piece.
  const Placement& dst = spec.out_placement;
  Tensor assembled = Tensor::zeros(shape, DataType::kFloat64);
  bool has_partial = false;
  for (const Sbp& s : spec.out_sbp) has_partial = has_partial || s.is_partial_sum();
  for (int64_t d = 0; d < dst.num_ranks(); ++d) {
    const Tensor& value = interpreter.value(out[d]);
    ASSERT_EQ(value.shape(), physical_shape(shape, spec.out_sbp, dst, d)) << "parallel id " << d;
    const Region region = logical_region(shape, spec.out_sbp, dst, d);
    if (!has_partial) {
      const Tensor expected = slice_of(logical, region);
      for (int64_t k = 0; k < value.numel(); ++k) {
        ASSERT_EQ(value.data<double>()[k], expected.data<double>()[k])
            << "parallel id " << d << " element " << k;
      }
    }
    std::vector<int64_t> coord = dst.coordinate(d);
    bool first_replica = true;
    for (size_t k = 0; k < spec.out_sbp.size(); ++k) {
      if (spec.out_sbp[k].is_broadcast() && coord[k] != 0) {
        coord[k] = 0;
        first_replica = false;
      }
    }
    if (first_replica) {
      copy_region(value, whole_region(value.shape()), assembled, region, /*accumulate=*/true);
    } else {
      const Tensor& replica = interpreter.value(out[parallel_id_of_coordinate(dst, coord)]);
      for (int64_t k = 0; k < value.numel(); ++k) {
        ASSERT_EQ(value.data<double>()[k], replica.data<double>()[k])
            << "broadcast replica at parallel id " << d << " differs, element " << k;
      }
    }
  }
  for (int64_t k = 0; k < logical.numel(); ++k) {
    ASSERT_EQ(assembled.data<double>()[k], logical.data<double>()[k]) << "element " << k;
  }
}

const std::vector<Sbp> kOneDimSbps = {S(0), S(1), B(), P()};

std::vector<NdSbp> all_nd_sbps(int ndim) {
  std::vector<NdSbp> out = {{}};
  for (int d = 0; d < ndim; ++d) {
    std::vector<NdSbp> next;
    for (const NdSbp& prefix : out) {
      for (const Sbp& s : kOneDimSbps) {
        NdSbp nd = prefix;
        nd.push_back(s);
        next.push_back(nd);
      }
    }
    out = std::move(next);
  }
  return out;
}

const std::vector<Shape> kShapes = {Shape{12, 12}, Shape{5, 7}, Shape{2, 3}};

void expect_every_conversion_delivers(const Placement& from, const Placement& to) {
  for (const Shape& shape : kShapes) {
    for (const NdSbp& in : all_nd_sbps(from.hierarchy().ndim())) {
      for (const NdSbp& out : all_nd_sbps(to.hierarchy().ndim())) {
        expect_boxing_delivers(BoxingSpec{from, in, to, out}, shape);
        if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
      }
    }
  }
}

Placement cpu(std::vector<int64_t> ranks) { return Placement(DeviceType::kCPU, std::move(ranks)); }

TEST(BoxingExecution, EveryOneDimConversionOnOneToFourRanksDeliversEachRankItsPiece) {
  for (int64_t n = 1; n <= 4; ++n) {
    std::vector<int64_t> ranks;
    for (int64_t r = 0; r < n; ++r) ranks.push_back(r);
    expect_every_conversion_delivers(cpu(ranks), cpu(ranks));
  }
}

TEST(BoxingExecution, EveryTwoDimConversionOnATwoByTwoPlacementDeliversEachRankItsPiece) {
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  expect_every_conversion_delivers(grid, grid);
}

TEST(BoxingExecution, ConversionsBetweenDifferentRankSetsDeliverEachRankItsPiece) {
  expect_every_conversion_delivers(cpu({0, 1}), cpu({2, 3, 4}));
  expect_every_conversion_delivers(cpu({0, 1}), cpu({1}));
  expect_every_conversion_delivers(cpu({2, 3, 4}), cpu({0, 1}));
  expect_every_conversion_delivers(cpu({0, 1}), Placement::parse("cpu, [[0, 1], [2, 3]]"));
  expect_every_conversion_delivers(Placement::parse("cpu, [[0, 1], [2, 3]]"), cpu({3, 1, 2}));
}

TEST(BoxingExecution, ThreeDimensionalTensorsAreBoxedOnTheirThirdAxisToo) {
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  for (const NdSbp& in : std::vector<NdSbp>{{S(2), P()}, {P(), S(2)}, {B(), S(1)}}) {
    for (const NdSbp& out : std::vector<NdSbp>{{B(), B()}, {S(2), S(2)}, {S(0), S(2)}}) {
      expect_boxing_delivers(BoxingSpec{grid, in, grid, out}, Shape{3, 4, 5});
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The shape of the decompositions.

/// The communication tasks of one boxing.
struct CommSummary {
  int64_t sends = 0;
  int64_t recvs = 0;
  // Per collective id: its op, and the member ranks of its tasks in task order.
  std::map<int64_t, proto::CollectiveProto> collectives;
  std::map<int64_t, std::vector<int64_t>> task_ranks;
  int64_t collective_threads_not_1 = 0;
};

CommSummary summarize(const BoxingSpec& spec, const Shape& shape) {
  PlanBuilder builder(union_of_ranks(spec.in_placement, spec.out_placement));
  std::vector<int64_t> in;
  for (int64_t pid = 0; pid < spec.in_placement.num_ranks(); ++pid) {
    proto::TaskProto* task =
        builder.add_task(spec.in_placement.rank(pid), proto::TaskProto::INPUT, "in");
    in.push_back(builder.add_output(task, "in",
                                    physical_shape(shape, spec.in_sbp, spec.in_placement, pid),
                                    DataType::kFloat32));
  }
  expand_boxing(spec, TensorMeta{shape, DataType::kFloat32}, in, builder, "box");
  CommSummary s;
  for (int64_t id = 0; id < builder.num_tasks(); ++id) {
    const proto::TaskProto& task = builder.task(id);
    if (task.kind() == proto::TaskProto::SEND) ++s.sends;
    if (task.kind() == proto::TaskProto::RECV) ++s.recvs;
    if (task.kind() == proto::TaskProto::COLLECTIVE) {
      s.collectives[task.collective().collective_id()] = task.collective();
      s.task_ranks[task.collective().collective_id()].push_back(task.rank());
      if (task.thread() != 1) ++s.collective_threads_not_1;
    }
  }
  return s;
}

std::vector<int64_t> members_of(const proto::CollectiveProto& c) {
  return {c.members().begin(), c.members().end()};
}

TEST(Collectives, PartialToBroadcastOnFourRanksIsOneAllReduceTaskPerRank) {
  const Placement p = cpu({0, 1, 2, 3});
  const BoxingSpec spec{p, {P()}, p, {B()}};
  const std::vector<BoxingStep> steps = plan_boxing(spec, Shape{8, 6});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].kind, BoxingKind::kAllReduce);
  const CommSummary s = summarize(spec, Shape{8, 6});
  EXPECT_EQ(s.sends + s.recvs, 0);
  ASSERT_EQ(s.collectives.size(), 1u);
  const proto::CollectiveProto& c = s.collectives.begin()->second;
  EXPECT_EQ(c.op(), proto::CollectiveProto::ALL_REDUCE);
  EXPECT_EQ(members_of(c), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(c.sequence(), 0);
  EXPECT_EQ(c.axis(), -1);
  EXPECT_EQ(s.task_ranks.begin()->second, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.collective_threads_not_1, 0);
}

// Note [Recursive doubling]: the compiler picks it for all-reduces up to
// kRecursiveDoublingMaxBytes of the whole tensor, the ring above.
TEST(Collectives, SmallAllReducesRunByRecursiveDoublingLargeOnesByRing) {
  const Placement p = cpu({0, 1, 2});
  const BoxingSpec spec{p, {P()}, p, {B()}};
  const int64_t largest = kRecursiveDoublingMaxBytes / 4;  // float32 elements
  for (const auto& [shape, algorithm] :
       std::vector<std::pair<Shape, proto::CollectiveProto::Algorithm>>{
           {Shape{8, 6}, proto::CollectiveProto::RECURSIVE_DOUBLING},
           {Shape{largest}, proto::CollectiveProto::RECURSIVE_DOUBLING},
           {Shape{largest + 1}, proto::CollectiveProto::RING}}) {
    const CommSummary s = summarize(spec, shape);
    ASSERT_EQ(s.collectives.size(), 1u);
    EXPECT_EQ(s.collectives.begin()->second.algorithm(), algorithm) << shape.to_string();
  }
  // Reductions into splits stay rings whatever their size.
  const CommSummary scatter = summarize(BoxingSpec{p, {P()}, p, {S(0)}}, Shape{6});
  EXPECT_EQ(scatter.collectives.begin()->second.algorithm(), proto::CollectiveProto::RING);
}

TEST(Collectives, PartialToSplitIsAReduceScatterAndSplitToBroadcastAnAllGather) {
  const Placement p = cpu({4, 2, 7});  // the ring follows the placement order, not rank numbers
  for (const auto& [from, to, kind, op, axis] :
       std::vector<std::tuple<Sbp, Sbp, BoxingKind, proto::CollectiveProto::Op, int>>{
           {P(), S(1), BoxingKind::kReduceScatter, proto::CollectiveProto::REDUCE_SCATTER, 1},
           {S(0), B(), BoxingKind::kAllGather, proto::CollectiveProto::ALL_GATHER, 0}}) {
    const BoxingSpec spec{p, {from}, p, {to}};
    EXPECT_EQ(plan_boxing(spec, Shape{5, 7}).at(0).kind, kind);
    const CommSummary s = summarize(spec, Shape{5, 7});
    EXPECT_EQ(s.sends, 0);
    ASSERT_EQ(s.collectives.size(), 1u);
    const proto::CollectiveProto& c = s.collectives.begin()->second;
    EXPECT_EQ(c.op(), op);
    EXPECT_EQ(c.axis(), axis);
    EXPECT_EQ(members_of(c), (std::vector<int64_t>{4, 2, 7}));
  }
}

TEST(Collectives, BroadcastToSplitSlicesLocallyWithoutCommunicating) {
  const Placement p = cpu({0, 1, 2, 3});
  const BoxingSpec spec{p, {B()}, p, {S(1)}};
  EXPECT_EQ(plan_boxing(spec, Shape{5, 7}).at(0).kind, BoxingKind::kLocalSlice);
  const CommSummary s = summarize(spec, Shape{5, 7});
  EXPECT_EQ(s.sends + s.recvs, 0);
  EXPECT_TRUE(s.collectives.empty());
}

TEST(Collectives, TwoDimPartialToBroadcastRunsOneCollectivePerGroupOfTheChangedDimension) {
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  const CommSummary s = summarize(BoxingSpec{grid, {P(), B()}, grid, {B(), B()}}, Shape{4, 4});
  // Dimension 0 changes: the communicators are {0, 2} and {1, 3}.
  std::set<std::vector<int64_t>> communicators;
  for (const auto& [id, c] : s.collectives) {
    communicators.insert(members_of(c));
    EXPECT_NE(c.communicator().find("dimension 0"), std::string::npos) << c.communicator();
    EXPECT_EQ(c.sequence(), 0);  // the first collective of each communicator
  }
  EXPECT_EQ(communicators, (std::set<std::vector<int64_t>>{{0, 2}, {1, 3}}));
}

// The collective-order proof names source lines (Note [Collective order]): a compiled plan's
// collective tasks carry where the user's code made the op whose output they box.
TEST(Collectives, CompiledCollectiveTasksCarryTheSourceLineOfTheirOp) {
  GraphBuilder b("located");
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  b.set_location("model.py:3");
  const int x = b.input("x", Shape{2, 8}, DataType::kFloat32, {S(0)});
  b.set_location("model.py:12");
  const int y = b.op1("reduce_sum", ReduceParams{{0}, false}, {x});  // partial on each rank
  b.set_location("model.py:13");
  b.fetch(b.op1("relu", NoParams{}, {y}, "", {B()}));  // needs it whole: an all-reduce
  const proto::PlanProto plan = compile_graph(std::move(b.graph()));
  int collectives = 0;
  for (const proto::RankPlanProto& rank : plan.ranks()) {
    for (const proto::TaskProto& task : rank.tasks()) {
      if (task.kind() != proto::TaskProto::COLLECTIVE) continue;
      ++collectives;
      EXPECT_EQ(task.location(), "model.py:12") << task.name();
    }
  }
  EXPECT_EQ(collectives, 2);
}

TEST(Collectives, SequenceNumbersCountTheCollectivesOfEachCommunicator) {
  const Placement p = cpu({0, 1});
  PlanBuilder builder({0, 1});
  std::vector<int64_t> in;
  for (int64_t rank : {0, 1}) {
    proto::TaskProto* task = builder.add_task(rank, proto::TaskProto::INPUT, "in");
    in.push_back(builder.add_output(task, "in", Shape{4}, DataType::kFloat32));
  }
  const TensorMeta meta{Shape{4}, DataType::kFloat32};
  const std::vector<int64_t> reduced = expand_boxing({p, {P()}, p, {B()}}, meta, in, builder, "a");
  expand_boxing({p, {B()}, p, {S(0)}}, meta, reduced, builder, "b");  // local: no collective
  expand_boxing({p, {P()}, p, {S(0)}}, meta, in, builder, "c");
  std::vector<std::pair<std::string, int64_t>> seen;
  for (int64_t id = 0; id < builder.num_tasks(); ++id) {
    const proto::TaskProto& task = builder.task(id);
    if (task.kind() == proto::TaskProto::COLLECTIVE && task.rank() == 1) {
      seen.emplace_back(logical_op_of(task), task.collective().sequence());
    }
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, int64_t>>{{"a", 0}, {"c", 1}}));
}

TEST(BoxingPlan, SameSbpOnSamePlacementAddsNoTasks) {
  const Placement p = cpu({0, 1});
  PlanBuilder builder({0, 1});
  std::vector<int64_t> in;
  for (int64_t r = 0; r < 2; ++r) {
    in.push_back(builder.add_output(builder.add_task(r, proto::TaskProto::INPUT, "in"), "in",
                                    Shape{2, 3}, DataType::kFloat32));
  }
  const std::vector<int64_t> out =
      expand_boxing(BoxingSpec{p, {S(0)}, p, {S(0)}}, TensorMeta{Shape{4, 3}}, in, builder, "box");
  EXPECT_EQ(out, in);
  EXPECT_EQ(builder.num_tasks(), 2);
}

TEST(BoxingPlan, NestedSplitsAreGatheredInnerDimensionFirst) {
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  const std::vector<BoxingStep> steps =
      plan_boxing(BoxingSpec{grid, {S(0), S(0)}, grid, {B(), B()}}, Shape{8, 4});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].kind, BoxingKind::kAllGather);
  EXPECT_EQ(nd_sbp_to_string(steps[0].spec.out_sbp), "(S(0), B)");
  EXPECT_EQ(steps[1].kind, BoxingKind::kAllGather);
}

TEST(BoxingPlan, OtherRankSetsAndSplitsThatDoNotNestUseTheGenericDecomposition) {
  const Placement p = cpu({0, 1});
  EXPECT_EQ(plan_boxing(BoxingSpec{p, {S(0)}, p, {S(1)}}, Shape{4, 4}).at(0).kind,
            BoxingKind::kAllToAll);
  // S(0) -> S(1) in dimension 0 while dimension 1 splits axis 1 again: not a chunk exchange.
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  // Within one rank set it is one grouped send/recv (Note [Grouped send/recv]).
  EXPECT_EQ(plan_boxing(BoxingSpec{grid, {S(0), S(1)}, grid, {S(1), S(1)}}, Shape{4, 4}).at(0).kind,
            BoxingKind::kSendRecv);
  // Partial sums and other rank sets keep the generic decomposition.
  EXPECT_EQ(plan_boxing(BoxingSpec{grid, {P(), S(1)}, grid, {S(1), S(1)}}, Shape{4, 4}).at(0).kind,
            BoxingKind::kGeneric);
  EXPECT_EQ(plan_boxing(BoxingSpec{p, {P()}, cpu({2, 3}), {B()}}, Shape{4, 4}).at(0).kind,
            BoxingKind::kGeneric);
  EXPECT_EQ(plan_boxing(BoxingSpec{p, {S(0)}, cpu({1, 2}), {S(0)}}, Shape{4, 4}).at(0).kind,
            BoxingKind::kGeneric);
}

// The one collective of a boxing that moves nothing by SEND/RECV, on the communication thread.
proto::CollectiveProto single_collective(const CommSummary& s) {
  EXPECT_EQ(s.sends + s.recvs, 0);
  EXPECT_EQ(s.collectives.size(), 1u);
  EXPECT_EQ(s.collective_threads_not_1, 0);
  return s.collectives.empty() ? proto::CollectiveProto() : s.collectives.begin()->second;
}

// Note [Broadcast]: one rank's tensor to B on a placement holding that rank is one BROADCAST
// task per member, rooted at that rank, only the root reading; elsewhere the generic moves.
TEST(BoxingPlan, OneRanksTensorToBroadcastOnAPlacementHoldingItIsOneBroadcast) {
  const Placement all = cpu({0, 1, 2, 3});
  for (int64_t root : {0, 2}) {
    for (const Sbp& from : {B(), S(0), P()}) {
      const BoxingSpec spec{cpu({root}), {from}, all, {B()}};
      EXPECT_EQ(plan_boxing(spec, Shape{8, 6}).at(0).kind, BoxingKind::kBroadcast);
      const CommSummary s = summarize(spec, Shape{8, 6});
      const proto::CollectiveProto c = single_collective(s);
      EXPECT_EQ(c.op(), proto::CollectiveProto::BROADCAST);
      EXPECT_EQ(c.root(), root);
      EXPECT_EQ(c.algorithm(), proto::CollectiveProto::TREE);  // 192 bytes
      EXPECT_EQ(members_of(c), (std::vector<int64_t>{0, 1, 2, 3}));
      EXPECT_EQ(s.task_ranks.begin()->second, (std::vector<int64_t>{0, 1, 2, 3}));
      expect_boxing_delivers(spec, Shape{8, 6});
    }
  }
  const int64_t large = kRecursiveDoublingMaxBytes / 4 + 1;  // float32 elements
  EXPECT_EQ(summarize(BoxingSpec{cpu({1}), {B()}, all, {B()}}, Shape{large})
                .collectives.begin()
                ->second.algorithm(),
            proto::CollectiveProto::RING);
  // A root outside the target, or a target that is not all B (a scatter): sends and receives.
  EXPECT_EQ(plan_boxing(BoxingSpec{cpu({0}), {B()}, cpu({1, 2}), {B()}}, Shape{4}).at(0).kind,
            BoxingKind::kGeneric);
  EXPECT_EQ(plan_boxing(BoxingSpec{cpu({0}), {B()}, all, {S(0)}}, Shape{4}).at(0).kind,
            BoxingKind::kGeneric);
}

// On GPUs member 0 of a communicator decides the order of its collectives as their inputs become
// ready there (Note [Device collectives] in actor/device_collectives.h), so it must read an input:
// a broadcast's root comes first, and a grouped send/recv whose member 0 sends nothing moves by
// the generic steps instead.
TEST(BoxingPlan, OnGpusMemberZeroOfABroadcastOrGroupedSendRecvReadsItsInput) {
  const Placement all = Placement::parse("cuda, [0, 1, 2, 3]");
  const proto::CollectiveProto b = single_collective(
      summarize(BoxingSpec{Placement::parse("cuda, [2]"), {B()}, all, {B()}}, Shape{8, 6}));
  EXPECT_EQ(b.op(), proto::CollectiveProto::BROADCAST);
  EXPECT_EQ(members_of(b), (std::vector<int64_t>{2, 3, 0, 1}));
  EXPECT_EQ(b.root(), 0);
  // Shape (2, 7) split over 4: ranks 2 and 3 hold nothing, and rank 2 is member 0 here.
  const Placement shuffled = Placement::parse("cuda, [2, 0, 3, 1]");
  const BoxingSpec reshard{all, {S(0)}, shuffled, {S(0)}};
  EXPECT_EQ(summarize(reshard, Shape{2, 7}).collectives.size(), 0u);
  const BoxingSpec on_cpu{cpu({0, 1, 2, 3}), {S(0)}, cpu({2, 0, 3, 1}), {S(0)}};
  EXPECT_EQ(single_collective(summarize(on_cpu, Shape{2, 7})).op(),
            proto::CollectiveProto::SEND_RECV);
}

// Note [Grouped send/recv]: conversions within one rank set that no one-dimension collective
// makes, across hierarchies too, are one SEND_RECV task per rank with no SEND/RECV pairs; each
// destination still gets its piece.
TEST(BoxingPlan, ReshardingWithinOneRankSetIsOneGroupedSendRecvPerRank) {
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  const Placement line = cpu({0, 1, 2, 3});
  const Placement shuffled = cpu({2, 0, 3, 1});
  for (const BoxingSpec& spec : std::vector<BoxingSpec>{{grid, {S(0), S(1)}, grid, {S(1), S(1)}},
                                                        {grid, {S(0), S(0)}, grid, {S(1), S(1)}},
                                                        {grid, {S(0), S(1)}, grid, {S(1), S(0)}},
                                                        {line, {S(0)}, grid, {S(1), S(0)}},
                                                        {grid, {S(0), B()}, line, {S(1)}},
                                                        {line, {S(0)}, shuffled, {S(0)}}}) {
    SCOPED_TRACE(describe(spec, Shape{5, 7}));
    EXPECT_EQ(plan_boxing(spec, Shape{5, 7}).at(0).kind, BoxingKind::kSendRecv);
    // Fewer rows than ranks: members holding nothing send nothing and read no register.
    expect_boxing_delivers(spec, Shape{2, 7});
    const proto::CollectiveProto c = single_collective(summarize(spec, Shape{5, 7}));
    EXPECT_EQ(c.op(), proto::CollectiveProto::SEND_RECV);
    EXPECT_EQ(members_of(c), spec.out_placement.ranks());
    expect_boxing_delivers(spec, Shape{5, 7});
  }
  // Every piece already on its rank (a narrower split of what each rank holds): local slices.
  const BoxingSpec local{grid, {S(0), B()}, grid, {S(0), S(0)}};
  EXPECT_EQ(summarize(local, Shape{8, 4}).collectives.size(), 0u);
  expect_boxing_delivers(local, Shape{8, 4});
}

TEST(BoxingPlan, GenericBoxingReadsTheReplicaOnTheDestinationRank) {
  // B on [0, 1] -> S(0) on [1]: rank 1 already holds everything and must not receive.
  const CommSummary s = summarize(BoxingSpec{cpu({0, 1}), {B()}, cpu({1}), {S(0)}}, Shape{4, 4});
  EXPECT_EQ(s.sends, 0);
}

TEST(BoxingPlan, ASbpThatDoesNotFitThePlacementIsAnError) {
  const Placement p = cpu({0, 1});
  PlanBuilder builder({0, 1});
  try {
    expand_boxing(BoxingSpec{p, {S(0), B()}, p, {B()}}, TensorMeta{Shape{4, 4}}, {0, 1}, builder,
                  "box");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("one SBP per placement dimension"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ofl::compiler::physical
