#include "compiler/physical/memory_planning.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/builder.h"
#include "compiler/compile.h"
#include "compiler/models/gpt.h"
#include "compiler/physical/memory_report.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/kernels/cpu/attention.h"
#include "oneflowlike/kernels/cpu/bf16_tiles.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"
#include "tests/cpp/models/gpt_training.h"

namespace ofl::compiler::physical {
namespace {

// Builds small plans by hand: tasks and registers get plan-wide dense ids in creation order.
class HandPlan {
 public:
  int64_t task(int64_t rank, proto::TaskProto::Kind kind, const std::string& name, int thread = 0) {
    proto::TaskProto* t = rank_plan(rank)->add_tasks();
    t->set_id(next_task_++);
    t->set_rank(rank);
    t->set_kind(kind);
    t->set_name(name);
    t->set_thread(thread);
    if (kind == proto::TaskProto::COMPUTE) t->set_op_type("relu");
    return t->id();
  }
  int64_t compute(int64_t rank, const std::string& name) {
    return task(rank, proto::TaskProto::COMPUTE, name);
  }
  // A float32 register of `numel` elements written by `producer`.
  int64_t output(int64_t producer, const std::string& name, int64_t numel, int register_num = 1,
                 bool persistent = false) {
    proto::TaskProto* p = find_task(producer);
    proto::RegisterProto* r = rank_plan(p->rank())->add_registers();
    r->set_id(next_register_++);
    r->set_name(name);
    r->mutable_shape()->add_dims(numel);
    r->set_dtype("float32");
    r->set_producer(producer);
    r->set_register_num(register_num);
    r->set_bytes(numel * 4);
    r->set_persistent(persistent);
    r->set_memory_block(-1);
    p->add_outputs(r->id());
    return r->id();
  }
  void read(int64_t consumer, int64_t register_id) {
    find_task(consumer)->add_inputs(register_id);
    find_register(register_id)->add_consumers(consumer);
  }
  proto::TaskProto* find_task(int64_t id) {
    for (auto& rp : *plan.mutable_ranks()) {
      for (auto& t : *rp.mutable_tasks()) {
        if (t.id() == id) return &t;
      }
    }
    ADD_FAILURE() << "no task " << id;
    return nullptr;
  }
  proto::RegisterProto* find_register(int64_t id) {
    for (auto& rp : *plan.mutable_ranks()) {
      for (auto& r : *rp.mutable_registers()) {
        if (r.id() == id) return &r;
      }
    }
    ADD_FAILURE() << "no register " << id;
    return nullptr;
  }
  const proto::RankPlanProto& rank(int64_t r) { return *rank_plan(r); }

  proto::PlanProto plan;

