// CUDA kernels of the reductions, computing what kernels/cpu/reduce.cpp computes. The axes are
// coalesced as there (kernels/reduce_groups.h): reducing trailing axes is a row reduction,
// reducing leading or middle axes a column reduction (Note [Column reductions]), and any other
// pattern a row reduction whose elements are found through the groups' strides. Float sums
// accumulate in float32 (float64 for double); integer sums in uint64, whose wrap-around cast
// back to the dtype gives the CPU's wrapped sum; max and min let NaN win, as the CPU does.
// No atomics: Note [Deterministic reductions] in reduce.cuh.

#include <limits>
#include <type_traits>

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/kernels/reduce_groups.h"
#include "oneflowlike/ops/reduce.h"

namespace ofl::cuda_kernels {

namespace {

enum class Reduction { kSum, kMean, kMax, kMin };

template <Reduction R>
constexpr bool kExtremum = R == Reduction::kMax || R == Reduction::kMin;

// What a reduction of native type N accumulates in.
template <class N, Reduction R>
using Accumulator =
    std::conditional_t<kExtremum<R> || !std::is_integral_v<compute_t<N>>, compute_t<N>, uint64_t>;

template <class Acc, Reduction R>
Acc identity() {
  if constexpr (R == Reduction::kMax) {
    if constexpr (std::is_same_v<Acc, bool>) {
      return false;
    } else {
      return std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::lowest();
    }
  } else if constexpr (R == Reduction::kMin) {
    if constexpr (std::is_same_v<Acc, bool>) {
      return true;
    } else {
      return std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::max();
    }
  } else {
    return Acc(0);
  }
}

// Combines an accumulator with an element or with another accumulator.
template <Reduction R>
struct Combine {
  template <class Acc>
  __device__ __forceinline__ Acc operator()(Acc a, Acc x) const {
    if constexpr (kExtremum<R>) {
      const bool better = R == Reduction::kMax ? x > a : x < a;
      if constexpr (std::is_floating_point_v<Acc>) {
        return (better || x != x) ? x : a;  // NaN wins, as in numpy and the CPU kernel
      } else {
        return better ? x : a;
      }
    } else {
      return a + x;
    }
  }
};

// Stores output j; the mean divides by the number of elements reduced (NaN for none, as 0/0).
template <class N, class Acc, Reduction R>
struct Finish {
  N* out;
  int64_t count;
  __device__ __forceinline__ void operator()(int64_t j, Acc acc) const {
    if constexpr (R == Reduction::kMean) {
      store(out, j, acc / static_cast<Acc>(count));
    } else {
      store(out, j, acc);
    }
  }
};

template <class Acc>
struct StorePartial {
  Acc* partial;
  __device__ __forceinline__ void operator()(int64_t j, Acc acc) const { partial[j] = acc; }
};

// Sources say where element c of row r is: length(r) and offset(r, c).
struct ContiguousRows {
  int64_t length_;
  __device__ __forceinline__ int64_t length(int64_t) const { return length_; }
  __device__ __forceinline__ int64_t offset(int64_t r, int64_t c) const { return r * length_ + c; }
};

// Row p is piece p % splits, of `chunk` elements, of row p / splits of Base.
template <class Base>
struct SplitRows {
  Base base;
  int64_t splits, chunk;
  __device__ __forceinline__ int64_t length(int64_t p) const {
    const int64_t rest = base.length(p / splits) - (p % splits) * chunk;
    return rest < 0 ? 0 : (rest < chunk ? rest : chunk);
  }
  __device__ __forceinline__ int64_t offset(int64_t p, int64_t c) const {
    return base.offset(p / splits, (p % splits) * chunk + c);
  }
};

// Several reduced groups: output r and element c are mixed-radix numbers over the kept and
// the reduced groups (last group fastest, as in the row-major input).
constexpr int kMaxGroups = 8;
struct StridedRows {
  int kept = 0, reduced = 0;
  int64_t count = 0;
  int64_t kept_extent[kMaxGroups] = {}, kept_stride[kMaxGroups] = {};
  int64_t reduced_extent[kMaxGroups] = {}, reduced_stride[kMaxGroups] = {};
  __device__ __forceinline__ int64_t length(int64_t) const { return count; }
  __device__ int64_t offset(int64_t r, int64_t c) const {
    int64_t off = 0;
    for (int k = kept - 1; k >= 0; --k) {
      off += r % kept_extent[k] * kept_stride[k];
      r /= kept_extent[k];
    }
    for (int k = reduced - 1; k >= 0; --k) {
      off += c % reduced_extent[k] * reduced_stride[k];
      c /= reduced_extent[k];
    }
    return off;
  }
};

StridedRows strided_rows(const ReduceGroups& g, int64_t count, const char* what) {
  const int n = static_cast<int>(g.extent.size());
  StridedRows rows;
  rows.count = count;
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    int& k = g.reduced[i] ? rows.reduced : rows.kept;
    OFL_CHECK(k < kMaxGroups, "[", what, "] on CUDA takes at most ", kMaxGroups,
              " separate groups of reduced (and of kept) axes. However, got ", g.extent.size(),
              " alternating groups.");
    (g.reduced[i] ? rows.reduced_extent : rows.kept_extent)[k] = g.extent[i];
    (g.reduced[i] ? rows.reduced_stride : rows.kept_stride)[k] = stride;
    ++k;
    stride *= g.extent[i];
  }
  // Filled from the last group back: reverse so that index 0 is the outermost group.
  std::reverse(rows.kept_extent, rows.kept_extent + rows.kept);
  std::reverse(rows.kept_stride, rows.kept_stride + rows.kept);
  std::reverse(rows.reduced_extent, rows.reduced_extent + rows.reduced);
  std::reverse(rows.reduced_stride, rows.reduced_stride + rows.reduced);
  return rows;
}

// One row's fold: each thread of the team folds a strided part, then the team combines.
template <class In, class Acc, Reduction R, class Source, class Out>
struct ReduceRow {
  const In* x;
  Source source;
  Acc identity;
  Out out;
  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const int64_t n = source.length(r);
    Acc acc = identity;
    for (int64_t c = team.rank(); c < n; c += team.size()) {
      acc = Combine<R>{}(acc, static_cast<Acc>(load(x, source.offset(r, c))));
    }
    acc = team.all_reduce(acc, Combine<R>{});
    if (team.rank() == 0) out(r, acc);
  }
};

