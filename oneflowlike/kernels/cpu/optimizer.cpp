// CPU kernels of the fused optimizer updates; each element is independent, so the loops split
// over threads. The per-element math is kernels/optimizer_update.h, which the CUDA kernels share.

#include "oneflowlike/ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/optimizer_update.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// The skippable updates' last input (Note [Dynamic loss scaling]): nonzero skips the update.
template <class T>
bool skipped(const KernelContext& ctx, size_t inputs) {
  return ctx.inputs.size() > inputs && *ctx.in(static_cast<int>(inputs)).data<T>() != T(0);
}

// Inputs: param, grad, momentum_buffer, lr () [, skip ()].
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    if (skipped<T>(ctx, 4)) return;
    const auto coefficients = optimizer_update::sgd_coefficients<T>(ctx.p<SgdParams>());
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* buffer = ctx.in(2).data<T>();
    const T lr = *ctx.in(3).data<T>();
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      const auto c = coefficients;  // a local copy: stores to param cannot alias it
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::sgd_element(c, lr, grad[i], param[i], buffer[i]);
      }
    });
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step () [, skip ()].
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    if (skipped<T>(ctx, 6)) return;
    const auto coefficients = optimizer_update::adam_coefficients<T>(
        optimizer_update::adam_hyperparameters(ctx.p<AdamParams>()),
        /*lr=*/static_cast<double>(*ctx.in(4).data<T>()),
        /*step=*/static_cast<double>(*ctx.in(5).data<T>()));
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* exp_avg = ctx.in(2).data<T>();
    T* exp_avg_sq = ctx.in(3).data<T>();
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      const auto c = coefficients;
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::adam_element(c, grad[i], param[i], exp_avg[i], exp_avg_sq[i]);
      }
    });
  }
};

// x -> the number of its inf and nan elements, as float32.
template <class T>
struct CountNonfiniteKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    const int64_t n = ctx.in(0).numel();
    // One count per chunk of the elements, each written by whoever runs the chunk.
    const int64_t chunks = std::max<int64_t>(1, (n + kParallelGrain - 1) / kParallelGrain);
    std::vector<int64_t> parts(chunks, 0);
    parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
          // Widened without rounding: float16 and bfloat16 through float, the rest as they are.
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            parts[c] += !std::isfinite(x[i]);
          } else {
            parts[c] += !std::isfinite(static_cast<float>(x[i]));
          }
        }
      }
    });
    int64_t total = 0;
    for (int64_t p : parts) total += p;
    *ctx.out(0).data<float>() = static_cast<float>(total);
  }
};

// Inputs: scale (), good_steps (), steps (), found (), the first three updated in place.
template <class T>
struct LossScaleUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<LossScaleParams>();
    optimizer_update::loss_scale_element(
        static_cast<float>(p.growth_factor), static_cast<float>(p.backoff_factor),
        static_cast<float>(p.growth_interval), *ctx.in(3).data<float>(), *ctx.in(0).data<float>(),
        *ctx.in(1).data<float>(), *ctx.in(2).data<float>());
  }
};

// assign(dst, src): a copy into dst's storage, in place.
template <class T>
struct AssignKernel {
  static void run(const KernelContext& ctx) {
    std::memcpy(ctx.in(0).raw_data(), ctx.in(1).raw_data(), ctx.in(0).nbytes());
  }
};

// Note [Multi-tensor updates]: a piece of one tensor's elements, the unit the threads share.
struct Piece {
  int tensor;
  int64_t begin;
  int64_t end;
};

// Each tensor's elements cut into pieces of at most `grain`, the tensors in order.
std::vector<Piece> pieces_of(const std::vector<int64_t>& sizes, int64_t grain) {
  std::vector<Piece> pieces;
  for (size_t j = 0; j < sizes.size(); ++j) {
    for (int64_t begin = 0; begin < sizes[j]; begin += grain) {
      pieces.push_back({static_cast<int>(j), begin, std::min(sizes[j], begin + grain)});
    }
  }
  return pieces;
}

// sum over x of sum(x * x): each tensor's sum as reduce_sum(x * x) makes it (Note [Blocked
// sums]: the same blocks, rounded to T once), the tensors' sums added in order in T, as the
// chain of adds they replace did.
template <class T>
struct MultiSumSquaresKernel {
  static void run(const KernelContext& ctx) {
    std::vector<int64_t> sizes;
    for (const Tensor& x : ctx.inputs) sizes.push_back(x.numel());
    const std::vector<Piece> pieces = pieces_of(sizes, kSumBlock);
    std::vector<double> partial(pieces.size());
    parallel_for(static_cast<int64_t>(pieces.size()), items_per_grain(kSumBlock),
                 [&](int64_t first, int64_t last) {
                   for (int64_t b = first; b < last; ++b) {
                     const Piece& p = pieces[b];
                     partial[b] = block_sum(ctx.in(p.tensor).data<T>() + p.begin, p.end - p.begin,
                                            [](T v) { return v * v; });
                   }
                 });
    T total = 0;
    size_t b = 0;
    for (size_t j = 0; j < sizes.size(); ++j) {
      double sum = 0;
      for (; b < pieces.size() && pieces[b].tensor == static_cast<int>(j); ++b) sum += partial[b];
      total = j == 0 ? static_cast<T>(sum) : total + static_cast<T>(sum);
    }
    *ctx.out(0).data<T>() = total;
  }
};

