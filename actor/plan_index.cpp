// PlanIndex (see the header): every check that a plan is well formed, done once when it is
// loaded, so the executors only move data. The checks of each task kind's registers are in
// plan_task_checks.cpp.

#include "actor/plan_index.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = kPlanTag;
using Kind = proto::TaskProto::Kind;

std::string kind_name(Kind kind) {
  const std::string& name = proto::TaskProto::Kind_Name(kind);
  return name.empty() ? str_cat("kind ", static_cast<int>(kind)) : name;
}

}  // namespace

PlanIndex::PlanIndex(const proto::PlanProto& plan, PlanIndexOptions options) {
  OFL_CHECK(plan.micro_batches() >= 0, kTag,
            "a plan must have a non-negative micro_batches. However, got ", plan.micro_batches(),
            ".");
  OFL_CHECK(plan.pipeline_depth() >= 0, kTag,
            "a plan must have a non-negative pipeline_depth. However, got ", plan.pipeline_depth(),
            ".");
  cpu_kernels_ = options.cpu_kernels;
  micro_batches_ = std::max(1, plan.micro_batches());
  pipeline_depth_ = std::max(1, plan.pipeline_depth());
  check_plan_contract(plan, PlanContractOptions{options.check_acyclic});
  index_plan(plan);
  for (int t = 0; t < num_tasks(); ++t) check_task(plan, t);
  link_transfers();
  link_collectives();
  check_pieces(inputs_by_name_, "INPUT");
  check_pieces(outputs_by_name_, "OUTPUT");
  check_pieces(variables_by_name_, "VARIABLE");
  compute_predecessors();
  // A topological order; with check_acyclic off, the tasks on and behind a cycle are left out
  // of it (the watchdog will meet them).
  check_micro_batch_edges(order_tasks(std::vector<bool>(tasks_.size(), true)));
}

int PlanIndex::task_index(int64_t id) const {
  auto it = task_index_.find(id);
  return it == task_index_.end() ? -1 : it->second;
}

int PlanIndex::register_index(int64_t id) const {
  auto it = register_index_.find(id);
  return it == register_index_.end() ? -1 : it->second;
}