 private:
  proto::RankPlanProto* rank_plan(int64_t rank) {
    for (auto& rp : *plan.mutable_ranks()) {
      if (rp.rank() == rank) return &rp;
    }
    proto::RankPlanProto* rp = plan.add_ranks();
    rp->set_rank(rank);
    plan.set_world_size(std::max<int64_t>(plan.world_size(), rank + 1));
    return rp;
  }
  int64_t next_task_ = 0;
  int64_t next_register_ = 0;
};

// Independent of the planner: recomputes each shared register's lifetime from the chain and
// checks every pair. Returns the number of violations (and reports each).
int count_overlap_violations(const proto::PlanProto& plan) {
  int violations = 0;
  for (const auto& rp : plan.ranks()) {
    std::unordered_map<int64_t, int64_t> position;
    for (const auto& t : rp.tasks()) {
      if (t.thread() == 0) position[t.id()] = static_cast<int64_t>(position.size());
    }
    struct Live {
      std::string name;
      int64_t block, offset, bytes;
      int64_t begin, end;
    };
    // A collective on the communication thread runs between the chain tasks giving its inputs
    // (or control inputs) and the first chain task reading its outputs (Note [Collective
    // windows]): it writes no earlier than the first and reads no later than the second.
    std::unordered_map<int64_t, int64_t> producer_of, written_at, read_at;
    for (const auto& r : rp.registers()) producer_of[r.id()] = r.producer();
    auto chain_position = [&](int64_t task) {
      const auto it = position.find(task);
      return it == position.end() ? int64_t{-1} : it->second;
    };
    for (const auto& t : rp.tasks()) {
      if (t.thread() == 0) continue;
      int64_t lo = -1, hi = std::numeric_limits<int64_t>::max();
      bool bounded = true;
      for (int64_t in : t.inputs()) {
        const auto p = producer_of.find(in);
        const int64_t at = p == producer_of.end() ? -1 : chain_position(p->second);
        bounded = bounded && at >= 0;
        lo = std::max(lo, at);
      }
      for (int64_t c : t.control_inputs()) {
        bounded = bounded && chain_position(c) >= 0;
        lo = std::max(lo, chain_position(c));
      }
      for (const auto& r : rp.registers()) {
        if (r.producer() != t.id()) continue;
        for (int64_t c : r.consumers()) {
          bounded = bounded && chain_position(c) >= 0;
          hi = std::min(hi, chain_position(c));
        }
      }
      if (bounded) {
        written_at[t.id()] = lo;
        read_at[t.id()] = hi;
      }
    }
    // -1: a task no bound places, which must touch no shared register.
    auto write_position = [&](int64_t task) {
      if (position.count(task)) return position.at(task);
      return written_at.count(task) ? written_at.at(task) : int64_t{-1};
    };
    auto read_position = [&](int64_t task) {
      if (position.count(task)) return position.at(task);
      return read_at.count(task) ? read_at.at(task) : int64_t{-1};
    };
    // Registers without memory of their own live in another's (Note [Slice views], Note
    // [All-reduces in place], Note [Concats in place]): a view's readers read its input's
    // memory, and the pieces written into an in-place concat are written into its output's.
    std::unordered_map<int64_t, const proto::RegisterProto*> registers;
    std::unordered_map<int64_t, const proto::TaskProto*> tasks;
    for (const auto& r : rp.registers()) registers[r.id()] = &r;
    for (const auto& t : rp.tasks()) tasks[t.id()] = &t;
    std::vector<Live> shared;
    for (const auto& r : rp.registers()) {
      if (r.memory_block() < 0) continue;
      if (r.offset() % kMemoryAlignment != 0) {
        ADD_FAILURE() << register_name_of(rp, r) << " has unaligned offset " << r.offset();
        ++violations;
      }
      std::vector<int64_t> holders{r.id()};  // registers whose bytes are r's
      const proto::TaskProto* made_by = tasks.count(r.producer()) ? tasks[r.producer()] : nullptr;
      if (made_by != nullptr && made_by->in_place()) {
        holders.insert(holders.end(), made_by->inputs().begin(), made_by->inputs().end());
      }
      int64_t begin = std::numeric_limits<int64_t>::max(), end = 0;
      bool placed = true;
      for (int64_t h : holders) {
        const int64_t at = write_position(registers.at(h)->producer());
        placed = placed && at >= 0;
        begin = std::min(begin, at);
      }
      end = begin;
      for (size_t k = 0; k < holders.size(); ++k) {  // grows with the views met
        for (int64_t c : registers.at(holders[k])->consumers()) {
          placed = placed && read_position(c) >= 0;
          end = std::max(end, read_position(c));
          const proto::TaskProto* reader = tasks.count(c) ? tasks[c] : nullptr;
          if (reader != nullptr && reader->view()) {
            holders.insert(holders.end(), reader->outputs().begin(), reader->outputs().end());
          }
        }
      }
      if (!placed) {
        ADD_FAILURE() << register_name_of(rp, r)
                      << " shares memory but a task off the chain touches it";
        ++violations;
        continue;
      }
      shared.push_back(
          {register_name_of(rp, r), r.memory_block(), r.offset(), r.bytes(), begin, end});
    }
    // Note [Collective scratch]: a collective's scratch in the block lives for its window, and
    // only a collective whose registers have one slot (no micro-batches in flight) has one.
    std::unordered_map<int64_t, int64_t> slots;
    for (const auto& r : rp.registers()) slots[r.id()] = r.register_num();
    for (const auto& t : rp.tasks()) {
      const proto::CollectiveProto& c = t.collective();
      if (!c.scratch_in_block()) continue;
      bool one_slot = true;
      for (const auto* ids : {&t.inputs(), &t.outputs()}) {
        for (int64_t id : *ids) one_slot = one_slot && slots[id] == 1;
      }
      if (!written_at.count(t.id()) || !one_slot) {
        ADD_FAILURE() << t.name() << "'s scratch shares memory, but no window bounds it";
        ++violations;
        continue;
      }
      if (c.scratch_offset() % kMemoryAlignment != 0) {
        ADD_FAILURE() << t.name() << "'s scratch has unaligned offset " << c.scratch_offset();
        ++violations;
      }
      shared.push_back({t.name() + " (scratch)", c.scratch_block(), c.scratch_offset(),
                        c.scratch_bytes(), written_at.at(t.id()), read_at.at(t.id())});
    }
    for (size_t i = 0; i < shared.size(); ++i) {
      for (size_t j = i + 1; j < shared.size(); ++j) {
        const Live& a = shared[i];
        const Live& b = shared[j];
        const bool alive_together = a.begin <= b.end && b.begin <= a.end;
        const bool same_memory =
            a.block == b.block && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        if (alive_together && same_memory) {
          ADD_FAILURE() << a.name << " and " << b.name << " overlap on rank " << rp.rank();
          ++violations;
        }
      }
    }
    for (const Live& live : shared) {
      bool inside = false;
      for (const auto& block : rp.memory_blocks()) {
        inside |= block.id() == live.block && live.offset + live.bytes <= block.bytes();
      }
      if (!inside) {
        ADD_FAILURE() << live.name << " lies outside its block";
        ++violations;
      }
    }
  }
  return violations;
}

// t0 -> t1 -> t2 -> t3 -> t4, register i written by t_i and read by t_{i+1}; the last has no
// consumer.
HandPlan five_task_chain(const std::vector<int64_t>& numels) {
  HandPlan h;
  std::vector<int64_t> tasks;
  for (size_t i = 0; i < numels.size(); ++i) {
    tasks.push_back(h.compute(0, str_cat("t", i)));
    if (i > 0) h.read(tasks[i], static_cast<int64_t>(i - 1));
    h.output(tasks[i], str_cat("r", i), numels[i]);
  }
  return h;
}

TEST(MemoryPlanning, AChainOfFiveTasksReusesMemoryUpToTheLargestAdjacentPair) {
  HandPlan h = five_task_chain({256, 512, 128, 1024, 64});  // bytes 1024, 2048, 512, 4096, 256
  plan_memory(&h.plan);
  const auto& rp = h.rank(0);
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
  ASSERT_EQ(rp.memory_blocks_size(), 1);
  // Live at once: (r0, r1) 3072, (r1, r2) 2560, (r2, r3) 4608, (r3, r4) 4352: the optimum is 4608.
  EXPECT_EQ(rp.memory_blocks(0).bytes(), 4608);
  EXPECT_EQ(rp.peak_bytes(), 4608);
  EXPECT_EQ(rp.bytes_without_reuse(), 1024 + 2048 + 512 + 4096 + 256);
  for (const auto& r : rp.registers()) EXPECT_EQ(r.memory_block(), rp.memory_blocks(0).id());
}

TEST(MemoryPlanning, ASimpleChainReachesTheOptimumAndSharesDeadRegisters) {
  // a -> b -> c -> d with equal registers: two are alive at a time, so two slots suffice.
  HandPlan h = five_task_chain({16, 16, 16, 16});
  plan_memory(&h.plan);
  const auto& rp = h.rank(0);
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
  EXPECT_EQ(rp.peak_bytes(), 2 * 64);
  EXPECT_LT(rp.peak_bytes(), rp.bytes_without_reuse());
  EXPECT_EQ(rp.registers(0).offset(), rp.registers(2).offset());  // a is dead when c is written
  EXPECT_NE(rp.registers(0).offset(), rp.registers(1).offset());
}

TEST(MemoryPlanning, OffsetsAreAlignedEvenForOddSizes) {
  HandPlan h = five_task_chain({3, 5, 7});  // 12, 20, 28 bytes
  plan_memory(&h.plan);
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
  const auto& rp = h.rank(0);
  // Largest first: r2 (28 B) at 0; r1 (20 B) lives with r2, so after it at the next multiple
  // of 64; r0 (12 B) lives with r1 only and fits in the gap before it.
  EXPECT_EQ(rp.registers(2).offset(), 0);
  EXPECT_EQ(rp.registers(1).offset(), 64);
  EXPECT_EQ(rp.registers(0).offset(), 0);
  EXPECT_EQ(rp.memory_blocks(0).bytes(), 64 + 20);
}

TEST(MemoryPlanning, ALongLivedRegisterIsNotOverwrittenBySkippedTasks) {
  // t0's output is read by t1 and by t4 (a residual connection).
  HandPlan h = five_task_chain({64, 64, 64, 64, 64});
  h.read(4, 0);
  plan_memory(&h.plan);
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
  const auto& rp = h.rank(0);
  for (int i = 1; i < 5; ++i) EXPECT_NE(rp.registers(0).offset(), rp.registers(i).offset());
}

TEST(MemoryPlanning, RandomGraphsNeverShareMemoryBetweenLiveRegisters) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    HandPlan h;
    std::vector<int64_t> registers;
    const int num_tasks = 3 + trial % 20;
    for (int i = 0; i < num_tasks; ++i) {
      const int64_t t = h.compute(0, str_cat("t", i));
      for (int64_t r : registers) {
        if (rng() % 4 == 0) h.read(t, r);
      }
      const int outputs = 1 + static_cast<int>(rng() % 2);
      for (int k = 0; k < outputs; ++k) {
        registers.push_back(h.output(t, str_cat("r", registers.size()), 1 + rng() % 300));
      }
    }
    plan_memory(&h.plan);
    ASSERT_EQ(count_overlap_violations(h.plan), 0) << "trial " << trial;
    const auto& rp = h.rank(0);
    EXPECT_LE(rp.peak_bytes(), rp.bytes_without_reuse() + 64 * rp.registers_size());
  }
}

