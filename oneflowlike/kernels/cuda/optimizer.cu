// CUDA kernels of the fused optimizer updates (ops/optimizer.h), in place like the CPU's
// (kernels/cpu/optimizer.cpp) and with the same per-element math (kernels/optimizer_update.h).
// lr and step are scalar tensors in device memory: each thread reads lr itself, and for Adam
// one thread per block computes the step's coefficients into shared memory, so the host never
// waits for the device. No __restrict__: flow.optim.SGD passes grad as the (unused) momentum
// buffer when momentum is 0.

#include <algorithm>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/kernels/cuda/tensor_list.cuh"
#include "oneflowlike/kernels/optimizer_update.h"

namespace ofl::cuda_kernels {

namespace {

// The skippable updates' last input, or null.
template <class T>
const T* skip_flag(const KernelContext& ctx, size_t inputs) {
  return ctx.inputs.size() > inputs ? data<T>(ctx.in(static_cast<int>(inputs))) : nullptr;
}

// Note [Multi-tensor updates]: one launch per list of up to kListTensors tensors (Note [One
// launch per tensor list] in tensor_list.cuh), each element updated by optimizer_update.h's
// math, as on the CPU; the optional scalars are device pointers, so the host never waits for
// them. The one-tensor updates are lists of one.
template <class T>
const T* optional_input(const KernelContext& ctx, int index) {
  return index >= 0 ? data<T>(ctx.in(index)) : nullptr;
}

constexpr int64_t kUpdatePiece = int64_t{kBlock} * 4;

template <class T>
__global__ void multi_sgd_update_kernel(TensorList<T, 3> list,
                                        optimizer_update::SgdCoefficients<T> c, const T* lr,
                                        const T* skip, const T* scale) {
  if (skip != nullptr && *skip != T(0)) return;
  const T learning_rate = *lr;
  int64_t begin = 0, end = 0;
  const int j = tensor_of_block(list, blockIdx.x, kUpdatePiece, &begin, &end);
  T* param = list.data[0][j];
  const T* grad = list.data[1][j];
  T* buffer = list.data[2][j];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const T g = scale != nullptr ? grad[i] * *scale : grad[i];
    optimizer_update::sgd_element(c, learning_rate, g, param[i], buffer[i]);
  }
}

template <class T>
__global__ void multi_adam_update_kernel(TensorList<T, 4> list,
                                         optimizer_update::AdamHyperparameters h, const T* lr,
                                         const T* step, const T* skip, const T* scale) {
  if (skip != nullptr && *skip != T(0)) return;  // the whole grid: before any __syncthreads
  __shared__ optimizer_update::AdamCoefficients<T> shared;
  if (threadIdx.x == 0) {
    shared = optimizer_update::adam_coefficients<T>(h, static_cast<double>(*lr),
                                                    static_cast<double>(*step));
  }
  __syncthreads();  // every thread reaches it: no thread returns before
  const optimizer_update::AdamCoefficients<T> c = shared;
  int64_t begin = 0, end = 0;
  const int j = tensor_of_block(list, blockIdx.x, kUpdatePiece, &begin, &end);
  T* param = list.data[0][j];
  const T* grad = list.data[1][j];
  T* exp_avg = list.data[2][j];
  T* exp_avg_sq = list.data[3][j];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const T g = scale != nullptr ? grad[i] * *scale : grad[i];
    optimizer_update::adam_element(c, g, param[i], exp_avg[i], exp_avg_sq[i]);
  }
}

template <class T>
struct MultiSgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MultiSgdParams>();
    const MultiUpdateInputs m = MultiUpdateInputs::of(p);
    const auto c = optimizer_update::sgd_coefficients<T>(p.sgd());
    for_each_tensor_list<T, 3>(
        m.num_tensors(static_cast<int>(ctx.inputs.size())), kUpdatePiece,
        [&](int j) { return ctx.in(m.tensor(j, 0)).numel(); },
        [&](int j, int k) { return data<T>(ctx.in(m.tensor(j, k))); },
        [&](const TensorList<T, 3>& list, int64_t blocks) {
          multi_sgd_update_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
              list, c, data<T>(ctx.in(m.lr)), optional_input<T>(ctx, m.skip),
              optional_input<T>(ctx, m.grad_scale));
          cuda::check(cudaGetLastError(), "multi_tensor_sgd_update", device_of(ctx));
        });
  }
};

