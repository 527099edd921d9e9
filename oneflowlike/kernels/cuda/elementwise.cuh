#pragma once
// What the elementwise CUDA kernels share (unary.cu, scalar.cu, elementwise.cu, creation.cu,
// and the selection kernels of where.cu and reshape.cu): maps over contiguous tensors with
// 16-byte vector loads, NumPy-broadcast indexing, and unsigned types of a dtype's size for
// kernels that only move elements.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "oneflowlike/kernels/cpu/broadcast_plan.h"
#include "oneflowlike/kernels/cuda/common.cuh"

namespace ofl::cuda_kernels {

// ---- element moves ----

/// An unsigned type of kBytes bytes: kernels that only move elements instantiate once per
/// element size, not once per dtype.
template <size_t kBytes>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = uint8_t;
};
template <>
struct BitsOf<2> {
  using type = uint16_t;
};
template <>
struct BitsOf<4> {
  using type = uint32_t;
};
template <>
struct BitsOf<8> {
  using type = uint64_t;
};
template <>
struct BitsOf<16> {
  using type = uint4;
};
// ---- maps over contiguous tensors ----

/// kVec elements of T loaded and stored as one vector (kVec * sizeof(T) <= 16 bytes).
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Pack p of x, read as one unsigned integer or uint4 of its size so that it is one load
// instruction (a Pack read member by member may become kVec loads).
template <int kVec, class T>
__device__ __forceinline__ Pack<T, kVec> load_pack(const T* x, int64_t p) {
  using Raw = typename BitsOf<sizeof(Pack<T, kVec>)>::type;
  const Raw raw = reinterpret_cast<const Raw*>(x)[p];
  Pack<T, kVec> pack;
  memcpy(&pack, &raw, sizeof(raw));
  return pack;
}
template <int kVec, class T>
__device__ __forceinline__ void store_pack(T* y, int64_t p, const Pack<T, kVec>& pack) {
  using Raw = typename BitsOf<sizeof(Pack<T, kVec>)>::type;
  Raw raw;
  memcpy(&raw, &pack, sizeof(raw));
  reinterpret_cast<Raw*>(y)[p] = raw;
}

// y[i] = f(x0[i], x1[i], ...) for i in [0, n): pack p covers elements [p kVec, (p + 1) kVec),
// and the n % kVec elements after the last whole pack go to the first threads of the grid.
template <int kVec, class F, class Out, class... In>
__global__ void map_kernel(int64_t n, F f, Out* y, const In*... x) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  const int64_t num_packs = n / kVec;
  for (int64_t p = first; p < num_packs; p += stride) {
    const auto compute = [&](const Pack<In, kVec>... in) {
      Pack<Out, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) store(out.v, k, f(load(in.v, k)...));
      return out;
    };
    store_pack<kVec>(y, p, compute(load_pack<kVec>(x, p)...));
  }
  const int64_t tail = num_packs * kVec + first;
  if (tail < n) store(y, tail, f(load(x, tail)...));
}

template <int kVec, class F, class Out, class... In>
void launch_map_with(const KernelContext& ctx, const char* what, int64_t n, F f, Out* y,
                     const In*... x) {
  const int64_t packs = n / kVec;
  // At least one block: the tail (fewer than kVec <= 16 elements) runs on block 0.
  const int64_t blocks = std::clamp<int64_t>((packs + kBlock - 1) / kBlock, 1, int64_t{65535} * 8);
  map_kernel<kVec><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(n, f, y, x...);
  cuda::check(cudaGetLastError(), what, device_of(ctx));
}

/// y[i] = f(load(x0, i), load(x1, i), ...) over n contiguous elements, stored with store()'s
/// rounding. Reads and writes 16-byte vectors when every pointer is aligned for them (the
/// caching allocator's blocks are), element by element otherwise.
template <class F, class Out, class... In>
void launch_map(const KernelContext& ctx, const char* what, int64_t n, F f, Out* y,
                const In*... x) {
  if (n == 0) return;
  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int kVec = static_cast<int>(16 / kWidest);
  const bool aligned =
      is_aligned(y, kVec * sizeof(Out)) && (is_aligned(x, kVec * sizeof(In)) && ...);
  if (kVec > 1 && aligned) {
    launch_map_with<kVec>(ctx, what, n, f, y, x...);
  } else {
    launch_map_with<1>(ctx, what, n, f, y, x...);
  }
}

// ---- broadcasting ----

/// Where output element i reads each of N inputs under NumPy broadcasting, from
/// cpu::BroadcastPlan (the CPU kernels' coalesced axes: stride 0 along the axes an input
/// repeats).
template <int N>
struct BroadcastIndex {
  int ndim = 0;
  int64_t dims[cpu::kMaxBroadcastDims] = {};
  int64_t strides[N][cpu::kMaxBroadcastDims] = {};

  __device__ void offsets(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t coord = i % dims[d];
      i /= dims[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += coord * strides[k][d];
    }
  }
};

template <int N>
BroadcastIndex<N> broadcast_index(const char* op, const Shape& out,
                                  const std::array<const Shape*, N>& in) {
  OFL_CHECK(out.ndim() <= cpu::kMaxBroadcastDims, "[", op, "] broadcasting takes at most ",
            cpu::kMaxBroadcastDims, " axes. However, got an output of shape ", out.to_string(),
            ".");
  const cpu::BroadcastPlan<N> plan(out, in);
  BroadcastIndex<N> index;
  index.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    index.dims[d] = plan.dims[d];
    for (int k = 0; k < N; ++k) index.strides[k][d] = plan.strides[k][d];
  }
  return index;
}

template <class T>
using bits_t = typename BitsOf<sizeof(T)>::type;

template <class T>
bits_t<T>* bits(const Tensor& t) {
  return static_cast<bits_t<T>*>(t.raw_data());
}

}  // namespace ofl::cuda_kernels
