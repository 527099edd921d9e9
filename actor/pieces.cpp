// Data movement shared by the executors of a plan (see the header).

#include "actor/pieces.h"

#include <cstring>
#include <type_traits>

#include "oneflowlike/cuda/device.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/plan_task.h"

namespace ofl::actor {

namespace {

constexpr const char* kTag = "[plan] ";

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

std::string names_of(const std::map<std::string, Tensor>& tensors) {
  if (tensors.empty()) return "no inputs";
  std::string s;
  for (const auto& [name, tensor] : tensors) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}

// The VARIABLE tasks of `name`, or a NotFound error naming `caller`.
const std::vector<int>& variable_pieces(const PlanIndex& index, const std::string& name,
                                        const char* caller) {
  auto it = index.variables_by_name().find(name);
  OFL_CHECK_CODE(it != index.variables_by_name().end(), ErrorCode::kNotFound, kTag, caller,
                 " needs a variable of the plan. However, got '", name, "'.");
  return it->second;
}

}  // namespace

std::string region_to_string(const std::vector<Range>& region) {
  std::string s = "[";
  for (size_t i = 0; i < region.size(); ++i) {
    s += str_cat(i ? ", " : "", region[i].begin, ":", region[i].end);
  }
  return s + "]";
}

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

void sum_into(const std::vector<Tensor>& inputs, const Tensor& out) {
  OFL_ASSERT(!inputs.empty());
  const int64_t n = out.numel();
  if (inputs.size() == 1) {
    std::memcpy(out.raw_data(), inputs[0].raw_data(), out.nbytes());
    return;
  }
  visit_dtype(out.dtype(), [&]<class T>() {
    T* o = out.data<T>();
    const T* a = inputs[0].data<T>();
    const T* b = inputs[1].data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = sum_of(a[i], b[i]);
    for (size_t k = 2; k < inputs.size(); ++k) {
      const T* c = inputs[k].data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = sum_of(o[i], c[i]);
    }
  });
}

bool regions_tile(const std::vector<std::vector<Range>>& regions, const Shape& shape) {
  int64_t volume = 0;
  for (const auto& region : regions) volume += region_shape(region).numel();
  if (volume != shape.numel()) return false;
  for (size_t i = 0; i < regions.size(); ++i) {
    for (size_t j = i + 1; j < regions.size(); ++j) {
      if (!region_is_empty(region_intersection(regions[i], regions[j]))) return false;
    }
  }
  return true;  // disjoint pieces whose volumes add up to the whole: they cover it
}

Tensor view_of_bytes(const Tensor& bytes, int64_t offset, const Shape& shape, DataType dtype) {
  OFL_ASSERT(offset >= 0 && offset + shape.numel() * static_cast<int64_t>(dtype_size(dtype)) <=
                                static_cast<int64_t>(bytes.nbytes()));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = bytes.impl()->storage;
  impl->offset_bytes = bytes.impl()->offset_bytes + static_cast<size_t>(offset);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void fill(const Tensor& tensor, double value) {
  char* d = static_cast<char*>(tensor.raw_data());
  const size_t bytes = tensor.nbytes();
  if (!in_host_memory(tensor.device())) {  // queued on the GPU's stream (ZEROS on a GPU)
    OFL_ASSERT(value == 0.0) << "a GPU register is only ever filled with zeros";
    if (bytes > 0) cuda::zero(d, tensor.device().index, bytes);
    return;
  }
  if (value == 0.0) {  // every dtype's zero is all zero bits
    std::memset(d, 0, bytes);
    return;
  }
  const Tensor one = Tensor::scalar(value, tensor.dtype());
  const size_t elem = dtype_size(tensor.dtype());
  if (bytes == 0) return;
  std::memcpy(d, one.raw_data(), elem);
  // Doubling copies: log2(n) memcpy calls instead of n.
  for (size_t done = elem; done < bytes; done *= 2) {
    std::memcpy(d + done, d, std::min(done, bytes - done));
  }
}

void check_fed_inputs(const PlanIndex& index, const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, tensor] : inputs) {
    OFL_CHECK(index.inputs_by_name().count(name) > 0, kTag,
              "every fed tensor must be an input of the plan. However, got '", name,
              "', which no INPUT task takes.");
  }
}