// A few long rows would leave most of the GPU idle: they are cut into pieces of at least
// kMinPiece elements, about kTargetBlocks pieces in all (from the shape alone, so the result
// does not depend on the device).
constexpr int64_t kMinPiece = 16384;
constexpr int64_t kTargetBlocks = 1024;

int64_t piece_count(int64_t rows, int64_t length) {
  const int64_t by_length = (length + kMinPiece - 1) / kMinPiece;
  const int64_t by_rows = (kTargetBlocks + rows - 1) / rows;
  return std::max<int64_t>(1, std::min(by_length, by_rows));
}

template <class T, Reduction R, class Source>
void reduce_rows(const KernelContext& ctx, const char* what, Source source, int64_t rows,
                 int64_t length, int64_t count) {
  using N = native_t<T>;
  using Acc = Accumulator<N, R>;
  const N* x = data<T>(ctx.in(0));
  const Finish<N, Acc, R> finish{data<T>(ctx.out(0)), count};
  const Acc init = identity<Acc, R>();
  if (rows == 0) return;
  int64_t splits = piece_count(rows, length);
  if (splits == 1) {
    launch_rows(ctx, what, rows, length,
                ReduceRow<N, Acc, R, Source, Finish<N, Acc, R>>{x, source, init, finish});
    return;
  }
  const int64_t chunk = (length + splits - 1) / splits;
  splits = (length + chunk - 1) / chunk;
  Scratch scratch(ctx, static_cast<size_t>(rows * splits) * sizeof(Acc));
  Acc* partial = scratch.as<Acc>();
  launch_rows(ctx, what, rows * splits, chunk,
              ReduceRow<N, Acc, R, SplitRows<Source>, StorePartial<Acc>>{
                  x, SplitRows<Source>{source, splits, chunk}, init, StorePartial<Acc>{partial}});
  launch_rows(ctx, what, rows, splits,
              ReduceRow<Acc, Acc, R, ContiguousRows, Finish<N, Acc, R>>{
                  partial, ContiguousRows{splits}, init, finish});
}

template <class N, class Acc>
struct LoadColumn {
  const N* x;
  ColumnShape s;
  __device__ __forceinline__ Acc operator()(int64_t o, int64_t m, int64_t i) const {
    return static_cast<Acc>(load(x, (o * s.middle + m) * s.inner + i));
  }
};

template <class T, Reduction R>
void reduce(const KernelContext& ctx, const char* what) {
  using N = native_t<T>;
  using Acc = Accumulator<N, R>;
  const Shape& x = ctx.in(0).shape();
  const ReduceGroups g = reduce_groups(x, ctx.p<ReduceParams>());
  const int64_t out_n = ctx.out(0).numel();
  if (out_n == 0) return;
  const int64_t count = x.numel() / out_n;
  if (g.reduced_groups() > 1) {
    reduce_rows<T, R>(ctx, what, strided_rows(g, count, what), out_n, count, count);
    return;
  }
  const ReduceView v = reduce_view(g);
  if (v.inner == 1) {
    reduce_rows<T, R>(ctx, what, ContiguousRows{v.middle}, v.outer, v.middle, count);
    return;
  }
  const ColumnShape s{v.outer, v.middle, v.inner};
  reduce_columns(ctx, what, s, identity<Acc, R>(), LoadColumn<N, Acc>{data<T>(ctx.in(0)), s},
                 Combine<R>{}, Finish<N, Acc, R>{data<T>(ctx.out(0)), count});
}

template <class T>
struct SumKernel {
  static void run(const KernelContext& ctx) { reduce<T, Reduction::kSum>(ctx, "reduce_sum"); }
};
template <class T>
struct MeanKernel {
  static void run(const KernelContext& ctx) { reduce<T, Reduction::kMean>(ctx, "reduce_mean"); }
};
template <class T>
struct MaxKernel {
  static void run(const KernelContext& ctx) { reduce<T, Reduction::kMax>(ctx, "reduce_max"); }
};
template <class T>
struct MinKernel {
  static void run(const KernelContext& ctx) { reduce<T, Reduction::kMin>(ctx, "reduce_min"); }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("reduce_sum", kCUDA, SumKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("reduce_mean", kCUDA, MeanKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("reduce_max", kCUDA, MaxKernel, OFL_FLOATS, int8_t, int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("reduce_min", kCUDA, MinKernel, OFL_FLOATS, int8_t, int32_t, int64_t, bool);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
