#include "compiler/physical/memory_planning.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/common/id_index.h"
#include "oneflowlike/common/parallel.h"
#include "oneflowlike/dtype.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

// Note [Memory reuse and the chain]
// ---------------------------------
// Two registers may share memory only if one is dead before the other is written, and "before"
// must hold in every execution the runtime may choose, not just in one schedule. Actors are
// decentralized: without more edges, two independent tasks on rank r may run in either order,
// so no lifetime would be well defined.
//
// We fix one order per rank: the chain, i.e. the rank's thread-0 (compute stream) tasks in plan
// order, which is a topological order of the rank's data edges. Each chain task gets the previous
// chain task as a control input (unless it is already a data predecessor), so within an
// iteration the chain runs exactly in that order, and a register's lifetime is the closed
// interval [index of its producer, index of its last consumer]. Closed intervals matter: a task's
// input and output both live at that task and must not alias.
//
// Only registers entirely inside the chain are shared: thread-1 tasks (SEND/RECV) run outside
// the chain order, so a register a SEND reads or a RECV writes could be live at any chain index.
// Persistent registers live across iterations and registers with register_num > 1 hold several
// iterations at once (pipelining), so neither has a lifetime inside one pass of the chain.
//
// Across iterations the runtime must keep the same discipline: thread 0 of a rank runs its chain
// as a strict cycle (the last chain task of iteration i before the first of iteration i+1), which
// is what a single compute stream does anyway. Control inputs only speak about one iteration,
// so this wrap-around is the runtime's part of the contract. With micro-batches the same holds
// per micro-batch: the chain is the once tasks before, then the per-micro-batch tasks, then the
// once tasks after (compile.cpp lists them so), and thread 0 runs the per-micro-batch segment as
// a strict cycle per micro-batch (its last task of micro-batch k before its first of k + 1).
// Registers that cross between the segments live through all m passes and are never shared
// (Note [Micro-batches and memory reuse]).
//
// Note [Collective windows]: a COLLECTIVE task runs on the communication thread, outside the
// chain, but its data edges bound when: it cannot start before the chain task that produces
// its last input (or is its last control input) has run, at chain index lo, and it has finished
// before the first chain task reading one of its outputs starts, at index hi. So its input
// registers are read no later than hi, and its outputs are written no earlier than lo: with
// those as the collective's chain positions its registers are shared like any other (a
// gathered ZeRO-3 parameter lives from its gather, placed next to its reader, to its last
// reader). A collective without such bounds (an input or a reader off the chain, or no reader)
// keeps its registers unshared.
//
// The control edges cannot deadlock when the plan lists tasks in an order that is a valid
// sequential schedule of the whole plan (expansion's creation order is one): the chain order
// agrees with it. check_plan_contract (run after memory planning) verifies that anyway, with
// SEND -> RECV pairs as edges.

