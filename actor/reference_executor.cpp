// The reference executor (Note [Reference execution] in the header). Every check that a plan is
// well formed happens in the constructor, so run() only moves data.

#include "actor/reference_executor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>
#include <set>
#include <type_traits>

#include "oneflowlike/ops/random.h"
#include "oneflowlike/proto_convert.h"
#include "oneflowlike/sbp.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = "[reference_executor] ";
using Kind = proto::TaskProto::Kind;

std::string kind_name(Kind kind) {
  const std::string& name = proto::TaskProto::Kind_Name(kind);
  return name.empty() ? str_cat("kind ", static_cast<int>(kind)) : name;
}

std::vector<Range> whole(const Shape& shape) {
  std::vector<Range> region;
  for (int64_t d : shape.dims()) region.push_back(Range{0, d});
  return region;
}

Shape region_shape(const std::vector<Range>& region) {
  std::vector<int64_t> dims;
  for (const Range& r : region) dims.push_back(r.size());
  return Shape(std::move(dims));
}

// "[0:2, 0:3]"
std::string region_to_string(const std::vector<Range>& region) {
  std::string s = "[";
  for (size_t i = 0; i < region.size(); ++i) {
    s += str_cat(i ? ", " : "", region[i].begin, ":", region[i].end);
  }
  return s + "]";
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

std::vector<Range> ranges_from_proto(
    const google::protobuf::RepeatedPtrField<proto::RangeProto>& in, int begin, int count) {
  std::vector<Range> out;
  for (int i = begin; i < begin + count; ++i) out.push_back(Range{in[i].begin(), in[i].end()});
  return out;
}

// Calls fn(src_offset, dst_offset, count), in elements, for each innermost row of two regions of
// equal sizes in two row-major tensors.
template <class F>
void for_each_row(const Shape& src_shape, const std::vector<Range>& src_region,
                  const Shape& dst_shape, const std::vector<Range>& dst_region, F fn) {
  const int nd = src_shape.ndim();
  if (nd == 0) {
    fn(0, 0, 1);
    return;
  }
  const Shape sizes = region_shape(src_region);
  OFL_ASSERT(sizes == region_shape(dst_region));
  if (sizes.numel() == 0) return;
  const std::vector<int64_t> src_strides = src_shape.strides();
  const std::vector<int64_t> dst_strides = dst_shape.strides();
  std::vector<int64_t> index(nd - 1, 0);  // position inside the region on the leading axes
  while (true) {
    int64_t s = src_region[nd - 1].begin;
    int64_t d = dst_region[nd - 1].begin;
    for (int a = 0; a < nd - 1; ++a) {
      s += (src_region[a].begin + index[a]) * src_strides[a];
      d += (dst_region[a].begin + index[a]) * dst_strides[a];
    }
    fn(s, d, sizes[nd - 1]);
    int a = nd - 2;
    for (; a >= 0; --a) {
      if (++index[a] < sizes[a]) break;
      index[a] = 0;
    }
    if (a < 0) return;
  }
}

// dst[dst_region] = src[src_region]
void copy_region(const Tensor& src, const std::vector<Range>& src_region, const Tensor& dst,
                 const std::vector<Range>& dst_region) {
  OFL_ASSERT(src.dtype() == dst.dtype());
  const size_t elem = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  for_each_row(src.shape(), src_region, dst.shape(), dst_region,
               [&](int64_t so, int64_t dof, int64_t n) {
                 std::memcpy(d + dof * elem, s + so * elem, n * elem);
               });
}

template <class T>
T sum_of(T a, T b) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(a) + static_cast<float>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return static_cast<T>(a + b);
  }
}

// dst[dst_region] += src[src_region]
void add_region(const Tensor& src, const std::vector<Range>& src_region, const Tensor& dst,
                const std::vector<Range>& dst_region) {
  OFL_ASSERT(src.dtype() == dst.dtype());
  visit_dtype(src.dtype(), [&]<class T>() {
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    for_each_row(src.shape(), src_region, dst.shape(), dst_region,
                 [&](int64_t so, int64_t dof, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) d[dof + i] = sum_of(d[dof + i], s[so + i]);
                 });
  });
}

void fill(const Tensor& t, double value) {
  const Tensor one = Tensor::scalar(value, t.dtype());
  const size_t elem = dtype_size(t.dtype());
  char* d = static_cast<char*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(d + i * elem, one.raw_data(), elem);
}