TEST(MemoryPlanning, ControlInputsOrderTheComputeChainWithoutRepeatingDataEdges) {
  HandPlan h;
  const int64_t a = h.compute(0, "a");
  const int64_t ra = h.output(a, "ra", 16);
  const int64_t b = h.compute(0, "b");  // independent of a
  const int64_t rb = h.output(b, "rb", 16);
  const int64_t send = h.task(0, proto::TaskProto::SEND, "send", /*thread=*/1);
  h.read(send, rb);
  const int64_t c = h.compute(0, "c");  // reads b: a data successor of b
  h.read(c, rb);
  h.read(c, ra);
  h.output(c, "rc", 16);
  plan_memory(&h.plan);
  EXPECT_TRUE(h.find_task(a)->control_inputs().empty());
  ASSERT_EQ(h.find_task(b)->control_inputs_size(), 1);
  EXPECT_EQ(h.find_task(b)->control_inputs(0), a);
  EXPECT_TRUE(h.find_task(c)->control_inputs().empty());     // b already precedes c through rb
  EXPECT_TRUE(h.find_task(send)->control_inputs().empty());  // not in the chain
}

TEST(MemoryPlanning, PlanningTwiceGivesTheSamePlan) {
  HandPlan h = five_task_chain({10, 20, 30, 40, 50});
  h.compute(0, "independent");
  plan_memory(&h.plan);
  const std::string once = h.plan.SerializeAsString();
  plan_memory(&h.plan);
  EXPECT_EQ(h.plan.SerializeAsString(), once);
}

