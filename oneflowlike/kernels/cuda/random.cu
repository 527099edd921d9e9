// CUDA kernels of the random ops: the values of kernels/cpu/random.cpp for the same seed, offset,
// random stream and output region. One thread per element computes the element's Philox block
// from its LOGICAL flat index (Note [Random element counters] in philox.h) and its value with
// the functions the CPU kernels call (Note [Random values on every device]).

#include <cmath>
#include <type_traits>

#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/philox.h"

namespace ofl::cuda_kernels {

namespace {

// The counter offset of this draw: the op's own offset, moved on by one logical output per
// KernelContext::random_stream (as stream_offset in kernels/cpu/random.cpp).
uint64_t stream_offset(const KernelContext& ctx, int64_t offset) {
  const int64_t numel =
      ctx.logical_output_shape ? ctx.logical_output_shape->numel() : ctx.out(0).numel();
  return static_cast<uint64_t>(offset) + ctx.random_stream * static_cast<uint64_t>(numel);
}

constexpr int kMaxDims = 8;

// The logical flat index of output 0's physical element i: i itself when the output is the whole
// tensor (ndim 0), else sum over axes of (region begin + coordinate) * logical stride, the index
// for_each_logical_run in kernels/cpu/random.cpp gives.
struct LogicalIndex {
  int ndim = 0;
  int64_t dims[kMaxDims] = {};             // output 0's (physical) shape
  int64_t begins[kMaxDims] = {};           // where the region starts along each axis
  int64_t logical_strides[kMaxDims] = {};  // row-major strides of the logical shape

  __device__ uint64_t operator()(int64_t i) const {
    if (ndim == 0) return static_cast<uint64_t>(i);
    int64_t logical = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      logical += (begins[d] + i % dims[d]) * logical_strides[d];
      i /= dims[d];
    }
    return static_cast<uint64_t>(logical);
  }
};

LogicalIndex logical_index(const KernelContext& ctx, const char* what) {
  LogicalIndex index;
  if (ctx.output_region == nullptr || ctx.output_region->empty()) return index;
  const std::vector<Range>& region = *ctx.output_region;
  const Shape& shape = ctx.out(0).shape();
  OFL_ASSERT(ctx.logical_output_shape != nullptr);
  OFL_ASSERT(static_cast<int>(region.size()) == shape.ndim());
  OFL_CHECK(shape.ndim() <= kMaxDims, "[", what, "] a CUDA random op's output region has at most ",
            kMaxDims, " axes. However, got an output of shape ", shape.to_string(), ".");
  const std::vector<int64_t> strides = ctx.logical_output_shape->strides();
  index.ndim = shape.ndim();
  for (int d = 0; d < shape.ndim(); ++d) {
    index.dims[d] = shape[d];
    index.begins[d] = region[d].begin;
    index.logical_strides[d] = strides[d];
  }
  return index;
}

template <class T>
struct RandomNormalKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<RandomParams>();
    const auto seed = static_cast<uint64_t>(p.seed);
    const uint64_t offset = stream_offset(ctx, p.offset);
    using D = std::conditional_t<std::is_same_v<T, double>, double, float>;  // Note [16-bit
    const D mean = static_cast<D>(p.a), stddev = static_cast<D>(p.b);        // random values]
    const LogicalIndex logical = logical_index(ctx, "random_normal");
    native_t<T>* y = data<T>(ctx.out(0));
    launch_for_each(ctx, "random_normal", ctx.out(0).numel(), [=] __device__(int64_t i) {
      store(y, i,
            philox::normal_value<D>(philox::element_bits(seed, offset, logical(i)), mean, stddev));
    });
  }
};

template <class T>
struct RandomUniformKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<RandomParams>();
    const auto seed = static_cast<uint64_t>(p.seed);
    const uint64_t offset = stream_offset(ctx, p.offset);
    using D = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr bool kSixteenBits = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;
    const D low = static_cast<D>(p.a), high = static_cast<D>(p.b);
    const D below_high = low < high ? std::nextafter(high, low) : low;  // as on the CPU
    // 16 bits: a draw that rounds up to high becomes the largest T below it (Note [16-bit
    // random values]).
    const bool clamp = kSixteenBits && low < high;
    float top = 0;
    if constexpr (kSixteenBits) top = clamp ? largest_below<T>(high) : 0.0f;
    const LogicalIndex logical = logical_index(ctx, "random_uniform");
    native_t<T>* y = data<T>(ctx.out(0));
    launch_for_each(ctx, "random_uniform", ctx.out(0).numel(), [=] __device__(int64_t i) {
      store(y, i,
            philox::uniform_value<D>(philox::element_bits(seed, offset, logical(i)), low, high,
                                     below_high));
      if (clamp && load(y, i) >= high) store(y, i, top);
    });
  }
};

template <class T>
struct DropoutKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const auto& p = ctx.p<DropoutParams>();
    const auto seed = static_cast<uint64_t>(p.seed);
    const uint64_t offset = stream_offset(ctx, p.offset);
    const double drop = p.p;
    const Acc scale = drop < 1.0 ? static_cast<Acc>(1.0 / (1.0 - drop)) : Acc(0);  // as on the CPU
    const LogicalIndex logical = logical_index(ctx, "dropout");
    const N* x = data<T>(ctx.in(0));
    N* y = data<T>(ctx.out(0));
    launch_for_each(ctx, "dropout", ctx.out(0).numel(), [=] __device__(int64_t i) {
      const bool keep = philox::dropout_keeps(philox::element_bits(seed, offset, logical(i)), drop);
      store(y, i, keep ? static_cast<Acc>(load(x, i)) * scale : Acc(0));
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("random_normal", kCUDA, RandomNormalKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("random_uniform", kCUDA, RandomUniformKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("dropout", kCUDA, DropoutKernel, float, double, float16, bfloat16);

}  // namespace ofl::cuda_kernels
