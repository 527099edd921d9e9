#include "oneflowlike/plan_contract.h"

#include <gtest/gtest.h>

#include "oneflowlike/common/error.h"

namespace ofl {
namespace {

// rank 0: a -> r0 -> send(0->1); rank 1: recv -> r1 -> b
proto::PlanProto two_rank_plan() {
  proto::PlanProto plan;
  plan.set_world_size(2);
  auto* r0 = plan.add_ranks();
  r0->set_rank(0);
  auto* r1 = plan.add_ranks();
  r1->set_rank(1);
  auto task = [](proto::RankPlanProto* rank, int64_t id, const char* name,
                 proto::TaskProto::Kind kind) {
    auto* t = rank->add_tasks();
    t->set_id(id);
    t->set_name(name);
    t->set_kind(kind);
    t->set_rank(rank->rank());
    return t;
  };
  auto reg = [](proto::RankPlanProto* rank, int64_t id, int64_t producer,
                std::vector<int64_t> consumers) {
    auto* r = rank->add_registers();
    r->set_id(id);
    r->set_name(str_cat("r", id));
    r->set_producer(producer);
    r->set_register_num(1);
    r->set_dtype("float32");
    r->mutable_shape()->add_dims(4);
    for (int64_t c : consumers) r->add_consumers(c);
  };
  task(r0, 1, "a", proto::TaskProto::COMPUTE)->add_outputs(10);
  auto* send = task(r0, 2, "send", proto::TaskProto::SEND);
  send->add_inputs(10);
  send->set_peer(1);
  send->set_transfer_id(7);
  reg(r0, 10, 1, {2});
  auto* recv = task(r1, 3, "recv", proto::TaskProto::RECV);
  recv->add_outputs(11);
  recv->set_peer(0);
  recv->set_transfer_id(7);
  task(r1, 4, "b", proto::TaskProto::COMPUTE)->add_inputs(11);
  reg(r1, 11, 3, {4});
  return plan;
}

TEST(PlanContract, AcceptsAMatchedAcyclicPlan) {
  EXPECT_NO_THROW(check_plan_contract(two_rank_plan()));
}

TEST(PlanContract, UnmatchedSendNamesTheTaskAndPeer) {
  proto::PlanProto plan = two_rank_plan();
  plan.mutable_ranks(1)->mutable_tasks(0)->set_transfer_id(8);
  try {
    check_plan_contract(plan);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("'send' (task 2 on rank 0)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no matching receive on rank 1"), std::string::npos);
  }
}

TEST(PlanContract, ACycleAcrossRanksIsADeadlockNamingItsTasks) {
  proto::PlanProto plan = two_rank_plan();
  plan.mutable_ranks(0)->mutable_tasks(0)->add_control_inputs(4);  // a waits for b on rank 1
  try {
    check_plan_contract(plan);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'a' (task 1 on rank 0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'b' (task 4 on rank 1)"), std::string::npos) << msg;
    // Each stuck task with what it waits for.
    EXPECT_NE(msg.find("'a' (task 1 on rank 0) waits for control input 'b' (task 4 on rank 1)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'recv' (task 3 on rank 1) waits for transfer 7 from 'send' (task 2 on "
                       "rank 0)"),
              std::string::npos)
        << msg;
  }
  EXPECT_NO_THROW(check_plan_contract(plan, PlanContractOptions{/*acyclic=*/false}));
}

TEST(PlanContract, MismatchedTransferShapesAndCrossRankReadsAreRejected) {
  proto::PlanProto plan = two_rank_plan();
  plan.mutable_ranks(1)->mutable_registers(0)->mutable_shape()->set_dims(0, 5);
  try {
    check_plan_contract(plan);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it sends (4,) float32 and receives (5,) float32"),
              std::string::npos)
        << e.what();
  }
  plan = two_rank_plan();
  plan.mutable_ranks(0)->mutable_registers(0)->add_consumers(4);  // task 4 is on rank 1
  try {
    check_plan_contract(plan);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only by SEND/RECV"), std::string::npos);
  }
}

}  // namespace
}  // namespace ofl
