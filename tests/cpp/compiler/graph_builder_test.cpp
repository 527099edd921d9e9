#include <gtest/gtest.h>

#include "compiler/builder.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/proto/job.pb.h"

namespace ofl::compiler {
namespace {

Initializer normal(double std, int64_t seed) {
  return Initializer{Initializer::Kind::kNormal, 0.0, std, seed};
}

TEST(GraphBuilder, InfersShapesAsOpsAreAdded) {
  GraphBuilder b("mlp");
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
  const int w = b.variable("w", Shape{4, 3}, normal(0.1, 1));
  const int y = b.op1("matmul", MatmulParams{}, {x, w}, "fc");
  EXPECT_EQ(b.meta(y).shape, (Shape{8, 3}));
  EXPECT_EQ(b.graph().op(b.graph().tensor(y).producer).name, "fc");
  const int loss = b.op1("reduce_mean", ReduceParams{}, {y});
  EXPECT_EQ(b.meta(loss).shape, (Shape{}));
}

TEST(GraphBuilder, BadOpsNameTheOpAndLocation) {
  GraphBuilder b;
  b.set_location("model.py:12");
  const int x = b.input("x", Shape{8, 4});
  const int w = b.variable("w", Shape{5, 3}, normal(0.1, 1));
  try {
    b.op1("matmul", MatmulParams{}, {x, w}, "fc1");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find("[matmul]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(8, 4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.py:12"), std::string::npos) << msg;
  }
  EXPECT_THROW(b.op1("no_such_op", NoParams{}, {x}), Error);
  // An SBP hint that splits an axis the tensor does not have.
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  EXPECT_THROW(b.input("bad", Shape{4}, DataType::kFloat32, {S(1)}), Error);
  EXPECT_THROW(b.input("bad2", Shape{4}, DataType::kFloat32, {S(0), B()}), Error);
}

TEST(GraphBuilder, JobRoundTripKeepsOpsParamsAndConfig) {
  GraphBuilder b("round_trip");
  b.set_placement(Placement::parse("cpu, [[0, 1], [2, 3]]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0), B()});
  const int w = b.variable("w", Shape{4, 6}, normal(0.02, 7), {B(), S(1)});
  const int y = b.op1("matmul", MatmulParams{false, false, 0.5}, {x, w}, "fc");
  const int loss = b.op1("reduce_sum", ReduceParams{{0, 1}, false}, {y}, "loss");
  b.set_loss(loss);
  b.fetch(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
  b.train().optimizer.weight_decay = 0.1;
  b.train().gradient_accumulation_steps = 4;
  proto::JobProto job;
  b.to_job(&job);
  const Graph g = graph_from_job(job);
  ASSERT_EQ(g.num_ops(), 4);
  const LogicalOp& fc = g.op(g.tensor(g.tensor_index("fc/out0")).producer);
  EXPECT_EQ(fc.schema->name(), "matmul");
  EXPECT_EQ(fc.params.as<MatmulParams>().alpha, 0.5);
  EXPECT_EQ(fc.placement, Placement::parse("cpu, [[0, 1], [2, 3]]"));
  EXPECT_EQ(g.tensor(g.tensor_index("w")).meta.shape, (Shape{4, 6}));
  const LogicalOp& wv = g.op(g.tensor(g.tensor_index("w")).producer);
  EXPECT_EQ(wv.kind, OpKind::kVariable);
  EXPECT_EQ(wv.initializer.seed, 7);
  EXPECT_EQ(wv.output_sbp_hints[0], (NdSbp{B(), S(1)}));
  EXPECT_EQ(g.op(g.tensor(loss).producer).params.as<ReduceParams>().axes,
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(g.train.loss, g.tensor_index("loss/out0"));
  EXPECT_EQ(g.train.optimizer.kind, OptimizerConfig::Kind::kAdamW);
  EXPECT_EQ(g.train.optimizer.weight_decay, 0.1);
  EXPECT_EQ(g.train.gradient_accumulation_steps, 4);
  EXPECT_EQ(g.fetches.size(), 1u);
}

TEST(GraphBuilder, JobWithUnknownOpOrMissingInputIsRejectedByName) {
  proto::JobProto job;
  auto* op = job.add_ops();
  op->set_name("mystery");
  op->set_type("frobnicate");
  op->mutable_placement()->set_device_type("cpu");
  op->mutable_placement()->add_ranks(0);
  try {
    graph_from_job(job);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'frobnicate'"), std::string::npos);
  }
  op->set_type("relu");
  op->add_inputs("nowhere");
  op->add_outputs()->set_name("y");
  try {
    graph_from_job(job);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nowhere'"), std::string::npos);
  }
}

TEST(Graph, TextAndDotListEveryOp) {
  GraphBuilder b;
  const int x = b.input("x", Shape{2, 2});
  const int y = b.op1("relu", NoParams{}, {x}, "act");
  b.fetch(y);
  const std::string text = graph_to_text(b.graph());
  EXPECT_NE(text.find("act = relu"), std::string::npos) << text;
  EXPECT_NE(text.find("x (2, 2) float32"), std::string::npos) << text;
  const std::string dot = graph_to_dot(b.graph());
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("op0 -> op1"), std::string::npos) << dot;
}

}  // namespace
}  // namespace ofl::compiler
