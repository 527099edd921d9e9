// CPU kernels of the reductions. Axes are coalesced into alternating kept/reduced groups
// (kernels/reduce_groups.h); the common patterns (reduce the trailing axes, reduce the leading
// axes, reduce a middle block) become three nested loops, anything else walks the reduced
// sub-space per output element. bfloat16 and float16 read their values as float32 where they
// load them and run the float32 kernel's arithmetic in the same order, rounding each result
// once: the Widened kernel's bits (Note [Widened kernels] in widened.h) without a float32 copy
// of the input.

#include "oneflowlike/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/kernels/reduce_groups.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

enum class Reduction { kSum, kMean, kMax, kMin };

// A stored value as the type it is computed in (compute_of: 16-bit floats as float32, Note [Native
// bfloat16 loops] in widened.h).
struct ValueOf {
  template <class T>
  compute_of<T> operator()(T x) const {
    return static_cast<compute_of<T>>(x);
  }
};

// Floats accumulate sums in double: a long row of float32 keeps its precision.
template <class V>
using Accumulator = std::conditional_t<std::is_floating_point_v<V>, double, V>;

template <class T, Reduction R>
struct Reducer {
  using V = compute_of<T>;
  static constexpr bool kExtremum = R == Reduction::kMax || R == Reduction::kMin;
  using Acc = std::conditional_t<kExtremum, V, Accumulator<V>>;
  static Acc init() {
    if constexpr (R == Reduction::kMax) {
      if constexpr (std::is_same_v<V, bool>) {
        return false;
      } else {
        return std::numeric_limits<V>::has_infinity ? -std::numeric_limits<V>::infinity()
                                                    : std::numeric_limits<V>::lowest();
      }
    } else if constexpr (R == Reduction::kMin) {
      if constexpr (std::is_same_v<V, bool>) {
        return true;
      } else {
        return std::numeric_limits<V>::has_infinity ? std::numeric_limits<V>::infinity()
                                                    : std::numeric_limits<V>::max();
      }
    } else {
      return Acc(0);
    }
  }
  static Acc combine(Acc a, T stored) {
    const V x = static_cast<V>(stored);
    if constexpr (kExtremum) {
      const bool better = R == Reduction::kMax ? x > a : x < a;
      if constexpr (std::is_floating_point_v<V>) {
        return (better || std::isnan(x)) ? x : a;  // NaN wins, as in numpy
      } else {
        return better ? x : a;
      }
    } else {
      return a + static_cast<Acc>(x);
    }
  }
  // Rounded to V first, as the float32 kernel's output was before the Widened kernel rounded it.
  static T finish(Acc a, int64_t count) {
    if constexpr (R == Reduction::kMean) {
      return static_cast<T>(static_cast<V>(a / static_cast<Acc>(count)));
    } else {
      return static_cast<T>(static_cast<V>(a));
    }
  }
};

// The sum of x[0..n), n <= kSumBlock, in double (Note [Blocked sums]). float16 is widened with
// F16C into a block on the stack first (Note [float16 blocks] in widened.h): the same values,
// so the same sum.
template <class T>
double sum_of_block(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float16>) {
    alignas(64) float wide[kSumBlock];
    halves_to_floats(x, wide, n);
    return block_sum(wide, n);
  } else {
    return block_sum(x, n, ValueOf{});
  }
}

// dst[o] = finish(sum of the row o of `rows` rows of `length` floats) (Note [Blocked sums]).
template <class T, Reduction R>
void blocked_row_sums(const T* src, T* dst, int64_t rows, int64_t length) {
  using Red = Reducer<T, R>;
  const int64_t blocks = (length + kSumBlock - 1) / kSumBlock;
  if (blocks <= 1) {
    parallel_for(rows, items_per_grain(length), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        dst[o] = Red::finish(sum_of_block(src + o * length, length), length);
      }
    });
    return;
  }
  std::vector<double> partial(rows * blocks);
  parallel_for(rows * blocks, items_per_grain(kSumBlock), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t o = b / blocks, start = (b % blocks) * kSumBlock;
      partial[b] = sum_of_block(src + o * length + start, std::min(kSumBlock, length - start));
    }
  });
  for (int64_t o = 0; o < rows; ++o) {
    double sum = 0;
    for (int64_t b = 0; b < blocks; ++b) sum += partial[o * blocks + b];
    dst[o] = Red::finish(sum, length);
  }
}

