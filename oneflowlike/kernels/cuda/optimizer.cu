// CUDA kernels of the fused optimizer updates (ops/optimizer.h), in place like the CPU's
// (kernels/cpu/optimizer.cpp) and with the same per-element math (kernels/optimizer_update.h).
// lr and step are scalar tensors in device memory: each thread reads lr itself, and for Adam
// one thread per block computes the step's coefficients into shared memory, so the host never
// waits for the device. No __restrict__: flow.optim.SGD passes grad as the (unused) momentum
// buffer when momentum is 0.

#include <algorithm>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/optimizer_update.h"

namespace ofl::cuda_kernels {

namespace {

template <class T>
__global__ void sgd_update_kernel(int64_t n, optimizer_update::SgdCoefficients<T> c, const T* lr,
                                  const T* grad, T* param, T* buffer, const T* skip) {
  if (skip != nullptr && *skip != T(0)) return;  // Note [Dynamic loss scaling]
  const T learning_rate = *lr;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    optimizer_update::sgd_element(c, learning_rate, grad[i], param[i], buffer[i]);
  }
}

template <class T>
__global__ void adam_update_kernel(int64_t n, optimizer_update::AdamHyperparameters h, const T* lr,
                                   const T* step, const T* grad, T* param, T* exp_avg,
                                   T* exp_avg_sq, const T* skip) {
  if (skip != nullptr && *skip != T(0)) return;  // the whole grid: before any __syncthreads
  __shared__ optimizer_update::AdamCoefficients<T> shared;
  if (threadIdx.x == 0) {
    shared = optimizer_update::adam_coefficients<T>(h, static_cast<double>(*lr),
                                                    static_cast<double>(*step));
  }
  __syncthreads();  // every thread reaches it: no thread returns before
  const optimizer_update::AdamCoefficients<T> c = shared;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    optimizer_update::adam_element(c, grad[i], param[i], exp_avg[i], exp_avg_sq[i]);
  }
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{65535} * 8));
}

// The skippable updates' last input, or null.
template <class T>
const T* skip_flag(const KernelContext& ctx, size_t inputs) {
  return ctx.inputs.size() > inputs ? data<T>(ctx.in(static_cast<int>(inputs))) : nullptr;
}

// Inputs: param, grad, momentum_buffer, lr () [, skip ()].
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const int64_t n = ctx.in(0).numel();
    if (n == 0) return;
    sgd_update_kernel<T><<<blocks_for(n), kBlock, 0, stream_of(ctx)>>>(
        n, optimizer_update::sgd_coefficients<T>(ctx.p<SgdParams>()), data<T>(ctx.in(3)),
        data<T>(ctx.in(1)), data<T>(ctx.in(0)), data<T>(ctx.in(2)), skip_flag<T>(ctx, 4));
    cuda::check(cudaGetLastError(), "sgd_update", device_of(ctx));
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step () [, skip ()].
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const int64_t n = ctx.in(0).numel();
    if (n == 0) return;
    adam_update_kernel<T><<<blocks_for(n), kBlock, 0, stream_of(ctx)>>>(
        n, optimizer_update::adam_hyperparameters(ctx.p<AdamParams>()), data<T>(ctx.in(4)),
        data<T>(ctx.in(5)), data<T>(ctx.in(1)), data<T>(ctx.in(0)), data<T>(ctx.in(2)),
        data<T>(ctx.in(3)), skip_flag<T>(ctx, 6));
    cuda::check(cudaGetLastError(), "adam_update", device_of(ctx));
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

OFL_REGISTER_KERNEL("assign", kCUDA, AssignKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update", kCUDA, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCUDA, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update_skippable", kCUDA, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update_skippable", kCUDA, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("count_nonfinite", kCUDA, CountNonfiniteKernel, float, double, float16,
                    bfloat16);
OFL_REGISTER_KERNEL("loss_scale_update", kCUDA, LossScaleUpdateKernel, float);

}  // namespace ofl::cuda_kernels
