// CUDA kernels of matmul and batch_matmul: the same products as kernels/cpu/matmul.cpp,
// out = alpha * op(a) @ op(b), batch by batch. The floating types go to cuBLASLt
// (cublasLtMatmul) with float32 accumulation for float16 and bfloat16; integers, which
// cuBLASLt does not multiply, and any shape cuBLASLt has no algorithm for, go to a tiled kernel.
//
// Precision: float32 uses CUBLAS_COMPUTE_32F, which never rounds inputs to TF32, so results
// match the CPU's sgemm within float32 rounding. CUBLAS_COMPUTE_32F_FAST_TF32 would be several
// times faster on tensor cores (10-bit mantissa inputs); it could become an opt-in later, as
// torch's allow_tf32 is. float64 uses CUBLAS_COMPUTE_64F.

#include <cublasLt.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "oneflowlike/cuda/cublas_check.h"
#include "oneflowlike/kernels/cuda/batched_product.h"
#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/cuda/gemm_layout.h"
#include "oneflowlike/ops/matmul.h"

namespace ofl::cuda_kernels {

namespace {

// "a (4, 8) float16, b (8, 5) float16 on cuda:0 with transpose_b=true, alpha=0.5", for errors.
std::string describe_operands(const KernelContext& ctx) {
  const auto& p = ctx.p<MatmulParams>();
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  return str_cat("a ", a.shape().to_string(), " ", dtype_name(a.dtype()), ", b ",
                 b.shape().to_string(), " ", dtype_name(b.dtype()), " on ", a.device().to_string(),
                 " with transpose_a=", p.transpose_a ? "true" : "false",
                 ", transpose_b=", p.transpose_b ? "true" : "false", ", alpha=", p.alpha,
                 p.float32_out ? ", float32_out=true" : "");
}

// ---------------------------------------------------------------------------------------------
// The tiled kernel: integers, and the fallback for floating types.

constexpr int kTile = 16;
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGridYZ = 65535;

// out (batches, m, n) = alpha * op(a) @ op(b). A block of kTile x kTile threads computes one
// kTile x kTile tile of out, one element per thread, staging kTile-wide slices of op(a)'s rows
// and op(b)'s columns through shared memory. The loops over tiles and batches make any extent
// fit the grid's limits; their bounds depend on the block only, so every thread of a block
// reaches every __syncthreads(). Sums run over p in increasing order, in the compute type (the
// integer type itself for integers, as the CPU's loop does).
template <class N, class O>
__global__ void tiled_product(gemm::RowMajorProduct p, int64_t batches, const N* a, const N* b,
                              O* out, compute_t<N> alpha) {
  using V = compute_t<N>;
  __shared__ V a_tile[kTile][kTile];  // [row of out][p]
  __shared__ V b_tile[kTile][kTile];  // [p][column of out]
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t row_tiles = (p.m + kTile - 1) / kTile;
  const int64_t col_tiles = (p.n + kTile - 1) / kTile;
  for (int64_t batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    const N* a_batch = a + batch * p.m * p.k;
    const N* b_batch = b + batch * p.k * p.n;
    O* out_batch = out + batch * p.m * p.n;
    for (int64_t row_tile = blockIdx.y; row_tile < row_tiles; row_tile += gridDim.y) {
      for (int64_t col_tile = blockIdx.x; col_tile < col_tiles; col_tile += gridDim.x) {
        const int64_t i = row_tile * kTile + ty;  // this thread's element of out
        const int64_t j = col_tile * kTile + tx;
        V acc = V(0);
        for (int64_t p0 = 0; p0 < p.k; p0 += kTile) {
          // Thread (ty, tx) fetches op(a)(i, p0 + tx) and op(b)(p0 + ty, j); zeros pad the edges.
          a_tile[ty][tx] = i < p.m && p0 + tx < p.k ? load(a_batch, p.a_offset(i, p0 + tx)) : V(0);
          b_tile[ty][tx] = p0 + ty < p.k && j < p.n ? load(b_batch, p.b_offset(p0 + ty, j)) : V(0);
          __syncthreads();
          for (int q = 0; q < kTile; ++q) acc += a_tile[ty][q] * b_tile[q][tx];
          __syncthreads();  // before the next slice overwrites the tiles
        }
        if (i < p.m && j < p.n)
          store(out_batch, i * p.n + j, static_cast<compute_t<O>>(alpha * acc));
      }
    }
  }
}

template <class T, class Out>
void launch_tiled(const KernelContext& ctx, const char* op, const gemm::RowMajorProduct& p,
                  int64_t batches, const native_t<T>* a, const native_t<T>* b, native_t<Out>* out,
                  double alpha) {
  using N = native_t<T>;
  const int64_t row_tiles = (p.m + kTile - 1) / kTile;
  const int64_t col_tiles = (p.n + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(std::min(col_tiles, kMaxGridX)),
                  static_cast<unsigned>(std::min(row_tiles, kMaxGridYZ)),
                  static_cast<unsigned>(std::min(batches, kMaxGridYZ)));
  // alpha as the CPU kernel has it: static_cast<T>(alpha), or float for the 16-bit types.
  tiled_product<N, native_t<Out>><<<grid, dim3(kTile, kTile), 0, stream_of(ctx)>>>(
      p, batches, a, b, out, static_cast<compute_t<N>>(alpha));
  cuda::check(cudaGetLastError(), op, device_of(ctx));
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt.

// The cuBLASLt types of a floating dtype; integers have none.
struct BlasTypes {
  cudaDataType_t data;  // a, b and out
  cublasComputeType_t compute;
  cudaDataType_t scale;  // alpha and beta
};
BlasTypes blas_types(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DataType::kFloat16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DataType::kBFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DataType::kFloat64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default:
      break;
  }
  OFL_ASSERT(false) << "[matmul] no cuBLASLt types for " << dtype_name(dtype);
  return {};
}

template <class T>
constexpr bool kHasBlas = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Recommended for Hopper (4 MiB suffice before it); enough for split-K reductions.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Note [One cuBLASLt handle per device]: made on a device's first product, under a once flag
// (actor threads of one device may race to it), with that device current, as cuBLAS ties a
// handle to the current device's context. cuBLAS functions may be called from several threads
// with one handle (cuBLAS guide, "Thread Safety"), and a cuBLASLt handle has no settings to
// change. The workspace is one block of the device's caching allocator; every product of the
// device runs on the device's one compute stream (stream_of), which orders the products that
// share it. Handles and workspaces live until the process exits and are never destroyed: at
// exit the CUDA runtime may already be gone.
struct DeviceBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

const DeviceBlas& device_blas(const KernelContext& ctx, const char* op,
                              const DescribeOperands& describe) {
  struct Slot {
    std::once_flag once;
    DeviceBlas blas;
  };
  static auto* const slots = new std::vector<Slot>(cuda::device_count());  // never freed
  const int device = device_of(ctx);
  Slot& slot = slots->at(device);
  std::call_once(slot.once, [&] {  // an exception leaves the flag unset: the next call retries
    cuda::DeviceGuard guard(device);
    void* workspace = cuda::allocator(device)->allocate(kWorkspaceBytes);
    cublasLtHandle_t handle = nullptr;
    const cublasStatus_t status = cublasLtCreate(&handle);
    if (status != CUBLAS_STATUS_SUCCESS) {
      cuda::allocator(device)->deallocate(workspace, kWorkspaceBytes);
      cuda::check_cublas(status, op, "cublasLtCreate", device, describe);
    }
    slot.blas = DeviceBlas{handle, workspace};
  });
  return slot.blas;
}

// Everything a product's descriptors and algorithm depend on: shapes, flags, batch strides and
// the alignment of each pointer (an algorithm chosen for 256-byte aligned operands may not run
// on a view that starts mid-block).
struct PlanKey {
  int device = 0;
  DataType dtype = DataType::kFloat32;      // a and b
  DataType out_dtype = DataType::kFloat32;  // out: dtype, or float32 for 16-bit a and b
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t batches = 0;
  int64_t a_stride = 0, b_stride = 0, out_stride = 0;            // elements between batches
  uint32_t a_alignment = 0, b_alignment = 0, out_alignment = 0;  // bytes
  auto operator<=>(const PlanKey&) const = default;
};

struct DestroyDesc {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct DestroyLayout {
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct DestroyPreference {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DestroyDesc>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, DestroyLayout>;
using PreferencePtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, DestroyPreference>;

// A product's descriptors and the algorithm cuBLASLt's heuristic chose, made once per key.
// Layouts are in cuBLASLt's terms (Note [Row-major products in cuBLASLt]): its a is our b, its
// b our a; c and d are both our out (beta is 0, so c is never read).
struct Plan {
  DescPtr desc;
  LayoutPtr a, b, d;
  bool has_algorithm = false;  // false: cuBLASLt has none for this key; the tiled kernel runs
  cublasLtMatmulAlgo_t algorithm{};
};

class Planner {
 public:
  Planner(const DescribeOperands& describe, const char* op, const PlanKey& key)
      : describe_(describe), op_(op), key_(key) {}

  std::unique_ptr<Plan> make(cublasLtHandle_t handle) {
    const BlasTypes types = blas_types(key_.dtype);
    const gemm::ColumnMajorProduct c = gemm::column_major(
        gemm::RowMajorProduct{key_.transpose_a, key_.transpose_b, key_.m, key_.n, key_.k});
    auto plan = std::make_unique<Plan>();

    cublasLtMatmulDesc_t desc = nullptr;
    check(cublasLtMatmulDescCreate(&desc, types.compute, types.scale), "cublasLtMatmulDescCreate");
    plan->desc.reset(desc);
    const int32_t transa = c.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t transb = c.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_desc(plan->desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, transa);
    set_desc(plan->desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, transb);

    plan->a = layout(types.data, c.a, key_.b_stride);
    plan->b = layout(types.data, c.b, key_.a_stride);
    plan->d = layout(blas_types(key_.out_dtype).data, c.d, key_.out_stride);

    cublasLtMatmulPreference_t raw_preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&raw_preference), "cublasLtMatmulPreferenceCreate");
    const PreferencePtr preference(raw_preference);
    const uint64_t workspace_bytes = kWorkspaceBytes;
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
    // Split-K partial sums kept in the compute type (float32 for the 16-bit dtypes), never in
    // the output type as the in-place and output-type reductions keep them.
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key_.b_alignment);
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key_.a_alignment);
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                   key_.out_alignment);
    set_preference(preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                   key_.out_alignment);

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, plan->desc.get(), plan->a.get(), plan->b.get(), plan->d.get(), plan->d.get(),
        preference.get(), /*requestedAlgoCount=*/1, &result, &found);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
      LOG(WARNING) << "[" << op_ << "] cuBLASLt has no algorithm for " << describe()
                   << "; the slower tiled kernel computes this shape.";
      return plan;
    }
    check(status, "cublasLtMatmulAlgoGetHeuristic");
    check(result.state, "cublasLtMatmulAlgoGetHeuristic");
    plan->has_algorithm = true;
    plan->algorithm = result.algo;
    return plan;
  }

 private:
  std::string describe() const { return describe_(); }
  void check(cublasStatus_t status, const char* call) const {
    cuda::check_cublas(status, op_, call, key_.device, [this] { return describe(); });
  }
  template <class V>
  void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                const V& value) const {
    check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)),
          "cublasLtMatmulDescSetAttribute");
  }
  template <class V>
  void set_preference(cublasLtMatmulPreference_t preference,
                      cublasLtMatmulPreferenceAttributes_t attribute, const V& value) const {
    check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
          "cublasLtMatmulPreferenceSetAttribute");
  }
  template <class V>
  void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                  const V& value) const {
    check(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)),
          "cublasLtMatrixLayoutSetAttribute");
  }
  // One operand's layout, `batches` matrices `stride` elements apart.
  LayoutPtr layout(cudaDataType_t type, const gemm::ColumnMajorMatrix& matrix,
                   int64_t stride) const {
    cublasLtMatrixLayout_t raw = nullptr;
    check(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(matrix.rows),
                                     static_cast<uint64_t>(matrix.cols), matrix.ld),
          "cublasLtMatrixLayoutCreate");
    LayoutPtr result(raw);
    const int32_t batch_count = static_cast<int32_t>(key_.batches);
    set_layout(result.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count);
    set_layout(result.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
    return result;
  }

  const DescribeOperands& describe_;
  const char* op_;
  const PlanKey& key_;
};

