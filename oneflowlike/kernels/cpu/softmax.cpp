// CPU kernels of softmax, log_softmax and their backward ops. The tensor is viewed as
// (outer, axis, inner) and processed in blocks of adjacent lines (see for_each_block). float16
// and bfloat16 run the float32 row and block functions on widened lines (Note [Native bfloat16
// rows] in wide_rows.h).

#include "oneflowlike/ops/softmax.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/cpu/row_exp.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

struct AxisView {
  int64_t outer = 1, extent = 1, inner = 1;
};

AxisView axis_view(const Shape& shape, int64_t axis) {
  if (shape.ndim() == 0) return {};
  const int a = static_cast<int>(axis < 0 ? axis + shape.ndim() : axis);
  return {shape.count(0, a), shape[a], shape.count(a + 1, shape.ndim())};
}

// Lines along the axis are (outer, inner) pairs. A block is up to kBlock lines with adjacent
// inner indices, so the loops over the block run over contiguous memory even when the axis is
// not the last one. Calls fn(base, count): line c of the block has element j at
// base + j * inner + c.
constexpr int64_t kBlock = 64;

template <class F>
void for_each_block(const AxisView& v, F&& fn) {
  const int64_t blocks_per_outer = (v.inner + kBlock - 1) / kBlock;
  const int64_t blocks = v.outer * blocks_per_outer;
  const int64_t block_work = std::max<int64_t>(1, v.extent * std::min(v.inner, kBlock));
  parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / block_work),
               [&](int64_t begin, int64_t end) {
                 for (int64_t b = begin; b < end; ++b) {
                   const int64_t o = b / blocks_per_outer, i0 = (b % blocks_per_outer) * kBlock;
                   fn(o * v.extent * v.inner + i0, std::min(kBlock, v.inner - i0));
                 }
               });
}

// Accumulation type: float lines sum in double for accuracy at long axes.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;

// The fast path of the last axis: calls fn(base) for each contiguous row.
template <class F>
void for_each_row(const AxisView& v, F&& fn) {
  parallel_for(v.outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(v.extent, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) fn(r * v.extent);
               });
}

// A row's sums in double lanes, its max in lanes too (lane_sums, lane_max: Note [Blocked sums]).
// In float the exponentials go through exp_shifted, at 16 lanes on AVX-512, in a loop of their
// own: inside lane_sums' term they ran at 8 (softmax over (4096, 768) 3.1 -> 2.3 ms here).
// x and y must not overlap: log_softmax keeps the exponentials in y while it still reads x.
template <class T, bool kLog>
void softmax_row(const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const float max = lane_max(x, n);
    exp_shifted(x, y, n, max);  // for log_softmax only to sum them; y is overwritten below
    const double sum = lane_sums<1>(
        n, [&](int64_t j) { return std::array<double, 1>{static_cast<double>(y[j])}; })[0];
    if constexpr (kLog) {
      const float shift = max + static_cast<float>(std::log(sum));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] - shift;
    } else {
      const float inv = static_cast<float>(1 / sum);
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) y[j] *= inv;
    }
  } else if constexpr (kLog) {
    const RowExpSum<T> e = row_exp_sum(x, n);
    const T shift = e.max + static_cast<T>(std::log(e.sum));
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] - shift;
  } else {
    const T max = lane_max(x, n);
    const double sum = lane_sums<1>(n, [&](int64_t j) {
      y[j] = vec_math::exp(x[j] - max);
      return std::array<double, 1>{static_cast<double>(y[j])};
    })[0];
    const T inv = static_cast<T>(1 / sum);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] *= inv;
  }
}

template <class T, bool kLog>
void softmax_backward_row(const T* y, const T* dy, T* dx, int64_t n) {
  const double acc = lane_sums<1>(n, [&](int64_t j) {
    return std::array<double, 1>{static_cast<double>(kLog ? dy[j] : dy[j] * y[j])};
  })[0];
  const T s = static_cast<T>(acc);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    dx[j] = kLog ? dy[j] - vec_math::exp(y[j]) * s : y[j] * (dy[j] - s);
}