namespace ofl::compiler::physical {
namespace {

int64_t align_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct Lifetime {
  int64_t begin = 0;  // chain index of the producer
  int64_t end = 0;    // chain index of the last consumer (inclusive)
  bool overlaps(const Lifetime& other) const { return begin <= other.end && other.begin <= end; }
};

struct Placed {
  Lifetime lifetime;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// A rank's tasks and registers by position (plan order), and how its ids map to them.
struct RankIndex {
  explicit RankIndex(const proto::RankPlanProto& rank_plan) {
    std::vector<int64_t> ids;
    for (const proto::TaskProto& task : rank_plan.tasks()) ids.push_back(task.id());
    tasks = IdIndex(ids);
    ids.clear();
    for (const proto::RegisterProto& reg : rank_plan.registers()) ids.push_back(reg.id());
    registers = IdIndex(ids);
    for (const proto::RegisterProto& reg : rank_plan.registers()) {
      producer.push_back(tasks.find(reg.producer()));
    }
  }
  IdIndex tasks;
  IdIndex registers;
  std::vector<int> producer;  // by register position: its producer's position, or -1
};

// Sets each chain task's control input to its chain predecessor; returns, by task position, its
// chain index (-1: not in the chain).
std::vector<int64_t> order_chain(proto::RankPlanProto* rank_plan, const RankIndex& index) {
  std::vector<int64_t> chain_index(rank_plan->tasks_size(), -1);
  int64_t length = 0;
  int previous = -1;  // position
  for (int i = 0; i < rank_plan->tasks_size(); ++i) {
    proto::TaskProto& task = *rank_plan->mutable_tasks(i);
    if (task.thread() != 0) continue;
    chain_index[i] = length++;
    if (previous >= 0) {
      const int64_t previous_id = rank_plan->tasks(previous).id();
      bool ordered = std::find(task.control_inputs().begin(), task.control_inputs().end(),
                               previous_id) != task.control_inputs().end();
      for (int64_t input : task.inputs()) {
        const int r = index.registers.find(input);
        if (r >= 0 && index.producer[r] == previous) ordered = true;
      }
      if (!ordered) task.add_control_inputs(previous_id);
    }
    previous = i;
  }
  return chain_index;
}

// First-fit: the lowest aligned offset where `bytes` fits between the placed registers that are
// alive at the same time. `placed` is kept in (offset, end) order (place()), so the live
// neighbours come in that order without collecting and sorting them: a 1,024-rank plan places
// millions of registers.
int64_t first_fit(const Lifetime& lifetime, int64_t bytes, const std::vector<Placed>& placed) {
  int64_t offset = 0;
  for (const Placed& other : placed) {
    if (other.bytes <= 0 || !other.lifetime.overlaps(lifetime)) continue;
    if (offset + bytes <= other.offset) break;
    offset = std::max(offset, align_up(other.offset + other.bytes, kMemoryAlignment));
  }
  return offset;
}

// Adds `item` to `placed`, keeping its (offset, end) order.
void place(const Placed& item, std::vector<Placed>* placed) {
  const auto key = [](const Placed& p) { return std::make_pair(p.offset, p.offset + p.bytes); };
  const auto at =
      std::upper_bound(placed->begin(), placed->end(), item,
                       [&](const Placed& a, const Placed& b) { return key(a) < key(b); });
  placed->insert(at, item);
}

struct RankMemory {
  int64_t block_bytes = 0;
  int64_t unshared_bytes = 0;
};

// The rank's memory per device: blocks `block_id` (host) and `device_block_id` (GPU).
// `lifetimes`, when given, receives each register's and scratch's lifetime (planned_lifetimes).
std::map<proto::PlanDevice, RankMemory> plan_rank(proto::RankPlanProto* rank_plan, int64_t block_id,
                                                  int64_t device_block_id,
                                                  PlannedLifetimes* lifetimes = nullptr) {
  if (lifetimes != nullptr) {
    lifetimes->registers.assign(rank_plan->registers_size(), RegisterLifetime{});
    lifetimes->scratch.assign(rank_plan->tasks_size(), RegisterLifetime{});
  }
  const RankIndex index(*rank_plan);
  const std::vector<int64_t> chain_index = order_chain(rank_plan, index);
  // Note [Micro-batches and memory reuse]: the micro-batch part of the chain runs m times per
  // iteration, so a register that crosses between it and the once-per-iteration part (the input
  // of UNPACK or REPEAT, the output of ACCUMULATE or PACK) lives through all m repetitions and
  // cannot share memory with registers of one micro-batch; it gets its own allocation.
  auto per_micro = [&](int task) { return rank_plan->tasks(task).per_micro_batch(); };

  // Note [Collective windows]: by task position, a collective's [lo, hi] on the chain, or
  // {-1, -1}.
  std::vector<std::pair<int64_t, int64_t>> window(rank_plan->tasks_size(), {-1, -1});
  {
    std::vector<std::vector<int>> output_readers(rank_plan->tasks_size());
    for (int r = 0; r < rank_plan->registers_size(); ++r) {
      const int producer = index.producer[r];
      if (producer < 0) continue;
      for (int64_t consumer : rank_plan->registers(r).consumers()) {
        output_readers[producer].push_back(index.tasks.find(consumer));
      }
    }
    for (int t = 0; t < rank_plan->tasks_size(); ++t) {
      const proto::TaskProto& task = rank_plan->tasks(t);
      if (task.kind() != proto::TaskProto::COLLECTIVE || chain_index[t] >= 0) continue;
      int64_t lo = -1, hi = std::numeric_limits<int64_t>::max();
      bool bounded = !output_readers[t].empty();
      // An ACCUMULATE's sum is ready once per iteration, after the last micro-batch.
      auto after = [&](int before) {
        if (before < 0 || chain_index[before] < 0 ||
            outputs_per_micro_batch(rank_plan->tasks(before)) != per_micro(t)) {
          bounded = false;
        } else {
          lo = std::max(lo, chain_index[before]);
        }
      };
      for (int64_t id : task.inputs()) {
        const int r = index.registers.find(id);
        after(r >= 0 ? index.producer[r] : -1);
      }
      for (int64_t id : task.control_inputs()) after(index.tasks.find(id));
      for (int reader : output_readers[t]) {
        if (reader < 0 || chain_index[reader] < 0 || per_micro(reader) != per_micro(t)) {
          bounded = false;
        } else {
          hi = std::min(hi, chain_index[reader]);
        }
      }
      if (bounded && lo >= 0 && lo <= hi) window[t] = {lo, hi};
    }
  }
  // A task's position on the chain as a writer (its window's start for a collective) and as a
  // reader (its window's end); -1 off the chain.
  auto writes_at = [&](int t) { return chain_index[t] >= 0 ? chain_index[t] : window[t].first; };
  auto reads_at = [&](int t) { return chain_index[t] >= 0 ? chain_index[t] : window[t].second; };

  // Note [Slice views] and Note [Concats in place] (in_place_boxing.h): a view's register and
  // an in-place concat's inputs have no memory of their own. A view's input lives until the
  // view's readers are done (views of views too); an in-place concat's output from the first
  // input's producer until its own readers and its inputs' readers are done.
  const int num_tasks = rank_plan->tasks_size();
  const int num_registers = rank_plan->registers_size();
  std::vector<int> view_output(num_tasks, -1);  // view task -> its register
  for (int r = 0; r < num_registers; ++r) {
    const int producer = index.producer[r];
    if (producer >= 0 && rank_plan->tasks(producer).view()) view_output[producer] = r;
  }
  std::vector<char> written_into_another(num_registers, 0);  // inputs of in-place concats
  for (const proto::TaskProto& task : rank_plan->tasks()) {
    if (!task.in_place()) continue;
    for (int64_t id : task.inputs()) {
      const int r = index.registers.find(id);
      if (r >= 0) written_into_another[r] = 1;
    }
  }
  // The registers whose memory is register r's: itself and, for an in-place concat's output,
  // its inputs (positions).
  std::vector<int> members;
  auto members_of = [&](int r) {
    members.assign(1, r);
    const int producer = index.producer[r];
    if (producer >= 0 && rank_plan->tasks(producer).in_place()) {
      for (int64_t id : rank_plan->tasks(producer).inputs()) {
        members.push_back(index.registers.find(id));
      }
    }
  };
  // The tasks (positions, -1 for one off the rank) that read register r's memory: its
  // consumers and those of views of it.
  std::vector<int> readers, pending;
  auto readers_of = [&](int r) {
    readers.clear();
    pending.assign(1, r);
    while (!pending.empty()) {
      const int at = pending.back();
      pending.pop_back();
      for (int64_t consumer : rank_plan->registers(at).consumers()) {
        const int t = index.tasks.find(consumer);
        readers.push_back(t);
        if (t >= 0 && view_output[t] >= 0) pending.push_back(view_output[t]);
      }
    }
  };

  // Per device (Note [Devices in a plan] in expansion.h), the shareable registers and
  // collective scratch and their lifetimes, largest first (ties by register id, then by task
  // id: deterministic plans).
  struct Shareable {
    proto::RegisterProto* reg = nullptr;        // a register's slot,
    proto::CollectiveProto* scratch = nullptr;  // or a collective's scratch
    int64_t bytes = 0, id = 0;
    Lifetime lifetime;
  };
  std::map<proto::PlanDevice, RankMemory> memories;
  for (const proto::PlanDevice device : {proto::PLAN_DEVICE_CPU, proto::PLAN_DEVICE_CUDA}) {
    std::vector<Shareable> shareable;
    RankMemory& memory = memories[device];
    for (int r = 0; r < num_registers; ++r) {
      proto::RegisterProto& reg = *rank_plan->mutable_registers(r);
      if (reg.device() != device) continue;
      reg.set_memory_block(-1);
      reg.set_offset(0);
      const int producer = index.producer[r];
      if ((producer >= 0 && view_output[producer] >= 0) || written_into_another[r]) {
        reg.set_bytes(0);
        continue;  // no memory of its own: 0 bytes in `lifetimes`
      }
      reg.set_bytes(register_slot_bytes(reg));
      // Note [Fetched pieces are handed over], Note [Fed pieces are handed in]: new memory (or
      // the caller's) every piece, outside the block.
      bool in_chain = !reg.persistent() && !reg.fresh_each_piece() && !reg.handed_in() &&
                      reg.register_num() == 1 && producer >= 0;
      Lifetime lifetime{std::numeric_limits<int64_t>::max(), 0};
      members_of(r);
      for (int member : members) {
        const int member_producer = member >= 0 ? index.producer[member] : -1;
        if (!in_chain || member_producer < 0 || writes_at(member_producer) < 0 ||
            per_micro(member_producer) != per_micro(producer)) {
          in_chain = false;
          break;
        }
        lifetime.begin = std::min(lifetime.begin, writes_at(member_producer));
      }
      lifetime.end = in_chain ? lifetime.begin : 0;
      for (int member : members) {
        if (!in_chain) break;
        readers_of(member);
        for (int consumer : readers) {
          if (consumer < 0 || reads_at(consumer) < 0 ||
              per_micro(consumer) != per_micro(producer)) {
            in_chain = false;
            break;
          }
          OFL_ASSERT(reads_at(consumer) >= lifetime.begin);  // the plan order is topological
          lifetime.end = std::max(lifetime.end, reads_at(consumer));
        }
      }
      if (in_chain) {
        shareable.push_back({&reg, nullptr, reg.bytes(), reg.id(), lifetime});
      } else {
        memory.unshared_bytes +=
            align_up(reg.bytes(), kMemoryAlignment) * std::max(reg.register_num(), 1);
      }
      if (lifetimes != nullptr) {
        lifetimes->registers[r] =
            in_chain ? RegisterLifetime{lifetime.begin, lifetime.end, reg.bytes()}
                     : RegisterLifetime{-1, -1, reg.bytes() * std::max(reg.register_num(), 1)};
      }
    }
    // Note [Collective scratch]: a host collective's working memory lives for its window.
    for (int t = 0; t < num_tasks; ++t) {
      proto::TaskProto& task = *rank_plan->mutable_tasks(t);
      if (task.kind() != proto::TaskProto::COLLECTIVE || task.device() != device) continue;
      proto::CollectiveProto& c = *task.mutable_collective();
      c.set_scratch_in_block(false);
      c.set_scratch_block(0);
      c.set_scratch_offset(0);
      if (c.scratch_bytes() <= 0) continue;
      // With pipeline stages the micro-batch part's registers have several slots and several
      // micro-batches are in flight (Note [What the runtime adds to a plan] in actor/runtime.h):
      // its collectives' windows then bound nothing, as its registers are not shared either.
      bool bounded = window[t].first >= 0;
      for (const auto* ids : {&task.inputs(), &task.outputs()}) {
        for (int64_t id : *ids) {
          const int r = index.registers.find(id);
          if (r < 0 || rank_plan->registers(r).register_num() > 1) bounded = false;
        }
      }
      if (bounded) {
        shareable.push_back({nullptr, &c, c.scratch_bytes(), task.id(),
                             Lifetime{window[t].first, window[t].second}});
      } else {
        memory.unshared_bytes += align_up(c.scratch_bytes(), kMemoryAlignment);
      }
      if (lifetimes != nullptr) {
        lifetimes->scratch[t] =
            bounded ? RegisterLifetime{window[t].first, window[t].second, c.scratch_bytes()}
                    : RegisterLifetime{-1, -1, c.scratch_bytes()};
      }
    }
    std::stable_sort(shareable.begin(), shareable.end(),
                     [&](const Shareable& a, const Shareable& b) {
                       if (a.bytes != b.bytes) return a.bytes > b.bytes;
                       if ((a.reg == nullptr) != (b.reg == nullptr)) return a.reg != nullptr;
                       return a.id < b.id;
                     });

    std::vector<Placed> placed;
    placed.reserve(shareable.size());
    const int64_t id = device == proto::PLAN_DEVICE_CPU ? block_id : device_block_id;
    for (Shareable& item : shareable) {
      const int64_t offset = first_fit(item.lifetime, item.bytes, placed);
      place({item.lifetime, offset, item.bytes}, &placed);
      if (item.reg != nullptr) {
        item.reg->set_memory_block(id);
        item.reg->set_offset(offset);
      } else {
        item.scratch->set_scratch_in_block(true);
        item.scratch->set_scratch_block(id);
        item.scratch->set_scratch_offset(offset);
      }
      memory.block_bytes = std::max(memory.block_bytes, offset + item.bytes);
    }
    if (!shareable.empty()) {
      proto::MemoryBlockProto* block = rank_plan->add_memory_blocks();
      block->set_id(id);
      block->set_bytes(memory.block_bytes);
      block->set_device(device);
    }
  }
  return memories;
}

}  // namespace

PlannedLifetimes planned_lifetimes(const proto::RankPlanProto& rank_plan) {
  proto::RankPlanProto copy = rank_plan;
  copy.clear_memory_blocks();
  PlannedLifetimes lifetimes;
  plan_rank(&copy, copy.rank(), copy.rank(), &lifetimes);
  return lifetimes;
}

std::string largest_registers(const proto::RankPlanProto& rank_plan, size_t count) {
  std::vector<const proto::RegisterProto*> registers;
  for (const proto::RegisterProto& reg : rank_plan.registers()) registers.push_back(&reg);
  std::stable_sort(registers.begin(), registers.end(), [](const auto* a, const auto* b) {
    return a->bytes() * std::max(a->register_num(), 1) >
           b->bytes() * std::max(b->register_num(), 1);
  });
  std::ostringstream os;
  for (size_t i = 0; i < registers.size() && i < count; ++i) {
    const proto::RegisterProto& reg = *registers[i];
    os << (i ? ", " : "") << "'" << register_name_of(rank_plan, reg) << "' "
       << from_proto(reg.shape()).to_string() << " " << reg.dtype() << " " << reg.bytes()
       << " bytes";
    if (reg.register_num() > 1) os << " x " << reg.register_num() << " slots";
    if (reg.persistent()) os << " (persistent)";
  }
  return os.str();
}

int64_t register_slot_bytes(const proto::RegisterProto& reg) {
  if (reg.bytes() > 0 || reg.dtype().empty()) return reg.bytes();
  int64_t numel = 1;
  for (int64_t dim : reg.shape().dims()) numel *= dim;
  return numel * static_cast<int64_t>(dtype_size(dtype_from_name(reg.dtype())));
}

void plan_memory(proto::PlanProto* plan, int64_t memory_limit_bytes) {
  OFL_ASSERT(plan != nullptr);
  parallel_each(plan->ranks_size(), [&](int64_t position) {
    proto::RankPlanProto& rank_plan = *plan->mutable_ranks(static_cast<int>(position));
    rank_plan.clear_memory_blocks();
    // A rank has at most one block per device, so its ids are the rank (host) and world size +
    // rank (GPU): the same whether the plan was compiled for the whole job or this rank alone.
    const std::map<proto::PlanDevice, RankMemory> memories =
        plan_rank(&rank_plan, rank_plan.rank(), plan->world_size() + rank_plan.rank());
    const RankMemory& host = memories.at(proto::PLAN_DEVICE_CPU);
    const RankMemory& device = memories.at(proto::PLAN_DEVICE_CUDA);
    // Without reuse every register would get its own aligned allocation, as the shared ones
    // get aligned offsets: count both the same way so the comparison is fair.
    int64_t without_reuse = 0;
    for (const proto::RegisterProto& reg : rank_plan.registers()) {
      // Views and in-place concat pieces too, at their size: "without reuse" is every register
      // in memory of its own.
      without_reuse +=
          align_up(register_slot_bytes(reg), kMemoryAlignment) * std::max(reg.register_num(), 1);
    }
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      without_reuse += align_up(task.collective().scratch_bytes(), kMemoryAlignment);
    }
    rank_plan.set_device_peak_bytes(device.block_bytes + device.unshared_bytes);
    rank_plan.set_peak_bytes(host.block_bytes + host.unshared_bytes +
                             rank_plan.device_peak_bytes());
    rank_plan.set_bytes_without_reuse(without_reuse);
  });

  if (memory_limit_bytes <= 0) return;
  std::ostringstream over;
  int num_over = 0;
  for (const proto::RankPlanProto& rank_plan : plan->ranks()) {
    if (rank_plan.peak_bytes() <= memory_limit_bytes) continue;
    over << (num_over++ ? "; " : "") << "rank " << rank_plan.rank() << " at a peak of "
         << rank_plan.peak_bytes() << " bytes (" << rank_plan.bytes_without_reuse()
         << " without reuse), its largest registers: " << largest_registers(rank_plan, 3);
  }
  OFL_CHECK_CODE(num_over == 0, ErrorCode::kFailedPrecondition,
                 "[memory_planning] The peak memory of every rank must fit the memory limit of ",
                 memory_limit_bytes, " bytes. However, got ", over.str(),
                 ". HINT: split the largest tensors over more ranks (S instead of B), use fewer "
                 "micro-batches in flight, or raise the limit.");
}

}  // namespace ofl::compiler::physical