// Plans by key, made on first use and kept (a training loop has few shapes). The lock is held
// while a plan is made, so racing threads make each plan once. Never freed (Note [One cuBLASLt
// handle per device]).
class PlanCache {
 public:
  const Plan& get(const DescribeOperands& describe, const char* op, const PlanKey& key,
                  cublasLtHandle_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      it = plans_.emplace(key, Planner(describe, op, key).make(handle)).first;
    }
    return *it->second;
  }

 private:
  std::mutex mu_;
  std::map<PlanKey, std::unique_ptr<const Plan>> plans_;  // GUARDED_BY(mu_)
};

PlanCache& plan_cache() {
  static auto* const cache = new PlanCache;  // never freed
  return *cache;
}

// The largest power of two, up to 256, that divides the address of every batch's matrix.
uint32_t alignment(const void* base, int64_t batches, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(base);
  if (batches > 1) bits |= static_cast<uint64_t>(stride_bytes);
  uint32_t result = 256;
  while (result > 1 && bits % result != 0) result /= 2;
  return result;
}

// One cublasLtMatmul over `batches` products (at most INT32_MAX, cuBLASLt's batch count);
// false when cuBLASLt has no algorithm for them.
template <class T, class Out>
bool blas_product(const KernelContext& ctx, const char* op, const gemm::RowMajorProduct& p,
                  int64_t batches, const native_t<T>* a, const native_t<T>* b, native_t<Out>* out,
                  double alpha, const DescribeOperands& describe) {
  constexpr int64_t kBytes = sizeof(native_t<T>);
  const int device = device_of(ctx);
  const DeviceBlas& blas = device_blas(ctx, op, describe);
  PlanKey key;
  key.device = device;
  key.dtype = dtype_of<T>();
  key.out_dtype = dtype_of<Out>();
  key.transpose_a = p.transpose_a;
  key.transpose_b = p.transpose_b;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.batches = batches;
  key.a_stride = p.a_stride();
  key.b_stride = p.b_stride();
  key.out_stride = p.out_stride();
  key.a_alignment = alignment(a, batches, key.a_stride * kBytes);
  key.b_alignment = alignment(b, batches, key.b_stride * kBytes);
  key.out_alignment = alignment(out, batches, key.out_stride * int64_t{sizeof(native_t<Out>)});
  const Plan& plan = plan_cache().get(describe, op, key, blas.handle);
  if (!plan.has_algorithm) return false;

  // alpha in the scale type: float for float32 and the 16-bit dtypes, as the CPU's float32
  // sgemm takes it; double for float64.
  using Scale = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Scale scaled_alpha = static_cast<Scale>(alpha);
  const Scale beta = 0;
  cuda::check_cublas(
      cublasLtMatmul(blas.handle, plan.desc.get(), &scaled_alpha, b, plan.a.get(), a, plan.b.get(),
                     &beta, out, plan.d.get(), out, plan.d.get(), &plan.algorithm, blas.workspace,
                     kWorkspaceBytes, stream_of(ctx)),
      op, "cublasLtMatmul", device, describe);
  return true;
}

}  // namespace

