// Matmuls on oneDNN's primitive (Notes [Low-precision matmul on the CPU] and [oneDNN matmul
// scratchpad] in the header).

#include "oneflowlike/kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/gemm.h"
#include "oneflowlike/kernels/cpu/row_products.h"

namespace ofl::cpu {

namespace {

using dnnl::memory;

// oneDNN fixes a primitive's thread count (and its scratchpad's size) when it creates it, from
// the creating thread's OpenMP setting: a primitive made where kernels use 2 threads must not
// run where they use 1 (a runtime with several ranks in one process), so the count is in the key.
struct Key {
  DataType dtype;
  bool transpose_a, transpose_b;
  int64_t batches, m, n, k;
  float alpha;
  int threads;
  bool float32_out;
  bool operator<(const Key& o) const {
    return std::tie(dtype, transpose_a, transpose_b, batches, m, n, k, alpha, threads,
                    float32_out) < std::tie(o.dtype, o.transpose_a, o.transpose_b, o.batches, o.m,
                                            o.n, o.k, o.alpha, o.threads, o.float32_out);
  }
};

// Primitives kept at most (each holds JIT code): the oldest made goes first. An eager loop whose
// shapes keep changing (variable lengths) would otherwise grow the cache without end.
constexpr size_t kMaxPrimitives = 1024;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// (batches, rows, cols) stored row-major, or transposed: (batches, cols, rows) in memory.
memory::desc matrix(memory::data_type dt, int64_t batches, int64_t rows, int64_t cols,
                    bool transposed) {
  const memory::dims dims{batches, rows, cols};
  const memory::dims strides =
      transposed ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1};
  return memory::desc(dims, dt, strides);
}

struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul matmul;
};

// The cached primitive of `key`, or nothing when oneDNN has none for its dtype here.
std::shared_ptr<Primitive> primitive(const Key& key) {
  static std::mutex mu;
  static auto* cache = new std::map<Key, std::shared_ptr<Primitive>>();  // never destroyed
  static auto* made_order = new std::deque<Key>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  if (cache->size() >= kMaxPrimitives) {  // a caller still running one holds its shared_ptr
    cache->erase(made_order->front());
    made_order->pop_front();
  }
  made_order->push_back(key);
  const memory::data_type dt = key.dtype == DataType::kBFloat16  ? memory::data_type::bf16
                               : key.dtype == DataType::kFloat32 ? memory::data_type::f32
                                                                 : memory::data_type::f16;
  std::shared_ptr<Primitive> made;
  try {
    const dnnl::matmul::desc desc(
        matrix(dt, key.batches, key.m, key.k, key.transpose_a),
        matrix(dt, key.batches, key.k, key.n, key.transpose_b),
        matrix(key.float32_out ? memory::data_type::f32 : dt, key.batches, key.m, key.n, false));
    dnnl::primitive_attr attr;
    if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
    // Each call brings its own scratchpad, so threads may run one cached primitive at once.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(desc, attr, engine());
    made = std::make_shared<Primitive>(Primitive{pd, dnnl::matmul(pd)});
  } catch (const dnnl::error&) {
    made = nullptr;  // unimplemented for this dtype on this CPU: the float32 path
  }
  (*cache)[key] = made;
  return made;
}

template <class T>
void widen(const void* in, float* out, int64_t n) {
  const T* x = static_cast<const T*>(in);
  parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float16>) {
      halves_to_floats(x + b, out + b, e - b);  // F16C (half.h)
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = static_cast<float>(x[i]);
    }
  });
}

template <class T>
void narrow(const float* in, void* out, int64_t n) {
  T* y = static_cast<T*>(out);
  parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float16>) {
      floats_to_halves(in + b, y + b, e - b);
    } else {
      for (int64_t i = b; i < e; ++i) y[i] = T(in[i]);
    }
  });
}

// The products through sgemm, one per batch.
void sgemm_products(const Key& key, const float* a, const float* b, float* c) {
  const int64_t a_step = key.m * key.k, b_step = key.k * key.n, c_step = key.m * key.n;
  for (int64_t i = 0; i < key.batches; ++i) {
    gemm<float>(key.transpose_a, key.transpose_b, key.m, key.n, key.k, key.alpha, a + i * a_step,
                key.transpose_a ? key.m : key.k, b + i * b_step, key.transpose_b ? key.k : key.n,
                0.0f, c + i * c_step, key.n);
  }
}