// rank 0: w (variable) and x (input) -> matmul -> y -> SEND to rank 1
// rank 1: RECV -> z -> relu -> out (2 slots: a pipeline boundary) -> sink
struct TwoRankPlan {
  HandPlan h;
  int64_t w, x, y, z, out, scratch;
  TwoRankPlan() {
    const int64_t var = h.task(0, proto::TaskProto::VARIABLE, "w");
    w = h.output(var, "w", 1000, 1, /*persistent=*/true);
    const int64_t input = h.task(0, proto::TaskProto::INPUT, "x");
    x = h.output(input, "x", 100);
    const int64_t mm = h.compute(0, "matmul");
    h.read(mm, x);
    h.read(mm, w);
    y = h.output(mm, "y", 50);
    const int64_t send = h.task(0, proto::TaskProto::SEND, "send_y", /*thread=*/1);
    h.find_task(send)->set_peer(1);
    h.find_task(send)->set_transfer_id(0);
    h.read(send, y);
    const int64_t recv = h.task(1, proto::TaskProto::RECV, "recv_y", /*thread=*/1);
    h.find_task(recv)->set_peer(0);
    h.find_task(recv)->set_transfer_id(0);
    z = h.output(recv, "z", 50);
    const int64_t relu = h.compute(1, "relu");
    h.read(relu, z);
    out = h.output(relu, "out", 50, /*register_num=*/2);
    const int64_t sink = h.task(1, proto::TaskProto::OUTPUT, "fetch");
    h.read(sink, out);
    const int64_t tail = h.compute(1, "tail");
    scratch = h.output(tail, "scratch", 8);
  }
};

// Allocations are 64-byte aligned; a block's size is the end of its last register.
int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

TEST(MemoryPlanning, RegistersThatLeaveTheChainGetTheirOwnAllocation) {
  TwoRankPlan p;
  plan_memory(&p.h.plan);
  EXPECT_EQ(p.h.find_register(p.w)->memory_block(), -1);    // persistent
  EXPECT_EQ(p.h.find_register(p.y)->memory_block(), -1);    // read by SEND
  EXPECT_EQ(p.h.find_register(p.z)->memory_block(), -1);    // written by RECV
  EXPECT_EQ(p.h.find_register(p.out)->memory_block(), -1);  // 2 slots
  EXPECT_GE(p.h.find_register(p.x)->memory_block(), 0);
  EXPECT_GE(p.h.find_register(p.scratch)->memory_block(), 0);
  EXPECT_NE(p.h.find_register(p.x)->memory_block(), p.h.find_register(p.scratch)->memory_block());
  // rank 0: block holds x (400); w 4000 and y 200 on their own.
  EXPECT_EQ(p.h.rank(0).peak_bytes(), 400 + aligned(4000) + aligned(200));
  EXPECT_EQ(p.h.rank(0).bytes_without_reuse(), aligned(400) + aligned(4000) + aligned(200));
  // rank 1: block holds scratch (32); z 200, out 2 x 200.
  EXPECT_EQ(p.h.rank(1).peak_bytes(), 32 + aligned(200) + 2 * aligned(200));
  EXPECT_EQ(p.h.rank(1).bytes_without_reuse(), aligned(32) + aligned(200) + 2 * aligned(200));
  EXPECT_EQ(count_overlap_violations(p.h.plan), 0);
}

// Note [Collective windows]: t0 -> g (gradient) -> all-reduce on thread 1 -> s -> t3, with t1,
// t2 on the chain in between. g is read by the collective no later than t3 and s written no
// earlier than t0: both share the block, with t1's and t2's registers placed around them.
// t0 -> g (100 floats) -> all-reduce on thread 1 -> s (100 floats); t1 -> a (`a_numel`) -> t2 on
// the chain meanwhile.
struct Window {
  int64_t t0, g, reduce, s, t1, a, t2;
};
Window all_reduce_beside_a_chain(HandPlan& h, int64_t a_numel) {
  Window w;
  w.t0 = h.compute(0, "t0");
  w.g = h.output(w.t0, "g", 100);
  w.reduce = h.task(0, proto::TaskProto::COLLECTIVE, "all_reduce", /*thread=*/1);
  h.read(w.reduce, w.g);
  w.s = h.output(w.reduce, "s", 100);
  w.t1 = h.compute(0, "t1");
  w.a = h.output(w.t1, "a", a_numel);
  w.t2 = h.compute(0, "t2");
  h.read(w.t2, w.a);
  return w;
}

