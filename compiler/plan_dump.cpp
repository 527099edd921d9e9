#include "compiler/plan_dump.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <unordered_map>

#include "compiler/physical/memory_planning.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler {
namespace {

struct NamedRegister {
  const proto::RegisterProto* proto;
  std::string name;  // register_name_of (Note [Implicit plan fields])
};
using RegisterMap = std::unordered_map<int64_t, NamedRegister>;

RegisterMap registers_of(const proto::RankPlanProto& rank_plan) {
  std::unordered_map<int64_t, const proto::TaskProto*> tasks;
  for (const proto::TaskProto& task : rank_plan.tasks()) tasks[task.id()] = &task;
  RegisterMap registers;
  for (const proto::RegisterProto& reg : rank_plan.registers()) {
    const auto producer = tasks.find(reg.producer());
    registers[reg.id()] = {
        &reg, register_name_of(producer == tasks.end() ? nullptr : producer->second, reg)};
  }
  return registers;
}

std::string shape_string(const proto::ShapeProto& shape) { return from_proto(shape).to_string(); }

template <class Ids>
std::string id_list(const Ids& ids) {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (int64_t id : ids) {
    os << (first ? "" : ", ") << id;
    first = false;
  }
  os << "]";
  return os.str();
}

// Registers whose memory is another's (Note [Slice views], Note [All-reduces in place], Note
// [Concats in place]).
struct Borrowed {
  std::set<int64_t> view_tasks;     // their outputs are views of their inputs
  std::set<int64_t> concat_inputs;  // registers written into an in-place concat's output
};

void write_register(std::ostream& os, const char* direction, int64_t id,
                    const RegisterMap& registers, const Borrowed& borrowed) {
  os << "    " << direction << " r" << id;
  auto it = registers.find(id);
  if (it == registers.end()) {
    os << " (not on this rank)\n";
    return;
  }
  const proto::RegisterProto& reg = *it->second.proto;
  os << " '" << it->second.name << "' " << shape_string(reg.shape()) << " " << reg.dtype() << " "
     << physical::register_slot_bytes(reg) << " B";
  if (reg.register_num() > 1) os << " x" << reg.register_num() << " slots";
  if (reg.persistent()) os << " persistent";
  if (borrowed.view_tasks.count(reg.producer())) {
    os << " view of its producer's input";
  } else if (borrowed.concat_inputs.count(reg.id())) {
    os << " in its in-place concat's output";
  } else if (reg.fresh_each_piece()) {
    os << " new each piece, handed over";
  } else if (reg.handed_in()) {
    os << " the caller's piece, handed in";
  } else if (reg.memory_block() >= 0) {
    os << " block " << reg.memory_block() << " @" << reg.offset();
  } else {
    os << " own allocation";
  }
  if (reg.donated()) os << " (donated: the caller's, handed back)";
  os << "\n";
}

// A double-quoted dot string.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string task_node(int64_t id) { return str_cat("t", id); }

bool is_transfer(const proto::TaskProto& task) {
  return task.kind() == proto::TaskProto::SEND || task.kind() == proto::TaskProto::RECV;
}

// "all_reduce over ranks [0, 1] (collective 3, sequence 0, axis -1, recursive doubling)"
std::string collective_text(const proto::TaskProto& task) {
  const proto::CollectiveProto& c = task.collective();
  return str_cat(collective_op_name(c.op()), " over ranks ", id_list(c.members()), " (collective ",
                 c.collective_id(), ", sequence ", c.sequence(), ", axis ", c.axis(),
                 c.op() == proto::CollectiveProto::BROADCAST ? str_cat(", root ", c.root()) : "",
                 c.op() == proto::CollectiveProto::SEND_RECV
                     ? str_cat(", ", c.sends_size(), " sends, ", c.receives_size(), " receives")
                     : "",
                 c.algorithm() == proto::CollectiveProto::RING
                     ? std::string()
                     : str_cat(", ", collective_algorithm_name(c.algorithm())),
                 c.scratch_bytes() == 0 ? std::string()
                 : c.scratch_in_block()
                     ? str_cat(", scratch ", c.scratch_bytes(), " B block ", c.scratch_block(),
                               " @", c.scratch_offset())
                     : str_cat(", scratch ", c.scratch_bytes(), " B own allocation"),
                 ")");
}

// Elements of a region (0 when an axis is empty).
int64_t region_numel(const std::vector<Range>& region) {
  int64_t n = 1;
  for (const Range& r : region) n *= std::max<int64_t>(r.end - r.begin, 0);
  return n;
}

// What one member of a ring collective (Note [Ring collectives] in actor/collective_engine.h)
// sends and receives: of a reduce-scatter, every chunk's running sum but its own chunk's (it
// receives all but chunk m - 1's); of an all-gather, every chunk but chunk m + 1 (it receives all
// but its own); an all-reduce runs both. A broadcast member receives the tensor once (the root
// never) and sends it to each child of its chain or tree (Note [Broadcast] in
// oneflowlike/collective.h); an all-to-all or grouped send/recv member its blocks but its own.
// Zero when the task's registers are not on `registers`.
void collective_bytes(const proto::TaskProto& task, const RegisterMap& registers, int64_t* sent,
                      int64_t* received) {
  const proto::CollectiveProto& c = task.collective();
  const int64_t n = c.members_size();
  const auto member = std::find(c.members().begin(), c.members().end(), task.rank());
  if (task.outputs_size() != 1 || member == c.members().end()) return;
  const int64_t m = member - c.members().begin();
  auto out = registers.find(task.outputs(0));
  if (out == registers.end()) return;
  const int64_t element =
      static_cast<int64_t>(dtype_size(dtype_from_name(out->second.proto->dtype())));
  const Shape output = from_proto(out->second.proto->shape());
  if (c.op() == proto::CollectiveProto::BROADCAST) {  // the tensor from its parent, to children
    if (c.root() < 0 || c.root() >= n) return;
    const int64_t v = (m - c.root() + n) % n;
    int64_t children = v + 1 < n ? 1 : 0;
    if (c.algorithm() == proto::CollectiveProto::TREE) {
      children = 0;
      for (int64_t step = 1; v + step < n; step *= 2) children += step > v ? 1 : 0;
    }
    *sent += children * output.numel() * element;
    *received += v > 0 ? output.numel() * element : 0;
    return;
  }
  auto in = task.inputs_size() == 1 ? registers.find(task.inputs(0)) : registers.end();
  if (in == registers.end() && c.op() != proto::CollectiveProto::SEND_RECV) return;
  const Shape input = in == registers.end() ? Shape{} : from_proto(in->second.proto->shape());
  if (c.op() == proto::CollectiveProto::SEND_RECV ||
      c.op() == proto::CollectiveProto::ALL_TO_ALL) {  // every block but its own
    if (c.op() == proto::CollectiveProto::ALL_TO_ALL &&
        (c.axis() < 0 || c.axis() >= input.ndim() || c.out_axis() < 0 ||
         c.out_axis() >= input.ndim())) {
      return;
    }
    const CollectiveBlocks blocks = collective_blocks(c, m, input, output);
    for (const CollectiveBlock& b : blocks.sends) {
      if (b.member != m) *sent += region_numel(b.region) * element;
    }
    for (const CollectiveBlock& b : blocks.receives) {
      if (b.member != m) *received += region_numel(b.region) * element;
    }
    return;
  }
  const Shape whole = collective_whole(c, input, output);
  if (c.axis() < -1 || c.axis() >= whole.ndim()) return;
  auto chunk_bytes = [&](int64_t j) {
    return collective_chunk_numel(whole, c.axis(), n, ((j % n) + n) % n) * element;
  };
  const int64_t all = whole.numel() * element;
  if (c.algorithm() == proto::CollectiveProto::RECURSIVE_DOUBLING) {  // the whole per exchange
    const int64_t p = recursive_doubling_core(n);
    const int64_t exchanges = collective_ids(c.op(), n, c.algorithm()) - 2;
    if (m >= p) {  // its input out, the sum back
      *sent += all;
      *received += all;
      return;
    }
    const int64_t messages = exchanges + (m + p < n ? 1 : 0);  // and the fold or the unfold
    *sent += messages * all;
    *received += messages * all;
    return;
  }
  if (c.op() != proto::CollectiveProto::ALL_GATHER) {  // the reduce-scatter steps
    *sent += all - chunk_bytes(m);
    *received += all - chunk_bytes(m - 1);
  }
  if (c.op() != proto::CollectiveProto::REDUCE_SCATTER) {  // the all-gather steps
    *sent += all - chunk_bytes(m + 1);
    *received += all - chunk_bytes(m);
  }
}

}  // namespace