// Copies tasks and registers out of the plan in (rank, position) order and resolves ids.
void PlanIndex::index_plan(const proto::PlanProto& plan) {
  std::vector<const proto::RankPlanProto*> ranks;
  for (const proto::RankPlanProto& rank : plan.ranks()) ranks.push_back(&rank);
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int64_t rank = ranks[i]->rank();
    OFL_CHECK(i == 0 || ranks[i - 1]->rank() != rank, kTag,
              "a plan must hold each rank once. However, got rank ", rank, " twice.");
    OFL_CHECK(rank >= 0 && (plan.world_size() == 0 || rank < plan.world_size()), kTag,
              "ranks must be in [0, world_size). However, got rank ", rank, " with world_size ",
              plan.world_size(), ".");
    ranks_.push_back(rank);
  }
  world_size_ = plan.world_size() > 0 || ranks_.empty() ? plan.world_size() : ranks_.back() + 1;

  for (const proto::RankPlanProto* rank : ranks) {
    for (const proto::MemoryBlockProto& block : rank->memory_blocks()) {
      OFL_CHECK(block.bytes() >= 0, kTag, "memory block ", block.id(), " on rank ", rank->rank(),
                " must have a non-negative size. However, got ", block.bytes(), " bytes.");
      OFL_CHECK(memory_blocks_
                    .emplace(std::make_pair(rank->rank(), block.id()),
                             MemoryBlockInfo{block.bytes(), block.device()})
                    .second,
                kTag, "memory block ids must be unique on a rank. However, got block ", block.id(),
                " twice on rank ", rank->rank(), ".");
    }
  }
  for (const proto::RankPlanProto* rank : ranks) {
    for (const proto::RegisterProto& reg : rank->registers()) {
      OFL_CHECK(register_index_.emplace(reg.id(), registers_.size()).second, kTag,
                "register ids must be unique. However, got id ", reg.id(), " twice (register '",
                register_name_of(*rank, reg), "' on rank ", rank->rank(), ").");
      RegisterInfo info;
      info.proto = reg;
      info.rank = rank->rank();
      info.shape = from_proto(reg.shape());
      try {
        info.dtype = dtype_from_name(reg.dtype());
      } catch (const Error& e) {
        throw_error(e.code(), str_cat(kTag, "register '", register_name_of(*rank, reg), "' (id ",
                                      reg.id(), ") needs a known dtype. ", e.what()));
      }
      // Slot numbers travel in ActorMessage::slot (16 bits).
      OFL_CHECK(reg.register_num() <= std::numeric_limits<int16_t>::max(), kTag, "register '",
                register_name_of(*rank, reg), "' may have at most ",
                std::numeric_limits<int16_t>::max(), " slots. However, it has ", reg.register_num(),
                ".");
      for (int64_t d : info.shape.dims()) {
        OFL_CHECK(d >= 0, kTag, "register '", register_name_of(*rank, reg),
                  "' must have a non-negative shape. However, got ", info.shape.to_string(), ".");
      }
      const int64_t needed = info.shape.numel() * static_cast<int64_t>(dtype_size(info.dtype));
      OFL_CHECK(reg.bytes() == 0 || reg.bytes() >= needed, kTag, "register '",
                register_name_of(*rank, reg),
                "' must have room for its shape. However, got bytes=", reg.bytes(), " for ",
                info.shape.to_string(), " ", dtype_name(info.dtype), " (", needed, " bytes).");
      if (reg.memory_block() >= 0) {  // shares a block: one slot, inside the block
        auto block = memory_blocks_.find({rank->rank(), reg.memory_block()});
        OFL_CHECK(block != memory_blocks_.end(), kTag, "register '", register_name_of(*rank, reg),
                  "' must be in a memory block of its rank. However, rank ", rank->rank(),
                  " has no block ", reg.memory_block(), ".");
        OFL_CHECK(reg.register_num() <= 1, kTag, "register '", register_name_of(*rank, reg),
                  "' must have one slot to share memory block ", reg.memory_block(),
                  ". However, it has ", reg.register_num(), ".");
        OFL_CHECK(reg.offset() >= 0 && reg.offset() + needed <= block->second.bytes, kTag,
                  "register '", register_name_of(*rank, reg), "' must lie inside memory block ",
                  reg.memory_block(), " (", block->second.bytes,
                  " bytes). However, it takes bytes [", reg.offset(), ", ", reg.offset() + needed,
                  ").");
        OFL_CHECK(reg.device() == block->second.device, kTag, "register '",
                  register_name_of(*rank, reg),
                  "' must share a memory block of its own device. However, it is in ",
                  proto::PlanDevice_Name(reg.device()), " memory and block ", reg.memory_block(),
                  " in ", proto::PlanDevice_Name(block->second.device), " memory.");
      }
      registers_.push_back(std::move(info));
    }
  }

  for (const proto::RankPlanProto* rank : ranks) {
    for (const proto::TaskProto& task : rank->tasks()) {
      OFL_CHECK(task_index_.emplace(task.id(), tasks_.size()).second, kTag,
                "task ids must be unique. However, got id ", task.id(), " twice (task '",
                task.name(), "' on rank ", rank->rank(), ").");
      OFL_CHECK(task.rank() == rank->rank(), kTag, "task '", task.name(), "' (id ", task.id(),
                ") must name the rank that holds it. However, got rank ", task.rank(),
                " inside the plan of rank ", rank->rank(), ".");
      TaskInfo info;
      info.proto = task;
      tasks_.push_back(std::move(info));
    }
  }

  // Resolve register ids; each register has one producer, which it names, and on its rank.
  auto resolve = [&](int t, int64_t id, const char* role) {
    auto it = register_index_.find(id);
    OFL_CHECK(it != register_index_.end(), kTag, describe_task(t), " ", role, " register id ", id,
              ", which the plan does not have.");
    OFL_CHECK(registers_[it->second].rank == tasks_[t].proto.rank(), kTag, describe_task(t),
              " must use registers of its own rank. However, its ", role, " ",
              describe_register(it->second), " is on rank ", registers_[it->second].rank, ".");
    return it->second;
  };
  std::vector<std::set<int64_t>> consumers(registers_.size());
  for (int t = 0; t < static_cast<int>(tasks_.size()); ++t) {
    TaskInfo& task = tasks_[t];
    for (int64_t id : task.proto.inputs()) {
      const int r = resolve(t, id, "reads");
      task.inputs.push_back(r);
      consumers[r].insert(task.proto.id());
    }
    for (int64_t id : task.proto.outputs()) {
      const int r = resolve(t, id, "writes");
      task.outputs.push_back(r);
      OFL_CHECK(registers_[r].producer == -1, kTag, describe_register(r),
                " must have one producer. However, it is written by ",
                describe_task(registers_[r].producer), " and ", describe_task(t), ".");
      registers_[r].producer = t;
    }
  }
  for (int r = 0; r < static_cast<int>(registers_.size()); ++r) {
    const RegisterInfo& reg = registers_[r];
    OFL_CHECK(reg.producer >= 0, kTag, describe_register(r),
              " must be written by a task. However, no task lists it as an output.");
    OFL_CHECK(reg.proto.producer() == tasks_[reg.producer].proto.id(), kTag, describe_register(r),
              " must name its producer. However, it names task id ", reg.proto.producer(),
              " while it is written by ", describe_task(reg.producer), ".");
    const std::set<int64_t> listed(reg.proto.consumers().begin(), reg.proto.consumers().end());
    if (listed != consumers[r]) {
      std::string want, got;
      for (int64_t id : consumers[r]) want += str_cat(want.empty() ? "" : ", ", id);

      OFL_CHECK(false, kTag, describe_register(r),
                " must list the tasks that read it as consumers ([", want, "]). However, got [",
                got, "].");
    }
  }
}