TEST(MemoryPlanning, CollectiveRegistersShareMemoryWithinTheirWindow) {
  HandPlan h;
  const Window w = all_reduce_beside_a_chain(h, 50);
  const int64_t b = h.output(w.t2, "b", 50);
  const int64_t t3 = h.compute(0, "t3");
  h.read(t3, w.s);
  h.read(t3, b);
  h.output(t3, "out", 10);
  // A collective whose output no chain task reads has no bound: its registers stay apart.
  const int64_t lone = h.task(0, proto::TaskProto::COLLECTIVE, "lone", /*thread=*/1);
  h.read(lone, b);
  const int64_t unread = h.output(lone, "unread", 10);
  plan_memory(&h.plan);
  EXPECT_GE(h.find_register(w.g)->memory_block(), 0);
  EXPECT_GE(h.find_register(w.s)->memory_block(), 0);
  EXPECT_EQ(h.find_register(unread)->memory_block(), -1);
  EXPECT_EQ(h.find_register(b)->memory_block(), -1);  // read by the unbounded collective
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
}

// Note [Collective scratch]: the bounded all-reduce's working memory takes block memory for its
// window [t0, t3], beside what is live there; the unbounded collective's is its own, counted in
// the peak; planning it again gives the same plan.
TEST(MemoryPlanning, CollectiveScratchLivesInTheBlockForTheCollectivesWindow) {
  HandPlan h;
  const Window w = all_reduce_beside_a_chain(h, 300);
  const int64_t reduce = w.reduce, s = w.s;
  const int64_t t3 = h.compute(0, "t3");
  h.read(t3, s);
  const int64_t t4 = h.compute(0, "t4");
  const int64_t late = h.output(t4, "late", 300);  // after the window: may share with scratch
  const int64_t t5 = h.compute(0, "t5");
  h.read(t5, late);
  const int64_t lone = h.task(0, proto::TaskProto::COLLECTIVE, "lone", /*thread=*/1);
  h.read(lone, h.output(t5, "z", 10));
  h.output(lone, "unread", 10);
  proto::PlanProto without = h.plan;  // no scratch
  plan_memory(&without);
  h.find_task(reduce)->mutable_collective()->set_scratch_bytes(1000);
  h.find_task(lone)->mutable_collective()->set_scratch_bytes(500);
  plan_memory(&h.plan);
  const proto::CollectiveProto& bounded = h.find_task(reduce)->collective();
  const proto::CollectiveProto& unbounded = h.find_task(lone)->collective();
  EXPECT_TRUE(bounded.scratch_in_block());
  EXPECT_FALSE(unbounded.scratch_in_block());
  // Live with the scratch in [t0, t3]: g, s and a; late comes after and takes the scratch's
  // place.
  const proto::RegisterProto& late_reg = *h.find_register(late);
  EXPECT_EQ(late_reg.memory_block(), bounded.scratch_block());
  EXPECT_LT(late_reg.offset(), bounded.scratch_offset() + bounded.scratch_bytes());
  EXPECT_EQ(count_overlap_violations(h.plan), 0);
  // The unbounded scratch is memory of its own; the bounded one shares the block, which now
  // holds it beside g and a.
  const proto::RankPlanProto& rank = h.rank(0);
  EXPECT_GE(rank.peak_bytes(), without.ranks(0).peak_bytes() + aligned(500));
  EXPECT_GE(rank.memory_blocks(0).bytes(), 1000 + 400 + 400 + 1200);
  EXPECT_EQ(rank.bytes_without_reuse(),
            without.ranks(0).bytes_without_reuse() + aligned(1000) + aligned(500));
  const proto::PlanProto once = h.plan;
  plan_memory(&h.plan);
  EXPECT_EQ(h.plan.SerializeAsString(), once.SerializeAsString());
}

// The same independent check on whole compiled plans, where collectives (gradient reductions,
// ZeRO gathers with their control inputs, tensor-parallel all-reduces) share memory with the
// compute chain: every rank of DP2 x TP2, and of DP2 x TP2 x PP2 with micro-batches, at ZeRO
// stages 1 and 3.
TEST(MemoryPlanning, CompiledGptPlansNeverShareMemoryBetweenLiveRegisters) {
  for (const int stage : {1, 3}) {
    for (const bool stages : {false, true}) {
      GraphBuilder b("gpt_memory");
      const GptParallel parallel = stages
                                       ? GptParallel{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}
                                       : GptParallel{.dp = 2, .tp = 2};
      const int loss = build_gpt(b, testing::tiny_gpt_config(), parallel);
      b.set_loss(loss);
      b.fetch(loss);
      b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
      b.train().zero_stage = stage;
      const proto::PlanProto plan = compile_graph(std::move(b.graph()));
      int shared_collective_registers = 0;
      for (const auto& rp : plan.ranks()) {
        for (const auto& t : rp.tasks()) {
          if (t.kind() != proto::TaskProto::COLLECTIVE) continue;
          for (const auto& r : rp.registers()) {
            if (r.producer() == t.id() && r.memory_block() >= 0) ++shared_collective_registers;
          }
        }
      }
      if (!stages) {
        EXPECT_GT(shared_collective_registers, 0) << "stage " << stage;
      }
      EXPECT_EQ(count_overlap_violations(plan), 0) << "stage " << stage << " pp " << stages;
    }
  }
}

