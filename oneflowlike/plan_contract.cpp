#include "oneflowlike/plan_contract.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

namespace ofl {

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

bool same_shape(const proto::ShapeProto& a, const proto::ShapeProto& b) {
  return std::equal(a.dims().begin(), a.dims().end(), b.dims().begin(), b.dims().end());
}

}  // namespace

// Tasks and registers are indexed by position (plan order: rank by rank) through hash maps from
// their ids, and every pass below walks them in plan order, so a plan with several faults always
// reports the same one. Plans hold ~10^5-10^6 tasks; ordered maps made this check a large share
// of compile time (see docs/benchmarks.md).
void check_plan_contract(const proto::PlanProto& plan, const PlanContractOptions& options) {
  std::vector<TaskRef> tasks;
  std::vector<std::pair<const proto::RegisterProto*, int64_t>> registers;  // (reg, rank)
  std::unordered_map<int64_t, int> task_index, register_index;             // id -> position
  for (const auto& rank : plan.ranks()) {
    for (const auto& t : rank.tasks()) {
      task_index.emplace(t.id(), static_cast<int>(tasks.size()));
      tasks.push_back(TaskRef{&t, rank.rank()});
    }
    for (const auto& r : rank.registers()) {
      register_index.emplace(r.id(), static_cast<int>(registers.size()));
      registers.emplace_back(&r, rank.rank());
    }
  }
  auto find_task = [&](int64_t id) -> const TaskRef* {
    auto it = task_index.find(id);
    return it == task_index.end() ? nullptr : &tasks[it->second];
  };
  auto find_register = [&](int64_t id) -> const proto::RegisterProto* {
    auto it = register_index.find(id);
    return it == register_index.end() ? nullptr : registers[it->second].first;
  };
  // Registers stay on their rank.
  for (const auto& [reg, rank] : registers) {
    OFL_PLAN_CHECK(reg->register_num() >= 1, "register '", reg->name(), "' on rank ", rank,
                   " has no slot (register_num ", reg->register_num(), ").");
    const TaskRef* producer = find_task(reg->producer());
    OFL_PLAN_CHECK(producer != nullptr && producer->rank == rank, "register '", reg->name(),
                   "' on rank ", rank, " is not produced by a task of its rank.");
    for (int64_t c : reg->consumers()) {
      const TaskRef* consumer = find_task(c);
      OFL_PLAN_CHECK(consumer != nullptr && consumer->rank == rank, "register '", reg->name(),
                     "' on rank ", rank, " is read by task ", c,
                     ", which is not on its rank: data crosses ranks only by SEND/RECV.");
    }
  }
  // Devices (Note [Devices in a plan] in compiler/physical/expansion.h): a task reads and writes
  // registers of its own device, except the copies between a rank's host and its GPU; only
  // compute, view copies and variables run on a GPU.
  for (const TaskRef& ref : tasks) {
    const proto::TaskProto& t = *ref.task;
    const bool h2d = t.kind() == proto::TaskProto::COPY_H2D;
    const bool d2h = t.kind() == proto::TaskProto::COPY_D2H;
    const bool may_run_on_gpu = t.kind() == proto::TaskProto::COMPUTE ||
                                t.kind() == proto::TaskProto::COPY ||
                                t.kind() == proto::TaskProto::VARIABLE || h2d || d2h;
    OFL_PLAN_CHECK(t.device() == proto::PLAN_DEVICE_CPU || may_run_on_gpu, "task ", describe(ref),
                   " of kind ", proto::TaskProto::Kind_Name(t.kind()),
                   " must run on the host. However, it is placed on a GPU.");
    const proto::PlanDevice in_device = h2d   ? proto::PLAN_DEVICE_CPU
                                        : d2h ? proto::PLAN_DEVICE_CUDA
                                              : t.device();
    const proto::PlanDevice out_device = h2d   ? proto::PLAN_DEVICE_CUDA
                                         : d2h ? proto::PLAN_DEVICE_CPU
                                               : t.device();
    for (int64_t r : t.inputs()) {
      const proto::RegisterProto* reg = find_register(r);
      OFL_PLAN_CHECK(reg == nullptr || reg->device() == in_device, "task ", describe(ref),
                     " must read registers in ", proto::PlanDevice_Name(in_device),
                     " memory. However, it reads '", reg->name(), "' in ",
                     proto::PlanDevice_Name(reg->device()), " memory.");
    }
    for (int64_t r : t.outputs()) {
      const proto::RegisterProto* reg = find_register(r);
      OFL_PLAN_CHECK(reg == nullptr || reg->device() == out_device, "task ", describe(ref),
                     " must write registers in ", proto::PlanDevice_Name(out_device),
                     " memory. However, it writes '", reg->name(), "' in ",
                     proto::PlanDevice_Name(reg->device()), " memory.");
    }
  }
  // Transfers are matched.
  std::unordered_map<int64_t, std::vector<int>> sends, recvs;  // transfer id -> task positions
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
    const proto::TaskProto& t = *tasks[i].task;
    if (t.kind() == proto::TaskProto::SEND) sends[t.transfer_id()].push_back(i);
    if (t.kind() == proto::TaskProto::RECV) recvs[t.transfer_id()].push_back(i);
  }
  // A plan compiled for some ranks only (CompileOptions::ranks) holds one side of the
  // transfers with the others; those are checked where that side is compiled.
  std::set<int64_t> present;
  for (const auto& rank : plan.ranks()) present.insert(rank.rank());
  for (const TaskRef& send : tasks) {
    if (send.task->kind() != proto::TaskProto::SEND) continue;
    const int64_t transfer = send.task->transfer_id();
    const std::vector<int>& list = sends[transfer];
    OFL_PLAN_CHECK(list.size() == 1, "transfer ", transfer, " has ", list.size(),
                   " senders, among them ", describe(send), ".");
    if (!present.count(send.task->peer())) continue;
    auto it = recvs.find(transfer);
    OFL_PLAN_CHECK(it != recvs.end() && it->second.size() == 1, "send ", describe(send),
                   " of transfer ", transfer, " has no matching receive on rank ",
                   send.task->peer(), ".");
    const TaskRef& recv = tasks[it->second[0]];
    OFL_PLAN_CHECK(send.task->peer() == recv.rank && recv.task->peer() == send.rank, "send ",
                   describe(send), " and receive ", describe(recv), " of transfer ", transfer,
                   " do not name each other's ranks.");
    const proto::RegisterProto* in = find_register(send.task->inputs(0));
    const proto::RegisterProto* out = find_register(recv.task->outputs(0));
    OFL_PLAN_CHECK(in != nullptr && out != nullptr && same_shape(in->shape(), out->shape()) &&
                       in->dtype() == out->dtype(),
                   "send ", describe(send), " and receive ", describe(recv),
                   " move registers of different shape or dtype: it sends ",
                   in == nullptr ? std::string("nothing")
                                 : str_cat(from_proto(in->shape()).to_string(), " ", in->dtype()),
                   " and receives ",
                   out == nullptr
                       ? std::string("nothing")
                       : str_cat(from_proto(out->shape()).to_string(), " ", out->dtype()),
                   ".");
  }
  for (const TaskRef& recv : tasks) {
    if (recv.task->kind() != proto::TaskProto::RECV || !present.count(recv.task->peer())) continue;
    OFL_PLAN_CHECK(sends.count(recv.task->transfer_id()), "receive ", describe(recv),
                   " of transfer ", recv.task->transfer_id(), " has no matching send on rank ",
                   recv.task->peer(), ".");
  }
  if (!options.acyclic) return;
  // No cycle across ranks (Kahn's algorithm over data, control and transfer edges).
  const int n = static_cast<int>(tasks.size());
  std::vector<std::vector<int>> next(n);
  std::vector<int> pending(n, 0);
  auto edge = [&](int from, int to) {
    next[from].push_back(to);
    ++pending[to];
  };
  for (int i = 0; i < n; ++i) {
    const TaskRef& t = tasks[i];
    for (int64_t r : t.task->inputs()) {
      const proto::RegisterProto* reg = find_register(r);
      OFL_PLAN_CHECK(reg != nullptr, "task ", describe(t), " reads register ", r,
                     ", which does not exist.");
      edge(task_index.at(reg->producer()), i);  // the producer exists: checked above
    }
    for (int64_t c : t.task->control_inputs()) {
      auto it = task_index.find(c);
      OFL_PLAN_CHECK(it != task_index.end(), "task ", describe(t), " waits for task ", c,
                     ", which does not exist.");
      edge(it->second, i);
    }
    if (t.task->kind() == proto::TaskProto::RECV && present.count(t.task->peer())) {
      edge(sends[t.task->transfer_id()][0], i);
    }
  }
  std::vector<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  int done = 0;
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    ++done;
    for (int j : next[i]) {
      if (--pending[j] == 0) ready.push_back(j);
    }
  }
  if (done == n) return;
  std::string stuck;
  int listed = 0;
  for (int i = 0; i < n && listed < 10; ++i) {
    if (pending[i] == 0) continue;
    ++listed;
    // What it waits for that never acted (the report is built only for a failing plan).
    const TaskRef& t = tasks[i];
    std::string waits;
    auto wait = [&](int from, const std::string& what) {
      if (pending[from] > 0) waits.append(waits.empty() ? "" : ", ").append(what);
    };
    for (int64_t r : t.task->inputs()) {
      const int from = task_index.at(find_register(r)->producer());
      wait(from, str_cat("register '", find_register(r)->name(), "' from ", describe(tasks[from])));
    }
    for (int64_t c : t.task->control_inputs()) {
      wait(task_index.at(c), "control input " + describe(tasks[task_index.at(c)]));
    }
    if (t.task->kind() == proto::TaskProto::RECV && present.count(t.task->peer())) {
      const int from = sends[t.task->transfer_id()][0];
      wait(from, str_cat("transfer ", t.task->transfer_id(), " from ", describe(tasks[from])));
    }
    stuck += str_cat("\n  ", describe(t), " waits for ", waits);
  }
  if (n - done > listed) stuck += str_cat("\n  and ", n - done - listed, " more");
  OFL_PLAN_CHECK(false,
                 "the tasks of one iteration wait for each other in a cycle, so the plan "
                 "would deadlock: ",
                 n - done, " tasks can never act:", stuck);
}

}  // namespace ofl