// Products and sums in float32, the result rounded once (or kept, under float32_out).
template <class T>
void through_float32(const Key& key, const void* a, const void* b, void* c) {
  std::vector<float> fa(key.batches * key.m * key.k), fb(key.batches * key.k * key.n), fc;
  widen<T>(a, fa.data(), static_cast<int64_t>(fa.size()));
  widen<T>(b, fb.data(), static_cast<int64_t>(fb.size()));
  if (key.float32_out) {
    sgemm_products(key, fa.data(), fb.data(), static_cast<float*>(c));
    return;
  }
  fc.resize(key.batches * key.m * key.n);
  sgemm_products(key, fa.data(), fb.data(), fc.data());
  narrow<T>(fc.data(), c, static_cast<int64_t>(fc.size()));
}

// Note [One-row products]: float32, one row against a weight stored (n, k) (a linear layer's).
bool one_row(DataType dtype, const MatmulProduct& p) {
  return dtype == DataType::kFloat32 && p.batches == 1 && p.m == 1 && p.transpose_b && p.k > 0;
}

Key key_of(DataType dtype, const MatmulProduct& p) {
  return Key{dtype,
             p.transpose_a,
             p.transpose_b,
             p.batches,
             p.m,
             p.n,
             p.k,
             static_cast<float>(p.alpha),
             omp_get_max_threads(),
             p.float32_out && dtype != DataType::kFloat32};
}

}  // namespace

MatmulProduct matmul_product(bool batched, const Shape& a, const Shape& b, const Shape& out,
                             const MatmulParams& p) {
  MatmulProduct product{p.transpose_a, p.transpose_b};
  product.alpha = p.alpha;
  product.float32_out = p.float32_out;
  const int nd = out.ndim();
  product.n = out[nd - 1];
  if (batched) {  // a (batch..., M, K), b (batch..., K, N): one product per batch
    product.m = out[nd - 2];
    product.k = p.transpose_a ? a[nd - 2] : a[nd - 1];
    product.batches = out.count(0, nd - 2);
  } else {  // a (rows..., K) or (K, M), b (K, N) or (N, K): the N-d a is one tall matrix
    product.m = out.count(0, nd - 1);
    product.k = p.transpose_b ? b[1] : b[0];
  }
  return product;
}

MatmulProduct rows_product(const Shape& a, const Shape& b, const MatmulParams& p) {
  MatmulProduct product{/*transpose_a=*/true, /*transpose_b=*/false};
  product.alpha = p.alpha;
  product.float32_out = p.float32_out;
  product.m = a[a.ndim() - 1];
  product.n = b[b.ndim() - 1];
  product.k = a.count(0, a.ndim() - 1);
  return product;
}

void onednn_matmul(DataType dtype, const MatmulProduct& product, const void* a, const void* b,
                   void* c) {
  OFL_ASSERT(dtype == DataType::kBFloat16 || dtype == DataType::kFloat16 ||
             dtype == DataType::kFloat32);
  if (product.batches == 0 || product.m == 0 || product.n == 0) return;
  if (one_row(dtype, product)) {
    one_row_product(static_cast<const float*>(a), static_cast<const float*>(b),
                    static_cast<float*>(c), product.n, product.k,
                    static_cast<float>(product.alpha));
    return;
  }
  const Key key = key_of(dtype, product);
  const std::shared_ptr<Primitive> prim = product.k > 0 ? primitive(key) : nullptr;
  if (prim == nullptr) {
    if (dtype == DataType::kBFloat16) {
      through_float32<bfloat16>(key, a, b, c);
    } else if (dtype == DataType::kFloat16) {
      through_float32<float16>(key, a, b, c);
    } else {  // float32 without a primitive (none seen): sgemm
      sgemm_products(key, static_cast<const float*>(a), static_cast<const float*>(b),
                     static_cast<float*>(c));
    }
    return;
  }
  const dnnl::matmul::primitive_desc& pd = prim->pd;
  memory ma(pd.src_desc(), engine(), const_cast<void*>(a));
  memory mb(pd.weights_desc(), engine(), const_cast<void*>(b));
  memory mc(pd.dst_desc(), engine(), c);
  // The calling thread's scratchpad, grown as needed and kept: a fresh one per call cost a page
  // fault per 4 KiB of it on every matmul.
  thread_local std::vector<char> scratch;
  if (scratch.size() < pd.scratchpad_desc().get_size()) {
    scratch.resize(pd.scratchpad_desc().get_size());
  }
  memory pad(pd.scratchpad_desc(), engine(), scratch.data());
  dnnl::stream stream(engine());
  prim->matmul.execute(
      stream,
      {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, pad}});
  stream.wait();
}

int64_t onednn_matmul_scratchpad_bytes(DataType dtype, const MatmulProduct& product) {
  if (product.batches == 0 || product.m == 0 || product.n == 0 || product.k == 0) return 0;
  if (one_row(dtype, product)) return 0;
  const std::shared_ptr<Primitive> prim = primitive(key_of(dtype, product));
  return prim == nullptr ? 0 : static_cast<int64_t>(prim->pd.scratchpad_desc().get_size());
}

}  // namespace ofl::cpu
