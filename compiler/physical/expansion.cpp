#include "compiler/physical/expansion.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "compiler/physical/boxing.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/ops/shape_ops.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {

PlanBuilder::PlanBuilder(const std::vector<int64_t>& ranks, const std::vector<int64_t>& kept)
    : kept_(kept.begin(), kept.end()) {
  int64_t world_size = 0;
  for (int64_t rank : ranks) {
    OFL_ASSERT(rank >= 0 && rank_plans_.count(rank) == 0);
    world_size = std::max(world_size, rank + 1);
    if (!this->kept(rank)) continue;
    proto::RankPlanProto* rank_plan = plan_.add_ranks();
    rank_plan->set_rank(rank);
    rank_plans_[rank] = rank_plan;
  }
  plan_.set_world_size(world_size);
  plan_.set_pipeline_depth(1);
}

proto::RankPlanProto& PlanBuilder::rank_plan(int64_t rank) {
  auto it = rank_plans_.find(rank);
  OFL_ASSERT(it != rank_plans_.end());
  return *it->second;
}

proto::TaskProto* PlanBuilder::scratch_task() {
  proto::TaskProto* task = &scratch_tasks_[next_scratch_++ % scratch_tasks_.size()];
  task->Clear();
  return task;
}

proto::TaskProto* PlanBuilder::add_task(int64_t rank, proto::TaskProto::Kind kind,
                                        const std::string& name, int thread) {
  const bool materialise = kept(rank);
  proto::TaskProto* task = materialise ? rank_plan(rank).add_tasks() : scratch_task();
  task->set_id(num_tasks());
  task->set_rank(rank);
  task->set_kind(kind);
  task->set_thread(thread);
  task->set_per_micro_batch(per_micro_batch_);
  task->set_after_micro_batches(!per_micro_batch_ && after_micro_batches_);
  task->set_device(device_);
  if (materialise) task->set_name(name);
  task_devices_.push_back(device_);
  tasks_.push_back(materialise ? task : nullptr);
  task_ranks_.push_back(rank);
  return task;
}

int64_t PlanBuilder::new_collective_id_block(int64_t ids) {
  OFL_CHECK_CODE(next_collective_id_ + ids <= kMaxCollectiveId, ErrorCode::kUnimplemented,
                 "[plan] a plan holds at most ", kMaxCollectiveId,
                 " collectives (their messages' tags carry the id). However, this one needs more.");
  const int64_t id = next_collective_id_;
  next_collective_id_ += ids;
  return id;
}

std::pair<int64_t, int64_t> PlanBuilder::new_collective(const std::vector<int64_t>& members,
                                                        int64_t ids) {
  OFL_CHECK_CODE(static_cast<int64_t>(members.size()) <= kMaxCollectiveMembers,
                 ErrorCode::kUnimplemented, "[plan] a communicator holds at most ",
                 kMaxCollectiveMembers, " ranks. However, got ", members.size(), ".");
  const int64_t id = new_collective_id_block(ids);
  return {id, collective_sequences_[members]++};
}

int64_t PlanBuilder::control_id(const std::vector<int64_t>& members) {
  auto it = control_ids_.find(members);
  if (it != control_ids_.end()) return it->second;
  const int64_t id = new_collective_id_block(1);
  control_ids_.emplace(members, id);
  return id;
}

int64_t PlanBuilder::add_output(proto::TaskProto* task, const std::string& name, const Shape& shape,
                                DataType dtype, bool persistent) {
  const int64_t id = num_registers();
  const int64_t rank = task_ranks_.at(task->id());
  OFL_ASSERT(task->rank() == rank);
  register_ranks_.push_back(rank);
  register_shapes_.push_back(shape);
  register_dtypes_.push_back(dtype);
  register_devices_.push_back(task_devices_.at(task->id()));
  const bool once_after =
      task->kind() == proto::TaskProto::ACCUMULATE || task->kind() == proto::TaskProto::PACK;
  copy_rates_.emplace_back(once_after ? false : task->per_micro_batch(),
                           once_after ? true : task->after_micro_batches());
  task->add_outputs(id);
  if (!kept(rank)) {
    registers_.push_back(nullptr);
    return id;
  }
  proto::RegisterProto* reg = rank_plan(rank).add_registers();
  reg->set_id(id);
  set_register_name(reg, *task, name);
  to_proto(shape, reg->mutable_shape());
  reg->set_dtype(dtype_name(dtype));
  reg->set_producer(task->id());
  reg->set_register_num(1);
  reg->set_memory_block(-1);
  reg->set_offset(0);
  reg->set_bytes(shape.numel() * static_cast<int64_t>(dtype_size(dtype)));
  reg->set_persistent(persistent);
  reg->set_device(register_devices_.back());
  registers_.push_back(reg);
  return id;
}

