#include "compiler/plan_dump.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "compiler/physical/memory_planning.h"
#include "oneflowlike/common/error.h"

namespace ofl::compiler {
namespace {

// rank 0: x (INPUT) -> matmul (with w, VARIABLE) -> y -> SEND y to rank 1 (transfer 0)
//                                                    -> SEND y to rank 2 (transfer 1)
// rank 1: RECV (transfer 0) -> y1 -> relu -> out -> OUTPUT
// rank 2: RECV (transfer 1) -> y2
struct DumpPlan {
  proto::PlanProto plan;
  int64_t next_task = 0;
  int64_t next_register = 0;

  DumpPlan() {
    plan.set_job_name("mlp");
    plan.set_world_size(3);
    plan.set_pipeline_depth(2);
    plan.add_fetches("out");
    for (int r = 0; r < 3; ++r) plan.add_ranks()->set_rank(r);
    auto* input = task(0, proto::TaskProto::INPUT, "x");
    const int64_t x = output(0, input, "x", {4, 8});
    auto* variable = task(0, proto::TaskProto::VARIABLE, "w");
    const int64_t w = output(0, variable, "w", {8, 8}, /*persistent=*/true);
    auto* matmul = task(0, proto::TaskProto::COMPUTE, "matmul");
    matmul->set_op_type("matmul");
    read(0, matmul, x);
    read(0, matmul, w);
    const int64_t y = output(0, matmul, "y", {4, 8});
    for (int peer = 1; peer <= 2; ++peer) {
      auto* send = task(0, proto::TaskProto::SEND, str_cat("send_y_", peer), 1);
      send->set_peer(peer);
      send->set_transfer_id(peer - 1);
      read(0, send, y);
      auto* recv = task(peer, proto::TaskProto::RECV, "recv_y", 1);
      recv->set_peer(0);
      recv->set_transfer_id(peer - 1);
      output(peer, recv, str_cat("y", peer), {4, 8});
    }
    auto* relu = task(1, proto::TaskProto::COMPUTE, "relu");
    relu->set_op_type("relu");
    read(1, relu, plan.ranks(1).registers(0).id());
    const int64_t out = output(1, relu, "out", {4, 8});
    auto* sink = task(1, proto::TaskProto::OUTPUT, "fetch_out");
    read(1, sink, out);
  }