template <class T>
struct MultiAdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<MultiAdamParams>();
    const MultiUpdateInputs m = MultiUpdateInputs::of(p);
    const auto h = optimizer_update::adam_hyperparameters(p.adam());
    for_each_tensor_list<T, 4>(
        m.num_tensors(static_cast<int>(ctx.inputs.size())), kUpdatePiece,
        [&](int j) { return ctx.in(m.tensor(j, 0)).numel(); },
        [&](int j, int k) { return data<T>(ctx.in(m.tensor(j, k))); },
        [&](const TensorList<T, 4>& list, int64_t blocks) {
          multi_adam_update_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
              list, h, data<T>(ctx.in(m.lr)), data<T>(ctx.in(m.step)),
              optional_input<T>(ctx, m.skip), optional_input<T>(ctx, m.grad_scale));
          cuda::check(cudaGetLastError(), "multi_tensor_adam_update", device_of(ctx));
        });
  }
};

// The one-tensor updates: a list of one (Note [One launch per tensor list]).
// Inputs: param, grad, momentum_buffer, lr () [, skip ()].
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto c = optimizer_update::sgd_coefficients<T>(ctx.p<SgdParams>());
    for_each_tensor_list<T, 3>(
        1, kUpdatePiece, [&](int) { return ctx.in(0).numel(); },
        [&](int, int k) { return data<T>(ctx.in(k)); },
        [&](const TensorList<T, 3>& list, int64_t blocks) {
          multi_sgd_update_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
              list, c, data<T>(ctx.in(3)), skip_flag<T>(ctx, 4), /*scale=*/nullptr);
          cuda::check(cudaGetLastError(), "sgd_update", device_of(ctx));
        });
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step () [, skip ()].
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto h = optimizer_update::adam_hyperparameters(ctx.p<AdamParams>());
    for_each_tensor_list<T, 4>(
        1, kUpdatePiece, [&](int) { return ctx.in(0).numel(); },
        [&](int, int k) { return data<T>(ctx.in(k)); },
        [&](const TensorList<T, 4>& list, int64_t blocks) {
          multi_adam_update_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(
              list, h, data<T>(ctx.in(4)), data<T>(ctx.in(5)), skip_flag<T>(ctx, 6),
              /*scale=*/nullptr);
          cuda::check(cudaGetLastError(), "adam_update", device_of(ctx));
        });
  }
};

// multi_tensor_sum_squares: each tensor cut into pieces of kSquaresPiece elements, one block per
// piece writing its sum of squares to the scratch, then one block adding the pieces in order:
// the result depends on the shapes only, never on timing.
constexpr int64_t kSquaresPiece = 16384;

template <class T>
__device__ T block_total(T mine) {
  __shared__ T partial[kBlock];
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// One block per piece of each tensor of the list, in order: pieces[b] = the piece's sum.
template <class T>
__global__ void sum_squares_pieces_kernel(TensorList<T, 1> list, T* pieces) {
  int64_t begin = 0, end = 0;
  const T* x = list.data[0][tensor_of_block(list, blockIdx.x, kSquaresPiece, &begin, &end)];
  T mine = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine += x[i] * x[i];
  const T sum = block_total(mine);
  if (threadIdx.x == 0) pieces[blockIdx.x] = sum;
}

template <class T>
__global__ void sum_pieces_kernel(int64_t count, const T* pieces, T* out) {
  T mine = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) mine += pieces[i];
  const T sum = block_total(mine);
  if (threadIdx.x == 0) *out = sum;
}

// The pieces of every tensor (one launch per list), then one block adding them in order.
template <class T>
struct MultiSumSquaresKernel {
  static void run(const KernelContext& ctx) {
    int64_t count = 0;
    for (const Tensor& x : ctx.inputs) count += (x.numel() + kSquaresPiece - 1) / kSquaresPiece;
    Scratch scratch(ctx, static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T));
    T* pieces = scratch.as<T>();
    int64_t offset = 0;
    for_each_tensor_list<T, 1>(
        static_cast<int>(ctx.inputs.size()), kSquaresPiece,
        [&](int j) { return ctx.in(j).numel(); }, [&](int j, int) { return data<T>(ctx.in(j)); },
        [&](const TensorList<T, 1>& list, int64_t blocks) {
          sum_squares_pieces_kernel<T>
              <<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(list, pieces + offset);
          cuda::check(cudaGetLastError(), "multi_tensor_sum_squares", device_of(ctx));
          offset += blocks;
        });
    sum_pieces_kernel<T><<<1, kBlock, 0, stream_of(ctx)>>>(count, pieces, data<T>(ctx.out(0)));
    cuda::check(cudaGetLastError(), "multi_tensor_sum_squares", device_of(ctx));
  }
};

// count_nonfinite: one block walks x and sums its threads' counts in shared memory (exact: small
// integers in float32), thread 0 writes the count. One block: gradients are checked once a step.
template <class N>
__global__ void count_nonfinite_kernel(int64_t n, const N* x, float* count) {
  __shared__ float partial[kBlock];
  float mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mine += isfinite(load(x, i)) ? 0.f : 1.f;
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = partial[0];
}

