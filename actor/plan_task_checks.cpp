// PlanIndex::check_task: the registers each task kind reads and writes, their count, dtypes and
// shapes, and the fields the kind needs (part of PlanIndex's checks, see plan_index.h).

#include <algorithm>
#include <set>

#include "actor/pieces.h"
#include "actor/plan_index.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/ops/shape_ops.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = kPlanTag;
using Kind = proto::TaskProto::Kind;

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

// The registers each kind needs, and their shapes.
void PlanIndex::check_task(const proto::PlanProto& plan, int index) {
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
  // A plan step on a GPU that runs op `name`'s kernel for `dtype` with `params` (Note
  // [Micro-batch tasks on a GPU] and Note [Local boxing steps on a GPU] in
  // compiler/physical/expansion.h); a simulated GPU runs the CPU's.
  auto gpu_step_kernel = [&](const char* name, DataType dtype, AnyParams params) {
    const DeviceType device = cpu_kernels_ ? DeviceType::kCPU : DeviceType::kCUDA;
    const OpSchema& op = OpRegistry::global().find(name);
    task.kernel = op.find_kernel(device, dtype);
    task.cuda_kernel = device == DeviceType::kCUDA;
    task.params = std::move(params);
    OFL_CHECK_TYPE(task.kernel != nullptr, kTag, who, " runs on a GPU with the ",
                   device_type_name(device), " kernel of '", name, "' for dtype ",
                   dtype_name(dtype), ". However, kernels exist for ", op.kernel_dtypes(device),
                   ".");
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
                p.kind() == proto::TaskProto::COPY || p.kind() == proto::TaskProto::REPEAT ||
                all_reduce_in_place,
            kTag, who,
            " is marked a view, which only a SLICE, a COPY, a REPEAT or a host all-reduce can be. "
            "However, it is a ",
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
        inputs_by_name_[logical_op_of(p)].push_back(index);
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
        variables_by_name_[logical_op_of(p)].push_back(index);
      }
      break;
    case proto::TaskProto::OUTPUT:
      arity(1, 0);
      read_region();
      same_shape(region_shape(task.region), task.inputs[0], "the size of its output_region");
      outputs_by_name_[logical_op_of(p)].push_back(index);
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
      task.params = params_from_proto(op, params_of(plan, p));
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
      task.cuda_kernel = device == DeviceType::kCUDA;
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
      if (p.device() == proto::PLAN_DEVICE_CUDA && !p.view()) {
        SliceParams params;
        for (const Range& r : slice) {
          params.start.push_back(r.begin);
          params.stop.push_back(r.end);
          params.step.push_back(1);
        }
        gpu_step_kernel("slice", reg(task.inputs[0]).dtype, std::move(params));
      }
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
      if (p.device() == proto::PLAN_DEVICE_CUDA) {
        gpu_step_kernel("add", reg(task.outputs[0]).dtype, AnyParams());
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
      if (p.kind() == proto::TaskProto::ACCUMULATE && p.device() == proto::PLAN_DEVICE_CUDA) {
        gpu_step_kernel("add", reg(task.inputs[0]).dtype, AnyParams());  // out = out + in
      }
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

}  // namespace ofl::actor