// `count` adjacent lines of a non-last axis: line c has element j at j * st + c.
template <class T, bool kLog>
void softmax_block(const T* xb, T* yb, int64_t extent, int64_t st, int64_t count) {
  std::array<T, kBlock> max;
  std::array<Acc<T>, kBlock> sum{};
  std::copy(xb, xb + count, max.begin());
  for (int64_t j = 1; j < extent; ++j) {
    for (int64_t c = 0; c < count; ++c) max[c] = lane_max_of(max[c], xb[j * st + c]);
  }
  for (int64_t j = 0; j < extent; ++j) {
    for (int64_t c = 0; c < count; ++c) {
      const T e = vec_math::exp(xb[j * st + c] - max[c]);
      if constexpr (!kLog) yb[j * st + c] = e;
      sum[c] += e;
    }
  }
  if constexpr (kLog) {
    std::array<T, kBlock> shift;  // log(sum(exp(x))) = max + log(sum(exp(x - max)))
    for (int64_t c = 0; c < count; ++c) shift[c] = max[c] + static_cast<T>(std::log(sum[c]));
    for (int64_t j = 0; j < extent; ++j) {
      for (int64_t c = 0; c < count; ++c) yb[j * st + c] = xb[j * st + c] - shift[c];
    }
  } else {
    std::array<T, kBlock> inv;
    for (int64_t c = 0; c < count; ++c) inv[c] = static_cast<T>(1 / sum[c]);
    for (int64_t j = 0; j < extent; ++j) {
      for (int64_t c = 0; c < count; ++c) yb[j * st + c] *= inv[c];
    }
  }
}

// softmax_grad:      dx = y * (dy - sum(dy * y)).
// log_softmax_grad:  dx = dy - exp(y) * sum(dy).
template <class T, bool kLog>
void softmax_backward_block(const T* y, const T* dy, T* dx, int64_t extent, int64_t st,
                            int64_t count) {
  std::array<Acc<T>, kBlock> acc{};
  for (int64_t j = 0; j < extent; ++j) {
    for (int64_t c = 0; c < count; ++c) {
      const int64_t k = j * st + c;
      if constexpr (kLog) {
        acc[c] += dy[k];
      } else {
        acc[c] += dy[k] * y[k];
      }
    }
  }
  std::array<T, kBlock> s;
  for (int64_t c = 0; c < count; ++c) s[c] = static_cast<T>(acc[c]);
  for (int64_t j = 0; j < extent; ++j) {
    for (int64_t c = 0; c < count; ++c) {
      const int64_t k = j * st + c;
      if constexpr (kLog) {
        dx[k] = dy[k] - vec_math::exp(y[k]) * s[c];
      } else {
        dx[k] = y[k] * (dy[k] - s[c]);
      }
    }
  }
}

// 16-bit types (Note [Native bfloat16 rows] in wide_rows.h): `lines` lines of a block, widened into
// scratch slot `slot` as lines side by side (element j of line c at j * lines + c).
template <class T>
const float* widened_lines(int slot, const T* x, int64_t extent, int64_t st, int64_t lines) {
  float* out = WideRows::row(slot, extent * lines);
  for (int64_t j = 0; j < extent; ++j) {
    for (int64_t c = 0; c < lines; ++c) out[j * lines + c] = static_cast<float>(x[j * st + c]);
  }
  return out;
}
template <class T>
void round_lines(const float* x, T* y, int64_t extent, int64_t st, int64_t lines) {
  for (int64_t j = 0; j < extent; ++j) {
    for (int64_t c = 0; c < lines; ++c) y[j * st + c] = T(x[j * lines + c]);
  }
}
// Lines of a block widened at a time: at most one line's worth of 16 K floats where the axis is
// long, up to the whole block where it is short (each line's arithmetic is its own, so the
// grouping does not change a bit).
int64_t lines_at_once(int64_t extent) {
  return std::clamp<int64_t>(16384 / std::max<int64_t>(extent, 1), 1, kBlock);
}

