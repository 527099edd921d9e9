// Physical expansion: per-rank tasks, register shapes (even and uneven), source and sink
// descriptions, views, in-place updates and boxing ops.

#include "compiler/physical/expansion.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/builder.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {
namespace {

/// Stands in for SBP inference: sets the signature of the op producing `output` (or of the
/// source op) and the SBP of its output tensors.
void set_signature(Graph& graph, int op_index, std::vector<NdSbp> inputs,
                   std::vector<NdSbp> outputs) {
  LogicalOp& op = graph.op(op_index);
  op.signature = NdSbpSignature{std::move(inputs), std::move(outputs)};
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    graph.tensor(op.outputs[k]).sbp = op.signature.outputs[k];
  }
}

int producer(const Graph& graph, int tensor) { return graph.tensor(tensor).producer; }

const proto::RankPlanProto& rank_plan(const proto::PlanProto& plan, int64_t rank) {
  for (const proto::RankPlanProto& r : plan.ranks()) {
    if (r.rank() == rank) return r;
  }
  throw std::runtime_error("no such rank in plan");
}

const proto::TaskProto& only_task(const proto::RankPlanProto& r, proto::TaskProto::Kind kind,
                                  const std::string& name) {
  const proto::TaskProto* found = nullptr;
  for (const proto::TaskProto& t : r.tasks()) {
    if (t.kind() == kind && t.name() == name) {
      EXPECT_EQ(found, nullptr) << "two tasks named " << name;
      found = &t;
    }
  }
  if (found == nullptr) throw std::runtime_error("no task " + name);
  return *found;
}

const proto::RegisterProto& register_of(const proto::RankPlanProto& r, int64_t id) {
  for (const proto::RegisterProto& reg : r.registers()) {
    if (reg.id() == id) return reg;
  }
  throw std::runtime_error("register not on this rank");
}

Shape shape_of(const proto::RegisterProto& reg) { return from_proto(reg.shape()); }

std::vector<Range> region_of(const proto::TaskProto& task) {
  std::vector<Range> out;
  for (const proto::RangeProto& r : task.output_region()) out.push_back(Range{r.begin(), r.end()});
  return out;
}

/// input x (5, 4) S(0) and variable w (4, 3) B on ranks [0, 1, 2]; y = matmul(x, w) S(0);
/// fetches y and w.
struct DataParallelMatmul {
  Graph graph;
  DataParallelMatmul() {
    GraphBuilder b("dp");
    b.set_placement(Placement(DeviceType::kCPU, {0, 1, 2}));
    const int x = b.input("x", Shape{5, 4}, DataType::kFloat32, {S(0)});
    const int w = b.variable("w", Shape{4, 3},
                             Initializer{Initializer::Kind::kNormal, 0.0, 0.1, /*seed=*/5}, {B()});
    const int y = b.op1("matmul", MatmulParams{}, {x, w}, "mm");
    b.fetch(y);
    b.fetch(w);
    graph = b.graph();
    set_signature(graph, producer(graph, x), {}, {{S(0)}});
    set_signature(graph, producer(graph, w), {}, {{B()}});
    set_signature(graph, producer(graph, y), {{S(0)}, {B()}}, {{S(0)}});
  }
};

TEST(Expansion, DataParallelMatmulGivesEveryRankAnInputVariableComputeAndOutputs) {
  const proto::PlanProto plan = expand_to_plan(DataParallelMatmul().graph);
  EXPECT_EQ(plan.job_name(), "dp");
  EXPECT_EQ(plan.world_size(), 3);
  ASSERT_EQ(plan.ranks_size(), 3);
  EXPECT_EQ(std::vector<std::string>(plan.fetches().begin(), plan.fetches().end()),
            (std::vector<std::string>{"mm/out0", "w"}));
  for (const proto::RankPlanProto& r : plan.ranks()) {
    std::multiset<int> kinds;
    for (const proto::TaskProto& t : r.tasks()) {
      kinds.insert(t.kind());
      EXPECT_EQ(t.rank(), r.rank());
      EXPECT_EQ(t.thread(), 0);
    }
    EXPECT_EQ(kinds, (std::multiset<int>{proto::TaskProto::INPUT, proto::TaskProto::VARIABLE,
                                         proto::TaskProto::COMPUTE, proto::TaskProto::OUTPUT,
                                         proto::TaskProto::OUTPUT}))
        << "rank " << r.rank();
  }
}