// The number of inf and nan elements of them all, as float32 (Note [Dynamic loss scaling]).
template <class T>
struct MultiCountNonfiniteKernel {
  static void run(const KernelContext& ctx) {
    std::vector<int64_t> sizes;
    for (const Tensor& x : ctx.inputs) sizes.push_back(x.numel());
    const std::vector<Piece> pieces = pieces_of(sizes, kParallelGrain);
    std::vector<int64_t> counts(pieces.size(), 0);
    parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const T* x = ctx.in(pieces[b].tensor).data<T>();
        for (int64_t i = pieces[b].begin; i < pieces[b].end; ++i) {
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            counts[b] += !std::isfinite(x[i]);
          } else {  // widened without rounding
            counts[b] += !std::isfinite(static_cast<float>(x[i]));
          }
        }
      }
    });
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    *ctx.out(0).data<float>() = static_cast<float>(total);
  }
};

// Runs update(tensor, begin, end) over every tensor's elements, the pieces shared by the threads.
template <class Update>
void for_each_piece(const KernelContext& ctx, const MultiUpdateInputs& m, const Update& update) {
  std::vector<int64_t> sizes;
  for (int j = 0; j < m.num_tensors(static_cast<int>(ctx.inputs.size())); ++j) {
    sizes.push_back(ctx.in(m.tensor(j, 0)).numel());
  }
  const std::vector<Piece> pieces = pieces_of(sizes, kParallelGrain);
  parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) update(pieces[b].tensor, pieces[b].begin, pieces[b].end);
  });
}

// The gradient scale of a scaled update, else 1. The update loops multiply by it either way
// (exact for 1): a choice made per element kept them from vectorising, which doubled AdamW's
// time on the GPT once clipping scaled its gradients. The tensors an update reads and writes
// are distinct registers, hence __restrict.
template <class T>
T grad_scale(const KernelContext& ctx, const MultiUpdateInputs& m) {
  return m.grad_scale >= 0 ? *ctx.in(m.grad_scale).data<T>() : T(1);
}

template <class T>
bool multi_skipped(const KernelContext& ctx, const MultiUpdateInputs& m) {
  return m.skip >= 0 && *ctx.in(m.skip).data<T>() != T(0);
}

template <class T>
struct MultiSgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MultiSgdParams>();
    const MultiUpdateInputs m = MultiUpdateInputs::of(p);
    if (multi_skipped<T>(ctx, m)) return;
    const auto coefficients = optimizer_update::sgd_coefficients<T>(p.sgd());
    const T lr = *ctx.in(m.lr).data<T>();
    const T scale = grad_scale<T>(ctx, m);
    for_each_piece(ctx, m, [&](int j, int64_t begin, int64_t end) {
      const auto c = coefficients;  // a local copy: stores to param cannot alias it
      T* __restrict param = ctx.in(m.tensor(j, 0)).data<T>();
      const T* __restrict grad = ctx.in(m.tensor(j, 1)).data<T>();
      T* __restrict buffer = ctx.in(m.tensor(j, 2)).data<T>();
      const T s = scale;
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::sgd_element(c, lr, grad[i] * s, param[i], buffer[i]);
      }
    });
  }
};

template <class T>
struct MultiAdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MultiAdamParams>();
    const MultiUpdateInputs m = MultiUpdateInputs::of(p);
    if (multi_skipped<T>(ctx, m)) return;
    const auto coefficients = optimizer_update::adam_coefficients<T>(
        optimizer_update::adam_hyperparameters(p.adam()),
        /*lr=*/static_cast<double>(*ctx.in(m.lr).data<T>()),
        /*step=*/static_cast<double>(*ctx.in(m.step).data<T>()));
    const T scale = grad_scale<T>(ctx, m);
    for_each_piece(ctx, m, [&](int j, int64_t begin, int64_t end) {
      const auto c = coefficients;
      T* __restrict param = ctx.in(m.tensor(j, 0)).data<T>();
      const T* __restrict grad = ctx.in(m.tensor(j, 1)).data<T>();
      T* __restrict exp_avg = ctx.in(m.tensor(j, 2)).data<T>();
      T* __restrict exp_avg_sq = ctx.in(m.tensor(j, 3)).data<T>();
      const T s = scale;
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::adam_element(c, grad[i] * s, param[i], exp_avg[i], exp_avg_sq[i]);
      }
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("multi_tensor_sum_squares", kCPU, MultiSumSquaresKernel, float, double);
OFL_REGISTER_KERNEL("multi_tensor_count_nonfinite", kCPU, MultiCountNonfiniteKernel, float, double,
                    float16, bfloat16);
OFL_REGISTER_KERNEL("multi_tensor_sgd_update", kCPU, MultiSgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("multi_tensor_adam_update", kCPU, MultiAdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("assign", kCPU, AssignKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);
OFL_REGISTER_KERNEL("sgd_update", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCPU, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update_skippable", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update_skippable", kCPU, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("count_nonfinite", kCPU, CountNonfiniteKernel, float, double, float16,
                    bfloat16);
OFL_REGISTER_KERNEL("loss_scale_update", kCPU, LossScaleUpdateKernel, float);

}  // namespace ofl::cpu