std::string plan_to_text(const proto::PlanProto& plan) {
  std::ostringstream os;
  os << "plan '" << plan.job_name() << "': world_size " << plan.world_size() << ", pipeline_depth "
     << plan.pipeline_depth() << ", fetches [";
  for (int i = 0; i < plan.fetches_size(); ++i) os << (i ? ", " : "") << plan.fetches(i);
  os << "]\n";
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    const RegisterMap registers = registers_of(rank_plan);
    os << "rank " << rank_plan.rank() << ": " << rank_plan.tasks_size() << " tasks, "
       << rank_plan.registers_size() << " registers, peak " << rank_plan.peak_bytes()
       << " B, without reuse " << rank_plan.bytes_without_reuse() << " B\n";
    for (const proto::MemoryBlockProto& block : rank_plan.memory_blocks()) {
      os << "  memory block " << block.id() << ": " << block.bytes() << " B"
         << (block.device() == proto::PLAN_DEVICE_CUDA ? " on the GPU" : "") << "\n";
    }
    Borrowed borrowed;
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      if (task.view()) borrowed.view_tasks.insert(task.id());
      if (task.in_place()) {
        borrowed.concat_inputs.insert(task.inputs().begin(), task.inputs().end());
      }
    }
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      os << "  task " << task.id() << " '" << task.name() << "' "
         << proto::TaskProto::Kind_Name(task.kind());
      if (task.view()) os << " view";
      if (task.in_place()) os << " in place";
      if (!task.op_type().empty()) os << " " << task.op_type();
      if (task.kind() == proto::TaskProto::COLLECTIVE) os << " " << collective_text(task);
      os << " thread " << task.thread();
      if (task.kind() == proto::TaskProto::SEND) os << " to rank " << task.peer();
      if (task.kind() == proto::TaskProto::RECV) os << " from rank " << task.peer();
      if (is_transfer(task)) os << " transfer " << task.transfer_id();
      if (logical_op_of(task) != task.name()) {
        os << " (op '" << logical_op_of(task) << "')";
      }
      os << "\n";
      for (int64_t id : task.inputs()) write_register(os, "in ", id, registers, borrowed);
      for (int64_t id : task.outputs()) write_register(os, "out", id, registers, borrowed);
      if (task.control_inputs_size() > 0) {
        os << "    after tasks " << id_list(task.control_inputs()) << "\n";
      }
    }
  }
  return os.str();
}