template <class T, bool kLog>
struct SoftmaxKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    const AxisView v = axis_view(ctx.in(0).shape(), ctx.p<SoftmaxParams>().axis);
    if (v.extent == 0) return;
    if (v.inner == 1) {  // the last axis: contiguous rows
      for_each_row(v, [&](int64_t base) {
        if constexpr (is_16bit_float<T>) {
          const float* xf = WideRows::widened(0, x + base, v.extent);
          float* yf = WideRows::row(1, v.extent);
          softmax_row<float, kLog>(xf, yf, v.extent);
          WideRows::round(yf, y + base, v.extent);
          WideRows::trim();
        } else {
          softmax_row<T, kLog>(x + base, y + base, v.extent);
        }
      });
      return;
    }
    for_each_block(v, [&](int64_t base, int64_t count) {
      if constexpr (is_16bit_float<T>) {
        const int64_t step = lines_at_once(v.extent);
        for (int64_t c0 = 0; c0 < count; c0 += step) {
          const int64_t lines = std::min(step, count - c0);
          const float* xf = widened_lines(0, x + base + c0, v.extent, v.inner, lines);
          float* yf = WideRows::row(1, v.extent * lines);
          softmax_block<float, kLog>(xf, yf, v.extent, lines, lines);
          round_lines(yf, y + base + c0, v.extent, v.inner, lines);
        }
        WideRows::trim();
      } else {
        softmax_block<T, kLog>(x + base, y + base, v.extent, v.inner, count);
      }
    });
  }
};

template <class T>
using SoftmaxForward = SoftmaxKernel<T, false>;
template <class T>
using LogSoftmaxForward = SoftmaxKernel<T, true>;

template <class T, bool kLog>
struct SoftmaxBackwardKernel {
  static void run(const KernelContext& ctx) {
    const T* y = ctx.in(0).data<T>();
    const T* dy = ctx.in(1).data<T>();
    T* dx = ctx.out(0).data<T>();
    const AxisView v = axis_view(ctx.in(0).shape(), ctx.p<SoftmaxParams>().axis);
    if (v.inner == 1) {
      for_each_row(v, [&](int64_t base) {
        if constexpr (is_16bit_float<T>) {
          const float* yf = WideRows::widened(0, y + base, v.extent);
          const float* dyf = WideRows::widened(1, dy + base, v.extent);
          float* dxf = WideRows::row(2, v.extent);
          softmax_backward_row<float, kLog>(yf, dyf, dxf, v.extent);
          WideRows::round(dxf, dx + base, v.extent);
          WideRows::trim();
        } else {
          softmax_backward_row<T, kLog>(y + base, dy + base, dx + base, v.extent);
        }
      });
      return;
    }
    for_each_block(v, [&](int64_t base, int64_t count) {
      if constexpr (is_16bit_float<T>) {
        const int64_t step = lines_at_once(v.extent);
        for (int64_t c0 = 0; c0 < count; c0 += step) {
          const int64_t lines = std::min(step, count - c0);
          const float* yf = widened_lines(0, y + base + c0, v.extent, v.inner, lines);
          const float* dyf = widened_lines(1, dy + base + c0, v.extent, v.inner, lines);
          float* dxf = WideRows::row(2, v.extent * lines);
          softmax_backward_block<float, kLog>(yf, dyf, dxf, v.extent, lines, lines);
          round_lines(dxf, dx + base + c0, v.extent, v.inner, lines);
        }
        WideRows::trim();
      } else {
        softmax_backward_block<T, kLog>(y + base, dy + base, dx + base, v.extent, v.inner, count);
      }
    });
  }
};

template <class T>
using SoftmaxGradKernel = SoftmaxBackwardKernel<T, false>;
template <class T>
using LogSoftmaxGradKernel = SoftmaxBackwardKernel<T, true>;

}  // namespace

OFL_REGISTER_KERNEL("softmax", kCPU, SoftmaxForward, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("log_softmax", kCPU, LogSoftmaxForward, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("softmax_grad", kCPU, SoftmaxGradKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("log_softmax_grad", kCPU, LogSoftmaxGradKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cpu