// Rank 0's planned peak at ZeRO stages 0..3 of a GPT whose weights outweigh its activations,
// DP2, AdamW, with `micro` micro-batches (of one sequence per rank under accumulation).
std::vector<int64_t> zero_stage_peaks(int micro) {
  GptConfig config = testing::tiny_gpt_config(/*n_layer=*/4);
  config.n_embd = 128;
  config.vocab_size = 64;
  if (micro > 1) config.batch_size = 2 * micro;
  std::vector<int64_t> peaks;
  for (const int stage : {0, 1, 2, 3}) {
    GraphBuilder b("gpt_zero");
    const int loss = build_gpt(b, config, GptParallel{.dp = 2, .micro_batches = micro});
    b.set_loss(loss);
    b.fetch(loss);
    b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
    b.train().zero_stage = stage;
    const proto::PlanProto plan = compile_graph(std::move(b.graph()));
    EXPECT_EQ(count_overlap_violations(plan), 0) << "stage " << stage << " micro " << micro;
    peaks.push_back(plan.ranks(0).peak_bytes());
  }
  return peaks;
}

// The ZeRO stages lower each rank's planned peak in the textbook's order: optimizer state
// sharded (1), then gradients reduce-scattered as the backward makes them (2: Note [Pacing
// ZeRO-2 reductions], without which every whole gradient lived to the end of the backward and
// stage 2 planned more than stage 1), then parameters (3). The same under gradient
// accumulation (4 micro-batches): the gradients of ZeRO-2 and -3 go to their shards every
// micro-batch and accumulate there (Note [Sharded gradients under accumulation]); summed whole
// once per step instead, stage 2 planned more than stage 1.
TEST(MemoryPlanning, ZeroStagesLowerThePlannedPeakInOrder) {
  for (const int micro : {1, 4}) {
    const std::vector<int64_t> peaks = zero_stage_peaks(micro);
    // Stage 3 below stage 1; at this size its gathered parameters (each gathered for its
    // forward and again for its backward readers) keep it above stage 2.
    EXPECT_GT(peaks[0], peaks[1]) << "micro " << micro;
    EXPECT_GT(peaks[1], peaks[2]) << "micro " << micro;
    EXPECT_GT(peaks[1], peaks[3]) << "micro " << micro;
  }
}

// Note [Sharded gradients under accumulation]: under ZeRO-2 and -3 with micro-batches each
// rank accumulates its shards of the gradients, half of them on DP2, whatever reads them after
// (clipping, loss scaling: one accumulator per gradient, not one per reader) and in whatever
// dtype they are reduced; stage 1 accumulates whole gradients (reduced once per step).
TEST(MemoryPlanning, ShardedGradientsAccumulateAsShards) {
  GptConfig config = testing::tiny_gpt_config(/*n_layer=*/2);
  config.n_embd = 64;
  config.vocab_size = 64;
  config.batch_size = 8;
  struct Variant {
    bool clip, loss_scale, bf16_reduction;
  };
  for (const Variant v :
       {Variant{false, false, false}, Variant{true, true, false}, Variant{true, false, true}}) {
    std::map<int, int64_t> accumulated;  // stage -> bytes of rank 0's gradient accumulators
    for (const int stage : {1, 2, 3}) {
      GraphBuilder b("gpt_accumulated");
      const int loss = build_gpt(b, config, GptParallel{.dp = 2, .micro_batches = 4});
      b.set_loss(loss);
      b.fetch(loss);
      b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
      if (v.clip) b.train().optimizer.clip_grad_max_norm = 1.0;
      if (v.loss_scale) b.train().dynamic_loss_scale.init_scale = 1024;
      if (v.bf16_reduction) b.train().grad_reduce_dtype = DataType::kBFloat16;
      b.train().zero_stage = stage;
      const proto::PlanProto plan = compile_graph(std::move(b.graph()));
      const auto& rank = plan.ranks(0);
      std::map<int64_t, const proto::RegisterProto*> registers;
      for (const auto& r : rank.registers()) registers[r.id()] = &r;
      for (const auto& t : rank.tasks()) {  // the gradients are what is accumulated here
        if (t.kind() == proto::TaskProto::ACCUMULATE) {
          accumulated[stage] += registers.at(t.outputs(0))->bytes();
        }
      }
    }
    const std::string what =
        str_cat("clip ", v.clip, " loss scale ", v.loss_scale, " bf16 ", v.bf16_reduction);
    ASSERT_GT(accumulated[1], 0) << what;
    EXPECT_LT(accumulated[2], accumulated[1] * 6 / 10) << what;
    EXPECT_LT(accumulated[3], accumulated[1] * 6 / 10) << what;
  }
}