std::string plan_to_dot(const proto::PlanProto& plan) {
  std::ostringstream os;
  os << "digraph plan {\n  label=" << quoted("plan " + plan.job_name()) << ";\n"
     << "  node [shape=box, fontsize=10];\n  edge [fontsize=8];\n";
  std::unordered_map<int64_t, int64_t> send_of_transfer;  // transfer id -> SEND task id
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    os << "  subgraph cluster_rank" << rank_plan.rank() << " {\n"
       << "    label=" << quoted(str_cat("rank ", rank_plan.rank())) << ";\n";
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      std::string label = task.name() + "\n" + proto::TaskProto::Kind_Name(task.kind());
      if (!task.op_type().empty()) label += " " + task.op_type();
      if (is_transfer(task)) {
        label += str_cat(task.kind() == proto::TaskProto::SEND ? " to " : " from ", task.peer());
        send_of_transfer.emplace(task.transfer_id(), task.id());
      }
      if (task.kind() == proto::TaskProto::COLLECTIVE) {
        const proto::CollectiveProto& c = task.collective();
        label += str_cat(" ", collective_op_name(c.op()), "\nranks ", id_list(c.members()),
                         " collective ", c.collective_id(), " #", c.sequence());
      }
      os << "    " << task_node(task.id()) << " [label=" << quoted(label);
      if (is_transfer(task) || task.kind() == proto::TaskProto::COLLECTIVE) {
        os << ", style=filled, fillcolor=lightblue";
      }
      if (task.kind() == proto::TaskProto::VARIABLE) os << ", style=filled, fillcolor=khaki";
      os << "];\n";
    }
    os << "  }\n";
  }
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    const RegisterMap named = registers_of(rank_plan);
    for (const proto::RegisterProto& reg : rank_plan.registers()) {
      const std::string label = named.at(reg.id()).name + " " + shape_string(reg.shape());
      for (int64_t consumer : reg.consumers()) {
        os << "  " << task_node(reg.producer()) << " -> " << task_node(consumer)
           << " [label=" << quoted(label) << "];\n";
      }
    }
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      for (int64_t control : task.control_inputs()) {
        os << "  " << task_node(control) << " -> " << task_node(task.id())
           << " [style=dotted, color=gray];\n";
      }
    }
  }
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      if (task.kind() != proto::TaskProto::RECV) continue;
      auto it = send_of_transfer.find(task.transfer_id());
      if (it == send_of_transfer.end()) continue;
      os << "  " << task_node(it->second) << " -> " << task_node(task.id())
         << " [style=dashed, color=blue, label=" << quoted(str_cat("transfer ", task.transfer_id()))
         << "];\n";
    }
  }
  os << "}\n";
  return os.str();
}

