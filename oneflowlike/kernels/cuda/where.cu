// CUDA kernels of where and masked_fill (kernels/cpu/where.cpp): pure selection, so each is
// instantiated per element size, not per dtype. Equal shapes are one flat map with 16-byte
// vector loads; other shapes index each input through the CPU's coalesced broadcast plan.
// Masks are bool tensors, read as bytes (0 or 1) as the CPU reads them.

#include <cstring>
#include <type_traits>

#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/ops/where.h"

namespace ofl::cuda_kernels {

namespace {

const uint8_t* mask_of(const Tensor& t) { return static_cast<const uint8_t*>(t.raw_data()); }

template <class T>
struct WhereKernel {
  static void run(const KernelContext& ctx) {
    using B = bits_t<T>;
    const uint8_t* c = mask_of(ctx.in(0));
    const B* x = bits<T>(ctx.in(1));
    const B* y = bits<T>(ctx.in(2));
    B* out = bits<T>(ctx.out(0));
    const Shape& shape = ctx.out(0).shape();
    if (ctx.in(0).shape() == shape && ctx.in(1).shape() == shape && ctx.in(2).shape() == shape) {
      launch_map(
          ctx, "where", shape.numel(),
          [] __device__(uint8_t ci, B xi, B yi) { return ci != 0 ? xi : yi; }, out, c, x, y);
      return;
    }
    if (shape.numel() == 0) return;
    const BroadcastIndex<3> index = broadcast_index<3>(
        "where", shape, {&ctx.in(0).shape(), &ctx.in(1).shape(), &ctx.in(2).shape()});
    launch_for_each(ctx, "where", shape.numel(), [=] __device__(int64_t i) {
      int64_t off[3];
      index.offsets(i, off);
      out[i] = c[off[0]] != 0 ? x[off[1]] : y[off[2]];
    });
  }
};

// The fill value converted to T on the host as the CPU converts it (through float for float16
// and bfloat16), then taken as bits.
template <class T>
bits_t<T> value_bits(double v) {
  T value;
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    value = T(static_cast<float>(v));
  } else {
    value = static_cast<T>(v);
  }
  bits_t<T> b;
  std::memcpy(&b, &value, sizeof(b));
  return b;
}

// x has the output's shape (inference checks it); the mask broadcasts to it.
template <class T>
struct MaskedFillKernel {
  static void run(const KernelContext& ctx) {
    using B = bits_t<T>;
    const B* x = bits<T>(ctx.in(0));
    const uint8_t* m = mask_of(ctx.in(1));
    B* out = bits<T>(ctx.out(0));
    const B value = value_bits<T>(ctx.p<MaskedFillParams>().value);
    const Shape& shape = ctx.out(0).shape();
    if (ctx.in(1).shape() == shape) {
      launch_map(
          ctx, "masked_fill", shape.numel(),
          [value] __device__(B xi, uint8_t mi) { return mi != 0 ? value : xi; }, out, x, m);
      return;
    }
    if (shape.numel() == 0) return;
    const BroadcastIndex<1> index = broadcast_index<1>("masked_fill", shape, {&ctx.in(1).shape()});
    launch_for_each(ctx, "masked_fill", shape.numel(), [=] __device__(int64_t i) {
      int64_t off[1];
      index.offsets(i, off);
      out[i] = m[off[0]] != 0 ? value : x[i];
    });
  }
};

}  // namespace

#define OFL_WHERE_TYPES float, double, float16, bfloat16, int8_t, int32_t, int64_t, bool
OFL_REGISTER_KERNEL("where", kCUDA, WhereKernel, OFL_WHERE_TYPES);
OFL_REGISTER_KERNEL("masked_fill", kCUDA, MaskedFillKernel, OFL_WHERE_TYPES);
#undef OFL_WHERE_TYPES

}  // namespace ofl::cuda_kernels