std::string names_of(const std::map<std::string, Tensor>& tensors) {
  if (tensors.empty()) return "no inputs";
  std::string s;
  for (const auto& [name, tensor] : tensors) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}

}  // namespace

ReferenceExecutor::ReferenceExecutor(proto::PlanProto plan) {
  OFL_CHECK(plan.micro_batches() >= 0, kTag,
            "a plan must have a non-negative micro_batches. However, got ", plan.micro_batches(),
            ".");
  micro_batches_ = std::max(1, plan.micro_batches());
  index_plan(plan);
  for (int t = 0; t < static_cast<int>(tasks_.size()); ++t) check_task(t);
  check_transfers();
  check_pieces(inputs_by_name_, "INPUT");
  check_pieces(outputs_by_name_, "OUTPUT");
  check_pieces(variables_by_name_, "VARIABLE");
  compute_schedule();
  values_.resize(registers_.size());
  in_flight_.resize(tasks_.size());
  // Variables read as zeros until initialize_variables() or write_variable().
  for (const auto& [name, pieces] : variables_by_name_) {
    for (int t : pieces) {
      const RegisterInfo& reg = registers_[tasks_[t].outputs[0]];
      values_[tasks_[t].outputs[0]] = Tensor::zeros(reg.shape, reg.dtype);
    }
  }
}

// Copies tasks and registers out of the plan in (rank, position) order and resolves ids.
void ReferenceExecutor::index_plan(const proto::PlanProto& plan) {
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
      for (int64_t d : info.shape.dims()) {
        OFL_CHECK(d >= 0, kTag, "register '", reg.name(),
                  "' must have a non-negative shape. However, got ", info.shape.to_string(), ".");
      }
      const int64_t needed = info.shape.numel() * static_cast<int64_t>(dtype_size(info.dtype));
      OFL_CHECK(reg.bytes() == 0 || reg.bytes() >= needed, kTag, "register '", reg.name(),
                "' must have room for its shape. However, got bytes=", reg.bytes(), " for ",
                info.shape.to_string(), " ", dtype_name(info.dtype), " (", needed, " bytes).");
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
      for (int64_t id : listed) got += str_cat(got.empty() ? "" : ", ", id);
      OFL_CHECK(false, kTag, describe_register(r),
                " must list the tasks that read it as consumers ([", want, "]). However, got [",
                got, "].");
    }
  }
}

// The registers each kind needs, and their shapes.
void ReferenceExecutor::check_task(int index) {
  TaskInfo& task = tasks_[index];
  const proto::TaskProto& p = task.proto;
  const std::string who = describe_task(index);
  auto arity = [&](size_t inputs, size_t outputs) {
    OFL_CHECK(task.inputs.size() == inputs && task.outputs.size() == outputs, kTag, who,
              " must read ", inputs, " and write ", outputs, " registers. However, got ",
              task.inputs.size(), " inputs and ", task.outputs.size(), " outputs.");
  };
  auto reg = [&](int r) -> const RegisterInfo& { return registers_[r]; };
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
  // The piece of the logical tensor this task holds.
  auto read_region = [&]() {
    task.logical_shape = from_proto(p.logical_output_shape());
    task.region = p.output_region_size() == 0
                      ? whole(task.logical_shape)
                      : ranges_from_proto(p.output_region(), 0, p.output_region_size());
    OFL_CHECK(region_fits(task.region, task.logical_shape), kTag, who,
              " must have an output_region inside logical_output_shape. However, got ",
              region_to_string(task.region), " in ", task.logical_shape.to_string(), ".");
  };

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
      const int* dtype_from = op.get<TKernelDtypeFrom>();
      const int which = dtype_from ? *dtype_from : 0;
      OFL_CHECK(!task.inputs.empty() || !task.outputs.empty(), kTag, who,
                " must read or write a register.");
      const DataType dtype = (which < 0 || task.inputs.empty()) ? reg(task.outputs.at(0)).dtype
                                                                : reg(task.inputs.at(which)).dtype;
      task.kernel = op.find_kernel(DeviceType::kCPU, dtype);
      OFL_CHECK_TYPE(task.kernel != nullptr, kTag, who, " needs a cpu kernel of '", op.name(),
                     "' for dtype ", dtype_name(dtype), ". However, kernels exist for ",
                     op.kernel_dtypes(DeviceType::kCPU), ".");
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
      OFL_CHECK(!task.inputs.empty() && task.outputs.size() == 1, kTag, who,
                " must read at least one register and write one. However, got ", task.inputs.size(),
                " inputs and ", task.outputs.size(), " outputs.");
      for (int r : task.inputs) {
        same_dtype(r, task.outputs[0]);
        same_shape(reg(task.outputs[0]).shape, r, "the shape of its output");
      }
      break;
    case proto::TaskProto::CONCAT: {
      OFL_CHECK(!task.inputs.empty() && task.outputs.size() == 1, kTag, who,
                " must read at least one register and write one. However, got ", task.inputs.size(),
                " inputs and ", task.outputs.size(), " outputs.");
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
        task.regions.push_back(std::move(region));
      }
      break;
    }
    case proto::TaskProto::ZEROS:
      arity(0, 1);
      break;
    case proto::TaskProto::COPY:
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
    default:
      OFL_CHECK(false, kTag, who, " has an unknown kind.");
  }
}