void PlanBuilder::add_input(proto::TaskProto* task, int64_t register_id) {
  OFL_ASSERT(register_id >= 0 && register_id < num_registers());
  OFL_ASSERT(register_ranks_[register_id] == task->rank());
  register_id = on_device(register_id, task_devices_.at(task->id()));
  task->add_inputs(register_id);
  if (registers_[register_id] != nullptr) registers_[register_id]->add_consumers(task->id());
}

int64_t PlanBuilder::on_device(int64_t register_id, proto::PlanDevice device) {
  if (register_devices_[register_id] == device) return register_id;
  auto it = copies_.find({register_id, device});
  if (it != copies_.end()) return it->second;
  // The copy is built like any task, at the register's rate, then the builder's state is back.
  const bool saved_per_micro = per_micro_batch_, saved_after = after_micro_batches_;
  const proto::PlanDevice saved_device = device_;
  std::tie(per_micro_batch_, after_micro_batches_) = copy_rates_[register_id];
  device_ = device;
  const bool to_device = device == proto::PLAN_DEVICE_CUDA;
  const std::string name = str_cat(register_name(register_id), to_device ? "/to_cuda" : "/to_host");
  proto::TaskProto* copy =
      add_task(register_ranks_[register_id],
               to_device ? proto::TaskProto::COPY_H2D : proto::TaskProto::COPY_D2H, name, 0);
  if (registers_[register_id] != nullptr) {
    set_logical_op(copy, logical_op_of(*tasks_.at(registers_[register_id]->producer())));
  }
  copy->add_inputs(register_id);  // not add_input: the copy is where the devices meet
  if (registers_[register_id] != nullptr) registers_[register_id]->add_consumers(copy->id());
  // By value: add_output grows the vectors these live in.
  const Shape shape = register_shapes_[register_id];
  const DataType dtype = register_dtypes_[register_id];
  const int64_t out = add_output(copy, name, shape, dtype);
  per_micro_batch_ = saved_per_micro;
  after_micro_batches_ = saved_after;
  device_ = saved_device;
  copies_.emplace(std::make_pair(register_id, device), out);
  return out;
}

const proto::TaskProto& PlanBuilder::task(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_tasks() && tasks_[id] != nullptr);
  return *tasks_[id];
}

proto::TaskProto& PlanBuilder::mutable_task(int64_t id) {
  OFL_ASSERT(id >= 0 && id < num_tasks());
  return tasks_[id] != nullptr ? *tasks_[id] : *scratch_task();
}

std::string PlanBuilder::register_name(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  const proto::RegisterProto* reg = registers_[id];
  return reg == nullptr ? std::string() : register_name_of(tasks_.at(reg->producer()), *reg);
}

int64_t PlanBuilder::register_rank(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  return register_ranks_[id];
}

Shape PlanBuilder::register_shape(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  return register_shapes_[id];
}

DataType PlanBuilder::register_dtype(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  return register_dtypes_[id];
}

proto::PlanProto PlanBuilder::release() {
  tasks_.clear();
  task_ranks_.clear();
  register_shapes_.clear();
  register_dtypes_.clear();
  registers_.clear();
  register_ranks_.clear();
  rank_plans_.clear();
  return std::move(plan_);
}

proto::PlanDevice plan_device(const Placement& placement) {
  return placement.device_type() == DeviceType::kCUDA ? proto::PLAN_DEVICE_CUDA
                                                      : proto::PLAN_DEVICE_CPU;
}