PlanSummary summarize_plan(const proto::PlanProto& plan) {
  PlanSummary summary;
  summary.job_name = plan.job_name();
  summary.world_size = plan.world_size();
  summary.pipeline_depth = plan.pipeline_depth();
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    const RegisterMap registers = registers_of(rank_plan);
    auto bytes_of = [&](int64_t id) {
      auto it = registers.find(id);
      return it == registers.end() ? int64_t{0} : physical::register_slot_bytes(*it->second.proto);
    };
    RankSummary rank;
    rank.rank = rank_plan.rank();
    rank.num_tasks = rank_plan.tasks_size();
    rank.num_registers = rank_plan.registers_size();
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      ++rank.tasks_by_kind[proto::TaskProto::Kind_Name(task.kind())];
      // A per-micro-batch transfer happens m times per iteration.
      const int64_t times = task.per_micro_batch() ? std::max(1, plan.micro_batches()) : 1;
      if (task.kind() == proto::TaskProto::SEND) {
        for (int64_t id : task.inputs()) rank.bytes_sent += times * bytes_of(id);
      }
      if (task.kind() == proto::TaskProto::RECV) {
        for (int64_t id : task.outputs()) rank.bytes_received += times * bytes_of(id);
      }
      if (task.kind() == proto::TaskProto::COPY_H2D || task.kind() == proto::TaskProto::COPY_D2H) {
        int64_t& copied =
            task.kind() == proto::TaskProto::COPY_H2D ? rank.bytes_to_gpu : rank.bytes_to_host;
        for (int64_t id : task.outputs()) copied += times * bytes_of(id);
      }
      if (task.kind() == proto::TaskProto::COLLECTIVE) {
        ++rank.collectives_by_op[proto::CollectiveProto::Op_Name(task.collective().op())];
        int64_t sent = 0, received = 0;
        collective_bytes(task, registers, &sent, &received);
        rank.bytes_sent += times * sent;
        rank.bytes_received += times * received;
      }
    }
    // A planned rank always has bytes_without_reuse > 0 once it holds any non-empty register.
    const bool planned = rank_plan.bytes_without_reuse() > 0 || rank_plan.peak_bytes() > 0;
    summary.memory_planned = summary.memory_planned || planned;
    if (planned) {
      rank.peak_bytes = rank_plan.peak_bytes();
      rank.device_peak_bytes = rank_plan.device_peak_bytes();
      rank.bytes_without_reuse = rank_plan.bytes_without_reuse();
    } else {
      for (const proto::RegisterProto& reg : rank_plan.registers()) {
        rank.bytes_without_reuse +=
            physical::register_slot_bytes(reg) * std::max(reg.register_num(), 1);
      }
      rank.peak_bytes = rank.bytes_without_reuse;
    }
    if (rank.bytes_without_reuse > 0) {
      rank.reduction_percent = 100.0 * (1.0 - static_cast<double>(rank.peak_bytes) /
                                                  static_cast<double>(rank.bytes_without_reuse));
    }
    summary.ranks.push_back(std::move(rank));
  }
  return summary;
}

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.1f %s (%lld B)", value, kUnits[unit],
                static_cast<long long>(bytes));
  return buffer;
}