// Pairs every SEND with one RECV: same transfer_id, each naming the other's rank, same data.
void ReferenceExecutor::check_transfers() {
  std::map<int64_t, int> sends;  // transfer_id -> task
  for (int t = 0; t < static_cast<int>(tasks_.size()); ++t) {
    if (tasks_[t].proto.kind() != proto::TaskProto::SEND) continue;
    auto [it, inserted] = sends.emplace(tasks_[t].proto.transfer_id(), t);
    OFL_CHECK(inserted, kTag, "each transfer_id must belong to one SEND. However, ",
              describe_task(it->second), " and ", describe_task(t), " both use transfer_id ",
              tasks_[t].proto.transfer_id(), ".");
  }
  std::set<int> matched;
  for (int t = 0; t < static_cast<int>(tasks_.size()); ++t) {
    TaskInfo& recv = tasks_[t];
    if (recv.proto.kind() != proto::TaskProto::RECV) continue;
    auto it = sends.find(recv.proto.transfer_id());
    OFL_CHECK(it != sends.end(), kTag, describe_task(t), " must have a SEND with transfer_id ",
              recv.proto.transfer_id(), ". However, no SEND has it.");
    const int s = it->second;
    OFL_CHECK(matched.insert(s).second, kTag, describe_task(s),
              " must have one RECV. However, several RECV tasks use transfer_id ",
              recv.proto.transfer_id(), ", among them ", describe_task(t), ".");
    const TaskInfo& send = tasks_[s];
    OFL_CHECK(send.proto.peer() == recv.proto.rank() && recv.proto.peer() == send.proto.rank(),
              kTag, describe_task(s), " and ", describe_task(t),
              " must name each other's rank as peer. However, got peers ", send.proto.peer(),
              " and ", recv.proto.peer(), ".");
    const RegisterInfo& in = registers_[send.inputs[0]];
    const RegisterInfo& out = registers_[recv.outputs[0]];
    OFL_CHECK(in.shape == out.shape && in.dtype == out.dtype, kTag, describe_task(t),
              " must receive what ", describe_task(s), " sends. However, it sends ",
              in.shape.to_string(), " ", dtype_name(in.dtype), " and receives ",
              out.shape.to_string(), " ", dtype_name(out.dtype), ".");
    recv.send = s;
  }
  for (const auto& [transfer_id, s] : sends) {
    OFL_CHECK(matched.count(s) > 0, kTag, describe_task(s), " must have a RECV with transfer_id ",
              transfer_id, ". However, no RECV has it.");
  }
}

// The pieces of one logical tensor agree on its logical shape and dtype (and initializer).
void ReferenceExecutor::check_pieces(const NameIndex& pieces, const char* kind) const {
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
    OFL_CHECK(std::string(kind) != "OUTPUT" || contributes, kTag, "some OUTPUT piece of '", name,
              "' must contribute to the fetched value. However, none of its ", tasks.size(),
              " pieces does.");
  }
}