namespace {

/// Whether this parallel id's piece is the one counted when the logical value is assembled:
/// coordinate 0 on every broadcast dimension (the other replicas hold the same values).
bool contributes(const NdSbp& sbp, const Placement& placement, int64_t parallel_id) {
  const std::vector<int64_t> coord = placement.coordinate(parallel_id);
  for (size_t d = 0; d < sbp.size(); ++d) {
    if (sbp[d].is_broadcast() && coord[d] != 0) return false;
  }
  return true;
}

/// Whether `op`'s kernel reads its output piece's place in the logical tensor (TPositionDependent
/// in op.h).
bool position_dependent(const LogicalOp& op) {
  const bool* set = op.schema->get<TPositionDependent>();
  return set != nullptr && *set;
}

/// Region, logical shape and SBP of a source or sink task's tensor.
void describe_piece(const TensorMeta& meta, const NdSbp& sbp, const Placement& placement,
                    int64_t parallel_id, proto::TaskProto* task) {
  add_ranges(logical_region(meta.shape, sbp, placement, parallel_id),
             task->mutable_output_region());
  to_proto(meta.shape, task->mutable_logical_output_shape());
  to_proto(sbp, task->mutable_sbp());
}

void initializer_to_proto(const Initializer& init, proto::InitializerProto* out) {
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      out->set_kind(proto::InitializerProto::ZEROS);
      break;
    case Initializer::Kind::kOnes:
      out->set_kind(proto::InitializerProto::ONES);
      break;
    case Initializer::Kind::kConstant:
      out->set_kind(proto::InitializerProto::CONSTANT);
      break;
    case Initializer::Kind::kNormal:
      out->set_kind(proto::InitializerProto::NORMAL);
      break;
    case Initializer::Kind::kUniform:
      out->set_kind(proto::InitializerProto::UNIFORM);
      break;
  }
  out->set_a(init.a);
  out->set_b(init.b);
  out->set_seed(init.seed);
}

// Note [Slices in a plan]: the region of the local piece `input` that a unit-step `slice` op
// reads, or nothing when a step is not 1. Its signatures split only axes it keeps whole (then
// the piece's extent is the rank's part, and the logical stop covers it); every other axis is
// whole in every piece.
std::optional<std::vector<Range>> slice_region(const LogicalOp& op, const Shape& input) {
  const auto& p = op.params.as<SliceParams>();
  std::vector<Range> region;
  for (int i = 0; i < input.ndim(); ++i) {
    if (p.step[i] != 1) return std::nullopt;
    const bool whole = p.start[i] == 0 && p.stop[i] >= input[i];
    region.push_back(whole ? Range{0, input[i]} : Range{p.start[i], p.stop[i]});
  }
  return region;
}

// Note [Slices in a plan]: the regions of a `concat` op's local `pieces` in its local output
// when each is one contiguous run of it (every axis before the concat axis has extent 1, as a
// gradient bucket's flat pieces), or nothing. Its signatures split only other axes, which every
// piece then splits alike, so the local output is the concat of the local pieces.
std::vector<std::vector<Range>> concat_runs(const LogicalOp& op, const std::vector<Shape>& pieces) {
  const int ndim = pieces.at(0).ndim();
  const int a = normalize_axis(op.params.as<ConcatParams>().axis, ndim, "concat");
  for (int i = 0; i < a; ++i) {
    if (pieces[0][i] != 1) return {};
  }
  std::vector<std::vector<Range>> runs;
  int64_t offset = 0;
  for (const Shape& piece : pieces) {
    std::vector<Range> region = whole_region(piece);
    region[a] = Range{offset, offset + piece[a]};
    offset += piece[a];
    runs.push_back(std::move(region));
  }
  return runs;
}

/// Expands the graph op by op; registers_[tensor][parallel id] is the tensor's register on
/// each parallel id of its producer's placement.
class Expander {
 public:
  Expander(const Graph& graph, const std::vector<int64_t>& kept)
      : graph_(graph),
        builder_(graph.all_ranks(), kept),
        registers_(graph.num_tensors()),
        micro_batches_(std::max(1, graph.train.gradient_accumulation_steps)),
        per_micro_(graph.num_ops(), false),
        after_micro_(graph.num_ops(), false),
        op_tasks_(graph.num_ops()),
        params_index_(graph.num_ops(), 0),
        boxing_tasks_(graph.num_ops(), {0, 0}) {}

  proto::PlanProto run() {
    builder_.plan().set_job_name(graph_.name);
    builder_.plan().set_micro_batches(micro_batches_);
    consumers_ = graph_.consumers();
    if (micro_batches_ > 1) assign_micro_batch_scopes();
    for (int i : graph_.topological_order()) {
      const LogicalOp& op = graph_.op(i);
      builder_.set_per_micro_batch(per_micro_[i]);
      builder_.set_after_micro_batches(after_micro_[i]);
      switch (op.kind) {
        case OpKind::kInput:
        case OpKind::kVariable:
          expand_source(op);
          break;
        case OpKind::kCompute:
          expand_compute(op);
          break;
        case OpKind::kBoxing:
          expand_boxing_op(op);
          break;
      }
      add_control_inputs(i);
    }
    builder_.set_per_micro_batch(false);
    for (int t : graph_.fetches) expand_fetch(t);
    return builder_.release();
  }

