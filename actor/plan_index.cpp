// PlanIndex (see the header): every check that a plan is well formed, done once when it is
// loaded, so the executors only move data.

#include "actor/plan_index.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = "[plan] ";
using Kind = proto::TaskProto::Kind;

std::string kind_name(Kind kind) {
  const std::string& name = proto::TaskProto::Kind_Name(kind);
  return name.empty() ? str_cat("kind ", static_cast<int>(kind)) : name;
}

bool region_fits(const std::vector<Range>& region, const Shape& shape) {
  if (static_cast<int>(region.size()) != shape.ndim()) return false;
  for (int a = 0; a < shape.ndim(); ++a) {
    if (region[a].begin < 0 || region[a].begin > region[a].end || region[a].end > shape[a]) {
      return false;
    }
  }
  return true;
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
  for (int t = 0; t < num_tasks(); ++t) check_task(t);
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
                reg.name(), "' on rank ", rank->rank(), ").");
      RegisterInfo info;
      info.proto = reg;
      info.rank = rank->rank();
      info.shape = from_proto(reg.shape());
      try {
        info.dtype = dtype_from_name(reg.dtype());
      } catch (const Error& e) {
        throw_error(e.code(), str_cat(kTag, "register '", reg.name(), "' (id ", reg.id(),
                                      ") needs a known dtype. ", e.what()));
      }
      // Slot numbers travel in ActorMessage::slot (16 bits).
      OFL_CHECK(reg.register_num() <= std::numeric_limits<int16_t>::max(), kTag, "register '",
                reg.name(), "' may have at most ", std::numeric_limits<int16_t>::max(),
                " slots. However, it has ", reg.register_num(), ".");
      for (int64_t d : info.shape.dims()) {
        OFL_CHECK(d >= 0, kTag, "register '", reg.name(),
                  "' must have a non-negative shape. However, got ", info.shape.to_string(), ".");
      }
      const int64_t needed = info.shape.numel() * static_cast<int64_t>(dtype_size(info.dtype));
      OFL_CHECK(reg.bytes() == 0 || reg.bytes() >= needed, kTag, "register '", reg.name(),
                "' must have room for its shape. However, got bytes=", reg.bytes(), " for ",
                info.shape.to_string(), " ", dtype_name(info.dtype), " (", needed, " bytes).");
      if (reg.memory_block() >= 0) {  // shares a block: one slot, inside the block
        auto block = memory_blocks_.find({rank->rank(), reg.memory_block()});
        OFL_CHECK(block != memory_blocks_.end(), kTag, "register '", reg.name(),
                  "' must be in a memory block of its rank. However, rank ", rank->rank(),
                  " has no block ", reg.memory_block(), ".");
        OFL_CHECK(reg.register_num() <= 1, kTag, "register '", reg.name(),
                  "' must have one slot to share memory block ", reg.memory_block(),
                  ". However, it has ", reg.register_num(), ".");
        OFL_CHECK(reg.offset() >= 0 && reg.offset() + needed <= block->second.bytes, kTag,
                  "register '", reg.name(), "' must lie inside memory block ", reg.memory_block(),
                  " (", block->second.bytes, " bytes). However, it takes bytes [", reg.offset(),
                  ", ", reg.offset() + needed, ").");
        OFL_CHECK(reg.device() == block->second.device, kTag, "register '", reg.name(),
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

// The registers each kind needs, and their shapes.
void PlanIndex::check_task(int index) {
  TaskInfo& task = tasks_[index];
  const proto::TaskProto& p = task.proto;
  const std::string who = describe_task(index);
  auto arity = [&](size_t inputs, size_t outputs) {
    OFL_CHECK(task.inputs.size() == inputs && task.outputs.size() == outputs, kTag, who,
              " must read ", inputs, " and write ", outputs, " registers. However, got ",
              task.inputs.size(), " inputs and ", task.outputs.size(), " outputs.");
  };
  auto same_dtype = [&](int a, int b) {
    OFL_CHECK_TYPE(reg(a).dtype == reg(b).dtype, kTag, who,
                   " must read and write one dtype. However, got ", describe_register(a), " ",
                   dtype_name(reg(a).dtype), " and ", describe_register(b), " ",
                   dtype_name(reg(b).dtype), ".");
  };
  auto same_shape = [&](const Shape& want, int r, const std::string& what) {
    OFL_CHECK(reg(r).shape == want, kTag, who, " needs ", describe_register(r), " of shape ",
              want.to_string(), " (", what, "). However, got ", reg(r).shape.to_string(), ".");
  };
  auto many_to_one = [&]() {  // ADD and CONCAT
    OFL_CHECK(!task.inputs.empty() && task.outputs.size() == 1, kTag, who,
              " must read at least one register and write one. However, got ", task.inputs.size(),
              " inputs and ", task.outputs.size(), " outputs.");
  };
  // The piece of the logical tensor this task holds.
  auto read_region = [&]() {
    task.logical_shape = from_proto(p.logical_output_shape());
    task.region = p.output_region_size() == 0
                      ? whole_region(task.logical_shape)
                      : ranges_from_proto(p.output_region(), 0, p.output_region_size());
    OFL_CHECK(region_fits(task.region, task.logical_shape), kTag, who,
              " must have an output_region inside logical_output_shape. However, got ",
              region_to_string(task.region), " in ", task.logical_shape.to_string(), ".");
  };

  // Note [All-reduces in place] in compiler/physical/in_place_boxing.h.
  const bool all_reduce_in_place = p.kind() == proto::TaskProto::COLLECTIVE &&
                                   p.device() == proto::PLAN_DEVICE_CPU &&
                                   p.collective().op() == proto::CollectiveProto::ALL_REDUCE;
  OFL_CHECK(!p.view() || p.kind() == proto::TaskProto::SLICE ||
                p.kind() == proto::TaskProto::COPY || all_reduce_in_place,
            kTag, who,
            " is marked a view, which only a SLICE, a COPY or a host all-reduce can be. However, "
            "it is a ",
            p.kind() == proto::TaskProto::COLLECTIVE
                ? str_cat(proto::CollectiveProto::Op_Name(p.collective().op()), " on ",
                          proto::PlanDevice_Name(p.device()))
                : proto::TaskProto::Kind_Name(p.kind()),
            ".");
  OFL_CHECK(!p.in_place() || p.kind() == proto::TaskProto::CONCAT, kTag, who,
            " is marked in place, which only a CONCAT can be. However, it is a ",
            proto::TaskProto::Kind_Name(p.kind()), ".");

  // Sources and sinks talk to the caller once per iteration; the micro-batching kinds are the
  // only way in and out of the micro-batch part, so they act in it.
  switch (p.kind()) {
    case proto::TaskProto::INPUT:
    case proto::TaskProto::VARIABLE:
    case proto::TaskProto::OUTPUT:
      OFL_CHECK(!p.per_micro_batch(), kTag, who,
                " must act once per iteration (micro-batches go through UNPACK and PACK). "
                "However, it has per_micro_batch set.");
      break;
    case proto::TaskProto::UNPACK:
    case proto::TaskProto::REPEAT:
    case proto::TaskProto::ACCUMULATE:
    case proto::TaskProto::PACK:
      OFL_CHECK(p.per_micro_batch(), kTag, who,
                " must act once per micro-batch. However, it does not have per_micro_batch set.");
      break;
    default:
      break;
  }
  // UNPACK and PACK: the whole-batch register holds m micro-batch registers.
  auto batch_of = [&](int micro) {
    return str_cat(micro_batches_, " micro-batches of ", describe_register(micro), " ",
                   reg(micro).shape.to_string());
  };

  switch (p.kind()) {
    case proto::TaskProto::INPUT:
    case proto::TaskProto::VARIABLE:
      arity(0, 1);
      OFL_CHECK(!p.logical_op().empty(), kTag, who, " must name its logical op.");
      read_region();
      if (p.kind() == proto::TaskProto::INPUT) {
        for (int64_t consumer : reg(task.outputs[0]).proto.consumers()) {
          task.micro_batched =
              task.micro_batched ||
              tasks_[task_index_.at(consumer)].proto.kind() == proto::TaskProto::UNPACK;
        }
      }
      if (task.micro_batched) {
        OFL_CHECK(task.logical_shape.ndim() >= 1, kTag, who,
                  " is unpacked into micro-batches, so it needs a batch axis. However, got "
                  "logical_output_shape ",
                  task.logical_shape.to_string(), ".");
        Shape all = region_shape(task.region);
        all[0] *= micro_batches_;
        same_shape(all, task.outputs[0],
                   str_cat(micro_batches_, " micro-batches of its output_region"));
      } else {
        same_shape(region_shape(task.region), task.outputs[0], "the size of its output_region");
      }
      if (p.kind() == proto::TaskProto::INPUT) {
        inputs_by_name_[p.logical_op()].push_back(index);
      } else {
        OFL_CHECK(reg(task.outputs[0]).proto.persistent(), kTag, who, " must write a persistent ",
                  "register. However, ", describe_register(task.outputs[0]), " is not.");
        OFL_CHECK(reg(task.outputs[0]).proto.register_num() <= 1, kTag, who,
                  " must write a register of one slot (a variable has one value). However, ",
                  describe_register(task.outputs[0]), " has ",
                  reg(task.outputs[0]).proto.register_num(), " slots.");
        for (const proto::SbpProto& sbp : p.sbp().sbp()) {
          OFL_CHECK(sbp.kind() != proto::SbpProto::PARTIAL_SUM, kTag, who,
                    " must hold a split or broadcast variable. However, got ",
                    nd_sbp_to_string(from_proto(p.sbp())), ".");
        }
        variables_by_name_[p.logical_op()].push_back(index);
      }
      break;
    case proto::TaskProto::OUTPUT:
      arity(1, 0);
      read_region();
      same_shape(region_shape(task.region), task.inputs[0], "the size of its output_region");
      outputs_by_name_[output_name(task)].push_back(index);
      break;
    case proto::TaskProto::COMPUTE: {
      task.op = OpRegistry::global().try_find(p.op_type());
      OFL_CHECK_CODE(task.op != nullptr && task.op->defined(), ErrorCode::kNotFound, kTag, who,
                     " must run a registered op. However, got op_type '", p.op_type(), "'.");
      const OpSchema& op = *task.op;
      OFL_CHECK(!op.has<TViewOfInput>(), kTag, who, " runs '", op.name(),
                "', a view op without a kernel: a plan must make it a COPY task.");
      OFL_CHECK(op.has_variadic_inputs() || task.inputs.size() == op.input_names().size(), kTag,
                who, " must read the ", op.input_names().size(), " inputs of '", op.name(),
                "'. However, got ", task.inputs.size(), ".");
      OFL_CHECK(op.has_variadic_outputs() || task.outputs.size() == op.output_names().size(), kTag,
                who, " must write the ", op.output_names().size(), " outputs of '", op.name(),
                "'. However, got ", task.outputs.size(), ".");
      task.params = params_from_proto(op, p.params());
      OFL_CHECK(!task.inputs.empty() || !task.outputs.empty(), kTag, who,
                " must read or write a register.");
      std::vector<DataType> input_dtypes;
      for (int64_t id : task.inputs) input_dtypes.push_back(reg(id).dtype);
      const DataType dtype = op.kernel_dtype(
          input_dtypes, task.outputs.empty() ? std::nullopt
                                             : std::optional<DataType>(reg(task.outputs[0]).dtype));
      const DeviceType device = p.device() == proto::PLAN_DEVICE_CUDA && !cpu_kernels_
                                    ? DeviceType::kCUDA
                                    : DeviceType::kCPU;
      task.kernel = op.find_kernel(device, dtype);
      OFL_CHECK_TYPE(task.kernel != nullptr, kTag, who, " needs a ", device_type_name(device),
                     " kernel of '", op.name(), "' for dtype ", dtype_name(dtype),
                     ". However, kernels exist for ", op.kernel_dtypes(device), ".");
      for (int i : p.mutated_inputs()) {
        OFL_CHECK_INDEX(i >= 0 && i < static_cast<int>(task.inputs.size()), kTag, who,
                        " must mutate one of its inputs. However, got mutated input ", i, ".");
      }
      if (p.output_region_size() > 0) {
        read_region();
        if (!task.outputs.empty()) {
          same_shape(region_shape(task.region), task.outputs[0], "the size of its output_region");
        }
      }
      break;
    }
    case proto::TaskProto::SLICE: {
      arity(1, 1);
      same_dtype(task.inputs[0], task.outputs[0]);
      const Shape& in = reg(task.inputs[0]).shape;
      std::vector<Range> slice = ranges_from_proto(p.slice(), 0, p.slice_size());
      OFL_CHECK(region_fits(slice, in), kTag, who, " must slice a region inside its input ",
                in.to_string(), ". However, got ", region_to_string(slice), ".");
      same_shape(region_shape(slice), task.outputs[0], "the size of its slice");
      OFL_CHECK(!p.view() || contiguous_offset(in, slice).has_value(), kTag, who,
                " is a view, so its region must be one contiguous run of its input ",
                in.to_string(), ". However, got ", region_to_string(slice), ".");
      task.regions.push_back(std::move(slice));
      break;
    }
    case proto::TaskProto::SEND:
      arity(1, 0);
      break;
    case proto::TaskProto::RECV:
      arity(0, 1);
      break;
    case proto::TaskProto::ADD:
      many_to_one();
      for (int r : task.inputs) {
        same_dtype(r, task.outputs[0]);
        same_shape(reg(task.outputs[0]).shape, r, "the shape of its output");
      }
      break;
    case proto::TaskProto::CONCAT: {
      many_to_one();
      const Shape& out = reg(task.outputs[0]).shape;
      const int nd = out.ndim();
      OFL_CHECK(p.concat_regions_size() == nd * static_cast<int>(task.inputs.size()), kTag, who,
                " must have ", nd, " concat_regions per input (", task.inputs.size(),
                " inputs). However, got ", p.concat_regions_size(), ".");
      for (size_t i = 0; i < task.inputs.size(); ++i) {
        std::vector<Range> region = ranges_from_proto(p.concat_regions(), i * nd, nd);
        OFL_CHECK(region_fits(region, out), kTag, who, " must place input ", i,
                  " inside its output ", out.to_string(), ". However, got ",
                  region_to_string(region), ".");
        same_dtype(task.inputs[i], task.outputs[0]);
        same_shape(region_shape(region), task.inputs[i], "the size of its concat region");
        OFL_CHECK(!p.in_place() || contiguous_offset(out, region).has_value(), kTag, who,
                  " is in place, so input ", i, "'s region must be one contiguous run of its ",
                  "output ", out.to_string(), ". However, got ", region_to_string(region), ".");
        task.regions.push_back(std::move(region));
      }
      if (p.in_place()) {
        OFL_CHECK(regions_tile(task.regions, out), kTag, who,
                  " is in place, so its regions must cover its output ", out.to_string(),
                  " exactly once.");
        std::set<int> distinct(task.inputs.begin(), task.inputs.end());
        OFL_CHECK(distinct.size() == task.inputs.size(), kTag, who,
                  " is in place, so it must read each register once.");
        std::vector<int> registers = task.inputs;
        registers.push_back(task.outputs[0]);
        for (int r : registers) {
          OFL_CHECK(reg(r).proto.register_num() <= 1 && !reg(r).proto.persistent(), kTag, who,
                    " is in place, so ", describe_register(r), " must be transient with one slot.");
        }
      }
      break;
    }
    case proto::TaskProto::ZEROS:
      arity(0, 1);
      break;
    case proto::TaskProto::COPY:
    case proto::TaskProto::COPY_H2D:
    case proto::TaskProto::COPY_D2H:
      arity(1, 1);
      same_dtype(task.inputs[0], task.outputs[0]);
      OFL_CHECK(reg(task.inputs[0]).shape.numel() == reg(task.outputs[0]).shape.numel(), kTag, who,
                " must copy between registers of one size. However, got ",
                describe_register(task.inputs[0]), " ", reg(task.inputs[0]).shape.to_string(),
                " and ", describe_register(task.outputs[0]), " ",
                reg(task.outputs[0]).shape.to_string(), ".");
      break;
    case proto::TaskProto::UNPACK: {  // (m * r0, r1, ...) -> (r0, r1, ...)
      arity(1, 1);
      same_dtype(task.inputs[0], task.outputs[0]);
      Shape all = reg(task.outputs[0]).shape;
      OFL_CHECK(all.ndim() >= 1, kTag, who, " needs a batch axis in ",
                describe_register(task.outputs[0]), ". However, got shape ", all.to_string(), ".");
      all[0] *= micro_batches_;
      same_shape(all, task.inputs[0], batch_of(task.outputs[0]));
      break;
    }
    case proto::TaskProto::PACK: {  // (r0, ...) -> (m, r0, ...)
      arity(1, 1);
      same_dtype(task.inputs[0], task.outputs[0]);
      std::vector<int64_t> dims = reg(task.inputs[0]).shape.dims();
      dims.insert(dims.begin(), micro_batches_);
      same_shape(Shape(std::move(dims)), task.outputs[0], batch_of(task.inputs[0]));
      break;
    }
    case proto::TaskProto::REPEAT:
    case proto::TaskProto::ACCUMULATE:
      arity(1, 1);
      same_dtype(task.inputs[0], task.outputs[0]);
      same_shape(reg(task.inputs[0]).shape, task.outputs[0], "the shape of its input");
      break;
    case proto::TaskProto::COLLECTIVE: {  // Note [Collective tasks] in oneflowlike/collective.h
      const proto::CollectiveProto& c = p.collective();
      const auto member = std::find(c.members().begin(), c.members().end(), p.rank());
      task.member_index = static_cast<int>(member - c.members().begin());  // a member: contract
      const int64_t n = c.members_size();
      if (c.op() == proto::CollectiveProto::BROADCAST) {  // only the root reads its tensor
        OFL_CHECK(c.root() >= 0 && c.root() < n, kTag, who, " must broadcast from one of its ", n,
                  " members. However, its root is ", c.root(), ".");
        if (c.root() != task.member_index) {
          arity(0, 1);
          break;
        }
        arity(1, 1);
        same_dtype(task.inputs[0], task.outputs[0]);
        same_shape(reg(task.inputs[0]).shape, task.outputs[0], "the shape of its input");
        break;
      }
      const bool reads = c.op() != proto::CollectiveProto::SEND_RECV || c.sends_size() > 0;
      arity(reads ? 1 : 0, 1);  // a grouped send/recv's member that sends nothing reads nothing
      if (reads) same_dtype(task.inputs[0], task.outputs[0]);
      const Shape in = reads ? reg(task.inputs[0]).shape : Shape{};
      if (c.scratch_in_block()) {  // Note [Collective scratch] in oneflowlike/collective.h
        const auto block = memory_blocks_.find({p.rank(), c.scratch_block()});
        OFL_CHECK(block != memory_blocks_.end() && c.scratch_bytes() >= 0 &&
                      c.scratch_offset() >= 0 &&
                      c.scratch_offset() + c.scratch_bytes() <= block->second.bytes,
                  kTag, who, "'s scratch must lie inside memory block ", c.scratch_block(),
                  " of rank ", p.rank(), ". However, it takes bytes [", c.scratch_offset(), ", ",
                  c.scratch_offset() + c.scratch_bytes(), ")",
                  block == memory_blocks_.end() ? " and the rank has no such block"
                                                : str_cat(" of ", block->second.bytes),
                  ".");
      }
      const Shape whole = collective_whole(c, in, reg(task.outputs[0]).shape);
      if (c.op() == proto::CollectiveProto::SEND_RECV) {  // blocks inside their registers
        const CollectiveBlocks blocks =
            collective_blocks(c, task.member_index, in, reg(task.outputs[0]).shape);
        for (const auto* list : {&blocks.sends, &blocks.receives}) {
          const bool sends = list == &blocks.sends;
          const Shape& frame = sends ? in : reg(task.outputs[0]).shape;
          for (const CollectiveBlock& b : *list) {
            OFL_CHECK(b.member >= 0 && b.member < n &&
                          static_cast<int>(b.region.size()) == frame.ndim() &&
                          region_fits(b.region, frame),
                      kTag, who, "'s block ", sends ? "to" : "from", " member ", b.member,
                      " must be a region of its ", sends ? "input " : "output ", frame.to_string(),
                      " and name one of its ", n, " members. However, got region ",
                      region_to_string(b.region), ".");
          }
        }
        break;
      }
      OFL_CHECK(
          c.axis() >= -1 && c.axis() < whole.ndim(), kTag, who, " must chunk its ",
          c.op() == proto::CollectiveProto::ALL_GATHER ? "output " : "input ", whole.to_string(),
          " along one of its axes or its flat elements (-1). However, got axis ", c.axis(), ".");
      if (c.op() == proto::CollectiveProto::ALL_REDUCE) {
        same_shape(in, task.outputs[0], "the shape of its input");
        break;
      }
      if (c.op() == proto::CollectiveProto::ALL_TO_ALL) {
        OFL_CHECK(c.axis() >= 0 && c.out_axis() >= 0 && c.out_axis() < whole.ndim() &&
                      c.axis() != c.out_axis(),
                  kTag, who, " must move its input's chunks along one axis of ", whole.to_string(),
                  " to chunks along another. However, got axis ", c.axis(), " and out_axis ",
                  c.out_axis(), ".");
        same_shape(region_shape(collective_chunks(whole, c.axis(), n)[task.member_index]),
                   task.inputs[0],
                   str_cat("chunk ", task.member_index, " of ", n, " of ", whole.to_string(),
                           " along axis ", c.axis()));
        same_shape(region_shape(collective_chunks(whole, c.out_axis(), n)[task.member_index]),
                   task.outputs[0],
                   str_cat("chunk ", task.member_index, " of ", n, " of ", whole.to_string(),
                           " along axis ", c.out_axis()));
        break;
      }
      // The member's chunk of the whole: the output of a reduce-scatter, the input of a gather.
      const std::vector<Range> chunk = collective_chunks(whole, c.axis(), n)[task.member_index];
      const int part =
          c.op() == proto::CollectiveProto::REDUCE_SCATTER ? task.outputs[0] : task.inputs[0];
      const std::string what =
          str_cat("chunk ", task.member_index, " of ", n, " of its ",
                  part == task.outputs[0] ? "input " : "output ", whole.to_string());
      if (c.axis() >= 0) {
        same_shape(region_shape(chunk), part, str_cat(what, " along axis ", c.axis()));
      } else {
        const int64_t elements = chunk[0].end - chunk[0].begin;
        OFL_CHECK(reg(part).shape.numel() == elements, kTag, who, " needs ",
                  describe_register(part), " of ", elements, " elements (", what,
                  " as flat elements). However, got ", reg(part).shape.to_string(), ".");
      }
      break;
    }
    default:
      OFL_CHECK(false, kTag, who, " has an unknown kind.");
  }
}

// Pairs every SEND with one RECV: same transfer_id, each naming the other's rank, same data.
bool PlanIndex::has_rank(int64_t rank) const {
  return std::binary_search(ranks_.begin(), ranks_.end(), rank);
}

// Each RECV's SEND, when both are in this plan (the plan contract checked that they match).
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
  return str_cat("register '", registers_[reg].proto.name(), "' (id ", registers_[reg].proto.id(),
                 ")");
}

std::string PlanIndex::output_name(const TaskInfo& task) const {
  return task.proto.logical_op().empty() ? registers_[task.inputs[0]].proto.name()
                                         : task.proto.logical_op();
}

}  // namespace ofl::actor
