// CPU kernel of attention over a KV cache extended in place (Note [Cached attention] in
// ops/cached_attention.h): the step's rows are copied into the caches, then the fused-attention
// forward (attention.cpp) runs over the caches' rows [0, p + T) where they lie, its queries
// placed at p (AttentionDims::query_offset, causal from the lower right), with no copy of the
// cache and no lse kept. float16, and bfloat16 without the tile instructions, run the float32
// attention on widened copies of q and the caches (Note [Widened kernels]; the rows are written
// in the caches' own dtype first).

#include "oneflowlike/ops/cached_attention.h"

#include <cstring>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/attention.h"
#include "oneflowlike/kernels/cpu/bf16_tiles.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// The step's first position, checked against the caches.
int64_t step_position(const KernelContext& ctx) {
  const int64_t at = ctx.in(5).data<int64_t>()[0];
  const int64_t steps = ctx.in(0).shape()[2], slots = ctx.in(3).shape()[2];
  OFL_CHECK_INDEX(at >= 0 && at + steps <= slots, "[cached_attention] ", steps,
                  " new positions from position ", at, " do not fit the caches' ", slots,
                  " (reset the cache for a new context).");
  return at;
}

// Rows [at, at + T) of each (batch, kv head) of cache input `cache_at` take the rows of input
// `rows_at` (B, Hk, T, E).
void write_rows(const KernelContext& ctx, int rows_at, int cache_at, int64_t at) {
  const Tensor &rows = ctx.in(rows_at), &cache = ctx.in(cache_at);
  const int64_t heads = rows.shape()[0] * rows.shape()[1], steps = rows.shape()[2];
  const int64_t slots = cache.shape()[2];
  const size_t row_bytes = static_cast<size_t>(rows.shape()[3]) * dtype_size(rows.dtype());
  const auto* from = static_cast<const char*>(rows.raw_data());
  auto* to = static_cast<char*>(cache.raw_data());
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(to + (h * slots + at) * row_bytes, from + h * steps * row_bytes, steps * row_bytes);
  }
}

// The attention of (q, k_cache, v_cache, position) -> out, the caches already written.
template <class T>
struct Attend {
  static void run(const KernelContext& ctx) {
    const CachedAttentionParams& p = ctx.p<CachedAttentionParams>();
    const int64_t at = ctx.in(3).data<int64_t>()[0];
    const Shape &q = ctx.in(0).shape(), &kc = ctx.in(1).shape(), &vc = ctx.in(2).shape();
    AttentionDims d;
    d.batch = q[0];
    d.heads = q[1];
    d.kv_heads = kc[1];
    d.queries = q[2];
    d.keys = at + q[2];  // the rows a query of the step may see
    d.head_dim = q[3];
    d.value_dim = vc[3];
    d.query_offset = at;
    d.window = p.window;
    d.q = {q[1] * q[2] * q[3], q[2] * q[3], q[3]};
    d.k = {kc[1] * kc[2] * kc[3], kc[2] * kc[3], kc[3]};
    d.v = {vc[1] * vc[2] * vc[3], vc[2] * vc[3], vc[3]};
    d.out = {q[1] * q[2] * vc[3], q[2] * vc[3], vc[3]};
    AttentionParams ap;
    ap.scale = p.scale;
    ap.is_causal = true;
    ap.window = p.window;
    std::vector<attention_lse_t<T>> lse(d.batch * d.heads * d.queries);
    attention_forward<T>(d, ap, {ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>()},
                         ctx.out(0).data<T>(), lse.data());
  }
};

// (q, k, v, k_cache, v_cache, position) -> out; the caches are written in place.
template <class T>
struct CachedAttentionKernel {
  static void run(const KernelContext& ctx) {
    const int64_t at = step_position(ctx);
    write_rows(ctx, 1, 3, at);
    write_rows(ctx, 2, 4, at);
    const std::vector<Tensor> inputs{ctx.in(0), ctx.in(3), ctx.in(4), ctx.in(5)};
    const KernelContext attend{ctx.params, inputs, ctx.outputs};
    if constexpr (std::is_same_v<T, float16>) {
      Widened<float16, Attend>::run(attend);
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      if (bf16_tiles::available()) {
        Attend<bfloat16>::run(attend);
      } else {
        Widened<bfloat16, Attend>::run(attend);
      }
    } else {
      Attend<T>::run(attend);
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("cached_attention", kCPU, CachedAttentionKernel, float, double, float16,
                    bfloat16);

namespace {

// The memory report counts the widening arena where the kernel widens (Note [Widening arena]).
[[maybe_unused]] const bool kNotedWidened = [] {
  note_widened_kernel(&CachedAttentionKernel<float16>::run);
  if (!bf16_tiles::available()) note_widened_kernel(&CachedAttentionKernel<bfloat16>::run);
  return true;
}();

}  // namespace

}  // namespace ofl::cpu