 private:
  // The entry of `op`'s params in PlanProto.op_params, plus one, added at its first task: every
  // rank's task of the op shares it (Note [Implicit plan fields] in oneflowlike/plan_task.h).
  int params_index(const LogicalOp& op) {
    int& index = params_index_[&op - &graph_.op(0)];
    if (index == 0) {
      params_to_proto(*op.schema, op.params, builder_.plan().add_op_params());
      index = builder_.plan().op_params_size();
    }
    return index;
  }

  // Which ops act once per micro-batch: inputs fed per batch and everything computed from them,
  // except the optimizer's ops and inputs (once per iteration). A boxing op whose consumers are
  // all optimizer ops converts the accumulated value once instead of every micro-batch (boxing
  // is linear, so that is the same sum).
  void assign_micro_batch_scopes() {
    for (int i : graph_.topological_order()) {
      const LogicalOp& op = graph_.op(i);
      if (op.kind == OpKind::kInput && op.role != OpRole::kOptimizer) {
        per_micro_[i] = true;
        continue;
      }
      if (op.role == OpRole::kOptimizer ||
          (op.kind != OpKind::kCompute && op.kind != OpKind::kBoxing)) {
        // Once per iteration; after the micro-batches when it depends on them.
        after_micro_[i] = depends_on_micro_batches(op);
        continue;
      }
      // Backward ops act per micro-batch even when nothing fed reaches them (the loss-gradient
      // seed and what is computed from it alone): each micro-batch's gradient is then summed
      // by ACCUMULATE like any other. An op waiting on a per-micro-batch op is one too.
      bool micro = op.role == OpRole::kBackward;
      for (int t : op.inputs) micro = micro || per_micro_[graph_.tensor(t).producer];
      for (int c : op.control_inputs) micro = micro || per_micro_[c];
      if (micro && op.kind == OpKind::kBoxing) micro = !consumers_are_optimizer(op);
      per_micro_[i] = micro;
      after_micro_[i] = !micro && depends_on_micro_batches(op);
    }
  }

  // Whether every consumer of the op's output is an optimizer op (and there is one).
  bool consumers_are_optimizer(const LogicalOp& op) const {
    const std::vector<int>& consumers = consumers_[op.outputs[0]];
    bool all = !consumers.empty();
    for (int c : consumers) all = all && graph_.op(c).role == OpRole::kOptimizer;
    return all;
  }

  // Whether a once-per-iteration op reads (or waits for) the micro-batches' results.
  bool depends_on_micro_batches(const LogicalOp& op) const {
    bool after = false;
    for (int t : op.inputs) {
      const int p = graph_.tensor(t).producer;
      after = after || per_micro_[p] || after_micro_[p];
    }
    for (int c : op.control_inputs) after = after || per_micro_[c] || after_micro_[c];
    return after;
  }

  // LogicalOp::control_inputs: on each rank of the (shared) placement, the op's task waits for
  // the task of each control input. The topological order expanded them first.
  void add_control_inputs(int i) {
    const LogicalOp& op = graph_.op(i);
    if (op.schedule_early && op.kind == OpKind::kCompute) {
      for (int64_t pid = 0; pid < static_cast<int64_t>(op_tasks_[i].size()); ++pid) {
        if (builder_.kept(op.placement.rank(pid))) {
          builder_.mutable_task(op_tasks_[i][pid]).set_schedule_early(true);
        }
      }
    }
    for (int c : op.control_inputs) {
      const LogicalOp& before = graph_.op(c);
      OFL_CHECK_CODE(before.placement == op.placement, ErrorCode::kFailedPrecondition,
                     "[expansion] ", op.describe(), " must act after ", before.describe(),
                     " (a control input), which needs both on one placement. However, got ",
                     op.placement.to_string(), " and ", before.placement.to_string(), ".");
      OFL_ASSERT(before.kind != OpKind::kBoxing)
          << "control inputs after boxing ops are not supported: " << op.describe() << " after "
          << before.describe();
      const std::vector<int64_t>& before_tasks = op_tasks_[c];
      if (op.kind == OpKind::kBoxing) {
        // Every task of the boxing waits for the task of `before` on its rank (Note [ZeRO-3
        // gathers twice] in passes/boxing_insertion.cpp).
        const std::vector<int64_t> ranks = before.placement.ranks();
        for (int64_t id = boxing_tasks_[i].first; id < boxing_tasks_[i].second; ++id) {
          const int64_t rank = builder_.task_rank(id);
          const auto at = std::find(ranks.begin(), ranks.end(), rank);
          if (at == ranks.end() || !builder_.kept(rank)) continue;
          proto::TaskProto& task = builder_.mutable_task(id);
          const int64_t waits_for = before_tasks[at - ranks.begin()];
          const auto& existing = task.control_inputs();
          if (std::find(existing.begin(), existing.end(), waits_for) == existing.end()) {
            task.add_control_inputs(waits_for);
          }
        }
        continue;
      }
      const std::vector<int64_t>& tasks = op_tasks_[i];
      OFL_ASSERT(tasks.size() == before_tasks.size() &&
                 static_cast<int64_t>(tasks.size()) == op.placement.num_ranks());
      for (size_t pid = 0; pid < tasks.size(); ++pid) {
        proto::TaskProto& task = builder_.mutable_task(tasks[pid]);
        const auto& existing = task.control_inputs();
        if (std::find(existing.begin(), existing.end(), before_tasks[pid]) == existing.end()) {
          task.add_control_inputs(before_tasks[pid]);
        }
      }
    }
  }