template <class T, class Out>
void batched_product(const KernelContext& ctx, const char* op, const gemm::RowMajorProduct& p,
                     int64_t batches, const native_t<T>* a, const native_t<T>* b,
                     native_t<Out>* out, double alpha, const DescribeOperands& describe) {
  using N = native_t<T>;
  using O = native_t<Out>;
  if (p.m == 0 || p.n == 0 || batches == 0) return;
  const int device = device_of(ctx);
  cuda::DeviceGuard guard(device);
  if (p.k == 0) {  // an empty sum: zeros, as on the CPU (all-zero bits are 0 in every dtype)
    const size_t bytes = static_cast<size_t>(batches * p.m * p.n) * sizeof(O);
    cuda::check(cudaMemsetAsync(out, 0, bytes, stream_of(ctx)), "cudaMemsetAsync", device);
    return;
  }
  if constexpr (kHasBlas<T>) {
    constexpr int64_t kMaxBatches = std::numeric_limits<int32_t>::max();
    for (int64_t first = 0; first < batches; first += kMaxBatches) {
      const int64_t count = std::min(kMaxBatches, batches - first);
      const N* a_first = a + first * p.a_stride();
      const N* b_first = b + first * p.b_stride();
      O* out_first = out + first * p.out_stride();
      if (!blas_product<T, Out>(ctx, op, p, count, a_first, b_first, out_first, alpha, describe)) {
        launch_tiled<T, Out>(ctx, op, p, count, a_first, b_first, out_first, alpha);
      }
    }
  } else {
    launch_tiled<T, Out>(ctx, op, p, batches, a, b, out, alpha);
  }
}