TEST(Expansion, RegistersHaveUnevenPhysicalShapesAndBelongToTheirProducersRank) {
  const proto::PlanProto plan = expand_to_plan(DataParallelMatmul().graph);
  const std::vector<int64_t> x_rows = {2, 2, 1};  // 5 rows over 3 ranks
  std::set<int64_t> task_ids, register_ids;
  for (int64_t rank = 0; rank < 3; ++rank) {
    const proto::RankPlanProto& r = rank_plan(plan, rank);
    for (const proto::TaskProto& t : r.tasks()) EXPECT_TRUE(task_ids.insert(t.id()).second);
    for (const proto::RegisterProto& reg : r.registers()) {
      EXPECT_TRUE(register_ids.insert(reg.id()).second);
      EXPECT_EQ(reg.register_num(), 1);
      EXPECT_EQ(reg.memory_block(), -1);
      EXPECT_EQ(reg.bytes(), shape_of(reg).numel() * 4);
    }
    const proto::TaskProto& input = only_task(r, proto::TaskProto::INPUT, "x");
    const proto::TaskProto& variable = only_task(r, proto::TaskProto::VARIABLE, "w");
    const proto::TaskProto& mm = only_task(r, proto::TaskProto::COMPUTE, "mm");
    const proto::RegisterProto& x = register_of(r, input.outputs(0));
    const proto::RegisterProto& w = register_of(r, variable.outputs(0));
    const proto::RegisterProto& y = register_of(r, mm.outputs(0));
    EXPECT_EQ(shape_of(x), (Shape{x_rows[rank], 4}));
    EXPECT_EQ(shape_of(w), (Shape{4, 3}));
    EXPECT_EQ(shape_of(y), (Shape{x_rows[rank], 3}));
    EXPECT_FALSE(x.persistent());
    EXPECT_TRUE(w.persistent());
    EXPECT_EQ(x.producer(), input.id());
    EXPECT_EQ(x.dtype(), "float32");
    // The matmul reads this rank's registers in op input order.
    ASSERT_EQ(mm.inputs_size(), 2);
    EXPECT_EQ(mm.inputs(0), x.id());
    EXPECT_EQ(mm.inputs(1), w.id());
    EXPECT_EQ(std::vector<int64_t>(x.consumers().begin(), x.consumers().end()),
              std::vector<int64_t>{mm.id()});
    EXPECT_EQ(mm.op_type(), "matmul");
    EXPECT_EQ(params_of(plan, mm).type(), "MatmulParams");
    // The op's params are held once for its three tasks (Note [Implicit plan fields]).
    EXPECT_FALSE(mm.has_params());
    EXPECT_EQ(mm.params_index(),
              only_task(rank_plan(plan, 0), proto::TaskProto::COMPUTE, "mm").params_index());
    EXPECT_EQ(plan.op_params_size(), 1);
    EXPECT_EQ(logical_op_of(mm), "mm");
    // Registers named as their producers imply leave the name out (Note [Implicit plan fields]).
    EXPECT_TRUE(y.name().empty());
    EXPECT_TRUE(w.name().empty());
    EXPECT_EQ(register_name_of(&mm, y), "mm/out0");
    EXPECT_EQ(register_name_of(r, w), "w");
    EXPECT_EQ(register_name_of(r, x), "x");
    // A matmul's values do not depend on where its piece lies: no region (TPositionDependent).
    EXPECT_FALSE(mm.has_logical_output_shape());
    EXPECT_EQ(mm.output_region_size(), 0);
    EXPECT_EQ(region_of(input), (std::vector<Range>{balanced_range(5, 3, rank), Range{0, 4}}));
    EXPECT_EQ(from_proto(input.sbp()), NdSbp{S(0)});
    EXPECT_TRUE(input.contributes());
    EXPECT_EQ(variable.initializer().kind(), proto::InitializerProto::NORMAL);
    EXPECT_DOUBLE_EQ(variable.initializer().b(), 0.1);
    EXPECT_EQ(variable.initializer().seed(), 5);
    EXPECT_EQ(from_proto(variable.logical_output_shape()), (Shape{4, 3}));
  }
}

