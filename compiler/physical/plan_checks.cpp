#include "compiler/physical/plan_checks.h"

#include <algorithm>
#include <map>

#include "oneflowlike/common/error.h"

namespace ofl::compiler::physical {

namespace {

struct TaskRef {
  const proto::TaskProto* task;
  int64_t rank;
};

std::string describe(const TaskRef& t) {
  return str_cat("'", t.task->name(), "' (task ", t.task->id(), " on rank ", t.rank, ")");
}

#define OFL_PLAN_CHECK(cond, ...) \
  OFL_CHECK_CODE(cond, ::ofl::ErrorCode::kFailedPrecondition, "[plan check] ", __VA_ARGS__)

}  // namespace

void check_plan(const proto::PlanProto& plan) {
  std::map<int64_t, TaskRef> tasks;
  std::map<int64_t, std::pair<const proto::RegisterProto*, int64_t>> registers;  // id -> (reg, rank)
  for (const auto& rank : plan.ranks()) {
    for (const auto& t : rank.tasks()) tasks[t.id()] = TaskRef{&t, rank.rank()};
    for (const auto& r : rank.registers()) registers[r.id()] = {&r, rank.rank()};
  }
  // Registers stay on their rank.
  for (const auto& [id, entry] : registers) {
    const auto& [reg, rank] = entry;
    OFL_PLAN_CHECK(reg->register_num() >= 1, "register '", reg->name(), "' on rank ", rank,
                   " has no slot (register_num ", reg->register_num(), ").");
    auto producer = tasks.find(reg->producer());
    OFL_PLAN_CHECK(producer != tasks.end() && producer->second.rank == rank, "register '",
                   reg->name(), "' on rank ", rank, " is not produced by a task of its rank.");
    for (int64_t c : reg->consumers()) {
      auto consumer = tasks.find(c);
      OFL_PLAN_CHECK(consumer != tasks.end() && consumer->second.rank == rank, "register '",
                     reg->name(), "' on rank ", rank, " is read by task ", c,
                     ", which is not on its rank: data crosses ranks only by SEND/RECV.");
    }
  }
  // Transfers are matched.
  std::map<int64_t, std::vector<TaskRef>> sends, recvs;
  for (const auto& [id, t] : tasks) {
    if (t.task->kind() == proto::TaskProto::SEND) sends[t.task->transfer_id()].push_back(t);
    if (t.task->kind() == proto::TaskProto::RECV) recvs[t.task->transfer_id()].push_back(t);
  }
  for (const auto& [transfer, list] : sends) {
    OFL_PLAN_CHECK(list.size() == 1, "transfer ", transfer, " has ", list.size(), " senders.");
    auto it = recvs.find(transfer);
    OFL_PLAN_CHECK(it != recvs.end() && it->second.size() == 1, "send ", describe(list[0]),
                   " of transfer ", transfer, " has no matching receive on rank ",
                   list[0].task->peer(), ".");
    const TaskRef& send = list[0];
    const TaskRef& recv = it->second[0];
    OFL_PLAN_CHECK(send.task->peer() == recv.rank && recv.task->peer() == send.rank, "send ",
                   describe(send), " and receive ", describe(recv), " of transfer ", transfer,
                   " do not name each other's ranks.");
    const auto* in = registers[send.task->inputs(0)].first;
    const auto* out = registers[recv.task->outputs(0)].first;
    OFL_PLAN_CHECK(in->shape().SerializeAsString() == out->shape().SerializeAsString() &&
                       in->dtype() == out->dtype(),
                   "send ", describe(send), " and receive ", describe(recv),
                   " move registers of different shape or dtype.");
  }
  for (const auto& [transfer, list] : recvs) {
    OFL_PLAN_CHECK(sends.count(transfer), "receive ", describe(list[0]), " of transfer ",
                   transfer, " has no matching send on rank ", list[0].task->peer(), ".");
  }
  // No cycle across ranks (Kahn's algorithm over data, control and transfer edges).
  std::map<int64_t, std::vector<int64_t>> next;
  std::map<int64_t, int> pending;
  for (const auto& [id, t] : tasks) pending[id] = 0;
  auto edge = [&](int64_t from, int64_t to) {
    next[from].push_back(to);
    ++pending[to];
  };
  for (const auto& [id, t] : tasks) {
    for (int64_t r : t.task->inputs()) edge(registers[r].first->producer(), id);
    for (int64_t c : t.task->control_inputs()) {
      OFL_PLAN_CHECK(tasks.count(c), "task ", describe(t), " waits for task ", c,
                     ", which does not exist.");
      edge(c, id);
    }
    if (t.task->kind() == proto::TaskProto::RECV) edge(sends[t.task->transfer_id()][0].task->id(), id);
  }
  std::vector<int64_t> ready;
  for (const auto& [id, n] : pending) {
    if (n == 0) ready.push_back(id);
  }
  size_t done = 0;
  while (!ready.empty()) {
    const int64_t id = ready.back();
    ready.pop_back();
    ++done;
    for (int64_t n : next[id]) {
      if (--pending[n] == 0) ready.push_back(n);
    }
  }
  if (done != tasks.size()) {
    std::string stuck;
    int listed = 0;
    for (const auto& [id, n] : pending) {
      if (n > 0 && listed++ < 8) stuck.append(stuck.empty() ? "" : ", ").append(describe(tasks[id]));
    }
    OFL_PLAN_CHECK(false, "the tasks of one iteration wait for each other in a cycle, so the plan "
                   "would deadlock. Tasks on or behind the cycle: ", stuck, ".");
  }
}

}  // namespace ofl::compiler::physical
