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
                                  const T* grad, T* param, T* buffer) {
  const T learning_rate = *lr;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    optimizer_update::sgd_element(c, learning_rate, grad[i], param[i], buffer[i]);
  }
}

template <class T>
__global__ void adam_update_kernel(int64_t n, optimizer_update::AdamHyperparameters h, const T* lr,
                                   const T* step, const T* grad, T* param, T* exp_avg,
                                   T* exp_avg_sq) {
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

// Inputs: param, grad, momentum_buffer, lr ().
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const int64_t n = ctx.in(0).numel();
    if (n == 0) return;
    sgd_update_kernel<T><<<blocks_for(n), kBlock, 0, stream_of(ctx)>>>(
        n, optimizer_update::sgd_coefficients<T>(ctx.p<SgdParams>()), data<T>(ctx.in(3)),
        data<T>(ctx.in(1)), data<T>(ctx.in(0)), data<T>(ctx.in(2)));
    cuda::check(cudaGetLastError(), "sgd_update", device_of(ctx));
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step ().
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const int64_t n = ctx.in(0).numel();
    if (n == 0) return;
    adam_update_kernel<T><<<blocks_for(n), kBlock, 0, stream_of(ctx)>>>(
        n, optimizer_update::adam_hyperparameters(ctx.p<AdamParams>()), data<T>(ctx.in(4)),
        data<T>(ctx.in(5)), data<T>(ctx.in(1)), data<T>(ctx.in(0)), data<T>(ctx.in(2)),
        data<T>(ctx.in(3)));
    cuda::check(cudaGetLastError(), "adam_update", device_of(ctx));
  }
};

}  // namespace

OFL_REGISTER_KERNEL("sgd_update", kCUDA, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCUDA, AdamUpdateKernel, float, double);

}  // namespace ofl::cuda_kernels