// Note [Implicit plan fields]: a register keeps its name only where its producer does not imply
// it, and reading it gives the name either way.
TEST(Expansion, ARegisterKeepsItsNameOnlyWhereItsProducerDoesNotImplyIt) {
  proto::TaskProto mm;
  mm.set_id(3);
  mm.set_name("mm");
  mm.set_kind(proto::TaskProto::COMPUTE);
  mm.add_outputs(7);
  mm.add_outputs(8);
  proto::TaskProto w;
  w.set_id(4);
  w.set_name("w");
  w.set_kind(proto::TaskProto::VARIABLE);
  w.add_outputs(9);
  auto named = [](const proto::TaskProto& producer, int64_t id, const std::string& name) {
    proto::RegisterProto reg;
    reg.set_id(id);
    reg.set_producer(producer.id());
    set_register_name(&reg, producer, name);
    return reg;
  };
  EXPECT_EQ(named(mm, 8, "mm/out1").name(), "");
  EXPECT_EQ(named(mm, 8, "mm/out0").name(), "mm/out0");  // not its output 0
  EXPECT_EQ(named(mm, 8, "mm/out10").name(), "mm/out10");
  EXPECT_EQ(named(mm, 8, "mm").name(), "mm");
  EXPECT_EQ(named(mm, 8, "logits").name(), "logits");  // a tensor named by the user
  EXPECT_EQ(named(w, 9, "w").name(), "");
  EXPECT_EQ(named(w, 9, "w/out0").name(), "w/out0");
  EXPECT_EQ(named(w, 9, "ww").name(), "ww");
  for (const auto& [producer, id, name] :
       std::vector<std::tuple<proto::TaskProto, int64_t, std::string>>{
           {mm, 8, "mm/out1"}, {mm, 8, "logits"}, {w, 9, "w"}, {w, 9, "w/out0"}}) {
    EXPECT_EQ(register_name_of(&producer, named(producer, id, name)), name);
  }
  // Without its producer an implied name reads as the register's id.
  EXPECT_EQ(register_name_of(nullptr, named(w, 9, "w")), "#9");
}

// Note TPositionDependent in op.h: a random draw's task carries its piece's place in the logical
// tensor, so each rank draws its own elements of the one logical tensor.
TEST(Expansion, APositionDependentOpsTasksCarryTheirPiecesRegion) {
  GraphBuilder b("noise");
  b.set_placement(Placement(DeviceType::kCPU, {0, 1, 2}));
  const int noise = b.op1(
      "random_normal", RandomParams{Shape{5, 3}, DataType::kFloat32, 0.0, 1.0, 7, 0}, {}, "noise");
  b.fetch(noise);
  Graph graph = b.graph();
  set_signature(graph, producer(graph, noise), {}, {{S(0)}});
  const proto::PlanProto plan = expand_to_plan(graph);
  for (int64_t rank = 0; rank < 3; ++rank) {
    const proto::TaskProto& draw =
        only_task(rank_plan(plan, rank), proto::TaskProto::COMPUTE, "noise");
    EXPECT_EQ(from_proto(draw.logical_output_shape()), (Shape{5, 3}));
    EXPECT_EQ(region_of(draw), (std::vector<Range>{balanced_range(5, 3, rank), Range{0, 3}}));
  }
}