  // Every LogicalOp the expander sees is an element of graph_'s op vector, so its index is its
  // offset from the first (the graph is const during expansion and never reallocates).
  bool op_per_micro(const LogicalOp& op) const {
    const std::ptrdiff_t index = &op - &graph_.op(0);
    OFL_ASSERT(index >= 0 && index < graph_.num_ops());
    return per_micro_[index];
  }

  // The register of tensor t on parallel id `pid` as a consumer in scope `per_micro` on
  // `device` sees it: a once-per-iteration value goes through REPEAT into the micro-batches, a
  // per-micro-batch value through ACCUMULATE out of them (Note [Micro-batch tasks on a GPU] in
  // expansion.h says where they run).
  int64_t scoped_register(int t, int64_t pid, bool per_micro, proto::PlanDevice device) {
    const int64_t reg = registers_[t].at(pid);
    const bool produced_per_micro = per_micro_[graph_.tensor(t).producer];
    if (micro_batches_ == 1 || produced_per_micro == per_micro) return reg;
    if (!per_micro) {
      device = builder_.register_dtype(reg) == DataType::kBool ? proto::PLAN_DEVICE_CPU
                                                               : builder_.register_device(reg);
    }
    auto& cache = per_micro ? repeated_ : accumulated_;
    auto it = cache.find({reg, device});
    if (it != cache.end()) return it->second;
    const bool saved = per_micro_scope_;
    const proto::PlanDevice saved_device = builder_.device();
    builder_.set_per_micro_batch(true);  // REPEAT and ACCUMULATE act every micro-batch
    builder_.set_device(device);
    const int64_t rank = builder_.register_rank(reg);
    const std::string name = builder_.register_name(reg);
    proto::TaskProto* task =
        builder_.add_task(rank, per_micro ? proto::TaskProto::REPEAT : proto::TaskProto::ACCUMULATE,
                          name + (per_micro ? "/repeat" : "/accumulate"), /*thread=*/0);
    set_logical_op(task, graph_.op(graph_.tensor(t).producer).name);
    builder_.add_input(task, reg);
    const int64_t out = builder_.add_output(task, task->name(), builder_.register_shape(reg),
                                            builder_.register_dtype(reg));
    builder_.set_per_micro_batch(saved);
    builder_.set_device(saved_device);
    cache.emplace(std::make_pair(reg, device), out);
    return out;
  }

  // Whether boxing op `op` reads its input where it lives (Note [Micro-batch tasks on a GPU]):
  // when its first step stays within the placement (a collective, a local slice, B -> P: on a
  // CUDA placement's GPU, Note [Local boxing steps on a GPU]); otherwise it reads on the host,
  // where the other steps run.
  bool boxing_reads_in_place(const LogicalOp& op) const {
    const std::vector<BoxingStep> steps =
        plan_boxing(op.boxing, graph_.tensor(op.inputs[0]).meta.shape);
    return steps.empty() ||
           (steps[0].kind != BoxingKind::kGeneric && steps[0].kind != BoxingKind::kBroadcast &&
            steps[0].kind != BoxingKind::kSendRecv);
  }

  const NdSbp& output_sbp(const LogicalOp& op, size_t k) const {
    if (k < op.signature.outputs.size()) return op.signature.outputs[k];
    return graph_.tensor(op.outputs[k]).sbp;
  }