// The largest (kMax) or smallest of row[0..n), n >= 1, read as float32: the last NaN if the
// row holds one, as Reducer::combine gives. Sixteen lanes of selects and a NaN mask in GCC
// vectors (combine's NaN test kept the loop scalar: 2 ns an element, 20x torch's amax), the
// lanes then merged in lane order, so the result depends on the row alone (where +0 and -0
// tie, the zero returned may be another occurrence than combine's first one). 16-bit rows are
// widened a block at a time.
template <bool kMax, class T>
float row_extremum(const T* row, int64_t n) {
  using Lanes = float __attribute__((vector_size(8 * sizeof(float))));
  using Mask = int32_t __attribute__((vector_size(8 * sizeof(int32_t))));
  constexpr int64_t kBlock = 1024;  // a multiple of the 16 lanes
  const auto better = [](float x, float than) { return kMax ? x > than : x < than; };
  const float first = static_cast<float>(row[0]);
  Lanes lo, hi;  // each lane starts at row[0] itself (0 + -0 would be +0)
  for (int k = 0; k < 8; ++k) lo[k] = hi[k] = first;
  Mask nan = {};
  float rest = first;
  alignas(64) float block[std::is_same_v<T, float> ? 1 : kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t m = std::min(kBlock, n - at);
    const float* x = block;
    if constexpr (std::is_same_v<T, float>) {
      x = row + at;
    } else if constexpr (std::is_same_v<T, float16>) {
      // F16C (Note [float16 blocks] in widened.h). A block on the stack, not WideRows' thread
      // scratch (wide_rows.h): fetching that took about 0.1 us a call, which more than doubled
      // amax over rows of 768 16-bit values.
      halves_to_floats(row + at, block, m);
    } else {
      for (int64_t i = 0; i < m; ++i) block[i] = static_cast<float>(row[at + i]);
    }
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) {
      Lanes a, b;
      std::memcpy(&a, x + i, sizeof(a));
      std::memcpy(&b, x + i + 8, sizeof(b));
      nan |= (a != a) | (b != b);
      if constexpr (kMax) {
        lo = a > lo ? a : lo;
        hi = b > hi ? b : hi;
      } else {
        lo = a < lo ? a : lo;
        hi = b < hi ? b : hi;
      }
    }
    for (; i < m; ++i) {  // only in the last block
      nan[0] |= x[i] != x[i] ? -1 : 0;
      if (better(x[i], rest)) rest = x[i];
    }
  }
  bool any_nan = false;
  for (int k = 0; k < 8; ++k) any_nan |= nan[k] != 0;
  if (any_nan) {
    for (int64_t j = n - 1; j >= 0; --j) {
      const float v = static_cast<float>(row[j]);
      if (std::isnan(v)) return v;
    }
  }
  float result = lo[0];
  for (int k = 0; k < 8; ++k) {
    if (better(lo[k], result)) result = lo[k];
    if (better(hi[k], result)) result = hi[k];
  }
  return better(rest, result) ? rest : result;
}

// Rows of a floating sum over columns summed apart, their sums then added in order.
constexpr int64_t kColumnChunkRows = 64;

