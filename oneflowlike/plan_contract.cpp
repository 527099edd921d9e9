#include "oneflowlike/plan_contract.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/common/id_index.h"
#include "oneflowlike/plan_task.h"
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

template <class Ranks>
std::string rank_list(const Ranks& ranks) {
  std::string out = "[";
  for (int64_t r : ranks) out += str_cat(out.size() > 1 ? ", " : "", r);
  return out + "]";
}

// "communicator 'dimension 0 of cpu:[0, 1]' (ranks [0, 1])"
std::string describe_communicator(const proto::CollectiveProto& c) {
  return str_cat("communicator ", c.communicator().empty() ? "" : "'" + c.communicator() + "' ",
                 "(ranks ", rank_list(c.members()), ")");
}

// What a COLLECTIVE task runs, and where it comes from.
struct CollectiveFacts {
  std::string dtype;  // of its output
  int64_t count = 0;  // elements of the whole tensor (collective_whole); a grouped send/recv's
                      // output, which may differ between members
};

bool is_send_recv(const proto::CollectiveProto& c) {
  return c.op() == proto::CollectiveProto::SEND_RECV;
}

// "all_reduce float32 x 1024 (collective 3, task 'b/all_reduce3' from 'grad_w_boxing')"
std::string describe_collective(const TaskRef& t, const CollectiveFacts& facts) {
  const proto::CollectiveProto& c = t.task->collective();
  return str_cat(collective_op_name(c.op()), " ", facts.dtype, " x ", facts.count,
                 c.axis() >= 0 ? str_cat(" along axis ", c.axis()) : std::string(),
                 c.op() == proto::CollectiveProto::ALL_TO_ALL ? str_cat(" to axis ", c.out_axis())
                                                              : std::string(),
                 c.op() == proto::CollectiveProto::BROADCAST ? str_cat(" from member ", c.root())
                                                             : std::string(),
                 c.algorithm() == proto::CollectiveProto::RING
                     ? std::string()
                     : str_cat(" by ", collective_algorithm_name(c.algorithm())),
                 " (collective ", c.collective_id(), ", task '", t.task->name(), "' from '",
                 logical_op_of(*t.task), "'",
                 t.task->location().empty() ? std::string() : str_cat(" at ", t.task->location()),
                 ")");
}

bool same_collective(const proto::CollectiveProto& a, const CollectiveFacts& a_facts,
                     const proto::CollectiveProto& b, const CollectiveFacts& b_facts) {
  return a.collective_id() == b.collective_id() && a.op() == b.op() && a.axis() == b.axis() &&
         a.out_axis() == b.out_axis() && a.algorithm() == b.algorithm() && a.root() == b.root() &&
         a_facts.dtype == b_facts.dtype && (a_facts.count == b_facts.count || is_send_recv(a));
}

// The distinct member lists of a plan's collectives. A 1,024-rank job's collective tasks name a
// few lists (one per data- or tensor-parallel group) hundreds of thousands of times, up to 128
// ranks each: a list is compared with the ones seen (a hash, then its elements, without an
// allocation) and checked once, where copying it into an ordered map's key and a set per task
// grew with ranks squared and was most of this check on 1,024 ranks (docs/benchmarks.md,
// "Collectives" (b)).
class CommunicatorLists {
 public:
  /// The index of `members` among the lists seen, adding it when new (`*fresh` then true).
  int find_or_add(const google::protobuf::RepeatedField<int64_t>& members, bool* fresh) {
    uint64_t hash = static_cast<uint64_t>(members.size());
    for (int64_t m : members) hash = (hash ^ static_cast<uint64_t>(m)) * 0x100000001b3ULL;
    const auto [first, last] = by_hash_.equal_range(hash);
    for (auto it = first; it != last; ++it) {
      const std::vector<int64_t>& list = lists_[it->second];
      if (std::equal(list.begin(), list.end(), members.begin(), members.end())) {
        *fresh = false;
        return it->second;
      }
    }
    *fresh = true;
    lists_.emplace_back(members.begin(), members.end());
    by_hash_.emplace(hash, static_cast<int>(lists_.size()) - 1);
    return static_cast<int>(lists_.size()) - 1;
  }
  const std::vector<int64_t>& members(int index) const { return lists_[index]; }
  int size() const { return static_cast<int>(lists_.size()); }