bool PlanIndex::has_rank(int64_t rank) const {
  return std::binary_search(ranks_.begin(), ranks_.end(), rank);
}

// Each RECV's SEND, when both are in this plan (the plan contract checked that they match).
// Pairs every SEND with one RECV: same transfer_id, each naming the other's rank, same data.
void PlanIndex::link_transfers() {
  std::map<int64_t, int> sends;  // transfer_id -> task
  for (int t = 0; t < static_cast<int>(tasks_.size()); ++t) {
    if (tasks_[t].proto.kind() == proto::TaskProto::SEND) sends[tasks_[t].proto.transfer_id()] = t;
  }
  for (TaskInfo& recv : tasks_) {
    if (recv.proto.kind() != proto::TaskProto::RECV || !has_rank(recv.proto.peer())) continue;
    recv.send = sends.at(recv.proto.transfer_id());
  }
}

// Each COLLECTIVE's member tasks in this plan, by member index (the plan contract checked that
// a collective has one task per member, all naming the same members).
void PlanIndex::link_collectives() {
  std::map<int64_t, std::vector<int>> members;  // collective_id -> tasks by member index
  for (int t = 0; t < num_tasks(); ++t) {
    const TaskInfo& task = tasks_[t];
    if (task.proto.kind() != proto::TaskProto::COLLECTIVE) continue;
    std::vector<int>& list = members[task.proto.collective().collective_id()];
    list.resize(task.proto.collective().members_size(), -1);
    list[task.member_index] = t;
  }
  for (TaskInfo& task : tasks_) {
    if (task.proto.kind() != proto::TaskProto::COLLECTIVE) continue;
    task.peers = members.at(task.proto.collective().collective_id());
    const int first =
        *std::find_if(task.peers.begin(), task.peers.end(), [](int peer) { return peer >= 0; });
    for (int peer : task.peers) {
      if (peer < 0) continue;
      OFL_CHECK(tasks_[peer].proto.per_micro_batch() == task.proto.per_micro_batch(), kTag,
                "the members of collective ", task.proto.collective().collective_id(),
                " must all act once per micro-batch or all once per iteration. However, ",
                describe_task(first), " and ", describe_task(peer), " differ.");
    }
  }
}