TEST(Expansion, OutputsOfASplitTensorAllContributeAndOfABroadcastOneOnlyCoordinateZero) {
  const proto::PlanProto plan = expand_to_plan(DataParallelMatmul().graph);
  for (int64_t rank = 0; rank < 3; ++rank) {
    const proto::RankPlanProto& r = rank_plan(plan, rank);
    const proto::TaskProto& y = only_task(r, proto::TaskProto::OUTPUT, "mm/out0/output");
    const proto::TaskProto& w = only_task(r, proto::TaskProto::OUTPUT, "w/output");
    EXPECT_TRUE(y.contributes()) << "rank " << rank;
    EXPECT_EQ(w.contributes(), rank == 0) << "rank " << rank;
    EXPECT_EQ(y.inputs(0), only_task(r, proto::TaskProto::COMPUTE, "mm").outputs(0));
    EXPECT_EQ(region_of(y), (std::vector<Range>{balanced_range(5, 3, rank), Range{0, 3}}));
    EXPECT_EQ(from_proto(w.sbp()), NdSbp{B()});
    EXPECT_EQ(from_proto(w.logical_output_shape()), (Shape{4, 3}));
  }
}

TEST(Expansion, AReshapeBecomesACopyIntoItsOwnRegister) {
  GraphBuilder b("view");
  b.set_placement(Placement(DeviceType::kCPU, {0, 1}));
  const int x = b.input("x", Shape{4, 6}, DataType::kFloat32, {S(0)});
  const int y = b.op1("reshape", ReshapeParams{Shape{24}}, {x}, "flat");
  Graph graph = b.graph();
  set_signature(graph, producer(graph, x), {}, {{S(0)}});
  set_signature(graph, producer(graph, y), {{S(0)}}, {{S(0)}});
  const proto::PlanProto plan = expand_to_plan(graph);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const proto::RankPlanProto& r = rank_plan(plan, rank);
    const proto::TaskProto& copy = only_task(r, proto::TaskProto::COPY, "flat");
    EXPECT_TRUE(copy.op_type().empty());
    ASSERT_EQ(copy.inputs_size(), 1);
    EXPECT_EQ(copy.inputs(0), only_task(r, proto::TaskProto::INPUT, "x").outputs(0));
    EXPECT_EQ(shape_of(register_of(r, copy.outputs(0))), (Shape{12}));
  }
}

TEST(Expansion, AnOptimizerUpdateWritesItsMutatedInputsAndHasNoOutputs) {
  GraphBuilder b("sgd");
  b.set_placement(Placement(DeviceType::kCPU, {0, 1}));
  const int w = b.variable("w", Shape{4, 3}, Initializer{}, {S(0)});
  const int m = b.variable("m", Shape{4, 3}, Initializer{}, {S(0)}, /*trainable=*/false);
  const int g = b.input("g", Shape{4, 3}, DataType::kFloat32, {S(0)});
  const int lr = b.input("lr", Shape{}, DataType::kFloat32, {B()});
  b.op("sgd_update", SgdParams{0.9, 0, 0, false}, {w, g, m, lr}, "update");
  Graph graph = b.graph();
  for (int t : {w, m, g}) set_signature(graph, producer(graph, t), {}, {{S(0)}});
  set_signature(graph, producer(graph, lr), {}, {{B()}});
  const int update = graph.num_ops() - 1;
  set_signature(graph, update, {{S(0)}, {S(0)}, {S(0)}, {B()}}, {});
  const proto::PlanProto plan = expand_to_plan(graph);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const proto::RankPlanProto& r = rank_plan(plan, rank);
    const proto::TaskProto& task = only_task(r, proto::TaskProto::COMPUTE, "update");
    EXPECT_EQ(std::vector<int>(task.mutated_inputs().begin(), task.mutated_inputs().end()),
              (std::vector<int>{0, 2}));
    EXPECT_EQ(task.outputs_size(), 0);
    EXPECT_EQ(task.inputs(0), only_task(r, proto::TaskProto::VARIABLE, "w").outputs(0));
    EXPECT_EQ(task.inputs(2), only_task(r, proto::TaskProto::VARIABLE, "m").outputs(0));
    // The lr input is broadcast: only rank 0's copy counts when the value is assembled.
    EXPECT_EQ(only_task(r, proto::TaskProto::INPUT, "lr").contributes(), rank == 0);
  }
}

