// The mixed-precision pass (Note [Mixed precision] in compiler/passes/amp.cpp): where casts go,
// how often a weight is cast, that gradients and parameters stay float32, and that a weight's
// cast acts once per step under gradient accumulation.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/autocast.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/softmax.h"
#include "oneflowlike/ops/unary.h"
#include "oneflowlike/plan_task.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

const Initializer kInit{Initializer::Kind::kNormal, 0, 0.1, 1};

// x @ w1 -> relu -> @ w2, and x2 @ w1 again: w1 has two matmul readers, and the second matmul
// reads the first's output through relu (which follows its input's dtype), the third reads x2
// directly; the reductions of the loss run in float32.
struct Model {
  GraphBuilder b{"amp"};
  int x, x2, w1, w2, h, y, z;
  explicit Model(DataType amp, int micro_batches = 1) {
    x = b.input("x", Shape{8, 4});
    x2 = b.input("x2", Shape{8, 4});
    w1 = b.variable("w1", Shape{4, 6}, kInit);
    w2 = b.variable("w2", Shape{6, 3}, kInit);
    h = b.op1("matmul", MatmulParams{}, {x, w1}, "mm1");
    const int r = b.op1("relu", NoParams{}, {h}, "relu");
    y = b.op1("matmul", MatmulParams{}, {r, w2}, "mm2");
    z = b.op1("matmul", MatmulParams{}, {x2, w1}, "mm3");
    const int sum = b.op1(
        "add", NoParams{},
        {b.op1("reduce_mean", ReduceParams{}, {y}), b.op1("reduce_mean", ReduceParams{}, {z})});
    b.set_loss(sum);
    b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
    b.train().amp_dtype = amp;
    b.train().gradient_accumulation_steps = micro_batches;
  }
};

// The ops reading tensor `t`.
std::vector<const LogicalOp*> readers(const Graph& g, int t) {
  std::vector<const LogicalOp*> out;
  for (int i = 0; i < g.num_ops(); ++i) {
    for (int in : g.op(i).inputs) {
      if (in == t) out.push_back(&g.op(i));
    }
  }
  return out;
}

const LogicalOp& op_named(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name == name) return g.op(i);
  }
  ADD_FAILURE() << "no op " << name;
  return g.op(0);
}

TEST(Amp, MatmulsRunInBfloat16ActivationsFollowAndReductionsRunInFloat32) {
  Model m(DataType::kBFloat16);
  Graph& g = m.b.graph();
  run_logical_passes(g);
  // mm1 writes bfloat16 for relu; mm2 and mm3, read only by float32 reductions, write their
  // float32 sums instead of a cast after them (Note [Casts folded into products]).
  for (const char* name : {"mm1", "mm2", "mm3"}) {
    const LogicalOp& op = op_named(g, name);
    for (int in : op.inputs) EXPECT_EQ(g.tensor(in).meta.dtype, DataType::kBFloat16) << name;
    const bool folded = std::string(name) != "mm1";
    EXPECT_EQ(op.params.as<MatmulParams>().float32_out, folded) << name;
    EXPECT_EQ(g.tensor(op.outputs[0]).meta.dtype, folded ? DataType::kFloat32 : DataType::kBFloat16)
        << name;
  }
  // relu reads mm1's bfloat16 output as it is and mm2 reads relu's, with no cast between.
  const LogicalOp& relu = op_named(g, "relu");
  EXPECT_EQ(relu.inputs[0], op_named(g, "mm1").outputs[0]);
  EXPECT_EQ(g.tensor(relu.outputs[0]).meta.dtype, DataType::kBFloat16);
  EXPECT_EQ(op_named(g, "mm2").inputs[0], relu.outputs[0]);
  // The reductions read their matmul's float32 output, and the loss is float32.
  for (const char* name : {"mm2", "mm3"}) {
    const std::vector<const LogicalOp*> read = readers(g, op_named(g, name).outputs[0]);
    ASSERT_FALSE(read.empty()) << name;
    for (const LogicalOp* r : read) {
      if (r->role == OpRole::kForward) {
        EXPECT_EQ(r->schema->name(), "reduce_mean") << name;
      }
    }
  }
  EXPECT_EQ(g.tensor(g.train.loss).meta.dtype, DataType::kFloat32);
  // w1 feeds two matmuls through one cast (and the optimizer reads it in float32).
  int casts_of_w1 = 0;
  for (const LogicalOp* r : readers(g, m.w1)) {
    if (r->schema != nullptr && r->schema->name() == "cast") ++casts_of_w1;
  }
  EXPECT_EQ(casts_of_w1, 1);
  EXPECT_EQ(g.tensor(m.w1).meta.dtype, DataType::kFloat32);
  // Every variable's gradient is float32 (what the optimizer applies to float32 weights), made
  // by a product of bfloat16 operands writing float32: no cast after it.
  ASSERT_FALSE(g.variable_grads.empty());
  for (const auto& [variable, grad] : g.variable_grads) {
    EXPECT_EQ(g.tensor(grad).meta.dtype, DataType::kFloat32) << g.op(variable).name;
  }
  // The backward matmuls read bfloat16 operands too.
  int backward_bf16_matmuls = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.role == OpRole::kBackward && op.schema != nullptr && op.schema->name() == "matmul" &&
        g.tensor(op.inputs[0]).meta.dtype == DataType::kBFloat16) {
      ++backward_bf16_matmuls;
    }
  }
  EXPECT_GE(backward_bf16_matmuls, 4);
}

