// Note [Memory report] in memory_report.h.

#include "compiler/physical/memory_report.h"

#include <omp.h>

#include <algorithm>
#include <iomanip>
#include <optional>
#include <sstream>

#include "compiler/physical/memory_planning.h"
#include "oneflowlike/common/id_index.h"
#include "oneflowlike/kernels/cpu/attention.h"
#include "oneflowlike/kernels/cpu/onednn_matmul.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {

namespace {

// Tasks that move data between ranks or devices (COPY, an identity such as a reshape, is not).
bool is_boxing(proto::TaskProto::Kind kind) {
  switch (kind) {
    case proto::TaskProto::SLICE:
    case proto::TaskProto::SEND:
    case proto::TaskProto::RECV:
    case proto::TaskProto::ADD:
    case proto::TaskProto::CONCAT:
    case proto::TaskProto::ZEROS:
    case proto::TaskProto::COLLECTIVE:
    case proto::TaskProto::COPY_H2D:
    case proto::TaskProto::COPY_D2H:
      return true;
    default:
      return false;
  }
}

// The FTempBytes of a compute task, as its actor will allocate it (actor/pieces.cpp's
// kernel_temp_bytes, from the plan instead of the runtime's index).
int64_t workspace_of(const proto::PlanProto& plan, const proto::TaskProto& task,
                     const IdIndex& registers, const proto::RankPlanProto& rank_plan) {
  if (task.kind() != proto::TaskProto::COMPUTE) return 0;
  const OpSchema& op = OpRegistry::global().find(task.op_type());
  const TempBytesFn* temp = op.get<FTempBytes>();
  if (temp == nullptr) return 0;
  std::vector<TensorMeta> metas;
  for (int64_t id : task.inputs()) {
    const int r = registers.find(id);
    if (r < 0) return 0;
    const proto::RegisterProto& reg = rank_plan.registers(r);
    metas.push_back(TensorMeta{from_proto(reg.shape()), dtype_from_name(reg.dtype())});
  }
  return static_cast<int64_t>(
      (*temp)(InferContext(op, params_from_proto(op, params_of(plan, task)), metas)));
}

// A task's input and output registers; empty when one is not in the rank's plan.
struct TaskRegisters {
  std::vector<const proto::RegisterProto*> ins, outs;
};

std::optional<TaskRegisters> registers_of(const proto::TaskProto& task, const IdIndex& registers,
                                          const proto::RankPlanProto& rank_plan) {
  TaskRegisters out;
  for (int64_t id : task.inputs()) {
    const int r = registers.find(id);
    if (r < 0) return std::nullopt;
    out.ins.push_back(&rank_plan.registers(r));
  }
  for (int64_t id : task.outputs()) {
    const int r = registers.find(id);
    if (r < 0) return std::nullopt;
    out.outs.push_back(&rank_plan.registers(r));
  }
  return out;
}

bool is_host_compute(const proto::TaskProto& task) {
  return task.kind() == proto::TaskProto::COMPUTE && task.device() == proto::PLAN_DEVICE_CPU;
}

// The float32 copies a host compute task's Widened kernel (a 16-bit op without a native loop)
// takes in its thread's arena (Note [Widening arena] in kernels/cpu/widened.h); 0 otherwise.
int64_t widening_of(const proto::TaskProto& task, const TaskRegisters& regs) {
  if (!is_host_compute(task) || (regs.ins.empty() && regs.outs.empty())) return 0;
  const OpSchema& op = OpRegistry::global().find(task.op_type());
  std::vector<DataType> input_dtypes;
  for (const auto* reg : regs.ins) input_dtypes.push_back(dtype_from_name(reg->dtype()));
  const DataType dtype = op.kernel_dtype(
      input_dtypes, regs.outs.empty()
                        ? std::nullopt
                        : std::optional<DataType>(dtype_from_name(regs.outs[0]->dtype())));
  if (dtype != DataType::kFloat16 && dtype != DataType::kBFloat16) return 0;
  if (!cpu::is_widened_kernel(op.find_kernel(DeviceType::kCPU, dtype))) return 0;
  std::vector<Shape> shapes;
  for (const auto* reg : regs.ins) {
    if (dtype_from_name(reg->dtype()) == dtype) shapes.push_back(from_proto(reg->shape()));
  }
  for (const auto* reg : regs.outs) {
    if (dtype_from_name(reg->dtype()) == dtype) shapes.push_back(from_proto(reg->shape()));
  }
  return cpu::widening_bytes(shapes);
}

// The scratchpad a host matmul on oneDNN's primitive takes in its thread's buffer (Note [oneDNN
// matmul scratchpad] in kernels/cpu/onednn_matmul.h); 0 otherwise.
int64_t scratchpad_of(const proto::PlanProto& plan, const proto::TaskProto& task,
                      const TaskRegisters& regs) {
  const bool batched = task.op_type() == "batch_matmul";
  const bool rows = task.op_type() == "broadcast_matmul_grad_b";  // Note [Products over rows]
  if (!is_host_compute(task) || (task.op_type() != "matmul" && !batched && !rows) ||
      regs.ins.size() != 2 || regs.outs.size() != 1) {
    return 0;
  }
  const OpSchema& op = OpRegistry::global().find(task.op_type());
  const DataType dtype = op.kernel_dtype(
      {dtype_from_name(regs.ins[0]->dtype()), dtype_from_name(regs.ins[1]->dtype())},
      dtype_from_name(regs.outs[0]->dtype()));
  if (!cpu::uses_onednn_matmul(batched, dtype)) return 0;
  const auto params = params_from_proto(op, params_of(plan, task));
  const Shape a = from_proto(regs.ins[0]->shape()), b = from_proto(regs.ins[1]->shape());
  const cpu::MatmulProduct product =
      rows ? cpu::rows_product(a, b, params.as<MatmulParams>())
           : cpu::matmul_product(batched, a, b, from_proto(regs.outs[0]->shape()),
                                 params.as<MatmulParams>());
  return cpu::onednn_matmul_scratchpad_bytes(dtype, product);
}

// What a host attention task takes on its threads (Note [Attention workspace] in
// oneflowlike/kernels/cpu/attention.h); 0 otherwise.
int64_t attention_of(const proto::PlanProto& plan, const proto::TaskProto& task,
                     const TaskRegisters& regs) {
  static const std::string kPrefix = "scaled_dot_product_attention";
  const std::string& op = task.op_type();
  if (is_host_compute(task) && op == "cached_attention" && regs.ins.size() == 6) {
    // Note [Cached attention]: the forward over the caches' rows, at most all of them.
    const AttentionDims d =
        attention_dims(from_proto(regs.ins[0]->shape()), from_proto(regs.ins[3]->shape()),
                       from_proto(regs.ins[4]->shape()));
    return cpu::attention_workspace_bytes(false, dtype_from_name(regs.ins[0]->dtype()), d, true,
                                          omp_get_max_threads());
  }
  if (!is_host_compute(task) || op.compare(0, kPrefix.size(), kPrefix) != 0) return 0;
  const bool backward = op.size() >= 5 && op.compare(op.size() - 5, 5, "_grad") == 0;
  const size_t q = backward ? 1 : 0;  // the grad reads (dout, q, k, v, ...)
  if (regs.ins.size() < q + 3) return 0;
  const OpSchema& schema = OpRegistry::global().find(op);
  const AttentionParams params =
      params_from_proto(schema, params_of(plan, task)).as<AttentionParams>();
  AttentionDims d =
      attention_dims(from_proto(regs.ins[q]->shape()), from_proto(regs.ins[q + 1]->shape()),
                     from_proto(regs.ins[q + 2]->shape()), params.sequence_first);
  // A piece of a sequence-split causal attention reads the keys up to its last query.
  place_queries(&d, params, ranges_from_proto(task.output_region(), 0, task.output_region_size()));
  return cpu::attention_workspace_bytes(backward, dtype_from_name(regs.ins[q]->dtype()), d,
                                        params.is_causal, omp_get_max_threads());
}

RankMemoryReport report_rank(const proto::PlanProto& plan, const proto::RankPlanProto& rank_plan,
                             const std::map<std::string, std::string>& kinds) {
  RankMemoryReport out;
  out.rank = rank_plan.rank();
  out.planned_peak = rank_plan.peak_bytes();
  std::vector<int64_t> ids;
  for (const proto::TaskProto& task : rank_plan.tasks()) ids.push_back(task.id());
  const IdIndex tasks(ids);
  ids.clear();
  for (const proto::RegisterProto& reg : rank_plan.registers()) ids.push_back(reg.id());
  const IdIndex registers(ids);

  // The chain: thread-0 tasks in plan order (memory planning's order).
  std::vector<int> chain;  // task positions
  // What the compute thread keeps for its largest call: the widened copies, the scratchpad.
  int64_t widening = 0, scratchpad = 0, attention = 0;
  for (int i = 0; i < rank_plan.tasks_size(); ++i) {
    const proto::TaskProto& task = rank_plan.tasks(i);
    if (task.thread() != 0) continue;
    chain.push_back(i);
    out.workspace += workspace_of(plan, task, registers, rank_plan);
    if (const auto regs = registers_of(task, registers, rank_plan)) {
      widening = std::max(widening, widening_of(task, *regs));
      scratchpad = std::max(scratchpad, scratchpad_of(plan, task, *regs));
      attention = std::max(attention, attention_of(plan, task, *regs));
    }
  }
  out.workspace += widening + scratchpad + attention;

  // Each register's kind, in plan order so that a boxing task sees its input's kind first.
  std::vector<std::string> kind(rank_plan.registers_size());
  for (int r = 0; r < rank_plan.registers_size(); ++r) {
    const proto::RegisterProto& reg = rank_plan.registers(r);
    const int producer = tasks.find(reg.producer());
    const auto named =
        kinds.find(register_name_of(producer >= 0 ? &rank_plan.tasks(producer) : nullptr, reg));
    if (named != kinds.end()) {
      kind[r] = named->second;
      continue;
    }
    const proto::TaskProto* task = producer >= 0 ? &rank_plan.tasks(producer) : nullptr;
    if (task != nullptr && task->kind() == proto::TaskProto::ACCUMULATE) {
      kind[r] = "gradients";  // a sum over micro-batches
    } else if (task != nullptr && is_boxing(task->kind())) {
      kind[r] = "communication buffers";
      for (int64_t input : task->inputs()) {
        const int in = registers.find(input);
        if (in >= 0 && in < r && kind[in] == "gradients") kind[r] = "gradients";
      }
    } else {
      kind[r] = "activations";
    }
  }

  // Lifetimes as memory planning decided them (-1: memory of its own all the time), of the
  // registers and of the collectives' scratch (Note [Collective scratch]).
  const PlannedLifetimes lifetimes = planned_lifetimes(rank_plan);
  std::map<std::string, int64_t> always;
  std::vector<int64_t> delta(chain.size() + 1, 0);
  std::vector<std::map<std::string, int64_t>> kind_delta(chain.size() + 1);
  auto count = [&](const RegisterLifetime& life, const std::string& what) {
    if (life.begin < 0) {
      always[what] += life.bytes;
      return;
    }
    delta[life.begin] += life.bytes;
    delta[life.end + 1] -= life.bytes;
    kind_delta[life.begin][what] += life.bytes;
    kind_delta[life.end + 1][what] -= life.bytes;
  };
  for (int r = 0; r < rank_plan.registers_size(); ++r) count(lifetimes.registers[r], kind[r]);
  for (const RegisterLifetime& life : lifetimes.scratch) {
    if (life.bytes > 0) count(life, "communication buffers");
  }
  int64_t base = 0;
  for (const auto& [k, bytes] : always) base += bytes;
  int64_t live = 0, best = -1;
  size_t at = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    live += delta[i];
    if (live > best) {
      best = live;
      at = i;
    }
  }
  out.live_peak = base + std::max<int64_t>(best, 0);
  // The model states' high-water mark (see RankMemoryReport).
  auto model_states = [](const std::map<std::string, int64_t>& bytes) {
    int64_t sum = 0;
    for (const char* k : {"parameters", "gradients", "optimizer state"}) {
      const auto it = bytes.find(k);
      if (it != bytes.end()) sum += it->second;
    }
    return sum;
  };
  {
    std::map<std::string, int64_t> running = always;
    out.model_states_peak = model_states(running);
    if (!chain.empty()) out.model_states_task = rank_plan.tasks(chain[0]).name();
    for (size_t i = 0; i < chain.size(); ++i) {
      for (const auto& [k, bytes] : kind_delta[i]) running[k] += bytes;
      const int64_t states = model_states(running);
      if (states > out.model_states_peak) {
        out.model_states_peak = states;
        out.model_states_task = rank_plan.tasks(chain[i]).name();
      }
    }
  }
  out.by_kind = always;
  if (!chain.empty()) {
    out.peak_task = rank_plan.tasks(chain[at]).name();
    std::map<std::string, int64_t> running;
    for (size_t i = 0; i <= at; ++i) {
      for (const auto& [k, bytes] : kind_delta[i]) running[k] += bytes;
    }
    for (const auto& [k, bytes] : running) {
      if (bytes != 0) out.by_kind[k] += bytes;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> memory_kinds(const Graph& logical) {
  std::map<std::string, std::string> kinds;
  for (const auto& [var, grad] : logical.variable_grads) {
    kinds[logical.tensor(grad).name] = "gradients";
  }
  // The optimizer pass's ops and boxing carry gradients on (buckets, layout copies,
  // reductions, clipping): what they make from a gradient is one too. So do the ops it puts in
  // the backward's scope under accumulation (Note [Buckets under accumulation], Note [Sharded
  // gradients under accumulation] in passes/optimizer.cpp): no op of the backward itself reads
  // a variable's finished gradient.
  for (int i : logical.topological_order()) {
    const LogicalOp& op = logical.op(i);
    if (op.role != OpRole::kOptimizer && op.role != OpRole::kBoxing &&
        op.role != OpRole::kBackward) {
      continue;
    }
    bool from_gradient = false;
    for (int t : op.inputs) {
      const auto it = kinds.find(logical.tensor(t).name);
      from_gradient = from_gradient || (it != kinds.end() && it->second == "gradients");
    }
    if (!from_gradient) continue;
    for (int t : op.outputs) kinds[logical.tensor(t).name] = "gradients";
  }
  for (int i = 0; i < logical.num_ops(); ++i) {
    const LogicalOp& op = logical.op(i);
    if (op.kind != OpKind::kVariable) continue;
    kinds[logical.tensor(op.outputs[0]).name] = op.trainable                    ? "parameters"
                                                : op.role == OpRole::kOptimizer ? "optimizer state"
                                                                                : "buffers";
  }
  return kinds;
}

std::string memory_report_to_text(const std::vector<RankMemoryReport>& reports) {
  static const char* kOrder[] = {"parameters",  "gradients", "optimizer state",
                                 "activations", "buffers",   "communication buffers"};
  const auto human = [](int64_t bytes) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(2);
    if (bytes >= (int64_t{1} << 20)) {
      os << static_cast<double>(bytes) / (1 << 20) << " MiB";
    } else if (bytes >= 1024) {
      os << static_cast<double>(bytes) / 1024 << " KiB";
    } else {
      os << bytes << " B";
    }
    return os.str();
  };
  std::ostringstream os;
  for (const RankMemoryReport& r : reports) {
    os << "rank " << r.rank << ": planned peak " << human(r.planned_peak) << ", live peak "
       << human(r.live_peak) << " at '" << r.peak_task << "':";
    for (const char* kind : kOrder) {
      const auto it = r.by_kind.find(kind);
      os << " " << kind << " " << human(it == r.by_kind.end() ? 0 : it->second) << ",";
    }
    os << " kernel workspace " << human(r.workspace) << "\n";
  }
  return os.str();
}

std::vector<RankMemoryReport> memory_report(const proto::PlanProto& plan,
                                            const std::map<std::string, std::string>& kinds) {
  std::vector<RankMemoryReport> out;
  for (const proto::RankPlanProto& rank_plan : plan.ranks()) {
    out.push_back(report_rank(plan, rank_plan, kinds));
  }
  return out;
}

}  // namespace ofl::compiler::physical