// The pieces of one logical tensor agree on its logical shape and dtype (and initializer).
void PlanIndex::check_pieces(const NameIndex& pieces, const char* kind) const {
  for (const auto& [name, tasks] : pieces) {
    const TaskInfo& first = tasks_[tasks[0]];
    auto dtype_of_piece = [&](const TaskInfo& task) {
      return registers_[task.inputs.empty() ? task.outputs[0] : task.inputs[0]].dtype;
    };
    bool contributes = false;
    for (int t : tasks) {
      const TaskInfo& task = tasks_[t];
      OFL_CHECK(task.logical_shape == first.logical_shape &&
                    dtype_of_piece(task) == dtype_of_piece(first),
                kTag, "the ", kind, " pieces of '", name,
                "' must agree on the logical shape and dtype. However, ", describe_task(tasks[0]),
                " has ", first.logical_shape.to_string(), " ", dtype_name(dtype_of_piece(first)),
                " and ", describe_task(t), " has ", task.logical_shape.to_string(), " ",
                dtype_name(dtype_of_piece(task)), ".");
      const proto::InitializerProto& a = first.proto.initializer();
      const proto::InitializerProto& b = task.proto.initializer();
      OFL_CHECK(a.kind() == b.kind() && a.a() == b.a() && a.b() == b.b() && a.seed() == b.seed(),
                kTag, "the ", kind, " pieces of '", name, "' must have one initializer. However, ",
                describe_task(tasks[0]), " and ", describe_task(t), " differ.");
      OFL_CHECK(task.micro_batched == first.micro_batched, kTag, "the ", kind, " pieces of '", name,
                "' must all be unpacked into micro-batches or none. However, ",
                describe_task(tasks[0]), (first.micro_batched ? " is" : " is not"), " and ",
                describe_task(t), (task.micro_batched ? " is" : " is not"), ".");
      contributes = contributes || task.proto.contributes();
    }
    // Note [Partial plans]: the contributing piece may be in another process's part.
    const bool whole_job = static_cast<int64_t>(ranks_.size()) == world_size_;
    OFL_CHECK(std::string(kind) != "OUTPUT" || contributes || !whole_job, kTag,
              "some OUTPUT piece of '", name,
              "' must contribute to the fetched value. However, none of its ", tasks.size(),
              " pieces does.");
  }
}

// Every task's predecessors: the producers of its input registers, its control inputs, for a
// RECV the SEND with its transfer_id, and for a COLLECTIVE the producers of the other present
// members' inputs and their control inputs (Note [Collective order] in
// oneflowlike/plan_contract.h).
void PlanIndex::compute_predecessors() {
  predecessors_.assign(tasks_.size(), {});
  for (int t = 0; t < num_tasks(); ++t) {
    const TaskInfo& task = tasks_[t];
    for (int r : task.inputs) {
      predecessors_[t].push_back(Edge{registers_[r].producer, EdgeKind::kData, r});
    }
    for (int64_t id : task.proto.control_inputs()) {
      auto it = task_index_.find(id);
      OFL_CHECK(it != task_index_.end(), kTag, describe_task(t), " has control input task id ", id,
                ", which the plan does not have.");
      predecessors_[t].push_back(Edge{it->second, EdgeKind::kControl, -1});
    }
    if (task.send >= 0) predecessors_[t].push_back(Edge{task.send, EdgeKind::kTransfer, -1});
    for (int peer : task.peers) {  // a collective acts once every member's input is written
      if (peer < 0 || peer == t) continue;
      if (!tasks_[peer].inputs.empty()) {  // a broadcast's members but the root read none
        const int in = tasks_[peer].inputs[0];
        predecessors_[t].push_back(Edge{registers_[in].producer, EdgeKind::kCollective, in});
      }
      // ... and every member's control inputs have acted (a gather of updated ZeRO shards waits
      // for each rank's update: Note [ZeRO stages 1 and 2] in compiler/passes/zero.cpp).
      for (int64_t id : tasks_[peer].proto.control_inputs()) {
        const auto it = task_index_.find(id);
        if (it != task_index_.end()) {
          predecessors_[t].push_back(Edge{it->second, EdgeKind::kControl, -1});
        }
      }
    }
  }
}

// Predecessors outside `member` count as acted.
std::vector<int> PlanIndex::order_tasks(const std::vector<bool>& member) const {
  const int n = num_tasks();
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);  // counted with repeats
  for (int t = 0; t < n; ++t) {
    if (!member[t]) continue;
    for (const Edge& e : predecessors_[t]) {
      if (!member[e.from]) continue;
      successors[e.from].push_back(t);
      ++waiting[t];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int t = 0; t < n; ++t) {
    if (member[t] && waiting[t] == 0) ready.push(t);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int t = ready.top();
    ready.pop();
    order.push_back(t);
    for (int s : successors[t]) {
      if (--waiting[s] == 0) ready.push(s);
    }
  }
  return order;
}