void check_fed_piece(const PlanIndex& index, int t,
                     const std::map<std::string, std::map<int64_t, Tensor>>& pieces) {
  const PlanIndex::TaskInfo& task = index.task(t);
  const std::string& name = logical_op_of(task.proto);
  auto by_rank = pieces.find(name);
  OFL_CHECK(by_rank != pieces.end(), kTag, "run needs the pieces of input '", name, "' (read by ",
            index.describe_task(t), ").");
  auto it = by_rank->second.find(task.proto.rank());
  OFL_CHECK(it != by_rank->second.end(), kTag, "run needs the piece of input '", name,
            "' for rank ", task.proto.rank(), ". However, got pieces for ", by_rank->second.size(),
            " other rank(s).");
  const Tensor& fed = it->second;
  const PlanIndex::RegisterInfo& reg = index.reg(task.outputs[0]);
  OFL_CHECK(fed.defined() && fed.shape() == reg.shape, kTag, "the piece of input '", name,
            "' for rank ", task.proto.rank(), " must have shape ", reg.shape.to_string(),
            ". However, got ", fed.defined() ? fed.shape().to_string() : "an undefined tensor",
            ".");
  OFL_CHECK_TYPE(fed.dtype() == reg.dtype, kTag, "the piece of input '", name, "' must have dtype ",
                 dtype_name(reg.dtype), ". However, got ", dtype_name(fed.dtype()), ".");
}

const Tensor& check_fed_input(const PlanIndex& index, int t,
                              const std::map<std::string, Tensor>& inputs) {
  const PlanIndex::TaskInfo& task = index.task(t);
  const int m = index.micro_batches();
  const std::string& name = logical_op_of(task.proto);
  auto it = inputs.find(name);
  OFL_CHECK(it != inputs.end(), kTag, "run needs input '", name, "' (read by ",
            index.describe_task(t), "). However, got ", names_of(inputs), ".");
  const Tensor& fed = it->second;
  for (const auto& s : task.proto.sbp().sbp()) {
    OFL_CHECK(s.kind() != proto::SbpProto::PARTIAL_SUM, kTag, "input '", name,
              "' is partial-sum (P): feed each rank's addend with run_local, not a whole value.");
  }
  // A micro-batched input is fed whole: m micro-batches of logical_output_shape, stacked on
  // axis 0.
  Shape want = task.logical_shape;
  if (task.micro_batched) want[0] *= m;
  OFL_CHECK(fed.defined() && fed.shape() == want, kTag, "input '", name, "' must have shape ",
            want.to_string(),
            task.micro_batched
                ? str_cat(" (", m, " micro-batches of ", task.logical_shape.to_string(), ")")
                : "",
            ". However, got ", fed.defined() ? fed.shape().to_string() : "an undefined tensor",
            ".");
  const DataType dtype = index.reg(task.outputs[0]).dtype;
  OFL_CHECK_TYPE(fed.dtype() == dtype, kTag, "input '", name, "' must have dtype ",
                 dtype_name(dtype), ". However, got ", dtype_name(fed.dtype()), ".");
  return fed;
}

void feed_input_piece(const PlanIndex& index, int t, const std::map<std::string, Tensor>& inputs,
                      const Tensor& out) {
  const PlanIndex::TaskInfo& task = index.task(t);
  const int m = index.micro_batches();
  const Tensor& fed = check_fed_input(index, t, inputs);
  if (!task.micro_batched) {
    copy_region(fed, task.region, out, whole_region(out.shape()));
    return;
  }
  // Micro-batch k is rows [k * s0, (k + 1) * s0) of the fed tensor; its region goes to rows
  // [k * r0, (k + 1) * r0) of the register.
  const int64_t s0 = task.logical_shape[0];
  const int64_t r0 = task.region[0].size();
  for (int k = 0; k < m; ++k) {
    std::vector<Range> from = task.region;
    from[0] = Range{k * s0 + task.region[0].begin, k * s0 + task.region[0].end};
    std::vector<Range> to = whole_region(out.shape());
    to[0] = Range{k * r0, (k + 1) * r0};
    copy_region(fed, from, out, to);
  }
}

void initialize_variable_piece(const PlanIndex& index, int t, const Tensor& value) {
  const PlanIndex::TaskInfo& task = index.task(t);
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
      // The random kernels draw each element from its logical index, so every piece holds the
      // values of the one-device tensor at its region.
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
      OFL_CHECK(false, kTag, index.describe_task(t), " has an unknown initializer kind ",
                static_cast<int>(init.kind()), ".");
  }
}