// Note [Buckets under accumulation]: with micro-batches each flat gradient accumulates in its
// run of the bucket (an in-place concat of the ACCUMULATE outputs); with or without them each
// bucket is reduced in place (Note [All-reduces in place]) and its gradients are views of it.
// The plan stays free of overlaps, and at the step's peak the gradients take about one whole
// gradient (the accumulators, the buckets' copies and the reductions' results were 2.1 here
// before, 2.7 on the GPT of docs/benchmarks.md).
TEST(MemoryPlanning, UnderAccumulationTheBucketsAreTheAccumulatorsAndAreReducedInPlace) {
  GptConfig config = testing::tiny_gpt_config(/*n_layer=*/4);
  config.n_embd = 128;
  config.vocab_size = 64;
  config.batch_size = 8;
  for (const int micro : {1, 4}) {
    GraphBuilder b("gpt_buckets");
    const int loss = build_gpt(b, config, GptParallel{.dp = 2, .micro_batches = micro});
    b.set_loss(loss);
    b.fetch(loss);
    b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
    b.train().gradient_bucket_bytes = 64 << 10;  // several buckets at this size
    Graph logical;
    const proto::PlanProto plan = compile_graph(std::move(b.graph()), {}, &logical);
    EXPECT_EQ(count_overlap_violations(plan), 0) << "micro-batches " << micro;
    const proto::RankPlanProto& rank = plan.ranks(0);
    std::map<int64_t, const proto::TaskProto*> producers;
    for (const proto::TaskProto& task : rank.tasks()) {
      for (int64_t out : task.outputs()) producers[out] = &task;
    }
    int reduced = 0;
    for (const proto::TaskProto& task : rank.tasks()) {
      if (task.kind() != proto::TaskProto::COLLECTIVE || task.name().rfind("grad_bucket", 0) != 0) {
        continue;
      }
      ++reduced;
      EXPECT_TRUE(task.view()) << task.name() << ": an all-reduce in place";
      const proto::TaskProto& bucket = *producers.at(task.inputs(0));
      EXPECT_EQ(bucket.kind(), proto::TaskProto::CONCAT) << bucket.name();
      // Without micro-batches its pieces are the gradients' flat views: it copies them (Note
      // [Concats in place] says why it does not look through them).
      EXPECT_EQ(bucket.in_place(), micro > 1) << bucket.name();
      if (micro == 1) continue;
      for (int64_t piece : bucket.inputs()) {
        EXPECT_EQ(producers.at(piece)->kind(), proto::TaskProto::ACCUMULATE) << bucket.name();
      }
    }
    EXPECT_GT(reduced, 2) << "micro-batches " << micro;
    const RankMemoryReport report = memory_report(plan, memory_kinds(logical)).at(0);
    EXPECT_LT(report.by_kind.at("gradients"), report.by_kind.at("parameters") * 115 / 100)
        << "micro-batches " << micro << ": " << memory_report_to_text({report});
    // The model states' own high-water mark: at least what is live at the peak, at least the
    // parameters, Adam's two moments and one whole gradient (all live before the update), at
    // most the live peak.
    const auto& at_peak = report.by_kind;
    EXPECT_GE(report.model_states_peak,
              at_peak.at("parameters") + at_peak.at("optimizer state") + at_peak.at("gradients"));
    EXPECT_GE(report.model_states_peak, at_peak.at("parameters") * 4);
    EXPECT_LE(report.model_states_peak, report.live_peak);
    EXPECT_FALSE(report.model_states_task.empty());
  }
}