// Note [Micro-batches] in plan.proto: data enters the micro-batch part only through UNPACK and
// REPEAT and leaves it only through ACCUMULATE and PACK, whose outputs are complete only after
// the last micro-batch. A control input on a per-micro-batch task carries no data: it orders the
// once task after the last micro-batch (an in-place update after every micro-batch's REPEAT of
// the variable). Sets after_micro_batches on the once tasks that so depend on the micro-batch
// part; they run after it. `order` is a topological order of the tasks to check.
void PlanIndex::check_micro_batch_edges(const std::vector<int>& order) {
  auto is = [&](int t, Kind a, Kind b) {
    const Kind kind = tasks_[t].proto.kind();
    return kind == a || kind == b;
  };
  auto after = [&](int t) { return tasks_[t].after_micro_batches; };
  std::vector<std::string> why(tasks_.size());  // after(t): the edge that put t after
  for (int t : order) {
    for (const Edge& e : predecessors_[t]) {
      const int p = e.from;
      const bool leaves = is(p, proto::TaskProto::ACCUMULATE, proto::TaskProto::PACK);
      const bool enters = is(t, proto::TaskProto::UNPACK, proto::TaskProto::REPEAT);
      const bool control = e.kind == EdgeKind::kControl;
      if (per_micro(p) && !per_micro(t)) {
        OFL_CHECK(leaves || control, kTag,
                  "a once-per-iteration task may depend on a per-micro-batch task only through ",
                  "ACCUMULATE or PACK (or a control input). However, ", describe_edge(t, e), ".");
      } else if (per_micro(p) && per_micro(t)) {
        // A control input orders the two within one micro-batch (ACCUMULATE acts every
        // micro-batch); only reading the accumulated register must wait for the last one.
        OFL_CHECK(!leaves || control, kTag,
                  "only once-per-iteration tasks may read ACCUMULATE or PACK outputs ",
                  "(their output is complete after the last micro-batch). However, ",
                  describe_edge(t, e), ".");
        OFL_CHECK(
            !enters || control, kTag,
            "UNPACK and REPEAT must read the register of a once-per-iteration task. However, ",
            describe_edge(t, e), ".");
      } else if (!per_micro(p) && per_micro(t)) {
        OFL_CHECK(enters || control, kTag,
                  "a per-micro-batch task may read a once-per-iteration task's register only ",
                  "through UNPACK or REPEAT. However, ", describe_edge(t, e), ".");
        OFL_CHECK(!after(p), kTag,
                  "a per-micro-batch task must not wait for a once-per-iteration task that runs ",
                  "after the micro-batches. However, ", describe_edge(t, e), ", which runs after ",
                  "them because ", why[p], ".");
      }
      if (!per_micro(t) && !after(t) && (per_micro(p) || after(p))) {
        tasks_[t].after_micro_batches = true;
        why[t] = describe_edge(t, e);
      }
    }
  }
}

std::string PlanIndex::describe_task(int task) const {
  const proto::TaskProto& p = tasks_[task].proto;
  std::string kind = kind_name(p.kind());
  if (p.kind() == proto::TaskProto::COMPUTE) kind += " " + p.op_type();
  if (p.kind() == proto::TaskProto::COLLECTIVE) {
    kind += str_cat(" ", collective_op_name(p.collective().op()));
  }
  if (p.per_micro_batch()) kind += ", per micro-batch";
  return str_cat("task '", p.name(), "' (id ", p.id(), ", rank ", p.rank(), ", ", kind, ")");
}

// "task 'a' (...) reads register 'r' (id 3) of task 'b' (...)"
std::string PlanIndex::describe_edge(int task, const Edge& edge) const {
  switch (edge.kind) {
    case EdgeKind::kData:
      return str_cat(describe_task(task), " reads ", describe_register(edge.reg), " of ",
                     describe_task(edge.from));
    case EdgeKind::kControl:
      return str_cat(describe_task(task), " has a control input on ", describe_task(edge.from));
    case EdgeKind::kTransfer:
      return str_cat(describe_task(task), " receives from ", describe_task(edge.from));
    case EdgeKind::kCollective: {
      const TaskInfo& t = tasks_[task];
      int peer = -1;
      for (int p : t.peers) {
        if (p >= 0 && p != task && !tasks_[p].inputs.empty() && tasks_[p].inputs[0] == edge.reg) {
          peer = p;
        }
      }
      return str_cat(describe_task(task), " runs collective ", t.proto.collective().collective_id(),
                     " with ", peer >= 0 ? describe_task(peer) : std::string("another member"),
                     ", which reads ", describe_register(edge.reg), " of ",
                     describe_task(edge.from));
    }
  }
  return "";
}

std::string PlanIndex::describe_register(int reg) const {
  const RegisterInfo& info = registers_[reg];
  const proto::TaskProto* producer = info.producer >= 0 ? &tasks_[info.producer].proto : nullptr;
  return str_cat("register '", register_name_of(producer, info.proto), "' (id ", info.proto.id(),
                 ")");
}

}  // namespace ofl::actor