 private:
  std::vector<std::vector<int64_t>> lists_;
  std::unordered_multimap<uint64_t, int> by_hash_;
};

// Whether `members` names at least two ranks, none twice.
bool distinct_members(std::vector<int64_t> members) {
  std::sort(members.begin(), members.end());
  return members.size() >= 2 && std::adjacent_find(members.begin(), members.end()) == members.end();
}

}  // namespace

// Tasks and registers are indexed by position (plan order: rank by rank) through hash maps from
// their ids, and every pass below walks them in plan order, so a plan with several faults always
// reports the same one. Plans hold ~10^5-10^6 tasks; ordered maps made this check a large share
// of compile time (see docs/benchmarks.md).
void check_plan_contract(const proto::PlanProto& plan, const PlanContractOptions& options) {
  std::vector<TaskRef> tasks;
  std::vector<std::pair<const proto::RegisterProto*, int64_t>> registers;  // (reg, rank)
  std::vector<int64_t> task_ids, register_ids;                             // by position
  for (const auto& rank : plan.ranks()) {
    for (const auto& t : rank.tasks()) {
      task_ids.push_back(t.id());
      tasks.push_back(TaskRef{&t, rank.rank()});
    }
    for (const auto& r : rank.registers()) {
      register_ids.push_back(r.id());
      registers.emplace_back(&r, rank.rank());
    }
  }
  const IdIndex task_index(task_ids), register_index(register_ids);  // id -> position
  // The position of a task known to exist (checked before).
  auto position_of = [&](int64_t id) {
    const int i = task_index.find(id);
    OFL_ASSERT(i >= 0) << "task " << id;
    return i;
  };
  auto find_task = [&](int64_t id) -> const TaskRef* {
    const int i = task_index.find(id);
    return i < 0 ? nullptr : &tasks[i];
  };
  auto find_register = [&](int64_t id) -> const proto::RegisterProto* {
    const int i = register_index.find(id);
    return i < 0 ? nullptr : registers[i].first;
  };
  auto register_name = [&](const proto::RegisterProto& reg) {
    const TaskRef* producer = find_task(reg.producer());
    return register_name_of(producer != nullptr ? producer->task : nullptr, reg);
  };
  // Registers stay on their rank.
  for (const auto& [reg, rank] : registers) {
    OFL_PLAN_CHECK(reg->register_num() >= 1, "register '", register_name(*reg), "' on rank ", rank,
                   " has no slot (register_num ", reg->register_num(), ").");
    const TaskRef* producer = find_task(reg->producer());
    OFL_PLAN_CHECK(producer != nullptr && producer->rank == rank, "register '", register_name(*reg),
                   "' on rank ", rank, " is not produced by a task of its rank.");
    for (int64_t c : reg->consumers()) {
      const TaskRef* consumer = find_task(c);
      OFL_PLAN_CHECK(consumer != nullptr && consumer->rank == rank, "register '",
                     register_name(*reg), "' on rank ", rank, " is read by task ", c,
                     ", which is not on its rank: data crosses ranks only by SEND/RECV.");
    }
  }
  // Devices (Note [Devices in a plan] in compiler/physical/expansion.h): a task reads and writes
  // registers of its own device, except the copies between a rank's host and its GPU; only
  // compute, copies, variables, collectives (Note [Device collectives] in
  // actor/device_collectives.h), the micro-batch tasks (Note [Micro-batch tasks on a GPU] in
  // compiler/physical/expansion.h) and the local boxing steps (Note [Local boxing steps on a
  // GPU] there) run on a GPU.
  for (const TaskRef& ref : tasks) {
    const proto::TaskProto& t = *ref.task;
    const bool h2d = t.kind() == proto::TaskProto::COPY_H2D;
    const bool d2h = t.kind() == proto::TaskProto::COPY_D2H;
    // Kinds whose work on a GPU is queued on its stream by the rank's compute thread.
    const bool streamed =
        t.kind() == proto::TaskProto::COMPUTE || t.kind() == proto::TaskProto::COPY ||
        t.kind() == proto::TaskProto::SLICE || t.kind() == proto::TaskProto::ZEROS ||
        t.kind() == proto::TaskProto::ADD || t.kind() == proto::TaskProto::UNPACK ||
        t.kind() == proto::TaskProto::REPEAT || t.kind() == proto::TaskProto::ACCUMULATE ||
        t.kind() == proto::TaskProto::PACK;
    const bool may_run_on_gpu = streamed || t.kind() == proto::TaskProto::VARIABLE ||
                                t.kind() == proto::TaskProto::COLLECTIVE || h2d || d2h;
    OFL_PLAN_CHECK(t.device() == proto::PLAN_DEVICE_CPU || may_run_on_gpu, "task ", describe(ref),
                   " of kind ", proto::TaskProto::Kind_Name(t.kind()),
                   " must run on the host. However, it is placed on a GPU.");
    // The GPU's stream and its events belong to the rank's compute thread (Note [Event-gated
    // acts]): GPU work on another thread would tell its readers it was done when only queued.
    const bool gpu_work = h2d || d2h || (t.device() == proto::PLAN_DEVICE_CUDA && streamed);
    OFL_PLAN_CHECK(!gpu_work || t.thread() == 0, "task ", describe(ref), " of kind ",
                   proto::TaskProto::Kind_Name(t.kind()),
                   " works on a GPU, so it must be on the rank's compute thread (0). However, it "
                   "is on thread ",
                   t.thread(), ".");
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
                     " memory. However, it reads '", register_name(*reg), "' in ",
                     proto::PlanDevice_Name(reg->device()), " memory.");
    }
    for (int64_t r : t.outputs()) {
      const proto::RegisterProto* reg = find_register(r);
      OFL_PLAN_CHECK(reg == nullptr || reg->device() == out_device, "task ", describe(ref),
                     " must write registers in ", proto::PlanDevice_Name(out_device),
                     " memory. However, it writes '", register_name(*reg), "' in ",
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
  // Collectives (Note [Collective order] in the header).
  std::vector<CollectiveFacts> facts;           // of the collective tasks
  std::vector<int> facts_at(tasks.size(), -1);  // task position -> facts index
  auto facts_of = [&](int i) -> const CollectiveFacts& { return facts[facts_at[i]]; };
  std::unordered_map<int64_t, std::vector<int>> collectives;  // collective id -> task positions
  std::vector<int64_t> collective_ids;                        // in plan order
  CommunicatorLists communicators;
  std::vector<bool> distinct;                          // by communicator: distinct_members()
  std::vector<std::vector<int>> communicator_tasks;    // by communicator: task positions
  std::vector<int> communicator_of(tasks.size(), -1);  // task position -> communicator
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i) {
    const TaskRef& ref = tasks[i];
    if (ref.task->kind() != proto::TaskProto::COLLECTIVE) continue;
    const proto::CollectiveProto& c = ref.task->collective();
    // A broadcast's members other than the root read nothing.
    const int64_t member =
        std::find(c.members().begin(), c.members().end(), ref.rank) - c.members().begin();
    // A broadcast's members other than the root, and a grouped send/recv's that send nothing
    // (the receiver of a transfer between GPUs), read nothing.
    const int reads = (c.op() == proto::CollectiveProto::BROADCAST && c.root() != member) ||
                              (is_send_recv(c) && c.sends_size() == 0)
                          ? 0
                          : 1;
    OFL_PLAN_CHECK(ref.task->inputs_size() == reads && ref.task->outputs_size() == 1, "collective ",
                   describe(ref), " must read ", reads, reads == 1 ? " register" : " registers",
                   " and write one. However, it reads ", ref.task->inputs_size(), " and writes ",
                   ref.task->outputs_size(), ".");
    // Note [Device collectives] in actor/device_collectives.h, "Order": member 0 of a GPU
    // collective decides its communicator's order as inputs become ready, so it must have one.
    OFL_PLAN_CHECK(reads == 1 || member != 0 || ref.task->device() != proto::PLAN_DEVICE_CUDA,
                   "collective ", describe(ref), " is member 0 of ", describe_communicator(c),
                   " on a GPU, which decides the order of the communicator's collectives as their "
                   "inputs become ready. However, it reads no register (",
                   collective_op_name(c.op()), ").");
    const proto::RegisterProto* in = reads == 1 ? find_register(ref.task->inputs(0)) : nullptr;
    const proto::RegisterProto* out = find_register(ref.task->outputs(0));
    OFL_PLAN_CHECK((in != nullptr || reads == 0) && out != nullptr, "collective ", describe(ref),
                   reads == 1 ? str_cat(" reads register ", ref.task->inputs(0), " and") : "",
                   " writes register ", ref.task->outputs(0), ". However, ",
                   out != nullptr ? "the first"
                   : reads == 1   ? "the second"
                                  : "it",
                   " does not exist.");
    OFL_PLAN_CHECK(proto::CollectiveProto::Op_IsValid(c.op()), "collective ", describe(ref),
                   " must run a known op. However, got op ", static_cast<int>(c.op()), ".");
    OFL_PLAN_CHECK(c.algorithm() == proto::CollectiveProto::RING ||
                       (c.algorithm() == proto::CollectiveProto::RECURSIVE_DOUBLING &&
                        c.op() == proto::CollectiveProto::ALL_REDUCE) ||
                       (c.algorithm() == proto::CollectiveProto::TREE &&
                        c.op() == proto::CollectiveProto::BROADCAST),
                   "collective ", describe(ref),
                   " must run by ring, by recursive doubling if it is an all-reduce or by a tree "
                   "if it is a broadcast. However, it is ",
                   collective_op_name(c.op()), " by ", collective_algorithm_name(c.algorithm()),
                   ".");
    bool fresh = false;
    const int communicator = communicators.find_or_add(c.members(), &fresh);
    if (fresh) {
      distinct.push_back(distinct_members(communicators.members(communicator)));
      communicator_tasks.emplace_back();
    }
    OFL_PLAN_CHECK(distinct[communicator] && member < c.members_size(), "collective ",
                   describe(ref),
                   " must run on at least two distinct member ranks, its own among them. However, "
                   "its members are ",
                   rank_list(c.members()), ".");
    const Shape whole = collective_whole(c, in != nullptr ? from_proto(in->shape()) : Shape{},
                                         from_proto(out->shape()));
    facts_at[i] = static_cast<int>(facts.size());
    facts.push_back(CollectiveFacts{out->dtype(), whole.numel()});
    std::vector<int>& members = collectives[c.collective_id()];
    if (members.empty()) collective_ids.push_back(c.collective_id());
    members.push_back(i);
    communicator_of[i] = communicator;
    communicator_tasks[communicator].push_back(i);
  }
  // The tasks of one collective: one per member rank, all naming the same members and running
  // the same op on the same data.
  for (int64_t id : collective_ids) {
    const std::vector<int>& members = collectives[id];
    const TaskRef& first = tasks[members[0]];
    const proto::CollectiveProto& a = first.task->collective();
    std::unordered_map<int64_t, int> by_rank;
    for (int i : members) {
      const TaskRef& t = tasks[i];
      const proto::CollectiveProto& b = t.task->collective();
      OFL_PLAN_CHECK(communicator_of[i] == communicator_of[members[0]], "the tasks of collective ",
                     id, " must name the same members in the same order. However, ",
                     describe(first), " names ", rank_list(a.members()), " and ", describe(t),
                     " names ", rank_list(b.members()), ".");
      auto [it, fresh] = by_rank.emplace(t.rank, i);
      OFL_PLAN_CHECK(fresh, "collective ", id, " on ", describe_communicator(a),
                     " must have one task on each member. However, rank ", t.rank, " has ",
                     describe(tasks[it->second]), " and ", describe(t), ".");
      OFL_PLAN_CHECK(same_collective(a, facts_of(members[0]), b, facts_of(i)),
                     "the members of collective ", id, " on ", describe_communicator(a),
                     " must run one op over one dtype and element count (and axis). However, rank ",
                     first.rank, " runs ", describe_collective(first, facts_of(members[0])),
                     " and rank ", t.rank, " runs ", describe_collective(t, facts_of(i)), ".");
    }
  }
  // A grouped send/recv (Note [Grouped send/recv] in oneflowlike/collective.h): every block one
  // member sends another is a block of the same size that the other receives from it, and the
  // blocks a member receives fill its output.
  for (int64_t id : collective_ids) {
    const std::vector<int>& positions = collectives[id];
    const proto::CollectiveProto& a = tasks[positions[0]].task->collective();
    if (!is_send_recv(a)) continue;
    const int64_t n = a.members_size();
    std::vector<int> by_member(n, -1);
    std::vector<CollectiveBlocks> blocks(n);
    for (int i : positions) {
      const int64_t m =
          std::find(a.members().begin(), a.members().end(), tasks[i].rank) - a.members().begin();
      by_member[m] = i;
      blocks[m] = collective_blocks(tasks[i].task->collective(), m, Shape{}, Shape{});
    }
    auto numel = [](const CollectiveBlock& b) { return region_shape(b.region).numel(); };
    for (int64_t m = 0; m < n; ++m) {
      if (by_member[m] < 0) continue;
      const TaskRef& t = tasks[by_member[m]];
      int64_t received = 0;
      for (const auto* list : {&blocks[m].sends, &blocks[m].receives}) {
        const bool sends = list == &blocks[m].sends;
        std::set<int64_t> peers;
        for (const CollectiveBlock& b : *list) {
          OFL_PLAN_CHECK(b.member >= 0 && b.member < n && peers.insert(b.member).second,
                         "collective ", describe(t), " on ", describe_communicator(a), " must ",
                         sends ? "send to" : "receive from",
                         " each member at most once, naming members 0..", n - 1,
                         ". However, it names member ", b.member,
                         b.member >= 0 && b.member < n ? " twice." : ".");
          if (!sends) received += numel(b);
          if (by_member[b.member] < 0) continue;  // Note [Partial plans]
          const std::vector<CollectiveBlock>& theirs =
              sends ? blocks[b.member].receives : blocks[b.member].sends;
          const auto match = std::find_if(theirs.begin(), theirs.end(),
                                          [&](const CollectiveBlock& c) { return c.member == m; });
          const TaskRef& u = tasks[by_member[b.member]];
          OFL_PLAN_CHECK(
              match != theirs.end() && numel(*match) == numel(b), "collective ", id, " on ",
              describe_communicator(a), ": rank ", t.rank, " ", sends ? "sends" : "receives", " ",
              numel(b), " elements ", sends ? "to" : "from", " rank ", u.rank, " (",
              describe_collective(t, facts_of(by_member[m])), "), but rank ", u.rank,
              match == theirs.end()
                  ? str_cat(sends ? " receives nothing from it" : " sends it nothing")
                  : str_cat(sends ? " receives " : " sends ", numel(*match), " elements"),
              " (", describe_collective(u, facts_of(by_member[b.member])), ").");
        }
      }
      OFL_PLAN_CHECK(received == facts_of(by_member[m]).count, "collective ", describe(t), " on ",
                     describe_communicator(a), " must receive every element of its output (",
                     facts_of(by_member[m]).count, "). However, its blocks receive ", received,
                     ".");
    }
  }
  // Every member present runs the same collectives in the same order on each communicator.
  for (int index = 0; index < communicators.size(); ++index) {
    const std::vector<int64_t>& members = communicators.members(index);
    const std::vector<int>& positions = communicator_tasks[index];
    const proto::CollectiveProto& communicator = tasks[positions[0]].task->collective();
    std::unordered_map<int64_t, std::vector<int>> by_rank;  // rank -> its tasks, by sequence
    for (int i : positions) by_rank[tasks[i].rank].push_back(i);
    for (auto& [rank, list] : by_rank) {
      std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
        return tasks[a].task->collective().sequence() < tasks[b].task->collective().sequence();
      });
    }
    auto sequence = [&](int i) { return tasks[i].task->collective().sequence(); };
    const std::vector<int> none;
    const std::vector<int>* reference = nullptr;
    int64_t reference_rank = -1;
    for (int64_t rank : members) {
      if (!present.count(rank)) continue;
      auto it = by_rank.find(rank);
      const std::vector<int>& list = it == by_rank.end() ? none : it->second;
      for (size_t p = 0; p < list.size(); ++p) {
        if (sequence(list[p]) == static_cast<int64_t>(p)) continue;
        const bool twice = p > 0 && sequence(list[p]) == sequence(list[p - 1]);
        OFL_PLAN_CHECK(
            false, "the collectives of rank ", rank, " on ", describe_communicator(communicator),
            " must have the sequence numbers 0, 1, ... once each. However, ",
            twice ? str_cat(describe_collective(tasks[list[p - 1]], facts_of(list[p - 1])), " and ",
                            describe_collective(tasks[list[p]], facts_of(list[p])),
                            " both have sequence ", sequence(list[p]))
                  : str_cat("it has none with sequence ", p, ": the next, ",
                            describe_collective(tasks[list[p]], facts_of(list[p])),
                            ", has sequence ", sequence(list[p])),
            ".");
      }
      if (reference == nullptr) {
        reference = &list;
        reference_rank = rank;
        continue;
      }
      for (size_t p = 0; p < std::max(list.size(), reference->size()); ++p) {
        const bool both = p < list.size() && p < reference->size();
        if (both &&
            same_collective(tasks[(*reference)[p]].task->collective(), facts_of((*reference)[p]),
                            tasks[list[p]].task->collective(), facts_of(list[p]))) {
          continue;
        }
        auto runs = [&](const std::vector<int>& on) {
          return p < on.size() ? describe_collective(tasks[on[p]], facts_of(on[p]))
                               : str_cat("nothing (it runs ", on.size(),
                                         on.size() == 1 ? " collective" : " collectives",
                                         " on this communicator)");
        };
        OFL_PLAN_CHECK(false, "collectives must run in the same order on every member of ",
                       describe_communicator(communicator), ". However, at position ", p, " rank ",
                       reference_rank, " runs ", runs(*reference), " and rank ", rank, " runs ",
                       runs(list), ".");
      }
    }
  }
  if (!options.acyclic) return;
  // No cycle across ranks (Kahn's algorithm over data, control, transfer and collective edges).
  // A collective is a node of its own after the tasks: the producers of its members' inputs
  // lead to it and it leads to its members' tasks (each waits for every member's input).
  const int n = static_cast<int>(tasks.size());
  const int nodes = n + static_cast<int>(collective_ids.size());
  // The edges as (from, to), then grouped by `from` (compressed rows: two allocations where a
  // list per node made millions on 1,024 ranks).
  std::vector<std::pair<int, int>> edges;
  edges.reserve(static_cast<size_t>(n) * 3);
  for (size_t k = 0; k < collective_ids.size(); ++k) {
    for (int i : collectives[collective_ids[k]]) {
      if (tasks[i].task->inputs_size() == 1) {
        const proto::RegisterProto* in = find_register(tasks[i].task->inputs(0));
        edges.emplace_back(position_of(in->producer()), n + static_cast<int>(k));
      }
      edges.emplace_back(n + static_cast<int>(k), i);
    }
  }
  for (int i = 0; i < n; ++i) {
    const TaskRef& t = tasks[i];
    for (int64_t r : t.task->inputs()) {
      const proto::RegisterProto* reg = find_register(r);
      OFL_PLAN_CHECK(reg != nullptr, "task ", describe(t), " reads register ", r,
                     ", which does not exist.");
      edges.emplace_back(position_of(reg->producer()), i);  // the producer exists: checked above
    }
    for (int64_t c : t.task->control_inputs()) {
      const int from = task_index.find(c);
      OFL_PLAN_CHECK(from >= 0, "task ", describe(t), " waits for task ", c,
                     ", which does not exist.");
      edges.emplace_back(from, i);
    }
    if (t.task->kind() == proto::TaskProto::RECV && present.count(t.task->peer())) {
      edges.emplace_back(sends[t.task->transfer_id()][0], i);
    }
  }
  std::vector<int> first(nodes + 1, 0),
      pending(nodes, 0);  // node i's edges: [first[i], first[i+1])
  for (const auto& [from, to] : edges) {
    ++first[from + 1];
    ++pending[to];
  }
  for (int i = 0; i < nodes; ++i) first[i + 1] += first[i];
  std::vector<int> next(edges.size());
  {
    std::vector<int> filled(first.begin(), first.end() - 1);
    for (const auto& [from, to] : edges) next[filled[from]++] = to;
  }
  edges = {};
  std::vector<int> ready;
  for (int i = 0; i < nodes; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  int done = 0;  // tasks
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    if (i < n) ++done;
    for (int e = first[i]; e < first[i + 1]; ++e) {
      if (--pending[next[e]] == 0) ready.push_back(next[e]);
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
      const int from = position_of(find_register(r)->producer());
      wait(from, str_cat("register '", register_name(*find_register(r)), "' from ",
                         describe(tasks[from])));
    }
    for (int64_t c : t.task->control_inputs()) {
      wait(position_of(c), "control input " + describe(tasks[position_of(c)]));
    }
    if (t.task->kind() == proto::TaskProto::RECV && present.count(t.task->peer())) {
      const int from = sends[t.task->transfer_id()][0];
      wait(from, str_cat("transfer ", t.task->transfer_id(), " from ", describe(tasks[from])));
    }
    if (t.task->kind() == proto::TaskProto::COLLECTIVE) {
      const proto::CollectiveProto& c = t.task->collective();
      for (int u : collectives[c.collective_id()]) {
        if (u == i || tasks[u].task->inputs_size() == 0) continue;
        const proto::RegisterProto* in = find_register(tasks[u].task->inputs(0));
        const int from = position_of(in->producer());
        wait(from, str_cat("collective ", c.collective_id(), " (", collective_op_name(c.op()),
                           " on ranks ", rank_list(c.members()), ") with ", describe(tasks[u]),
                           ", whose input '", register_name(*in), "' comes from ",
                           describe(tasks[from])));
      }
    }
    stuck += str_cat("\n  ", describe(t), " waits for ", waits);
  }
  if (n - done > listed) stuck += str_cat("\n  and ", n - done - listed, " more");
  OFL_PLAN_CHECK(false,
                 "the tasks of one iteration wait for each other in a cycle, so the plan "
                 "would deadlock: ",
                 n - done, " tasks can never act:", stuck);
}

bool outputs_per_micro_batch(const proto::TaskProto& task) {
  return task.per_micro_batch() && task.kind() != proto::TaskProto::ACCUMULATE &&
         task.kind() != proto::TaskProto::PACK;
}

}  // namespace ofl