// Every task's predecessors: the producers of its input registers, its control inputs and, for
// a RECV, the SEND with its transfer_id.
std::vector<std::vector<ReferenceExecutor::Edge>> ReferenceExecutor::predecessor_edges() const {
  const int n = static_cast<int>(tasks_.size());
  std::vector<std::vector<Edge>> predecessors(n);
  for (int t = 0; t < n; ++t) {
    const TaskInfo& task = tasks_[t];
    for (int r : task.inputs) {
      predecessors[t].push_back(Edge{registers_[r].producer, EdgeKind::kData, r});
    }
    for (int64_t id : task.proto.control_inputs()) {
      auto it = task_index_.find(id);
      OFL_CHECK(it != task_index_.end(), kTag, describe_task(t), " has control input task id ", id,
                ", which the plan does not have.");
      predecessors[t].push_back(Edge{it->second, EdgeKind::kControl, -1});
    }
    if (task.send >= 0) predecessors[t].push_back(Edge{task.send, EdgeKind::kTransfer, -1});
  }
  return predecessors;
}

// The tasks of `member` in execution order: repeatedly the lowest (rank, position) one whose
// predecessors in `member` acted (the others count as acted). `waiting` gets, per task, how many
// of its predecessors never acted: non-zero only for tasks stuck on a cycle.
std::vector<int> ReferenceExecutor::order_tasks(const std::vector<std::vector<Edge>>& predecessors,
                                                const std::vector<bool>& member,
                                                std::vector<int>* waiting) const {
  const int n = static_cast<int>(tasks_.size());
  std::vector<std::vector<int>> successors(n);
  waiting->assign(n, 0);  // counted with repeats
  for (int t = 0; t < n; ++t) {
    if (!member[t]) continue;
    for (const Edge& e : predecessors[t]) {
      if (!member[e.from]) continue;
      successors[e.from].push_back(t);
      ++(*waiting)[t];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int t = 0; t < n; ++t) {
    if (member[t] && (*waiting)[t] == 0) ready.push(t);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int t = ready.top();
    ready.pop();
    order.push_back(t);
    for (int s : successors[t]) {
      if (--(*waiting)[s] == 0) ready.push(s);
    }
  }
  return order;
}

// Note [Micro-batches] in plan.proto: data enters the micro-batch part only through UNPACK and
// REPEAT and leaves it only through ACCUMULATE and PACK, whose outputs are complete only after
// the last micro-batch. A control input on a per-micro-batch task carries no data: it orders the
// once task after the last micro-batch (an in-place update after every micro-batch's REPEAT of
// the variable). Marks in `after` the once tasks that so depend on the micro-batch part; they
// run after it. `order` is a topological order of all tasks.
void ReferenceExecutor::check_micro_batch_edges(const std::vector<std::vector<Edge>>& predecessors,
                                                const std::vector<int>& order,
                                                std::vector<bool>* after) const {
  auto is = [&](int t, Kind a, Kind b) {
    const Kind kind = tasks_[t].proto.kind();
    return kind == a || kind == b;
  };
  std::vector<std::string> why(tasks_.size());  // after[t]: the edge that put t after
  for (int t : order) {
    for (const Edge& e : predecessors[t]) {
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
        OFL_CHECK(!(*after)[p], kTag,
                  "a per-micro-batch task must not wait for a once-per-iteration task that runs ",
                  "after the micro-batches. However, ", describe_edge(t, e), ", which runs after ",
                  "them because ", why[p], ".");
      }
      if (!per_micro(t) && !(*after)[t] && (per_micro(p) || (*after)[p])) {
        (*after)[t] = true;
        why[t] = describe_edge(t, e);
      }
    }
  }
}