#define OFL_INSTANTIATE(T, Out)                                                 \
  template void batched_product<T, Out>(                                        \
      const KernelContext&, const char*, const gemm::RowMajorProduct&, int64_t, \
      const native_t<T>*, const native_t<T>*, native_t<Out>*, double, const DescribeOperands&);
OFL_INSTANTIATE(float, float)
OFL_INSTANTIATE(double, double)
OFL_INSTANTIATE(float16, float16)
OFL_INSTANTIATE(bfloat16, bfloat16)
OFL_INSTANTIATE(float16, float)
OFL_INSTANTIATE(bfloat16, float)
#undef OFL_INSTANTIATE

namespace {

// out = alpha * op(in 0) @ op(in 1), the product's operands as the context holds them; out in
// float32 for 16-bit operands under MatmulParams::float32_out.
template <class T>
void product(const KernelContext& ctx, const char* op, const gemm::RowMajorProduct& p,
             int64_t batches, double alpha) {
  const DescribeOperands describe = [&] { return describe_operands(ctx); };
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    if (ctx.out(0).dtype() == DataType::kFloat32) {
      batched_product<T, float>(ctx, op, p, batches, data<T>(ctx.in(0)), data<T>(ctx.in(1)),
                                data<float>(ctx.out(0)), alpha, describe);
      return;
    }
  }
  batched_product<T>(ctx, op, p, batches, data<T>(ctx.in(0)), data<T>(ctx.in(1)),
                     data<T>(ctx.out(0)), alpha, describe);
}