TEST(Expansion, ABoxingOpBecomesItsStepsAndAFetchReadsTheBoxedRegister) {
  GraphBuilder b("gather");
  const Placement p(DeviceType::kCPU, {0, 1});
  b.set_placement(p);
  const int x = b.input("x", Shape{5, 2}, DataType::kFloat32, {S(0)});
  Graph graph = b.graph();
  set_signature(graph, producer(graph, x), {}, {{S(0)}});
  LogicalOp box;
  box.kind = OpKind::kBoxing;
  box.role = OpRole::kBoxing;
  box.name = "x.boxing";
  box.inputs = {x};
  box.placement = p;
  box.boxing = BoxingSpec{p, {S(0)}, p, {B()}};
  const int box_index = graph.add_op(box, 1, {"x@B"});
  const int boxed = graph.op(box_index).outputs[0];
  graph.tensor(boxed).meta = graph.tensor(x).meta;
  set_signature(graph, box_index, {{S(0)}}, {{B()}});
  graph.fetches.push_back(boxed);

  const proto::PlanProto plan = expand_to_plan(graph);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const proto::RankPlanProto& r = rank_plan(plan, rank);
    const proto::TaskProto* gather = nullptr;
    for (const proto::TaskProto& t : r.tasks()) {
      EXPECT_NE(t.kind(), proto::TaskProto::SEND) << "a collective needs no transfer tasks";
      if (t.kind() == proto::TaskProto::COLLECTIVE) {
        EXPECT_EQ(gather, nullptr) << "one collective task per rank";
        gather = &t;
        EXPECT_EQ(t.collective().op(), proto::CollectiveProto::ALL_GATHER);
        EXPECT_EQ(t.thread(), 1);
      }
      if (t.kind() != proto::TaskProto::INPUT && t.kind() != proto::TaskProto::OUTPUT) {
        EXPECT_EQ(logical_op_of(t), "x.boxing");
      }
    }
    ASSERT_NE(gather, nullptr);
    const proto::TaskProto& out = only_task(r, proto::TaskProto::OUTPUT, "x@B/output");
    EXPECT_EQ(out.inputs(0), gather->outputs(0));
    EXPECT_EQ(shape_of(register_of(r, gather->outputs(0))), (Shape{5, 2}));
    EXPECT_EQ(out.contributes(), rank == 0);
  }
}

TEST(Expansion, AnInputOnAnotherPlacementThanItsConsumerIsAnError) {
  GraphBuilder b("unboxed");
  b.set_placement(Placement(DeviceType::kCPU, {0}));
  const int x = b.input("x", Shape{2, 2}, DataType::kFloat32, {B()});
  b.set_placement(Placement(DeviceType::kCPU, {1}));
  const int y = b.op1("relu", NoParams{}, {x}, "act");
  Graph graph = b.graph();
  set_signature(graph, producer(graph, x), {}, {{B()}});
  set_signature(graph, producer(graph, y), {{B()}}, {{B()}});
  try {
    expand_to_plan(graph);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    const std::string message = e.what();
    EXPECT_NE(message.find("run boxing insertion first"), std::string::npos) << message;
    EXPECT_NE(message.find("'act'"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ofl::compiler::physical
