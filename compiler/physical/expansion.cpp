#include "compiler/physical/expansion.h"

#include <algorithm>

#include "compiler/physical/boxing.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {

PlanBuilder::PlanBuilder(const std::vector<int64_t>& ranks) {
  int64_t world_size = 0;
  for (int64_t rank : ranks) {
    OFL_ASSERT(rank >= 0 && rank_plans_.count(rank) == 0);
    proto::RankPlanProto* rank_plan = plan_.add_ranks();
    rank_plan->set_rank(rank);
    rank_plans_[rank] = rank_plan;
    world_size = std::max(world_size, rank + 1);
  }
  plan_.set_world_size(world_size);
  plan_.set_pipeline_depth(1);
}

proto::RankPlanProto& PlanBuilder::rank_plan(int64_t rank) {
  auto it = rank_plans_.find(rank);
  OFL_ASSERT(it != rank_plans_.end());
  return *it->second;
}

proto::TaskProto* PlanBuilder::add_task(int64_t rank, proto::TaskProto::Kind kind,
                                        const std::string& name, int thread) {
  proto::TaskProto* task = rank_plan(rank).add_tasks();
  task->set_id(num_tasks());
  task->set_name(name);
  task->set_rank(rank);
  task->set_kind(kind);
  task->set_thread(thread);
  tasks_.push_back(task);
  return task;
}

int64_t PlanBuilder::add_output(proto::TaskProto* task, const std::string& name, const Shape& shape,
                                DataType dtype, bool persistent) {
  proto::RegisterProto* reg = rank_plan(task->rank()).add_registers();
  const int64_t id = num_registers();
  reg->set_id(id);
  reg->set_name(name);
  to_proto(shape, reg->mutable_shape());
  reg->set_dtype(dtype_name(dtype));
  reg->set_producer(task->id());
  reg->set_register_num(1);
  reg->set_memory_block(-1);
  reg->set_offset(0);
  reg->set_bytes(shape.numel() * static_cast<int64_t>(dtype_size(dtype)));
  reg->set_persistent(persistent);
  registers_.push_back(reg);
  register_ranks_.push_back(task->rank());
  task->add_outputs(id);
  return id;
}

void PlanBuilder::add_input(proto::TaskProto* task, int64_t register_id) {
  OFL_ASSERT(register_id >= 0 && register_id < num_registers());
  OFL_ASSERT(register_ranks_[register_id] == task->rank());
  task->add_inputs(register_id);
  registers_[register_id]->add_consumers(task->id());
}

const proto::TaskProto& PlanBuilder::task(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_tasks());
  return *tasks_[id];
}

const proto::RegisterProto& PlanBuilder::register_proto(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  return *registers_[id];
}

int64_t PlanBuilder::register_rank(int64_t id) const {
  OFL_ASSERT(id >= 0 && id < num_registers());
  return register_ranks_[id];
}

Shape PlanBuilder::register_shape(int64_t id) const {
  return from_proto(register_proto(id).shape());
}

DataType PlanBuilder::register_dtype(int64_t id) const {
  return dtype_from_name(register_proto(id).dtype());
}

proto::PlanProto PlanBuilder::release() {
  tasks_.clear();
  registers_.clear();
  register_ranks_.clear();
  rank_plans_.clear();
  return std::move(plan_);
}