template <class T>
struct CountNonfiniteKernel {
  static void run(const KernelContext& ctx) {
    count_nonfinite_kernel<<<1, kBlock, 0, stream_of(ctx)>>>(
        ctx.in(0).numel(), data<T>(ctx.in(0)), static_cast<float*>(ctx.out(0).raw_data()));
    cuda::check(cudaGetLastError(), "count_nonfinite", device_of(ctx));
  }
};

// One block per piece of each tensor of the list: counts[b] = the piece's count (exact: small
// integers in float32, so the order of the sums does not matter).
template <class N>
__global__ void count_nonfinite_pieces_kernel(TensorList<N, 1> list, float* counts) {
  __shared__ float partial[kBlock];
  int64_t begin = 0, end = 0;
  const N* x = list.data[0][tensor_of_block(list, blockIdx.x, kSquaresPiece, &begin, &end)];
  float mine = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    mine += isfinite(load(x, i)) ? 0.f : 1.f;
  }
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = partial[0];
}

// Each piece's count into its slot of the scratch (one launch per list), then the slots added.
template <class T>
struct MultiCountNonfiniteKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    int64_t count = 0;
    for (const Tensor& x : ctx.inputs) count += (x.numel() + kSquaresPiece - 1) / kSquaresPiece;
    Scratch scratch(ctx, static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float));
    float* counts = scratch.as<float>();
    int64_t offset = 0;
    for_each_tensor_list<N, 1>(
        static_cast<int>(ctx.inputs.size()), kSquaresPiece,
        [&](int j) { return ctx.in(j).numel(); }, [&](int j, int) { return data<T>(ctx.in(j)); },
        [&](const TensorList<N, 1>& list, int64_t blocks) {
          count_nonfinite_pieces_kernel<N>
              <<<static_cast<unsigned>(blocks), kBlock, 0, stream_of(ctx)>>>(list, counts + offset);
          cuda::check(cudaGetLastError(), "multi_tensor_count_nonfinite", device_of(ctx));
          offset += blocks;
        });
    sum_pieces_kernel<float><<<1, kBlock, 0, stream_of(ctx)>>>(
        count, counts, static_cast<float*>(ctx.out(0).raw_data()));
    cuda::check(cudaGetLastError(), "multi_tensor_count_nonfinite", device_of(ctx));
  }
};

__global__ void loss_scale_update_kernel(float growth_factor, float backoff_factor,
                                         float growth_interval, const float* found, float* scale,
                                         float* good_steps, float* steps) {
  optimizer_update::loss_scale_element(growth_factor, backoff_factor, growth_interval, *found,
                                       *scale, *good_steps, *steps);
}

template <class T>
struct LossScaleUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<LossScaleParams>();
    loss_scale_update_kernel<<<1, 1, 0, stream_of(ctx)>>>(
        static_cast<float>(p.growth_factor), static_cast<float>(p.backoff_factor),
        static_cast<float>(p.growth_interval), static_cast<const float*>(ctx.in(3).raw_data()),
        static_cast<float*>(ctx.in(0).raw_data()), static_cast<float*>(ctx.in(1).raw_data()),
        static_cast<float*>(ctx.in(2).raw_data()));
    cuda::check(cudaGetLastError(), "loss_scale_update", device_of(ctx));
  }
};

// assign(dst, src): a device copy into dst's storage, on the compute stream, in place.
template <class T>
struct AssignKernel {
  static void run(const KernelContext& ctx) {
    cuda::check(cudaMemcpyAsync(ctx.in(0).raw_data(), ctx.in(1).raw_data(), ctx.in(0).nbytes(),
                                cudaMemcpyDeviceToDevice, stream_of(ctx)),
                "assign", device_of(ctx));
  }
};

}  // namespace

OFL_REGISTER_KERNEL("multi_tensor_sum_squares", kCUDA, MultiSumSquaresKernel, float, double);
OFL_REGISTER_KERNEL("multi_tensor_count_nonfinite", kCUDA, MultiCountNonfiniteKernel, float, double,
                    float16, bfloat16);
OFL_REGISTER_KERNEL("multi_tensor_sgd_update", kCUDA, MultiSgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("multi_tensor_adam_update", kCUDA, MultiAdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("assign", kCUDA, AssignKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("sgd_update", kCUDA, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCUDA, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update_skippable", kCUDA, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update_skippable", kCUDA, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("count_nonfinite", kCUDA, CountNonfiniteKernel, float, double, float16,
                    bfloat16);
OFL_REGISTER_KERNEL("loss_scale_update", kCUDA, LossScaleUpdateKernel, float);

}  // namespace ofl::cuda_kernels
