// CUDA kernel of attention over a KV cache extended in place (Note [Cached attention] in
// ops/cached_attention.h), for a decoder's steps of a few tokens: one kernel copies the step's
// rows into the caches, then one team (a warp, or a block for long caches) per query row makes
// the row's scores over the keys it sees into scratch (L floats a row, at most kScoreBytes for
// the rows of one launch: long prompts go in chunks of rows), folds their online
// softmax (Note [Online softmax]) and sums the values' rows weighted by the probabilities, each
// thread over its channels. Compute in float32 (float64 for float64), as fused attention does;
// each sum in one order. Not the flash-decoding split over the keys, which a long cache would
// want: a row's keys are walked by its one team.
// The position is read where it lies, on the device: rows past the cache are not written, and
// a query sees the rows up to min(its position, L - 1); the caller checks the position (the
// CPU kernel raises).

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/kernels/online_softmax.h"
#include "oneflowlike/ops/cached_attention.h"

namespace ofl::cuda_kernels {

namespace {

template <class T>
using calc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A team's threads see each other's writes to global memory from before this.
template <class Team>
__device__ __forceinline__ void team_sync() {
  if constexpr (std::is_same_v<Team, BlockTeam>) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

// The scores of at most this many bytes at once: the rows go in chunks (a prompt of 2048
// positions over 32 heads and 4096 slots would need 1 GiB at once).
constexpr int64_t kScoreBytes = int64_t{64} << 20;

template <class N, class C>
struct CachedRow {
  const N* q;    // (B, H, T, E)
  const N* kc;   // (B, Hk, L, E)
  const N* vc;   // (B, Hk, L, Ev)
  N* out;        // (B, H, T, Ev)
  C* scores;     // (rows of the chunk, L)
  int64_t row0;  // the chunk's first row
  const int64_t* position;
  int64_t heads, kv_heads, steps, slots, head_dim, value_dim, window;
  C scale;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t chunk_row) const {
    const int64_t r = row0 + chunk_row;
    const int64_t h = r / steps % heads, b = r / (steps * heads);
    const int64_t kv = h / (heads / kv_heads);
    const int64_t at = position[0] + r % steps;  // the query's position
    const int64_t last = at < slots - 1 ? at : slots - 1;
    const int64_t first = window > 0 && at - window + 1 > 0 ? at - window + 1 : 0;
    const N* qr = q + r * head_dim;
    const N* keys = kc + (b * kv_heads + kv) * slots * head_dim;
    const N* values = vc + (b * kv_heads + kv) * slots * value_dim;
    C* s = scores + chunk_row * slots;
    OnlineSoftmax<C> state = OnlineSoftmax<C>::empty();
    for (int64_t j = first + team.rank(); j <= last; j += team.size()) {
      C dot = 0;
      for (int64_t c = 0; c < head_dim; ++c) {
        dot += static_cast<C>(load(qr, c)) * static_cast<C>(load(keys, j * head_dim + c));
      }
      s[j] = dot * scale;
      state.add(s[j]);
    }
    state = team.all_reduce(state, CombineSoftmax{});
    team_sync<Team>();
    for (int64_t c = team.rank(); c < value_dim; c += team.size()) {
      C acc = 0;
      for (int64_t j = first; j <= last; ++j) {
        acc += OnlineSoftmax<C>::exp_of(s[j] - state.max) *
               static_cast<C>(load(values, j * value_dim + c));
      }
      store(out, r * value_dim + c, state.sum > C(0) ? acc / state.sum : C(0));
    }
  }
};

template <class T>
struct CachedAttentionKernel {
  using N = native_t<T>;
  using C = calc_t<T>;
  static void run(const KernelContext& ctx) {
    const CachedAttentionParams& p = ctx.p<CachedAttentionParams>();
    const Shape &q = ctx.in(0).shape(), &kc = ctx.in(3).shape(), &vc = ctx.in(4).shape();
    const int64_t steps = q[2], slots = kc[2];
    const int64_t* position = ctx.in(5).data<int64_t>();
    for (int which = 0; which < 2; ++which) {  // k, then v: the step's rows into the cache
      const N* rows = data<T>(ctx.in(1 + which));
      N* cache = data<T>(ctx.in(3 + which));
      const int64_t width = (which == 0 ? kc : vc)[3];
      launch_for_each(ctx, "cached_attention (rows)", kc[0] * kc[1] * steps * width,
                      [=] __device__(int64_t i) {
                        const int64_t c = i % width, t = i / width % steps;
                        const int64_t head = i / (width * steps);
                        const int64_t slot = position[0] + t;
                        if (slot >= 0 && slot < slots) {
                          cache[(head * slots + slot) * width + c] = rows[i];
                        }
                      });
    }
    const int64_t rows = q[0] * q[1] * steps;
    const int64_t chunk =
        std::max<int64_t>(1, std::min<int64_t>(rows, kScoreBytes / (slots * int64_t{sizeof(C)})));
    Scratch scores(ctx, static_cast<size_t>(std::max<int64_t>(chunk * slots, 1)) * sizeof(C));
    for (int64_t row0 = 0; row0 < rows; row0 += chunk) {  // in stream order: one scratch
      launch_rows(ctx, "cached_attention", std::min(chunk, rows - row0), slots,
                  CachedRow<N, C>{data<T>(ctx.in(0)), data<T>(ctx.in(3)), data<T>(ctx.in(4)),
                                  data<T>(ctx.out(0)), scores.as<C>(), row0, position, q[1], kc[1],
                                  steps, slots, q[3], vc[3], p.window, static_cast<C>(p.scale)});
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("cached_attention", kCUDA, CachedAttentionKernel, float, float16, bfloat16,
                    double);

}  // namespace ofl::cuda_kernels
