// Op benchmarks, each against a reference measured in the same run (the machine is shared and
// noisy, so only ratios mean much):
//   matmul n^3 and the GPT's products through the framework  vs  dnnl_sgemm called directly
//   bf16 matmul n^3 (framework)       vs  oneDNN's bf16 matmul primitive made and run directly
//   add on 64 MiB tensors             vs  memcpy of the same bytes (bandwidth)
//   eager dispatch of tiny ops        (microseconds per op)
// Usage: bench_ops [--quick]

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

#include "oneflowlike/half.h"
#include "oneflowlike/ops/elementwise.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

// Best time of `repeats` runs, in seconds (the best is the least disturbed by neighbours).
double best_seconds(int repeats, const std::function<void()>& fn) {
  fn();  // warm up
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

ofl::Tensor filled(const ofl::Shape& shape, float value) {
  ofl::Tensor t = ofl::Tensor::empty(shape, ofl::DataType::kFloat32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), value);
  return t;
}

// (m, k) @ (k, n) in float32 through the framework (oneDNN's matmul primitive, Note [oneDNN
// matmul scratchpad]) against dnnl_sgemm.
void bench_matmul(int64_t m, int64_t k, int64_t n, int repeats) {
  ofl::Tensor a = filled({m, k}, 0.5f), b = filled({k, n}, 0.25f);
  std::vector<float> c(m * n);
  const double flops = 2.0 * m * n * k;
  const double direct = best_seconds(repeats, [&] {
    dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.data<float>(), k, b.data<float>(), n, 0.0f, c.data(), n);
  });
  const double framework =
      best_seconds(repeats, [&] { ofl::functional::matmul(a, b, false, false); });
  std::printf(
      "matmul (%ld, %ld) @ (%ld, %ld): framework %.1f GFLOP/s, dnnl_sgemm %.1f GFLOP/s, "
      "ratio %.3f\n",
      m, k, k, n, flops / framework / 1e9, flops / direct / 1e9, direct / framework);
}

// The framework's bfloat16 matmul (Note [Low-precision matmul on the CPU]) against the
// primitive a user of oneDNN would make: plain row-major bf16 operands and result.
void bench_matmul_bf16(int64_t n, int repeats) {
  using dnnl::memory;
  ofl::Tensor a = ofl::Tensor::empty({n, n}, ofl::DataType::kBFloat16);
  ofl::Tensor b = ofl::Tensor::empty({n, n}, ofl::DataType::kBFloat16);
  std::fill(a.data<ofl::bfloat16>(), a.data<ofl::bfloat16>() + n * n, ofl::bfloat16(0.5f));
  std::fill(b.data<ofl::bfloat16>(), b.data<ofl::bfloat16>() + n * n, ofl::bfloat16(0.25f));
  std::vector<uint16_t> c(n * n);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc md({n, n}, memory::data_type::bf16, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
  dnnl::matmul prim(pd);
  memory ma(md, engine, a.raw_data()), mb(md, engine, b.raw_data()), mc(md, engine, c.data());
  const double flops = 2.0 * n * n * n;
  const double direct = best_seconds(repeats, [&] {
    prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
  });
  const double framework =
      best_seconds(repeats, [&] { ofl::functional::matmul(a, b, false, false); });
  std::printf(
      "bf16 matmul %ld^3: framework %.1f GFLOP/s, oneDNN matmul %.1f GFLOP/s (%s), "
      "ratio %.3f\n",
      n, flops / framework / 1e9, flops / direct / 1e9, pd.impl_info_str(), direct / framework);
}

void bench_add(int repeats) {
  const int64_t n = 64 * 1024 * 1024 / 4;  // 64 MiB of float32 per tensor
  ofl::Tensor a = filled({n}, 1.0f), b = filled({n}, 2.0f);
  std::vector<float> dst(n);
  const double copy =
      best_seconds(repeats, [&] { std::memcpy(dst.data(), a.data<float>(), n * 4); });
  const double add = best_seconds(repeats, [&] { ofl::functional::add(a, b); });
  // memcpy moves 2 x 64 MiB (read + write); add moves 3 x 64 MiB (two reads, one write).
  const double copy_bw = 2.0 * n * 4 / copy / 1e9, add_bw = 3.0 * n * 4 / add / 1e9;
  std::printf("add 64 MiB: %.2f GB/s, memcpy %.2f GB/s, ratio %.3f\n", add_bw, copy_bw,
              add_bw / copy_bw);
}

void bench_dispatch(int iterations) {
  ofl::Tensor a = filled({4}, 1.0f), b = filled({4}, 2.0f);
  const double t = best_seconds(5, [&] {
    for (int i = 0; i < iterations; ++i) ofl::functional::add(a, b);
  });
  std::printf("eager dispatch (add on 4 floats, C++): %.2f us per op\n", t / iterations * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  bench_matmul(1024, 1024, 1024, quick ? 2 : 10);
  if (!quick) bench_matmul(2048, 2048, 2048, 5);
  // The medium GPT's products (1,024 tokens, 384 channels; docs/benchmarks.md, "Fused
  // attention" (c2)).
  for (const auto& [k, n] :
       {std::pair<int64_t, int64_t>{384, 1152}, {384, 1536}, {1536, 384}, {384, 384}}) {
    bench_matmul(1024, k, n, quick ? 2 : 20);
  }
  bench_matmul_bf16(1024, quick ? 2 : 20);
  if (!quick) bench_matmul_bf16(2048, 10);
  bench_add(quick ? 2 : 10);
  bench_dispatch(quick ? 1000 : 100000);
  return 0;
}