// a (rows..., K) or (K, M), b (K, N) or (N, K): the N-d a is one tall matrix (as on the CPU).
template <class T>
struct MatmulKernel {
  static void run(const KernelContext& ctx) {
    const auto& params = ctx.p<MatmulParams>();
    const Shape& b = ctx.in(1).shape();
    const Shape& out = ctx.out(0).shape();
    gemm::RowMajorProduct p{params.transpose_a, params.transpose_b};
    p.m = out.count(0, out.ndim() - 1);
    p.n = out[out.ndim() - 1];
    p.k = params.transpose_b ? b[1] : b[0];
    product<T>(ctx, "matmul", p, /*batches=*/1, params.alpha);
  }
};

// a (rows..., K), b (rows..., N): out (K, N) = alpha a^T b over the rows, a read transposed
// (Note [Products over rows] in ops/matmul.h).
template <class T>
struct RowsProductKernel {
  static void run(const KernelContext& ctx) {
    const auto& params = ctx.p<MatmulParams>();
    const Shape& a = ctx.in(0).shape();
    gemm::RowMajorProduct p{/*transpose_a=*/true, /*transpose_b=*/false};
    p.m = a[a.ndim() - 1];
    p.n = ctx.out(0).shape()[1];
    p.k = a.count(0, a.ndim() - 1);
    product<T>(ctx, "broadcast_matmul_grad_b", p, /*batches=*/1, params.alpha);
  }
};

// a (batch..., M, K), b (batch..., K, N) with identical batch dims: one product per batch.
template <class T>
struct BatchMatmulKernel {
  static void run(const KernelContext& ctx) {
    const auto& params = ctx.p<MatmulParams>();
    const Shape& a = ctx.in(0).shape();
    const Shape& out = ctx.out(0).shape();
    const int nd = out.ndim();
    gemm::RowMajorProduct p{params.transpose_a, params.transpose_b};
    p.m = out[nd - 2];
    p.n = out[nd - 1];
    p.k = params.transpose_a ? a[nd - 2] : a[nd - 1];
    product<T>(ctx, "batch_matmul", p, out.count(0, nd - 2), params.alpha);
  }
};

}  // namespace

OFL_REGISTER_KERNEL("matmul", kCUDA, MatmulKernel, float, float16, bfloat16, double, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("broadcast_matmul_grad_b", kCUDA, RowsProductKernel, float, float16, bfloat16,
                    double, int32_t, int64_t);
OFL_REGISTER_KERNEL("batch_matmul", kCUDA, BatchMatmulKernel, float, float16, bfloat16, double,
                    int32_t, int64_t);

}  // namespace ofl::cuda_kernels