std::map<std::string, Tensor> assemble_outputs(const PlanIndex& index,
                                               const std::vector<std::pair<int, Tensor>>& fetched) {
  std::map<std::string, Tensor> results;
  for (const auto& [name, pieces] : index.outputs_by_name()) {
    const PlanIndex::TaskInfo& first = index.task(pieces[0]);
    results[name] = Tensor::zeros(first.logical_shape, index.reg(first.inputs[0]).dtype);
  }
  for (const auto& [t, piece] : fetched) {
    const PlanIndex::TaskInfo& task = index.task(t);
    if (task.proto.contributes()) {
      add_region(piece, whole_region(piece.shape()), results.at(logical_op_of(task.proto)),
                 task.region);
    }
  }
  return results;
}

Tensor read_variable(const PlanIndex& index, const std::string& name,
                     const std::function<Tensor(int task)>& piece) {
  const std::vector<int>& pieces = variable_pieces(index, name, "read_variable");
  const PlanIndex::TaskInfo& first = index.task(pieces[0]);
  Tensor out = Tensor::zeros(first.logical_shape, index.reg(first.outputs[0]).dtype);
  // Variables are split or broadcast, never partial: placing every piece (replicas overwrite
  // each other with equal values) rebuilds the logical value.
  for (int t : pieces) {
    const Tensor value = piece(t);
    copy_region(value, whole_region(value.shape()), out, index.task(t).region);
  }
  return out;
}

void write_variable(const PlanIndex& index, const std::string& name, const Tensor& value,
                    const std::function<Tensor(int task)>& piece) {
  const std::vector<int>& pieces = variable_pieces(index, name, "write_variable");
  const PlanIndex::TaskInfo& first = index.task(pieces[0]);
  const DataType dtype = index.reg(first.outputs[0]).dtype;
  OFL_CHECK(value.defined() && value.shape() == first.logical_shape, kTag, "variable '", name,
            "' must be written with shape ", first.logical_shape.to_string(), ". However, got ",
            value.defined() ? value.shape().to_string() : "an undefined tensor", ".");
  OFL_CHECK_TYPE(value.dtype() == dtype, kTag, "variable '", name, "' must be written with dtype ",
                 dtype_name(dtype), ". However, got ", dtype_name(value.dtype()), ".");
  for (int t : pieces) {
    const Tensor target = piece(t);
    copy_region(value, index.task(t).region, target, whole_region(target.shape()));
  }
}

void run_kernel(const PlanIndex::TaskInfo& task, const std::vector<Tensor>& inputs,
                const std::vector<Tensor>& outputs, uint64_t random_stream, void* temp,
                size_t temp_bytes) {
  KernelContext ctx{task.params, inputs, outputs};
  ctx.random_stream = random_stream;
  ctx.temp = temp;
  ctx.temp_bytes = temp_bytes;
  if (task.proto.output_region_size() > 0) {
    ctx.output_region = &task.region;
    ctx.logical_output_shape = &task.logical_shape;
  }
  if (!task.cuda_kernel) {
    task.kernel(ctx);
    return;
  }
  // Its GPU current while it launches (Note [Current devices] in oneflowlike/cuda/device.h):
  // that of its first tensor on a GPU (a few inputs, such as an update's step, may be on the
  // host).
  int gpu = -1;
  for (const auto* tensors : {&outputs, &inputs}) {
    for (const Tensor& t : *tensors) {
      if (gpu < 0 && t.defined() && t.device().type == DeviceType::kCUDA) gpu = t.device().index;
    }
  }
  if (gpu < 0) {
    task.kernel(ctx);
    return;
  }
  cuda::DeviceGuard guard(gpu);
  task.kernel(ctx);
}

size_t kernel_temp_bytes(const PlanIndex& index, int t) {
  const PlanIndex::TaskInfo& task = index.task(t);
  OFL_ASSERT(task.op != nullptr) << index.describe_task(t) << " is not a COMPUTE task";
  const TempBytesFn* temp_bytes = task.op->get<FTempBytes>();
  if (temp_bytes == nullptr) return 0;
  std::vector<TensorMeta> metas;
  for (int r : task.inputs) metas.push_back(TensorMeta{index.reg(r).shape, index.reg(r).dtype});
  return (*temp_bytes)(InferContext(*task.op, task.params, metas));
}

}  // namespace ofl::actor
