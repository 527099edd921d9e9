#include <gtest/gtest.h>

#include <fstream>

#include "compiler/builder.h"
#include "compiler/compile.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/proto/job.pb.h"

namespace ofl::compiler {
namespace {

TEST(ShapeInference, FillsShapesOfAJobReadFromAFile) {
  GraphBuilder b;
  const int x = b.input("x", Shape{3, 5});
  const int w = b.variable("w", Shape{5, 2}, Initializer{});
  b.fetch(b.op1("matmul", MatmulParams{}, {x, w}, "fc"));
  proto::JobProto job;
  b.to_job(&job);
  job.mutable_ops(2)->mutable_outputs(0)->clear_shape();  // as a hand-written job would be
  Graph g = graph_from_job(job);
  EXPECT_EQ(g.tensor(g.tensor_index("fc/out0")).meta.shape, (Shape{}));
  make_shape_inference_pass()->run(g, {});
  EXPECT_EQ(g.tensor(g.tensor_index("fc/out0")).meta.shape, (Shape{3, 2}));
}

TEST(ShapeInference, MismatchInAJobNamesTheOpAndShapes) {
  GraphBuilder b;
  b.set_location("train.py:40");
  const int x = b.input("x", Shape{3, 5});
  const int w = b.variable("w", Shape{5, 2}, Initializer{});
  b.op1("matmul", MatmulParams{}, {x, w}, "fc");
  proto::JobProto job;
  b.to_job(&job);
  job.mutable_ops(1)->mutable_outputs(0)->mutable_shape()->set_dims(0, 4);  // w is now (4, 2)
  Graph g = graph_from_job(job);
  try {
    make_shape_inference_pass()->run(g, {});
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find("[matmul]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(4, 2)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc' (matmul) at train.py:40"), std::string::npos) << msg;
  }
}

TEST(PassManager, RejectsPassesRunBeforeWhatTheyNeed) {
  PassManager pm;
  pm.add(make_sbp_inference_pass());
  try {
    pm.check_order();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("'sbp_inference' needs 'shapes'"), std::string::npos);
  }
}

TEST(PassManager, DumpsTheGraphAfterARequestedPass) {
  GraphBuilder b;
  b.op1("relu", NoParams{}, {b.input("x", Shape{2})}, "act");
  PassManager pm;
  pm.add(make_shape_inference_pass());
  pm.add(make_sbp_inference_pass());
  CompileOptions options;
  options.dump_after = {"sbp_inference"};
  options.dump_dir = ::testing::TempDir();
  pm.run(b.graph(), options);
  std::ifstream text(options.dump_dir + "/2_sbp_inference.txt");
  std::string all((std::istreambuf_iterator<char>(text)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("act = relu"), std::string::npos);
  EXPECT_NE(all.find("sbp B -> B"), std::string::npos) << all;
  EXPECT_FALSE(std::ifstream(options.dump_dir + "/1_shape_inference.txt").good());
}

// CompileOptions::skip_passes: a pass nothing needs is left out (the cast stays where folding
// would have removed it, Note [Casts folded into products]); one that others need, or a name of
// no pass, is refused by name.
TEST(PassManager, SkipsOnlyPassesNoOtherPassNeeds) {
  const auto graph = [] {
    GraphBuilder b;
    b.train().amp_dtype = DataType::kBFloat16;
    const int x = b.op1("cast", CastParams{DataType::kBFloat16}, {b.input("x", Shape{2, 3})});
    const int w = b.op1("cast", CastParams{DataType::kBFloat16}, {b.input("w", Shape{3, 4})});
    b.fetch(b.op1("cast", CastParams{DataType::kFloat32}, {b.op1("matmul", MatmulParams{}, {x, w})},
                  "up"));
    return b;
  };
  const auto product_of = [](const Graph& g) {  // what makes the fetched value
    return g.op(g.tensor(g.fetches.at(0)).producer).schema->name();
  };
  GraphBuilder folded = graph();
  run_logical_passes(folded.graph());
  EXPECT_EQ(product_of(folded.graph()), "matmul");
  GraphBuilder kept = graph();
  CompileOptions options;
  options.skip_passes = {"cast_folding"};
  run_logical_passes(kept.graph(), options);
  EXPECT_EQ(product_of(kept.graph()), "cast");
  // Without mixed precision a cast after a product is the user's: it stays.
  GraphBuilder plain = graph();
  plain.train().amp_dtype = DataType::kFloat32;
  run_logical_passes(plain.graph());
  EXPECT_EQ(product_of(plain.graph()), "cast");
  for (const auto& [name, phrase] : std::vector<std::pair<std::string, std::string>>{
           {"autograd",
            "cannot skip pass 'autograd' (OFL_SKIP_PASSES or CompileOptions::skip_passes): later "
            "passes need what it provides ('gradients')"},
           {"dead_code_elimination",
            "cannot skip pass 'dead_code_elimination' (OFL_SKIP_PASSES or "
            "CompileOptions::skip_passes): later passes need it (they leave dead ops for it)"},
           {"folding",
            "cannot skip pass 'folding' (OFL_SKIP_PASSES or CompileOptions::skip_passes): there "
            "is no such pass. The passes are: shape_inference, amp, attention_layout, autograd, "
            "cast_folding"}}) {
    GraphBuilder b = graph();
    options.skip_passes = {name};
    try {
      run_logical_passes(b.graph(), options);
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ofl::compiler
