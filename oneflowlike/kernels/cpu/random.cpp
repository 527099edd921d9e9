// CPU kernels of the random ops. Each element's value depends on its LOGICAL flat index only
// (Note [Random element counters] in philox.h), read through KernelContext::output_region, and
// is computed by the philox.h functions the CUDA kernels call too (Note [Random values on every
// device]).

#include "oneflowlike/ops/random.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/philox_lanes.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/op.h"
#include "oneflowlike/philox.h"

namespace ofl::cpu {

namespace {

// A Philox block costs about as much as a few dozen adds, so smaller chunks pay off.
constexpr int64_t kRandomGrain = kParallelGrain / 8;

// The counter offset of this draw: the op's own offset, moved on by one logical output per
// KernelContext::random_stream.
uint64_t stream_offset(const KernelContext& ctx, int64_t offset) {
  const int64_t numel =
      ctx.logical_output_shape ? ctx.logical_output_shape->numel() : ctx.out(0).numel();
  return static_cast<uint64_t>(offset) + ctx.random_stream * static_cast<uint64_t>(numel);
}

// Calls fn(begin, end, logical_begin) on runs [begin, end) of output 0's physical flat indices
// whose logical flat indices are logical_begin, logical_begin + 1, ... (a run is one row of the
// last axis when the output is a region of a larger tensor, else everything).
template <class F>
void for_each_logical_run(const KernelContext& ctx, F fn) {
  const Shape& shape = ctx.out(0).shape();
  const int64_t n = shape.numel();
  if (n == 0) return;
  if (ctx.output_region == nullptr || ctx.output_region->empty()) {
    parallel_for(n, kRandomGrain, [&](int64_t begin, int64_t end) { fn(begin, end, begin); });
    return;
  }
  const std::vector<Range>& region = *ctx.output_region;
  OFL_ASSERT(ctx.logical_output_shape != nullptr);
  const int nd = shape.ndim();
  OFL_ASSERT(static_cast<int>(region.size()) == nd);
  const std::vector<int64_t> logical_strides = ctx.logical_output_shape->strides();
  const int64_t row = shape[nd - 1];
  parallel_for(n / row, std::max<int64_t>(1, kRandomGrain / row), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t rest = r;
      int64_t logical = region[nd - 1].begin;
      for (int d = nd - 2; d >= 0; --d) {
        logical += (region[d].begin + rest % shape[d]) * logical_strides[d];
        rest /= shape[d];
      }
      fn(r * row, (r + 1) * row, logical);
    }
  });
}

// fn(i, bits) for i in [begin, end), bits the Philox block of logical element logical + (i -
// begin), computed sixteen at a time (Note [Philox in lanes]).
template <class F>
[[gnu::always_inline]] inline void bits_loop(uint64_t seed, uint64_t offset, int64_t begin,
                                             int64_t end, int64_t logical, const F& fn) {
  PhiloxLanes lanes;
  for (int64_t i = begin; i < end; i += kPhiloxLanes) {
    element_bits_lanes(seed, offset, static_cast<uint64_t>(logical + (i - begin)), lanes);
    const int n = static_cast<int>(std::min<int64_t>(kPhiloxLanes, end - i));
    for (int l = 0; l < n; ++l) fn(i + l, lanes.block(l));
  }
}

template <class F>
[[gnu::flatten]] void bits_run(uint64_t seed, uint64_t offset, int64_t begin, int64_t end,
                               int64_t logical, const F& fn) {
  bits_loop(seed, offset, begin, end, logical, fn);
}

// The same compiled for AVX-512 (Note [AVX-512 loops] in unary_functions.h): integer rounds, so
// the same bits either way.
template <class F>
[[gnu::flatten, gnu::target("arch=x86-64-v4,prefer-vector-width=512")]] void bits_run_v4(
    uint64_t seed, uint64_t offset, int64_t begin, int64_t end, int64_t logical, const F& fn) {
  bits_loop(seed, offset, begin, end, logical, fn);
}

// fn(i, bits) for every element i of output 0, bits its Philox block (Note [Random element
// counters]), over the cores.
template <class F>
void for_each_element_bits(const KernelContext& ctx, uint64_t seed, uint64_t offset, const F& fn) {
  const bool wide = avx512_loops();
  for_each_logical_run(ctx, [&](int64_t begin, int64_t end, int64_t logical) {
    if (wide) {
      bits_run_v4(seed, offset, begin, end, logical, fn);
    } else {
      bits_run(seed, offset, begin, end, logical, fn);
    }
  });
}

// Note [16-bit random values] in ops/random.h: 16-bit draws are float32 draws, rounded.
template <class T>
using DrawType = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
constexpr bool kSixteenBits = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

template <class T>
struct RandomNormalKernel {
  static void run(const KernelContext& ctx) {
    using D = DrawType<T>;
    const auto& p = ctx.p<RandomParams>();
    const auto seed = static_cast<uint64_t>(p.seed), offset = stream_offset(ctx, p.offset);
    const D mean = static_cast<D>(p.a), std = static_cast<D>(p.b);
    T* y = ctx.out(0).data<T>();
    for_each_element_bits(ctx, seed, offset, [&](int64_t i, const philox::Block& bits) {
      y[i] = T(philox::normal_value<D>(bits, mean, std));
    });
  }
};

template <class T>
struct RandomUniformKernel {
  static void run(const KernelContext& ctx) {
    using D = DrawType<T>;
    const auto& p = ctx.p<RandomParams>();
    const auto seed = static_cast<uint64_t>(p.seed), offset = stream_offset(ctx, p.offset);
    const D low = static_cast<D>(p.a), high = static_cast<D>(p.b);
    // low + (high - low) * u can round up to high; the largest value below it stands in.
    const D below_high = low < high ? std::nextafter(high, low) : low;
    T top{};  // 16 bits: the largest T below high, for a draw that rounds up to it
    if constexpr (kSixteenBits<T>) top = T(low < high ? largest_below<T>(high) : low);
    T* y = ctx.out(0).data<T>();
    for_each_element_bits(ctx, seed, offset, [&](int64_t i, const philox::Block& bits) {
      const D v = philox::uniform_value<D>(bits, low, high, below_high);
      if constexpr (kSixteenBits<T>) {
        const T r(v);
        y[i] = low < high && static_cast<float>(r) >= high ? top : r;
      } else {
        y[i] = v;
      }
    });
  }
};

template <class T>
struct DropoutKernel {
  static void run(const KernelContext& ctx) {
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const auto& p = ctx.p<DropoutParams>();
    const auto seed = static_cast<uint64_t>(p.seed), offset = stream_offset(ctx, p.offset);
    const double drop = p.p;
    const Acc scale = drop < 1.0 ? static_cast<Acc>(1.0 / (1.0 - drop)) : Acc(0);
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    for_each_element_bits(ctx, seed, offset, [&](int64_t i, const philox::Block& bits) {
      y[i] = T(philox::dropout_keeps(bits, drop) ? static_cast<Acc>(x[i]) * scale : Acc(0));
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("random_normal", kCPU, RandomNormalKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("random_uniform", kCPU, RandomUniformKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("dropout", kCPU, DropoutKernel, float, double, float16, bfloat16);

}  // namespace ofl::cpu