std::string summary_to_text(const PlanSummary& summary) {
  std::ostringstream os;
  os << "plan '" << summary.job_name << "': world size " << summary.world_size
     << ", pipeline depth " << summary.pipeline_depth
     << (summary.memory_planned ? "" : ", memory not planned") << "\n";
  RankSummary total;
  int64_t max_peak = 0;
  for (const RankSummary& rank : summary.ranks) {
    os << "rank " << rank.rank << ": " << rank.num_tasks
       << (rank.num_tasks == 1 ? " task (" : " tasks (");
    bool first = true;
    for (const auto& [kind, count] : rank.tasks_by_kind) {
      os << (first ? "" : ", ") << kind << " " << count;
      first = false;
      total.tasks_by_kind[kind] += count;
    }
    char reduction[32];
    std::snprintf(reduction, sizeof(reduction), "%.1f%%", rank.reduction_percent);
    os << "), " << rank.num_registers << " registers\n";
    if (!rank.collectives_by_op.empty()) {
      os << "  collectives:";
      for (const auto& [op, count] : rank.collectives_by_op) os << " " << op << " " << count;
      os << "\n";
    }
    os << "  per iteration: sent " << format_bytes(rank.bytes_sent) << ", received "
       << format_bytes(rank.bytes_received)
       << (rank.bytes_to_gpu + rank.bytes_to_host > 0
               ? str_cat("; copied to the GPU ", format_bytes(rank.bytes_to_gpu), ", to the host ",
                         format_bytes(rank.bytes_to_host))
               : std::string())
       << "\n"
       << "  memory: peak " << format_bytes(rank.peak_bytes)
       << (rank.device_peak_bytes > 0
               ? str_cat(" (", format_bytes(rank.device_peak_bytes), " on the GPU)")
               : std::string())
       << ", without reuse " << format_bytes(rank.bytes_without_reuse) << ", reduction "
       << reduction << "\n";
    total.num_tasks += rank.num_tasks;
    total.bytes_sent += rank.bytes_sent;
    total.bytes_received += rank.bytes_received;
    max_peak = std::max(max_peak, rank.peak_bytes);
  }
  os << "total: " << total.num_tasks << " tasks over " << summary.ranks.size()
     << (summary.ranks.size() == 1 ? " rank" : " ranks") << ", sent "
     << format_bytes(total.bytes_sent) << " per iteration, largest peak " << format_bytes(max_peak)
     << "\n";
  return os.str();
}

}  // namespace ofl::compiler