template <class T, Reduction R>
void reduce_kernel(const KernelContext& ctx) {
  using Red = Reducer<T, R>;
  using Acc = typename Red::Acc;
  const Tensor& in = ctx.in(0);
  const Shape& x = in.shape();
  const ReduceGroups g = reduce_groups(x, ctx.p<ReduceParams>());
  const T* src = in.data<T>();
  T* dst = ctx.out(0).data<T>();
  const int64_t out_n = ctx.out(0).numel();
  const int64_t count = out_n == 0 ? 0 : x.numel() / out_n;

  // Pattern [outer kept] [reduced] [inner kept], each part possibly absent.
  const int n = static_cast<int>(g.extent.size());
  if (g.reduced_groups() <= 1) {
    const ReduceView v = reduce_view(g);
    const int64_t outer = v.outer, middle = v.middle, inner = v.inner;
    if constexpr (std::is_floating_point_v<compute_of<T>> && !Red::kExtremum) {
      if (inner == 1) {
        blocked_row_sums<T, R>(src, dst, outer, middle);
        return;
      }
    }
    if constexpr (Red::kExtremum && std::is_same_v<compute_of<T>, float>) {
      if (inner == 1 && middle > 0) {
        parallel_for(outer, items_per_grain(middle), [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            dst[o] =
                Red::finish(row_extremum<R == Reduction::kMax>(src + o * middle, middle), count);
          }
        });
        return;
      }
    }
    if (inner == 1) {  // rows: each output reduces a contiguous run
      parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(middle, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t o = begin; o < end; ++o) {
                       const T* row = src + o * middle;
                       Acc acc = Red::init();
                       for (int64_t r = 0; r < middle; ++r) acc = Red::combine(acc, row[r]);
                       dst[o] = Red::finish(acc, count);
                     }
                   });
      return;
    }
    // Columns: accumulate whole inner rows at a time (vectorises), in blocks of 256 columns.
    // Floating sums also split the rows into chunks of kColumnChunkRows, each summed on its
    // own and the chunks' sums added in order after (the order depends on the shape alone,
    // never on the threads): a bias gradient has few column blocks (three over 768 columns)
    // and many rows, and two threads split three blocks badly (0.39x torch's speed).
    constexpr bool kChunked = !Red::kExtremum && std::is_same_v<Acc, double>;
    const int64_t per_outer = (inner + 255) / 256;
    const int64_t chunk_rows = kChunked ? kColumnChunkRows : std::max<int64_t>(middle, 1);
    const int64_t chunks = std::max<int64_t>(1, (middle + chunk_rows - 1) / chunk_rows);
    std::vector<Acc> partial(chunks > 1 ? outer * chunks * inner : 0);
    const int64_t rows_per_item = std::min(middle, chunk_rows);
    parallel_for(outer * per_outer * chunks, items_per_grain(rows_per_item * 256),
                 [&](int64_t begin, int64_t end) {
                   std::vector<Acc> acc(256);
                   for (int64_t b = begin; b < end; ++b) {
                     const int64_t chunk = b % chunks, block = b / chunks;
                     const int64_t o = block / per_outer;
                     const int64_t i0 = (block % per_outer) * 256;
                     const int64_t len = std::min<int64_t>(256, inner - i0);
                     const int64_t r0 = chunk * chunk_rows;
                     const int64_t r1 = std::min(middle, r0 + chunk_rows);
                     std::fill(acc.begin(), acc.begin() + len, Red::init());
                     for (int64_t r = r0; r < r1; ++r) {
                       const T* row = src + (o * middle + r) * inner + i0;
                       if constexpr (std::is_same_v<T, float16>) {
                         // Widened with F16C (Note [float16 blocks] in widened.h), combined
                         // as the same values.
                         alignas(64) float wide[256];
                         halves_to_floats(row, wide, len);
                         for (int64_t i = 0; i < len; ++i) {
                           acc[i] = Reducer<float, R>::combine(acc[i], wide[i]);
                         }
                       } else {
                         for (int64_t i = 0; i < len; ++i) acc[i] = Red::combine(acc[i], row[i]);
                       }
                     }
                     for (int64_t i = 0; i < len; ++i) {
                       if (chunks == 1) {
                         dst[o * inner + i0 + i] = Red::finish(acc[i], count);
                       } else {
                         partial[(o * chunks + chunk) * inner + i0 + i] = acc[i];
                       }
                     }
                   }
                 });
    if constexpr (kChunked) {
      if (chunks > 1) {
        parallel_for(outer, items_per_grain(chunks * inner), [&](int64_t begin, int64_t end) {
          std::vector<Acc> total(inner);
          for (int64_t o = begin; o < end; ++o) {
            const Acc* first = partial.data() + o * chunks * inner;
            std::copy(first, first + inner, total.begin());
            for (int64_t c = 1; c < chunks; ++c) {
              const Acc* next = first + c * inner;
              for (int64_t i = 0; i < inner; ++i) total[i] += next[i];
            }
            for (int64_t i = 0; i < inner; ++i) dst[o * inner + i] = Red::finish(total[i], count);
          }
        });
      }
    }
    return;
  }

  // General: for each output element walk the reduced sub-space with an odometer.
  std::vector<int64_t> strides(n);
  int64_t s = 1;
  for (int i = n - 1; i >= 0; --i) {
    strides[i] = s;
    s *= g.extent[i];
  }
  std::vector<int> kept, red;
  for (int i = 0; i < n; ++i) (g.reduced[i] ? red : kept).push_back(i);
  parallel_for(out_n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(count, 1)),
               [&](int64_t begin, int64_t end) {
                 std::vector<int64_t> idx(red.size());
                 for (int64_t o = begin; o < end; ++o) {
                   int64_t base = 0, rest = o;
                   for (int k = static_cast<int>(kept.size()) - 1; k >= 0; --k) {
                     base += (rest % g.extent[kept[k]]) * strides[kept[k]];
                     rest /= g.extent[kept[k]];
                   }
                   std::fill(idx.begin(), idx.end(), 0);
                   Acc acc = Red::init();
                   for (int64_t c = 0; c < count; ++c) {
                     int64_t off = base;
                     for (size_t k = 0; k < red.size(); ++k) off += idx[k] * strides[red[k]];
                     acc = Red::combine(acc, src[off]);
                     for (int k = static_cast<int>(red.size()) - 1; k >= 0; --k) {
                       if (++idx[k] < g.extent[red[k]]) break;
                       idx[k] = 0;
                     }
                   }
                   dst[o] = Red::finish(acc, count);
                 }
               });
}

template <class T>
struct SumKernel {
  static void run(const KernelContext& ctx) { reduce_kernel<T, Reduction::kSum>(ctx); }
};
template <class T>
struct MeanKernel {
  static void run(const KernelContext& ctx) { reduce_kernel<T, Reduction::kMean>(ctx); }
};
template <class T>
struct MaxKernel {
  static void run(const KernelContext& ctx) { reduce_kernel<T, Reduction::kMax>(ctx); }
};
template <class T>
struct MinKernel {
  static void run(const KernelContext& ctx) { reduce_kernel<T, Reduction::kMin>(ctx); }
};

}  // namespace

OFL_REGISTER_KERNEL("reduce_sum", kCPU, SumKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("reduce_mean", kCPU, MeanKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("reduce_max", kCPU, MaxKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("reduce_min", kCPU, MinKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t, bool);

}  // namespace ofl::cpu