  void check_sbp(const LogicalOp& op, const NdSbp& sbp, const std::string& what) const {
    OFL_CHECK_CODE(static_cast<int>(sbp.size()) == op.placement.hierarchy().ndim(),
                   ErrorCode::kFailedPrecondition, "[expansion] ", op.describe(), " ", what,
                   " needs one SBP per dimension of placement ", op.placement.to_string(),
                   " (run SBP inference first). However, got '", nd_sbp_to_string(sbp), "'.");
  }

  void expand_source(const LogicalOp& op) {
    OFL_ASSERT(op.outputs.size() == 1);
    const LogicalTensor& tensor = graph_.tensor(op.outputs[0]);
    const NdSbp& sbp = output_sbp(op, 0);
    check_sbp(op, sbp, "output");
    const bool variable = op.kind == OpKind::kVariable;
    std::vector<int64_t>& regs = registers_[op.outputs[0]];
    for (int64_t pid = 0; pid < op.placement.num_ranks(); ++pid) {
      // Note [Devices in a plan]: variables live on the placement's device, fed inputs on the host.
      builder_.set_device(variable ? plan_device(op.placement) : proto::PLAN_DEVICE_CPU);
      proto::TaskProto* task = builder_.add_task(
          op.placement.rank(pid), variable ? proto::TaskProto::VARIABLE : proto::TaskProto::INPUT,
          op.name, /*thread=*/0);
      builder_.set_device(proto::PLAN_DEVICE_CPU);
      set_logical_op(task, op.name);
      describe_piece(tensor.meta, sbp, op.placement, pid, task);
      if (variable) {
        initializer_to_proto(op.initializer, task->mutable_initializer());
      } else {
        task->set_contributes(contributes(sbp, op.placement, pid));
      }
      const Shape shape = physical_shape(tensor.meta.shape, sbp, op.placement, pid);
      if (variable || !op_per_micro(op)) {
        task->set_donates(!variable && op.donates);
        regs.push_back(builder_.add_output(task, tensor.name, shape, tensor.meta.dtype,
                                           /*persistent=*/variable));
        op_tasks_[&op - &graph_.op(0)].push_back(task->id());
        continue;
      }
      // Micro-batched input: the INPUT task (once) holds this rank's region of every
      // micro-batch, and UNPACK hands out one micro-batch at a time.
      OFL_CHECK(tensor.meta.shape.ndim() >= 1, "[expansion] ", op.describe(),
                " is fed per micro-batch, so it needs a batch axis. However, got shape ",
                tensor.meta.shape.to_string(), ".");
      task->set_per_micro_batch(false);
      Shape all = shape;
      all[0] *= micro_batches_;
      const int64_t fed = builder_.add_output(task, tensor.name, all, tensor.meta.dtype);
      proto::TaskProto* unpack = builder_.add_task(op.placement.rank(pid), proto::TaskProto::UNPACK,
                                                   tensor.name + "/unpack", /*thread=*/0);
      set_logical_op(unpack, op.name);
      builder_.add_input(unpack, fed);
      regs.push_back(builder_.add_output(unpack, unpack->name(), shape, tensor.meta.dtype));
      op_tasks_[&op - &graph_.op(0)].push_back(unpack->id());
    }
  }

  /// The registers of input k of `op`, one per parallel id of op's placement.
  std::vector<int64_t> input_registers(const LogicalOp& op, size_t k) {
    const int t = op.inputs[k];
    const LogicalTensor& tensor = graph_.tensor(t);
    const LogicalOp& producer = graph_.op(tensor.producer);
    OFL_CHECK_CODE(producer.placement == op.placement, ErrorCode::kFailedPrecondition,
                   "[expansion] ", op.describe(), " needs input '", tensor.name,
                   "' on its own placement ", op.placement.to_string(),
                   " (run boxing insertion first). However, got it on ",
                   producer.placement.to_string(), " from ", producer.describe(), ".");
    if (k < op.signature.inputs.size()) {
      OFL_CHECK_CODE(op.signature.inputs[k] == tensor.sbp, ErrorCode::kFailedPrecondition,
                     "[expansion] ", op.describe(), " consumes input '", tensor.name, "' as ",
                     nd_sbp_to_string(op.signature.inputs[k]),
                     " and needs its producer to give that SBP (run boxing insertion first). "
                     "However, got ",
                     nd_sbp_to_string(tensor.sbp), ".");
    }
    OFL_ASSERT(static_cast<int64_t>(registers_[t].size()) == op.placement.num_ranks());
    std::vector<int64_t> regs;
    for (int64_t pid = 0; pid < op.placement.num_ranks(); ++pid) {
      regs.push_back(scoped_register(t, pid, op_per_micro(op), plan_device(op.placement)));
    }
    return regs;
  }