// The execution order (Note [Reference execution] in the header): the once tasks before the
// micro-batches, the per-micro-batch tasks for each micro-batch, the once tasks after them.
void ReferenceExecutor::compute_schedule() {
  const int n = static_cast<int>(tasks_.size());
  const std::vector<std::vector<Edge>> predecessors = predecessor_edges();
  std::vector<int> waiting;
  const std::vector<int> order = order_tasks(predecessors, std::vector<bool>(n, true), &waiting);
  if (static_cast<int>(order.size()) < n) {
    // Name every task that can never act and what it waits for.
    std::string report;
    int listed = 0;
    const int stuck = n - static_cast<int>(order.size());
    for (int t = 0; t < n && listed < 10; ++t) {
      if (waiting[t] == 0) continue;
      ++listed;
      std::string waits;
      for (const Edge& e : predecessors[t]) {
        if (waiting[e.from] == 0) continue;
        std::string what = describe_task(e.from);
        if (e.kind == EdgeKind::kData) {
          what = str_cat(describe_register(e.reg), " from ", what);
        } else if (e.kind == EdgeKind::kControl) {
          what = "control input " + what;
        }
        waits += (waits.empty() ? "" : ", ") + what;
      }
      report += str_cat("\n  ", describe_task(t), " waits for ", waits);
    }
    if (stuck > listed) report += str_cat("\n  and ", stuck - listed, " more");
    OFL_CHECK(false, kTag, "every task must be able to act (no cycle through data, control ",
              "inputs or transfers). However, ", stuck, " tasks can never act:", report);
  }

  std::vector<bool> after(n, false);
  check_micro_batch_edges(predecessors, order, &after);
  std::vector<bool> before(n), micro(n);
  for (int t = 0; t < n; ++t) {
    micro[t] = per_micro(t);
    before[t] = !micro[t] && !after[t];
  }
  for (int t : order_tasks(predecessors, before, &waiting)) schedule_.push_back(Step{t, 0});
  const std::vector<int> micro_order = order_tasks(predecessors, micro, &waiting);
  for (int k = 0; k < micro_batches_; ++k) {
    for (int t : micro_order) schedule_.push_back(Step{t, k});
  }
  for (int t : order_tasks(predecessors, after, &waiting)) schedule_.push_back(Step{t, 0});
  OFL_ASSERT(static_cast<int>(schedule_.size()) ==
             n + (micro_batches_ - 1) * static_cast<int>(micro_order.size()));
}

std::string ReferenceExecutor::describe_task(int task) const {
  const proto::TaskProto& p = tasks_[task].proto;
  std::string kind = kind_name(p.kind());
  if (p.kind() == proto::TaskProto::COMPUTE) kind += " " + p.op_type();
  if (p.per_micro_batch()) kind += ", per micro-batch";
  return str_cat("task '", p.name(), "' (id ", p.id(), ", rank ", p.rank(), ", ", kind, ")");
}

// "task 'a' (...) reads register 'r' (id 3) of task 'b' (...)"
std::string ReferenceExecutor::describe_edge(int task, const Edge& edge) const {
  switch (edge.kind) {
    case EdgeKind::kData:
      return str_cat(describe_task(task), " reads ", describe_register(edge.reg), " of ",
                     describe_task(edge.from));
    case EdgeKind::kControl:
      return str_cat(describe_task(task), " has a control input on ", describe_task(edge.from));
    case EdgeKind::kTransfer:
      return str_cat(describe_task(task), " receives from ", describe_task(edge.from));
  }
  return "";
}

std::string ReferenceExecutor::describe_register(int reg) const {
  return str_cat("register '", registers_[reg].proto.name(), "' (id ", registers_[reg].proto.id(),
                 ")");
}

std::string ReferenceExecutor::output_name(const TaskInfo& task) const {
  return task.proto.logical_op().empty() ? registers_[task.inputs[0]].proto.name()
                                         : task.proto.logical_op();
}

void ReferenceExecutor::initialize_variables() {
  for (const auto& [name, pieces] : variables_by_name_) {
    for (int t : pieces) {
      const TaskInfo& task = tasks_[t];
      const Tensor& value = values_[task.outputs[0]];
      const proto::InitializerProto& init = task.proto.initializer();
      switch (init.kind()) {
        case proto::InitializerProto::ZEROS:
          fill(value, 0.0);
          break;
        case proto::InitializerProto::ONES:
          fill(value, 1.0);
          break;
        case proto::InitializerProto::CONSTANT:
          fill(value, init.a());
          break;
        case proto::InitializerProto::NORMAL:
        case proto::InitializerProto::UNIFORM: {
          // The random kernels draw each element from its logical index, so every piece holds
          // the values of the one-device tensor at its region.
          const OpSchema& op = OpRegistry::global().find(
              init.kind() == proto::InitializerProto::NORMAL ? "random_normal" : "random_uniform");
          const AnyParams params =
              RandomParams{task.logical_shape, value.dtype(), init.a(), init.b(), init.seed(), 0};
          op.infer(params, {});  // rejects a bad dtype or distribution, naming the op
          const KernelFn kernel = op.find_kernel(DeviceType::kCPU, value.dtype());
          OFL_ASSERT(kernel != nullptr);
          const std::vector<Tensor> inputs;
          const std::vector<Tensor> outputs = {value};
          KernelContext ctx{params, inputs, outputs};
          ctx.output_region = &task.region;
          ctx.logical_output_shape = &task.logical_shape;
          kernel(ctx);
          break;
        }
        default:
          OFL_CHECK(false, kTag, describe_task(t), " has an unknown initializer kind ",
                    static_cast<int>(init.kind()), ".");
      }
    }
  }
}