// Note [Casts folded into products]: only a cast that is its product's one reader folds; what
// is fetched stays as traced; a weight's gradient comes out of its product in float32.
TEST(Amp, CastsAfterProductsFoldIntoThemWhereTheCastIsTheOnlyReader) {
  const auto casts_to_float32 = [](const Graph& g) {
    int n = 0;
    for (int i = 0; i < g.num_ops(); ++i) {
      const LogicalOp& op = g.op(i);
      if (op.kind == OpKind::kCompute && op.schema->name() == "cast" &&
          g.tensor(op.outputs[0]).meta.dtype == DataType::kFloat32) {
        ++n;
      }
    }
    return n;
  };
  {
    Model m(DataType::kBFloat16);
    Graph& g = m.b.graph();
    run_logical_passes(g);
    // mm2 and mm3 forward and w2's gradient fold; w1's gradient is the bfloat16 sum of its two
    // matmuls' (an add), cast up as before: the one cast to float32 left.
    EXPECT_EQ(casts_to_float32(g), 1);
    const auto grad_maker = [&](const std::string& variable) -> const LogicalOp& {
      for (const auto& [v, grad] : g.variable_grads) {
        if (g.op(v).name == variable) return g.op(g.tensor(grad).producer);
      }
      ADD_FAILURE() << "no gradient of " << variable;
      return g.op(0);
    };
    const LogicalOp& w2_grad = grad_maker("w2");
    EXPECT_EQ(w2_grad.schema->name(), "matmul");
    EXPECT_TRUE(w2_grad.params.as<MatmulParams>().float32_out);
    const LogicalOp& w1_grad = grad_maker("w1");
    EXPECT_EQ(w1_grad.schema->name(), "cast");
    EXPECT_EQ(g.op(g.tensor(w1_grad.inputs[0]).producer).schema->name(), "add");
  }
  {
    // mm2's output fetched: the cast the fetch reads (the traced float32) is mm2 writing float32.
    Model m(DataType::kBFloat16);
    m.b.fetch(m.y);
    Graph& g = m.b.graph();
    run_logical_passes(g);
    const int fetched = g.fetches.at(0);
    EXPECT_EQ(g.tensor(fetched).meta.dtype, DataType::kFloat32);
    EXPECT_EQ(&g.op(g.tensor(fetched).producer), &op_named(g, "mm2"));
    EXPECT_TRUE(op_named(g, "mm2").params.as<MatmulParams>().float32_out);
  }
  {
    // mm2's bfloat16 output also read by relu: the cast stays, and mm2 writes bfloat16.
    Model m(DataType::kBFloat16);
    m.b.fetch(m.b.op1("relu", NoParams{}, {m.y}, "relu_of_mm2"));
    Graph& g = m.b.graph();
    run_logical_passes(g);
    const LogicalOp& mm2 = op_named(g, "mm2");
    EXPECT_FALSE(mm2.params.as<MatmulParams>().float32_out);
    int casts = 0;
    for (const LogicalOp* r : readers(g, mm2.outputs[0])) casts += r->schema->name() == "cast";
    EXPECT_EQ(casts, 1);
    EXPECT_EQ(op_named(g, "relu_of_mm2").inputs.at(0), mm2.outputs[0]);
  }
}