TEST(MemoryPlanning, ExceedingTheMemoryLimitNamesTheRankAndItsLargestRegisters) {
  TwoRankPlan p;
  try {
    plan_memory(&p.h.plan, /*memory_limit_bytes=*/1000);
    FAIL() << "expected a memory limit error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    const std::string message = e.what();
    EXPECT_NE(message.find("got rank 0 at a peak of 4688 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("limit of 1000 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("'w' (1000,) float32 4000 bytes"), std::string::npos) << message;
    EXPECT_EQ(message.find("rank 1"), std::string::npos) << message;  // 800 bytes fit
  }
  EXPECT_NO_THROW(plan_memory(&p.h.plan, /*memory_limit_bytes=*/4688));
}

// Note [Attention workspace]: a host attention's tiles on this process's kernel threads are
// kernel workspace, the larger of its forward's and its backward's, in the dtype the kernels
// run: float32, and bfloat16 under mixed precision; also with a mask (the grads read dout, q,
// k, v, ...: q is their second input; the mask comes last); sequence-first too, whose shapes
// are read in its layout (Note [Sequence-first attention]).
TEST(MemoryReport, AHostAttentionsTilesAreKernelWorkspace) {
  const Shape qs{2, 4, 130, 8}, ks{2, 2, 200, 8}, vs{2, 2, 200, 6};
  const auto swapped = [](const Shape& s) { return Shape{s[0], s[2], s[1], s[3]}; };
  const Initializer init{Initializer::Kind::kNormal, 0, 0.1, 1};
  for (const DataType amp : {DataType::kFloat32, DataType::kBFloat16}) {
    for (const int variant : {0, 1, 2}) {
      const bool masked = variant == 1, sequence_first = variant == 2;
      GraphBuilder b("attention");
      const auto layout = [&](const Shape& s) { return sequence_first ? swapped(s) : s; };
      const int q = b.variable("q", layout(qs), init), k = b.variable("k", layout(ks), init),
                v = b.variable("v", layout(vs), init);
      std::vector<int> inputs = {q, k, v};
      if (masked) inputs.push_back(b.input("mask", Shape{130, 200}));
      const std::vector<int> out =
          b.op(masked ? "scaled_dot_product_attention_masked" : "scaled_dot_product_attention",
               AttentionParams{0.3, !masked, sequence_first}, inputs, "attention");
      b.set_loss(b.op1("reduce_mean", ReduceParams{}, {out[0]}));
      b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
      b.train().amp_dtype = amp;  // float32: no mixed precision
      Graph logical;
      const proto::PlanProto plan = compile_graph(std::move(b.graph()), {}, &logical);
      const RankMemoryReport report = memory_report(plan, memory_kinds(logical)).at(0);
      const AttentionDims d = attention_dims(qs, ks, vs);
      const int threads = omp_get_max_threads();
      const int64_t attention =
          std::max(cpu::attention_workspace_bytes(false, amp, d, !masked, threads),
                   cpu::attention_workspace_bytes(true, amp, d, !masked, threads));
      const std::string what = str_cat(dtype_name(amp), masked ? " masked" : "",
                                       sequence_first ? " sequence-first" : "");
      // Nothing else in this plan takes workspace but the widening arena where bfloat16 widens.
      if (amp == DataType::kFloat32 || cpu::bf16_tiles::available()) {
        EXPECT_EQ(report.workspace, attention) << what;
      } else {
        EXPECT_GT(report.workspace, attention) << what << " (widened)";
      }
    }
  }
}

TEST(MemoryPlanning, MemoryBlockIdsAreUniqueAcrossRanks) {
  TwoRankPlan p;
  plan_memory(&p.h.plan);
  ASSERT_EQ(p.h.rank(0).memory_blocks_size(), 1);
  ASSERT_EQ(p.h.rank(1).memory_blocks_size(), 1);
  EXPECT_NE(p.h.rank(0).memory_blocks(0).id(), p.h.rank(1).memory_blocks(0).id());
}

TEST(MemoryPlanning, RegisterBytesAreComputedFromShapeAndDtypeWhenMissing) {
  HandPlan h = five_task_chain({6, 6});
  h.find_register(0)->set_bytes(0);
  h.find_register(0)->set_dtype("float64");
  plan_memory(&h.plan);
  EXPECT_EQ(h.find_register(0)->bytes(), 48);
  EXPECT_EQ(h.rank(0).bytes_without_reuse(), aligned(48) + aligned(24));
}

TEST(MemoryPlanning, ChainOrderThatContradictsTransfersIsReportedAsACycle) {
  // rank 0 runs x (needs rank 1's w) before y; rank 1 runs z (needs rank 0's y) before w.
  // Data alone is acyclic; chaining x -> y and z -> w closes a cycle.
  HandPlan h;
  const int64_t recv0 = h.task(0, proto::TaskProto::RECV, "recv_w", 1);
  h.find_task(recv0)->set_transfer_id(1);
  h.find_task(recv0)->set_peer(1);
  const int64_t w_copy = h.output(recv0, "w_copy", 4);
  const int64_t x = h.compute(0, "x");
  h.read(x, w_copy);
  const int64_t y = h.compute(0, "y");
  const int64_t ry = h.output(y, "ry", 4);
  const int64_t send0 = h.task(0, proto::TaskProto::SEND, "send_y", 1);
  h.find_task(send0)->set_transfer_id(0);
  h.find_task(send0)->set_peer(1);
  h.read(send0, ry);
  const int64_t recv1 = h.task(1, proto::TaskProto::RECV, "recv_y", 1);
  h.find_task(recv1)->set_transfer_id(0);
  h.find_task(recv1)->set_peer(0);
  const int64_t y_copy = h.output(recv1, "y_copy", 4);
  const int64_t z = h.compute(1, "z");
  h.read(z, y_copy);
  const int64_t w = h.compute(1, "w");
  const int64_t rw = h.output(w, "rw", 4);
  const int64_t send1 = h.task(1, proto::TaskProto::SEND, "send_w", 1);
  h.find_task(send1)->set_transfer_id(1);
  h.find_task(send1)->set_peer(0);
  h.read(send1, rw);
  plan_memory(&h.plan);  // the plan contract, checked after memory planning, finds the cycle
  try {
    check_plan_contract(h.plan);
    FAIL() << "expected a cycle";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("'x' (task"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("on rank 0) waits for"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ofl::compiler::physical