std::map<std::string, Tensor> ReferenceExecutor::run(const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, tensor] : inputs) {
    OFL_CHECK(inputs_by_name_.count(name) > 0, kTag, "every fed tensor must be an input of the ",
              "plan. However, got '", name, "', which no INPUT task takes.");
  }
  std::vector<std::pair<int, Tensor>> fetched;
  for (const Step& step : schedule_) act(step.task, step.micro_batch, inputs, &fetched);
  ++iteration_;

  std::map<std::string, Tensor> results;
  for (const auto& [name, pieces] : outputs_by_name_) {
    const TaskInfo& first = tasks_[pieces[0]];
    results[name] = Tensor::zeros(first.logical_shape, registers_[first.inputs[0]].dtype);
  }
  for (const auto& [t, piece] : fetched) {
    const TaskInfo& task = tasks_[t];
    if (task.proto.contributes()) {
      add_region(piece, whole(piece.shape()), results.at(output_name(task)), task.region);
    }
  }
  // Free this iteration's registers; variables keep theirs.
  for (int r = 0; r < static_cast<int>(registers_.size()); ++r) {
    if (tasks_[registers_[r].producer].proto.kind() != proto::TaskProto::VARIABLE) {
      values_[r] = Tensor();
    }
  }
  return results;
}