  proto::TaskProto* task(int rank, proto::TaskProto::Kind kind, const std::string& name,
                         int thread = 0) {
    proto::TaskProto* t = plan.mutable_ranks(rank)->add_tasks();
    t->set_id(next_task++);
    t->set_rank(rank);
    t->set_kind(kind);
    t->set_name(name);
    t->set_thread(thread);
    return t;
  }
  int64_t output(int rank, proto::TaskProto* producer, const std::string& name,
                 std::initializer_list<int64_t> dims, bool persistent = false) {
    proto::RegisterProto* r = plan.mutable_ranks(rank)->add_registers();
    r->set_id(next_register++);
    r->set_name(name);
    int64_t numel = 1;
    for (int64_t d : dims) {
      r->mutable_shape()->add_dims(d);
      numel *= d;
    }
    r->set_dtype("float32");
    r->set_bytes(numel * 4);
    r->set_producer(producer->id());
    r->set_register_num(1);
    r->set_persistent(persistent);
    r->set_memory_block(-1);
    producer->add_outputs(r->id());
    return r->id();
  }
  void read(int rank, proto::TaskProto* consumer, int64_t register_id) {
    consumer->add_inputs(register_id);
    for (auto& r : *plan.mutable_ranks(rank)->mutable_registers()) {
      if (r.id() == register_id) r.add_consumers(consumer->id());
    }
  }
};

int64_t count(const std::string& text, const std::string& piece) {
  int64_t n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

TEST(PlanDump, TextMentionsEveryTaskWithItsKindShapesAndMemory) {
  DumpPlan p;
  physical::plan_memory(&p.plan);
  const std::string text = plan_to_text(p.plan);
  for (const auto& rp : p.plan.ranks()) {
    EXPECT_NE(text.find(str_cat("rank ", rp.rank()) + ":"), std::string::npos);
    for (const auto& t : rp.tasks()) {
      EXPECT_NE(text.find(str_cat("task ", t.id()) + " '" + t.name() + "' " +
                          proto::TaskProto::Kind_Name(t.kind())),
                std::string::npos)
          << t.name() << "\n"
          << text;
    }
  }
  EXPECT_NE(text.find("'send_y_1' SEND thread 1 to rank 1 transfer 0"), std::string::npos) << text;
  EXPECT_NE(text.find("'recv_y' RECV thread 1 from rank 0 transfer 1"), std::string::npos) << text;
  EXPECT_NE(text.find("'matmul' COMPUTE matmul"), std::string::npos);
  EXPECT_NE(text.find("'w' (8, 8) float32 256 B persistent own allocation"), std::string::npos)
      << text;
  EXPECT_NE(text.find("'x' (4, 8) float32 128 B block 0 @0"), std::string::npos) << text;
  EXPECT_NE(text.find("memory block 0:"), std::string::npos);
}

TEST(PlanDump, DotHasOneClusterPerRankBalancedBracesAndDashedTransfers) {
  DumpPlan p;
  physical::plan_memory(&p.plan);
  const std::string dot = plan_to_dot(p.plan);
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0u);
  EXPECT_EQ(count(dot, "{"), count(dot, "}"));
  int depth = 0;
  for (char c : dot) {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(count(dot, "subgraph cluster_rank"), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(count(dot, str_cat("subgraph cluster_rank", r) + " {"), 1);
  }
  // send_y_1 (task 3) -> recv on rank 1 (task 4); send_y_2 (task 5) -> recv on rank 2 (task 6).
  EXPECT_NE(dot.find("t3 -> t4 [style=dashed"), std::string::npos) << dot;
  EXPECT_NE(dot.find("t5 -> t6 [style=dashed"), std::string::npos) << dot;
  EXPECT_EQ(count(dot, "style=dashed"), 2);
  EXPECT_NE(dot.find("t2 -> t3 [label=\"y (4, 8)\"]"), std::string::npos) << dot;
  EXPECT_EQ(count(dot, "\""), 2 * (count(dot, "label=")));  // every label is one quoted string
}

TEST(PlanDump, DotEscapesQuotesInNames) {
  DumpPlan p;
  p.plan.mutable_ranks(0)->mutable_tasks(0)->set_name("say \"hi\"");
  const std::string dot = plan_to_dot(p.plan);
  EXPECT_NE(dot.find("say \\\"hi\\\""), std::string::npos) << dot;
}

TEST(PlanSummary, CountsTasksBytesMovedAndMemoryPerRank) {
  DumpPlan p;
  physical::plan_memory(&p.plan);
  const PlanSummary summary = summarize_plan(p.plan);
  EXPECT_EQ(summary.job_name, "mlp");
  EXPECT_EQ(summary.pipeline_depth, 2);
  EXPECT_TRUE(summary.memory_planned);
  ASSERT_EQ(summary.ranks.size(), 3u);
  const RankSummary& r0 = summary.ranks[0];
  EXPECT_EQ(r0.num_tasks, 5);
  EXPECT_EQ(r0.tasks_by_kind.at("SEND"), 2);
  EXPECT_EQ(r0.tasks_by_kind.at("COMPUTE"), 1);
  EXPECT_EQ(r0.bytes_sent, 2 * 128);  // y (4, 8) float32 to two peers
  EXPECT_EQ(r0.bytes_received, 0);
  // x is shared (alone in its block); w and y have their own memory: no reduction on rank 0.
  EXPECT_EQ(r0.peak_bytes, 128 + 256 + 128);
  EXPECT_EQ(r0.bytes_without_reuse, 128 + 256 + 128);
  EXPECT_DOUBLE_EQ(r0.reduction_percent, 0.0);
  EXPECT_EQ(summary.ranks[1].bytes_received, 128);
  EXPECT_EQ(summary.ranks[1].bytes_sent, 0);
  EXPECT_EQ(summary.ranks[2].bytes_received, 128);
  EXPECT_EQ(summary.ranks[2].tasks_by_kind.at("RECV"), 1);
}

TEST(PlanSummary, ReportsTheReductionFromMemoryReuse) {
  // Three equal registers in a chain a -> b -> c -> d: two live at a time.
  proto::PlanProto plan;
  auto* rp = plan.add_ranks();
  for (int i = 0; i < 4; ++i) {
    auto* t = rp->add_tasks();
    t->set_id(i);
    t->set_name(str_cat("t", i));
    t->set_kind(proto::TaskProto::COMPUTE);
    if (i > 0) t->add_inputs(i - 1);
    if (i < 3) {
      t->add_outputs(i);
      auto* r = rp->add_registers();
      r->set_id(i);
      r->set_producer(i);
      r->add_consumers(i + 1);
      r->set_register_num(1);
      r->set_bytes(1024);
    }
  }
  PlanSummary before = summarize_plan(plan);
  EXPECT_FALSE(before.memory_planned);
  EXPECT_EQ(before.ranks[0].peak_bytes, 3072);
  physical::plan_memory(&plan);
  PlanSummary after = summarize_plan(plan);
  EXPECT_EQ(after.ranks[0].peak_bytes, 2048);
  EXPECT_EQ(after.ranks[0].bytes_without_reuse, 3072);
  EXPECT_NEAR(after.ranks[0].reduction_percent, 100.0 / 3.0, 1e-9);
  const std::string text = summary_to_text(after);
  EXPECT_NE(text.find("reduction 33.3%"), std::string::npos) << text;
  EXPECT_NE(text.find("peak 2.0 KiB (2048 B)"), std::string::npos) << text;
}

TEST(PlanSummary, TextHasALinePerRankWithBytesMoved) {
  DumpPlan p;
  physical::plan_memory(&p.plan);
  const std::string text = summary_to_text(summarize_plan(p.plan));
  EXPECT_NE(text.find("plan 'mlp': world size 3, pipeline depth 2"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0: 5 tasks (COMPUTE 1, INPUT 1, SEND 2, VARIABLE 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sent 256 B, received 0 B"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2: 1 task (RECV 1)"), std::string::npos) << text;
}

TEST(PlanSummary, FormatsBytesWithExactCounts) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB (1536 B)");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.0 GiB (3221225472 B)");
}

}  // namespace
}  // namespace ofl::compiler