// A checkpointed block under mixed precision (it failed: the casts amp made between the block's
// ops had no group, so the block's path left it and came back): each cast joins its input's
// group, the block compiles, and its casts after products fold inside it too.
TEST(Amp, CastsJoinTheirInputsCheckpointGroupAndFoldThere) {
  GraphBuilder b{"amp_checkpointed"};
  const int x = b.input("x", Shape{8, 4});
  const int w1 = b.variable("w1", Shape{4, 6}, kInit);
  const int w2 = b.variable("w2", Shape{6, 3}, kInit);
  b.set_checkpoint_group("block");
  // layer_norm (float32) between two matmuls: casts down after it and up before it, inside.
  const int h = b.op1("matmul", MatmulParams{}, {x, w1}, "mm1");
  const int n = b.op1("softmax", SoftmaxParams{}, {h}, "softmax");
  const int y = b.op1("matmul", MatmulParams{}, {n, w2}, "mm2");
  b.set_checkpoint_group("");
  b.set_loss(b.op1("reduce_mean", ReduceParams{}, {y}, "loss"));
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  b.train().amp_dtype = DataType::kBFloat16;
  Graph& g = b.graph();
  ASSERT_NO_THROW(run_logical_passes(g));
  int casts_in_block = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kCompute || op.schema->name() != "cast" || op.role != OpRole::kForward) {
      continue;
    }
    const int producer = g.tensor(op.inputs[0]).producer;
    if (g.op(producer).kind == OpKind::kVariable) {
      EXPECT_EQ(op.checkpoint_group, "") << op.name;  // a weight's cast
    } else {
      EXPECT_EQ(op.checkpoint_group, g.op(producer).checkpoint_group) << op.name;
      casts_in_block += op.checkpoint_group == "block";
    }
  }
  EXPECT_GT(casts_in_block, 0);
  // mm1's output, read only by the cast up to float32 for softmax, is mm1 writing float32; so
  // are the weights' gradients, whose products read the block's recomputed activations.
  EXPECT_TRUE(op_named(g, "mm1").params.as<MatmulParams>().float32_out);
  for (const auto& [variable, grad] : g.variable_grads) {
    const LogicalOp& made_by = g.op(g.tensor(grad).producer);
    EXPECT_EQ(made_by.schema->name(), "matmul") << g.op(variable).name;
    EXPECT_EQ(made_by.checkpoint_group, "block") << g.op(variable).name;
  }
}