void ReferenceExecutor::act(int t, int micro_batch, const std::map<std::string, Tensor>& inputs,
                            std::vector<std::pair<int, Tensor>>* fetched) {
  const TaskInfo& task = tasks_[t];
  auto fresh = [&](int i) {
    const RegisterInfo& reg = registers_[task.outputs[i]];
    return Tensor::empty(reg.shape, reg.dtype);
  };
  switch (task.proto.kind()) {
    case proto::TaskProto::INPUT: {
      const std::string& name = task.proto.logical_op();
      auto it = inputs.find(name);
      OFL_CHECK(it != inputs.end(), kTag, "run needs input '", name, "' (read by ",
                describe_task(t), "). However, got ", names_of(inputs), ".");
      const Tensor& fed = it->second;
      // A micro-batched input is fed whole: m micro-batches of logical_output_shape, stacked
      // on axis 0.
      Shape want = task.logical_shape;
      if (task.micro_batched) want[0] *= micro_batches_;
      OFL_CHECK(fed.defined() && fed.shape() == want, kTag, "input '", name, "' must have shape ",
                want.to_string(),
                task.micro_batched ? str_cat(" (", micro_batches_, " micro-batches of ",
                                             task.logical_shape.to_string(), ")")
                                   : "",
                ". However, got ", fed.defined() ? fed.shape().to_string() : "an undefined tensor",
                ".");
      const DataType dtype = registers_[task.outputs[0]].dtype;
      OFL_CHECK_TYPE(fed.dtype() == dtype, kTag, "input '", name, "' must have dtype ",
                     dtype_name(dtype), ". However, got ", dtype_name(fed.dtype()), ".");
      Tensor out = fresh(0);
      if (!task.micro_batched) {
        copy_region(fed, task.region, out, whole(out.shape()));
      } else {
        // Micro-batch k is rows [k * s0, (k + 1) * s0) of the fed tensor; its region goes to
        // rows [k * r0, (k + 1) * r0) of the register.
        const int64_t s0 = task.logical_shape[0];
        const int64_t r0 = task.region[0].size();
        for (int k = 0; k < micro_batches_; ++k) {
          std::vector<Range> from = task.region;
          from[0] = Range{k * s0 + task.region[0].begin, k * s0 + task.region[0].end};
          std::vector<Range> to = whole(out.shape());
          to[0] = Range{k * r0, (k + 1) * r0};
          copy_region(fed, from, out, to);
        }
      }
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::VARIABLE:
      break;  // its register holds the value across iterations
    case proto::TaskProto::OUTPUT:
      // A snapshot: a later in-place update must not change what was fetched.
      fetched->emplace_back(t, values_[task.inputs[0]].clone());
      break;
    case proto::TaskProto::COMPUTE:
      run_compute(task, micro_batch);
      break;
    case proto::TaskProto::SLICE: {
      Tensor out = fresh(0);
      copy_region(values_[task.inputs[0]], task.regions[0], out, whole(out.shape()));
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::SEND:
      in_flight_[t] = values_[task.inputs[0]].clone();
      break;
    case proto::TaskProto::RECV:
      values_[task.outputs[0]] = std::move(in_flight_[task.send]);
      in_flight_[task.send] = Tensor();
      break;
    case proto::TaskProto::ADD: {
      Tensor out = values_[task.inputs[0]].clone();
      for (size_t i = 1; i < task.inputs.size(); ++i) {
        add_region(values_[task.inputs[i]], whole(out.shape()), out, whole(out.shape()));
      }
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::CONCAT: {
      const RegisterInfo& reg = registers_[task.outputs[0]];
      Tensor out = Tensor::zeros(reg.shape, reg.dtype);
      for (size_t i = 0; i < task.inputs.size(); ++i) {
        const Tensor& in = values_[task.inputs[i]];
        copy_region(in, whole(in.shape()), out, task.regions[i]);
      }
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::ZEROS: {
      const RegisterInfo& reg = registers_[task.outputs[0]];
      values_[task.outputs[0]] = Tensor::zeros(reg.shape, reg.dtype);
      break;
    }
    case proto::TaskProto::COPY: {
      Tensor out = fresh(0);
      std::memcpy(out.raw_data(), values_[task.inputs[0]].raw_data(), out.nbytes());
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::UNPACK: {  // rows [k * r0, (k + 1) * r0) of the whole batch
      Tensor out = fresh(0);
      const char* in = static_cast<const char*>(values_[task.inputs[0]].raw_data());
      std::memcpy(out.raw_data(), in + micro_batch * out.nbytes(), out.nbytes());
      values_[task.outputs[0]] = out;
      break;
    }
    case proto::TaskProto::REPEAT:
      // A copy, so that a micro-batch writing its input in place cannot change the once value.
      values_[task.outputs[0]] = values_[task.inputs[0]].clone();
      break;
    case proto::TaskProto::ACCUMULATE: {  // the running sum lives in the output register
      const Tensor& in = values_[task.inputs[0]];
      if (micro_batch == 0) {
        values_[task.outputs[0]] = in.clone();
      } else {
        add_region(in, whole(in.shape()), values_[task.outputs[0]], whole(in.shape()));
      }
      break;
    }
    case proto::TaskProto::PACK: {  // row k of (m, *shape)
      const Tensor& in = values_[task.inputs[0]];
      if (micro_batch == 0) values_[task.outputs[0]] = fresh(0);
      char* out = static_cast<char*>(values_[task.outputs[0]].raw_data());
      std::memcpy(out + micro_batch * in.nbytes(), in.raw_data(), in.nbytes());
      break;
    }
    default:
      OFL_ASSERT(false) << "kinds are checked when the plan is loaded";
  }
  if (planned_memory_) place_in_blocks(task);
}

void ReferenceExecutor::use_planned_memory() {
  std::map<int64_t, int64_t> block_bytes;
  for (const RegisterInfo& reg : registers_) {
    const int64_t block = reg.proto.memory_block();
    if (block < 0) continue;
    const int64_t end =
        reg.proto.offset() + static_cast<int64_t>(reg.shape.numel() * dtype_size(reg.dtype));
    block_bytes[block] = std::max(block_bytes[block], end);
  }
  for (const auto& [block, bytes] : block_bytes) {
    blocks_[block] = Tensor::zeros(Shape{bytes}, DataType::kInt8);
  }
  planned_memory_ = true;
}

// Moves each output that lives in a memory block into the block, and has later readers read it
// from there (use_planned_memory).
void ReferenceExecutor::place_in_blocks(const TaskInfo& task) {
  for (int r : task.outputs) {
    const RegisterInfo& reg = registers_[r];
    if (reg.proto.memory_block() < 0 || !values_[r].defined()) continue;
    const Tensor& block = blocks_.at(reg.proto.memory_block());
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = block.impl()->storage;
    impl->offset_bytes = static_cast<size_t>(reg.proto.offset());
    impl->shape = reg.shape;
    impl->dtype = reg.dtype;
    Tensor view(std::move(impl));
    if (!view.shares_storage_with(values_[r]) || view.raw_data() != values_[r].raw_data()) {
      std::memcpy(view.raw_data(), values_[r].raw_data(), view.nbytes());
    }
    values_[r] = view;
  }
}

// Inputs are the registers themselves, so mutated inputs (optimizer updates) write in place.
void ReferenceExecutor::run_compute(const TaskInfo& task, int micro_batch) {
  std::vector<Tensor> inputs;
  std::vector<TensorMeta> metas;
  for (int r : task.inputs) {
    inputs.push_back(values_[r]);
    metas.push_back(TensorMeta{registers_[r].shape, registers_[r].dtype});
  }
  std::vector<Tensor> outputs;
  for (int r : task.outputs)
    outputs.push_back(Tensor::empty(registers_[r].shape, registers_[r].dtype));
  Tensor temp;
  KernelContext ctx{task.params, inputs, outputs};
  ctx.random_stream = static_cast<uint64_t>(iteration_ * micro_batches_ + std::max(micro_batch, 0));
  if (const TempBytesFn* temp_bytes = task.op->get<FTempBytes>()) {
    const size_t bytes = (*temp_bytes)(InferContext(*task.op, task.params, metas));
    if (bytes > 0) {
      temp = Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DataType::kInt8);
      ctx.temp = temp.raw_data();
      ctx.temp_bytes = bytes;
    }
  }
  if (task.proto.output_region_size() > 0) {
    ctx.output_region = &task.region;
    ctx.logical_output_shape = &task.logical_shape;
  }
  task.kernel(ctx);
  for (size_t i = 0; i < task.outputs.size(); ++i) values_[task.outputs[i]] = outputs[i];
}

Tensor ReferenceExecutor::read_variable(const std::string& name) const {
  auto it = variables_by_name_.find(name);
  OFL_CHECK_CODE(it != variables_by_name_.end(), ErrorCode::kNotFound, kTag,
                 "read_variable needs a variable of the plan. However, got '", name, "'.");
  const TaskInfo& first = tasks_[it->second[0]];
  Tensor out = Tensor::zeros(first.logical_shape, registers_[first.outputs[0]].dtype);
  // Variables are split or broadcast, never partial: placing every piece (replicas overwrite
  // each other with equal values) rebuilds the logical value.
  for (int t : it->second) {
    const Tensor& piece = values_[tasks_[t].outputs[0]];
    copy_region(piece, whole(piece.shape()), out, tasks_[t].region);
  }
  return out;
}

void ReferenceExecutor::write_variable(const std::string& name, const Tensor& value) {
  auto it = variables_by_name_.find(name);
  OFL_CHECK_CODE(it != variables_by_name_.end(), ErrorCode::kNotFound, kTag,
                 "write_variable needs a variable of the plan. However, got '", name, "'.");
  const TaskInfo& first = tasks_[it->second[0]];
  const DataType dtype = registers_[first.outputs[0]].dtype;
  OFL_CHECK(value.defined() && value.shape() == first.logical_shape, kTag, "variable '", name,
            "' must be written with shape ", first.logical_shape.to_string(), ". However, got ",
            value.defined() ? value.shape().to_string() : "an undefined tensor", ".");
  OFL_CHECK_TYPE(value.dtype() == dtype, kTag, "variable '", name, "' must be written with dtype ",
                 dtype_name(dtype), ". However, got ", dtype_name(value.dtype()), ".");
  for (int t : it->second) {
    const Tensor& piece = values_[tasks_[t].outputs[0]];
    copy_region(value, tasks_[t].region, piece, whole(piece.shape()));
  }
}

std::vector<std::string> ReferenceExecutor::schedule() const {
  std::vector<std::string> names;
  for (const Step& step : schedule_) {
    const std::string& name = tasks_[step.task].proto.name();
    names.push_back(
        micro_batches_ > 1 && per_micro(step.task) ? str_cat(name, "#", step.micro_batch) : name);
  }
  return names;
}

}  // namespace ofl::actor