namespace {

void add_region(const std::vector<Range>& region,
                google::protobuf::RepeatedPtrField<proto::RangeProto>* out) {
  for (const Range& r : region) {
    proto::RangeProto* p = out->Add();
    p->set_begin(r.begin);
    p->set_end(r.end);
  }
}

/// Whether this parallel id's piece is the one counted when the logical value is assembled:
/// coordinate 0 on every broadcast dimension (the other replicas hold the same values).
bool contributes(const NdSbp& sbp, const Placement& placement, int64_t parallel_id) {
  const std::vector<int64_t> coord = placement.coordinate(parallel_id);
  for (size_t d = 0; d < sbp.size(); ++d) {
    if (sbp[d].is_broadcast() && coord[d] != 0) return false;
  }
  return true;
}

/// Region, logical shape and SBP of a source or sink task's tensor.
void describe_piece(const TensorMeta& meta, const NdSbp& sbp, const Placement& placement,
                    int64_t parallel_id, proto::TaskProto* task) {
  add_region(logical_region(meta.shape, sbp, placement, parallel_id),
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

/// Expands the graph op by op; registers_[tensor][parallel id] is the tensor's register on
/// each parallel id of its producer's placement.
class Expander {
 public:
  explicit Expander(const Graph& graph)
      : graph_(graph), builder_(graph.all_ranks()), registers_(graph.num_tensors()) {}

  proto::PlanProto run() {
    builder_.plan().set_job_name(graph_.name);
    for (int i : graph_.topological_order()) {
      const LogicalOp& op = graph_.op(i);
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
    }
    for (int t : graph_.fetches) expand_fetch(t);
    return builder_.release();
  }

 private:
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
      proto::TaskProto* task = builder_.add_task(
          op.placement.rank(pid), variable ? proto::TaskProto::VARIABLE : proto::TaskProto::INPUT,
          op.name, /*thread=*/0);
      task->set_logical_op(op.name);
      describe_piece(tensor.meta, sbp, op.placement, pid, task);
      if (variable) {
        initializer_to_proto(op.initializer, task->mutable_initializer());
      } else {
        task->set_contributes(contributes(sbp, op.placement, pid));
      }
      regs.push_back(builder_.add_output(task, tensor.name,
                                         physical_shape(tensor.meta.shape, sbp, op.placement, pid),
                                         tensor.meta.dtype, /*persistent=*/variable));
    }
  }

  /// The registers of input k of `op`, one per parallel id of op's placement.
  const std::vector<int64_t>& input_registers(const LogicalOp& op, size_t k) const {
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
    return registers_[t];
  }

  void expand_compute(const LogicalOp& op) {
    OFL_ASSERT(op.schema != nullptr);
    const int* view_of = op.schema->get<TViewOfInput>();
    const std::vector<int>* mutated = op.schema->get<TMutatedInputs>();
    for (size_t k = 0; k < op.outputs.size(); ++k) check_sbp(op, output_sbp(op, k), "output");
    std::vector<const std::vector<int64_t>*> inputs;
    for (size_t k = 0; k < op.inputs.size(); ++k) inputs.push_back(&input_registers(op, k));
    for (int64_t pid = 0; pid < op.placement.num_ranks(); ++pid) {
      const int64_t rank = op.placement.rank(pid);
      proto::TaskProto* task;
      if (view_of != nullptr) {
        // A view (reshape) has no kernel; in a plan it is a memcpy into its own register.
        task = builder_.add_task(rank, proto::TaskProto::COPY, op.name, /*thread=*/0);
        builder_.add_input(task, (*inputs.at(*view_of))[pid]);
      } else {
        task = builder_.add_task(rank, proto::TaskProto::COMPUTE, op.name, /*thread=*/0);
        task->set_op_type(op.schema->name());
        params_to_proto(*op.schema, op.params, task->mutable_params());
        for (const auto* regs : inputs) builder_.add_input(task, (*regs)[pid]);
        if (mutated != nullptr) {
          for (int m : *mutated) task->add_mutated_inputs(m);
        }
      }
      task->set_logical_op(op.name);
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const LogicalTensor& tensor = graph_.tensor(op.outputs[k]);
        const NdSbp& sbp = output_sbp(op, k);
        if (k == 0) {
          add_region(logical_region(tensor.meta.shape, sbp, op.placement, pid),
                     task->mutable_output_region());
          to_proto(tensor.meta.shape, task->mutable_logical_output_shape());
        }
        registers_[op.outputs[k]].push_back(builder_.add_output(
            task, tensor.name, physical_shape(tensor.meta.shape, sbp, op.placement, pid),
            tensor.meta.dtype));
      }
    }
  }

  void expand_boxing_op(const LogicalOp& op) {
    OFL_ASSERT(op.inputs.size() == 1 && op.outputs.size() == 1);
    const LogicalTensor& in = graph_.tensor(op.inputs[0]);
    const LogicalOp& producer = graph_.op(in.producer);
    const BoxingSpec& spec = op.boxing;
    OFL_ASSERT(producer.placement == spec.in_placement);
    OFL_ASSERT(op.placement == spec.out_placement);
    registers_[op.outputs[0]] =
        expand_boxing(spec, in.meta, registers_[op.inputs[0]], builder_, op.name);
  }

  void expand_fetch(int t) {
    const LogicalTensor& tensor = graph_.tensor(t);
    const LogicalOp& producer = graph_.op(tensor.producer);
    const NdSbp& sbp = output_sbp(producer, tensor.producer_output);
    for (int64_t pid = 0; pid < producer.placement.num_ranks(); ++pid) {
      proto::TaskProto* task =
          builder_.add_task(producer.placement.rank(pid), proto::TaskProto::OUTPUT,
                            str_cat(tensor.name, "/output"), /*thread=*/0);
      task->set_logical_op(tensor.name);  // fetches are named by tensor: an op may have several
      builder_.add_input(task, registers_[t].at(pid));
      describe_piece(tensor.meta, sbp, producer.placement, pid, task);
      task->set_contributes(contributes(sbp, producer.placement, pid));
    }
    builder_.plan().add_fetches(tensor.name);
  }

  const Graph& graph_;
  PlanBuilder builder_;
  std::vector<std::vector<int64_t>> registers_;  // by tensor, then parallel id
};

}  // namespace

proto::PlanProto expand_to_plan(const Graph& graph) { return Expander(graph).run(); }

}  // namespace ofl::compiler::physical