// Note [Mixed precision policy]: the one function graphs and eager autocast share.
TEST(Amp, ThePolicyLowersMatmulsLetsCheapOpsFollowAndCastsTheRestUp) {
  const auto dtypes = [](const char* op, std::vector<DataType> in) {
    return amp_input_dtypes(OpRegistry::global().find(op), std::move(in), DataType::kBFloat16);
  };
  using D = DataType;
  using V = std::vector<D>;
  EXPECT_EQ(dtypes("matmul", {D::kFloat32, D::kBFloat16}), (V{D::kBFloat16, D::kBFloat16}));
  EXPECT_EQ(dtypes("scaled_dot_product_attention", {D::kFloat32, D::kFloat32, D::kBFloat16}),
            (V{D::kBFloat16, D::kBFloat16, D::kBFloat16}));
  // Followers keep a low input low, and promote when float32 meets it.
  EXPECT_EQ(dtypes("gelu", {D::kBFloat16}), (V{D::kBFloat16}));
  EXPECT_EQ(dtypes("transpose", {D::kFloat32}), (V{D::kFloat32}));
  EXPECT_EQ(dtypes("add", {D::kBFloat16, D::kBFloat16}), (V{D::kBFloat16, D::kBFloat16}));
  EXPECT_EQ(dtypes("add", {D::kFloat32, D::kBFloat16}), (V{D::kFloat32, D::kFloat32}));
  // The rest runs in float32; integers, other float dtypes and absent inputs never change.
  EXPECT_EQ(dtypes("layer_norm", {D::kBFloat16, D::kFloat32}), (V{D::kFloat32, D::kFloat32}));
  EXPECT_EQ(dtypes("embedding", {D::kBFloat16, D::kInt64}), (V{D::kFloat32, D::kInt64}));
  EXPECT_EQ(dtypes("matmul", {D::kFloat64, D::kInt32}), (V{D::kFloat64, D::kInt32}));
  EXPECT_EQ(dtypes("softmax", {D::kFloat16}), (V{D::kFloat16}));  // not the low dtype asked
  // An op writing inputs in place keeps them as they are (a cast would take the write into a
  // copy) and takes its other floating operands in the first one's dtype; a second written
  // input of another dtype stays so, for the op to refuse.
  EXPECT_EQ(dtypes("cached_attention",
                   {D::kBFloat16, D::kBFloat16, D::kFloat32, D::kFloat32, D::kFloat32, D::kInt64}),
            (V{D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kInt64}));
  EXPECT_EQ(dtypes("cached_attention",
                   {D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kBFloat16, D::kInt64}),
            (V{D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kBFloat16, D::kInt64}));
  EXPECT_EQ(dtypes("assign", {D::kBFloat16, D::kFloat32}), (V{D::kBFloat16, D::kBFloat16}));
}

TEST(Amp, AMatmulReadingAMatmulTakesItsBfloat16OutputWithoutARoundTrip) {
  GraphBuilder b("chain");
  const int x = b.input("x", Shape{8, 4});
  const int w1 = b.variable("w1", Shape{4, 6}, kInit);
  const int w2 = b.variable("w2", Shape{6, 3}, kInit);
  const int h = b.op1("matmul", MatmulParams{}, {x, w1}, "mm1");
  const int y = b.op1("matmul", MatmulParams{}, {h, w2}, "mm2");
  b.set_loss(b.op1("reduce_mean", ReduceParams{}, {y}));
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  b.train().amp_dtype = DataType::kBFloat16;
  Graph& g = b.graph();
  run_logical_passes(g);
  (void)h;  // passes renumber tensors: compare by producer
  const int read = op_named(g, "mm2").inputs[0];
  EXPECT_EQ(g.op(g.tensor(read).producer).name, "mm1") << "mm2 reads mm1's bfloat16 output";
}

TEST(Amp, OffByDefaultAndForOtherDtypesRefused) {
  Model off(DataType::kFloat32);
  run_logical_passes(off.b.graph());
  for (int i = 0; i < off.b.graph().num_ops(); ++i) {
    const LogicalOp& op = off.b.graph().op(i);
    EXPECT_FALSE(op.schema != nullptr && op.schema->name() == "cast") << op.name;
  }
  Model bad(DataType::kInt32);
  testing::expect_error([&] { run_logical_passes(bad.b.graph()); }, ErrorCode::kTypeError,
                        "mixed precision runs in bfloat16 or float16. However, got int32");
}

// The cast of a weight is hoisted out of the accumulation window: it acts once per step while
// the matmuls act once per micro-batch.
TEST(Amp, AWeightIsCastOncePerStepUnderGradientAccumulation) {
  Model m(DataType::kBFloat16, /*micro_batches=*/4);
  const proto::PlanProto plan = compile_graph(m.b.graph());
  int weight_casts = 0, matmuls_per_micro = 0;
  for (const auto& task : plan.ranks(0).tasks()) {
    if (task.op_type() == "cast" && logical_op_of(task) == "w1.bfloat16") {  // the forward cast
      ++weight_casts;
      EXPECT_FALSE(task.per_micro_batch()) << task.name();
    }
    const std::string& op = logical_op_of(task);
    if (task.op_type() == "matmul" && (op == "mm1" || op == "mm2" || op == "mm3")) {
      matmuls_per_micro += task.per_micro_batch();
    }
  }
  EXPECT_EQ(weight_casts, 1);
  EXPECT_EQ(matmuls_per_micro, 3);
}

}  // namespace
}  // namespace ofl::compiler