  void expand_compute(const LogicalOp& op) {
    OFL_ASSERT(op.schema != nullptr);
    const int* view_of = op.schema->get<TViewOfInput>();
    const std::vector<int> mutated =
        mutated_inputs(*op.schema, op.params, static_cast<int>(op.inputs.size()));
    for (size_t k = 0; k < op.outputs.size(); ++k) check_sbp(op, output_sbp(op, k), "output");
    per_micro_scope_ = op_per_micro(op);
    std::vector<std::vector<int64_t>> input_regs;
    for (size_t k = 0; k < op.inputs.size(); ++k) input_regs.push_back(input_registers(op, k));
    std::vector<const std::vector<int64_t>*> inputs;
    for (const auto& regs : input_regs) inputs.push_back(&regs);
    builder_.set_device(plan_device(op.placement));
    for (int64_t pid = 0; pid < op.placement.num_ranks(); ++pid) {
      const int64_t rank = op.placement.rank(pid);
      const bool kept = builder_.kept(rank);
      proto::TaskProto* task;
      const bool host = plan_device(op.placement) == proto::PLAN_DEVICE_CPU;
      std::optional<std::vector<Range>> sliced;
      std::vector<std::vector<Range>> runs;
      if (host && op.schema->name() == "slice") {
        sliced = slice_region(op, builder_.register_shape((*inputs.at(0))[pid]));
      } else if (host && op.schema->name() == "concat") {
        std::vector<Shape> pieces;
        for (const auto* regs : inputs) pieces.push_back(builder_.register_shape((*regs)[pid]));
        runs = concat_runs(op, pieces);
      }
      if (view_of != nullptr) {
        // A view (reshape) has no kernel; in a plan it is a memcpy into its own register.
        task = builder_.add_task(rank, proto::TaskProto::COPY, op.name, /*thread=*/0);
        builder_.add_input(task, (*inputs.at(*view_of))[pid]);
      } else if (sliced) {
        // Note [Slices in a plan] in expansion.h.
        task = builder_.add_task(rank, proto::TaskProto::SLICE, op.name, /*thread=*/0);
        builder_.add_input(task, (*inputs.at(0))[pid]);
        add_ranges(*sliced, task->mutable_slice());
      } else if (!runs.empty()) {
        task = builder_.add_task(rank, proto::TaskProto::CONCAT, op.name, /*thread=*/0);
        for (size_t k = 0; k < inputs.size(); ++k) {
          builder_.add_input(task, (*inputs[k])[pid]);
          add_ranges(runs[k], task->mutable_concat_regions());
        }
      } else {
        task = builder_.add_task(rank, proto::TaskProto::COMPUTE, op.name, /*thread=*/0);
        task->set_op_type(op.schema->name());
        // The params' index is taken on every rank, kept or not, so a rank's own compile has the
        // whole plan's indexes and table (Note [Compiling per rank] in compile.cpp).
        task->set_params_index(params_index(op));
        for (const auto* regs : inputs) builder_.add_input(task, (*regs)[pid]);
        for (int m : mutated) task->add_mutated_inputs(m);
      }
      set_logical_op(task, op.name);
      op_tasks_[&op - &graph_.op(0)].push_back(task->id());
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const LogicalTensor& tensor = graph_.tensor(op.outputs[k]);
        const NdSbp& sbp = output_sbp(op, k);
        if (k == 0 && kept && position_dependent(op)) {
          add_ranges(logical_region(tensor.meta.shape, sbp, op.placement, pid),
                     task->mutable_output_region());
          to_proto(tensor.meta.shape, task->mutable_logical_output_shape());
        }
        registers_[op.outputs[k]].push_back(builder_.add_output(
            task, tensor.name, physical_shape(tensor.meta.shape, sbp, op.placement, pid),
            tensor.meta.dtype));
      }
    }
    builder_.set_device(proto::PLAN_DEVICE_CPU);
  }

  void expand_boxing_op(const LogicalOp& op) {
    OFL_ASSERT(op.inputs.size() == 1 && op.outputs.size() == 1);
    const LogicalTensor& in = graph_.tensor(op.inputs[0]);
    const LogicalOp& producer = graph_.op(in.producer);
    const BoxingSpec& spec = op.boxing;
    OFL_ASSERT(producer.placement == spec.in_placement);
    OFL_ASSERT(op.placement == spec.out_placement);
    per_micro_scope_ = op_per_micro(op);
    std::vector<int64_t> in_regs;
    const bool in_place = micro_batches_ > 1 && boxing_reads_in_place(op);
    for (int64_t pid = 0; pid < producer.placement.num_ranks(); ++pid) {
      const int64_t reg = registers_[op.inputs[0]].at(pid);
      in_regs.push_back(
          scoped_register(op.inputs[0], pid, per_micro_scope_,
                          in_place ? builder_.register_device(reg) : proto::PLAN_DEVICE_CPU));
    }
    // Note [Gradient boxing on the communication thread] in boxing.h.
    const bool gradient = producer.role == OpRole::kBackward && consumers_are_optimizer(op);
    const int64_t first = builder_.num_tasks();
    registers_[op.outputs[0]] = expand_boxing(spec, in.meta, in_regs, builder_, op.name,
                                              /*thread=*/gradient ? 1 : 0, op.location);
    boxing_tasks_[&op - &graph_.op(0)] = {first, builder_.num_tasks()};
  }

  void expand_fetch(int t) {
    const LogicalTensor& tensor = graph_.tensor(t);
    const LogicalOp& producer = graph_.op(tensor.producer);
    const NdSbp& sbp = output_sbp(producer, tensor.producer_output);
    const bool packed = micro_batches_ > 1 && op_per_micro(producer);
    for (int64_t pid = 0; pid < producer.placement.num_ranks(); ++pid) {
      const int64_t rank = producer.placement.rank(pid);
      int64_t reg = registers_[t].at(pid);
      if (packed) {  // one row per micro-batch: (m, *shape), where the rows are computed
        builder_.set_per_micro_batch(true);
        builder_.set_device(builder_.register_device(reg));
        proto::TaskProto* pack =
            builder_.add_task(rank, proto::TaskProto::PACK, str_cat(tensor.name, "/pack"), 0);
        builder_.set_device(proto::PLAN_DEVICE_CPU);
        set_logical_op(pack, tensor.name);
        builder_.add_input(pack, reg);
        std::vector<int64_t> dims = builder_.register_shape(reg).dims();
        dims.insert(dims.begin(), micro_batches_);
        reg = builder_.add_output(pack, pack->name(), Shape(dims), tensor.meta.dtype);
        builder_.set_per_micro_batch(false);
      }
      builder_.set_after_micro_batches(packed || after_micro_[tensor.producer]);
      proto::TaskProto* task = builder_.add_task(rank, proto::TaskProto::OUTPUT,
                                                 str_cat(tensor.name, "/output"), /*thread=*/0);
      set_logical_op(task, tensor.name);  // fetches are named by tensor: an op may have several
      builder_.add_input(task, reg);
      describe_piece(tensor.meta, sbp, producer.placement, pid, task);
      if (packed) {
        std::vector<int64_t> dims = tensor.meta.shape.dims();
        dims.insert(dims.begin(), micro_batches_);
        to_proto(Shape(dims), task->mutable_logical_output_shape());
        auto* first = task->mutable_output_region()->Add();
        first->set_begin(0);
        first->set_end(micro_batches_);
        for (int k = task->output_region_size() - 1; k > 0; --k) {
          task->mutable_output_region()->SwapElements(k, k - 1);
        }
      }
      task->set_contributes(contributes(sbp, producer.placement, pid));
    }
    builder_.plan().add_fetches(tensor.name);
  }

  const Graph& graph_;
  PlanBuilder builder_;
  std::vector<std::vector<int64_t>> registers_;  // by tensor, then parallel id
  const int micro_batches_;
  std::vector<bool> per_micro_;    // by op: acts once per micro-batch
  std::vector<bool> after_micro_;  // by op: acts once, after the micro-batches
  bool per_micro_scope_ = false;   // scope of the op being expanded
  // (register, device of the task) -> the output of its REPEAT or ACCUMULATE there.
  std::map<std::pair<int64_t, proto::PlanDevice>, int64_t> repeated_;
  std::map<std::pair<int64_t, proto::PlanDevice>, int64_t> accumulated_;
  std::vector<std::vector<int>> consumers_;     // by tensor: consuming ops
  std::vector<std::vector<int64_t>> op_tasks_;  // by op, then parallel id (not boxing ops)
  std::vector<int> params_index_;  // by op: its entry in PlanProto.op_params, plus one; 0: none
  std::vector<std::pair<int64_t, int64_t>> boxing_tasks_;  // by boxing op: [first, end) task ids
};

}  // namespace

proto::PlanProto expand_to_plan(const Graph& graph, const std::vector<int64_t>& kept) {
  return Expander(graph, kept).run();
}

}  // namespace ofl::compiler::physical