namespace ofl::compiler {
namespace {

// Note [Gradient reduction dtype]: under DP2 the replicated gradients' all-reduces move bfloat16
// when asked, float32 otherwise, bucketed (several variables) or alone (one).
TEST(Amp, GradientsAreReducedInTheDtypeAsked) {
  for (DataType reduce : {DataType::kFloat32, DataType::kBFloat16}) {
    for (int64_t bucket_bytes : {int64_t{0}, int64_t{4} << 20}) {
      SCOPED_TRACE(str_cat(dtype_name(reduce), ", buckets of ", bucket_bytes, " bytes"));
      GraphBuilder b("dp2");
      b.set_placement(Placement::parse("cpu, [0, 1]"));
      const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
      const int w1 = b.variable("w1", Shape{4, 6}, kInit, {B()});
      const int w2 = b.variable("w2", Shape{6, 3}, kInit, {B()});
      const int h = b.op1("matmul", MatmulParams{}, {x, w1});
      const int y = b.op1("matmul", MatmulParams{}, {h, w2});
      b.set_loss(b.op1("reduce_mean", ReduceParams{}, {y}));
      b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
      b.train().amp_dtype = DataType::kBFloat16;
      b.train().grad_reduce_dtype = reduce;
      b.train().gradient_bucket_bytes = bucket_bytes;
      const proto::PlanProto plan = compile_graph(b.graph());
      std::map<int64_t, std::string> dtypes;  // register id -> dtype
      for (const auto& reg : plan.ranks(0).registers()) dtypes[reg.id()] = reg.dtype();
      int all_reduces = 0;
      for (const auto& task : plan.ranks(0).tasks()) {
        if (task.kind() != proto::TaskProto::COLLECTIVE) continue;
        ++all_reduces;
        EXPECT_EQ(dtypes.at(task.inputs(0)), dtype_name(reduce)) << task.name();
      }
      EXPECT_EQ(all_reduces, bucket_bytes > 0 ? 1 : 2);
    }
  }
}

}  // namespace
}  // namespace ofl::compiler

namespace ofl::compiler {
namespace {

// Note [Dynamic loss scaling in a graph]: the scale variable seeds the backward and divides the
// gradients; every gradient is checked; every update can be skipped; Adam counts the steps
// applied in the graph instead of taking a fed step.
TEST(Amp, DynamicLossScalingChecksEveryGradientAndCanSkipEveryUpdate) {
  Model m(DataType::kFloat16);
  m.b.train().optimizer.kind = OptimizerConfig::Kind::kAdam;
  m.b.train().dynamic_loss_scale = DynamicLossScale{1024.0, 2.0, 0.5, 100};
  Graph& g = m.b.graph();
  run_logical_passes(g);
  std::map<std::string, int> ops;
  bool scale_variable = false, step_input = false;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.schema != nullptr) ++ops[op.schema->name()];
    scale_variable = scale_variable || (op.kind == OpKind::kVariable && op.name == "_loss_scale");
    step_input = step_input || (op.kind == OpKind::kInput && op.name.rfind("step", 0) == 0);
  }
  EXPECT_TRUE(scale_variable);
  EXPECT_FALSE(step_input) << "Adam's step is counted in the graph";
  EXPECT_EQ(ops["count_nonfinite"], 0);
  EXPECT_EQ(ops["multi_tensor_count_nonfinite"], 1);  // w1 and w2 together
  // Note [Multi-tensor updates]: both variables (one placement and layout) in one update.
  ASSERT_EQ(ops["multi_tensor_adam_update"], 1);
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.schema == nullptr || op.schema->name() != "multi_tensor_adam_update") continue;
    const auto& p = op.params.as<MultiAdamParams>();
    EXPECT_TRUE(p.skippable);
    EXPECT_EQ(MultiUpdateInputs::of(p).num_tensors(static_cast<int>(op.inputs.size())), 2);
  }
  EXPECT_EQ(ops["loss_scale_update"], 1);
}

}  // namespace
}  // namespace ofl::compiler
