// CPU kernels of fused attention (Note [Fused attention] in ops/attention.h), in the style of
// flash attention: tiles of queries against tiles of keys, products through cpu::gemm, never
// the L x S matrix.
//
//  - Forward: one task per (batch, head, query tile); for each key tile the scores
//    (q k^T * scale + mask, causal entries -inf) update each row's running maximum m and sum l
//    (Note [Online softmax] in kernels/online_softmax.h) and the accumulator acc += p v, whose
//    older terms are rescaled by exp(m_old - m). Key tiles wholly after the tile's last query
//    are skipped under is_causal. out = acc / l and lse = m + log(l).
//  - Backward: D_i = sum(dout_i * out_i) per query row first; then one task per (batch,
//    key/value head), which owns its dk and dv and, through its query heads, their dq rows, so
//    nothing is summed by two threads. Per (key tile, query head, query tile): p = exp(s - lse),
//    dv += p^T dout, dp = dout v^T, ds = p (dp - D), dk += scale ds^T q, dq += scale ds k.
// Every row's sums run in one order fixed by the tile sizes: results do not depend on threads.
// float16 and bfloat16 run the float32 kernel on widened copies (Note [Widened kernels]).

#include "oneflowlike/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/gemm.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 128;

// Where the inputs of one (batch, query head) start, and the mask.
template <class T>
struct HeadView {
  const T* q;               // (L, E)
  const T* k;               // (S, E) of the head's key/value head
  const T* v;               // (S, Ev)
  const T* mask = nullptr;  // element (i, j) at mask[i * ms.query + j * ms.key]
  MaskStrides ms = MaskStrides();
};

template <class T>
HeadView<T> head_view(const KernelContext& ctx, int q_at, int mask_at, const AttentionDims& d,
                      int64_t b, int64_t h) {
  const int64_t kv = h / d.group();
  HeadView<T> view{ctx.in(q_at).data<T>() + (b * d.heads + h) * d.queries * d.head_dim,
                   ctx.in(q_at + 1).data<T>() + (b * d.kv_heads + kv) * d.keys * d.head_dim,
                   ctx.in(q_at + 2).data<T>() + (b * d.kv_heads + kv) * d.keys * d.value_dim};
  if (mask_at >= 0) {
    view.ms = attention_mask_strides(ctx.in(mask_at).shape());
    view.mask = ctx.in(mask_at).data<T>() + b * view.ms.batch + h * view.ms.head;
  }
  return view;
}

// Scores of queries [q0, q0 + nq) against keys [k0, k0 + nk) into s (nq, nk): q k^T * scale,
// plus the mask, -inf where causal hides the key.
template <class T>
void scores(const HeadView<T>& hv, const AttentionDims& d, const AttentionParams& p, int64_t q0,
            int64_t nq, int64_t k0, int64_t nk, T* s) {
  gemm<T>(false, true, nq, nk, d.head_dim, static_cast<T>(p.scale), hv.q + q0 * d.head_dim,
          d.head_dim, hv.k + k0 * d.head_dim, d.head_dim, T(0), s, nk);
  for (int64_t i = 0; i < nq; ++i) {
    T* row = s + i * nk;
    if (hv.mask != nullptr) {
      const T* m = hv.mask + (q0 + i) * hv.ms.query + k0 * hv.ms.key;
      for (int64_t j = 0; j < nk; ++j) row[j] += m[j * hv.ms.key];
    }
    if (p.is_causal) {
      for (int64_t j = std::max<int64_t>(0, q0 + i + 1 - k0); j < nk; ++j) {
        row[j] = -std::numeric_limits<T>::infinity();
      }
    }
  }
}

// row[j] = exp(row[j] - shift), and 0 where row[j] is -inf (a hidden key), also when shift is
// -inf (a row that sees no key). vec_math's exp and a bit-mask select for float, so GCC
// vectorises the loop: <cmath>'s exp never is, and it was most of this kernel's time.
inline void exp_shifted(float* row, int64_t n, float shift) {
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float x = row[j];
    row[j] = vec_math::detail::select(x == kHidden, 0.0f, vec_math::exp(x - shift));
  }
}
inline void exp_shifted(double* row, int64_t n, double shift) {
  for (int64_t j = 0; j < n; ++j) {
    row[j] = row[j] == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(row[j] - shift);
  }
}

// The key tiles a query tile ending (exclusive) at q_end reads: all, or under is_causal those
// starting at or before its last query.
int64_t keys_read(const AttentionDims& d, const AttentionParams& p, int64_t q_end) {
  return p.is_causal ? std::min(d.keys, q_end) : d.keys;
}

// (q, k, v[, mask]) -> (out, lse).
template <class T>
struct AttentionKernel {
  static void run(const KernelContext& ctx) {
    const AttentionDims d = attention_dims(ctx.in(0), ctx.in(1), ctx.in(2));
    const AttentionParams& p = ctx.p<AttentionParams>();
    const int mask_at = ctx.inputs.size() == 4 ? 3 : -1;
    T* out = ctx.out(0).data<T>();
    T* lse = ctx.out(1).data<T>();
    const int64_t tiles = (d.queries + kQueryTile - 1) / kQueryTile;
    const int64_t tasks = d.batch * d.heads * tiles;
    const T inf = std::numeric_limits<T>::infinity();
    parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> s(kQueryTile * kKeyTile), acc(kQueryTile * d.value_dim), m(kQueryTile),
          l(kQueryTile);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t bh = task / tiles, q0 = (task % tiles) * kQueryTile;
        const int64_t b = bh / d.heads, h = bh % d.heads;
        const int64_t nq = std::min(kQueryTile, d.queries - q0);
        const HeadView<T> hv = head_view<T>(ctx, 0, mask_at, d, b, h);
        std::fill(m.begin(), m.end(), -inf);
        std::fill(l.begin(), l.end(), T(0));
        std::fill(acc.begin(), acc.end(), T(0));
        const int64_t last = keys_read(d, p, q0 + nq);
        for (int64_t k0 = 0; k0 < last; k0 += kKeyTile) {
          const int64_t nk = std::min(kKeyTile, d.keys - k0);
          scores(hv, d, p, q0, nq, k0, nk, s.data());
          for (int64_t i = 0; i < nq; ++i) {
            T* row = s.data() + i * nk;
            T top = m[i];
            for (int64_t j = 0; j < nk; ++j) top = std::max(top, row[j]);
            if (top == -inf) {  // nothing seen yet in this row: no mass, nothing to rescale
              std::fill(row, row + nk, T(0));
              continue;
            }
            const T rescale = std::exp(m[i] - top);
            exp_shifted(row, nk, top);
            T sum = 0;
            for (int64_t j = 0; j < nk; ++j) sum += row[j];
            l[i] = l[i] * rescale + sum;
            m[i] = top;
            if (rescale != T(1)) {
              T* a = acc.data() + i * d.value_dim;
              for (int64_t c = 0; c < d.value_dim; ++c) a[c] *= rescale;
            }
          }
          gemm<T>(false, false, nq, d.value_dim, nk, T(1), s.data(), nk, hv.v + k0 * d.value_dim,
                  d.value_dim, T(1), acc.data(), d.value_dim);
        }
        T* o = out + (bh * d.queries + q0) * d.value_dim;
        for (int64_t i = 0; i < nq; ++i) {
          // A row that sees no key is 0 / 0: NaN, as softmax over nothing is in PyTorch.
          for (int64_t c = 0; c < d.value_dim; ++c) {
            o[i * d.value_dim + c] = acc[i * d.value_dim + c] / l[i];
          }
          lse[bh * d.queries + q0 + i] = m[i] + std::log(l[i]);
        }
      }
    });
  }
};

// (dout, q, k, v, out, lse[, mask]) -> (dq, dk, dv).
template <class T>
struct AttentionGradKernel {
  static void run(const KernelContext& ctx) {
    const AttentionDims d = attention_dims(ctx.in(1), ctx.in(2), ctx.in(3));
    const AttentionParams& p = ctx.p<AttentionParams>();
    const int mask_at = ctx.inputs.size() == 7 ? 6 : -1;
    const T* dout = ctx.in(0).data<T>();
    const T* out = ctx.in(4).data<T>();
    const T* lse = ctx.in(5).data<T>();
    T* dq = ctx.out(0).data<T>();
    T* dk = ctx.out(1).data<T>();
    T* dv = ctx.out(2).data<T>();
    std::fill(dq, dq + ctx.out(0).numel(), T(0));
    std::fill(dk, dk + ctx.out(1).numel(), T(0));
    std::fill(dv, dv + ctx.out(2).numel(), T(0));
    // D_i = sum_c dout_ic out_ic, one per query row.
    const int64_t rows = d.batch * d.heads * d.queries;
    std::vector<T> dsum(rows);
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, d.value_dim)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     T acc = 0;
                     for (int64_t c = 0; c < d.value_dim; ++c) {
                       acc += dout[r * d.value_dim + c] * out[r * d.value_dim + c];
                     }
                     dsum[r] = acc;
                   }
                 });
    const T scale = static_cast<T>(p.scale);
    parallel_for(d.batch * d.kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> s(kQueryTile * kKeyTile), dp(kQueryTile * kKeyTile);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / d.kv_heads, kv = task % d.kv_heads;
        T* dk_head = dk + task * d.keys * d.head_dim;
        T* dv_head = dv + task * d.keys * d.value_dim;
        for (int64_t k0 = 0; k0 < d.keys; k0 += kKeyTile) {
          const int64_t nk = std::min(kKeyTile, d.keys - k0);
          for (int64_t h = kv * d.group(); h < (kv + 1) * d.group(); ++h) {
            const HeadView<T> hv = head_view<T>(ctx, 1, mask_at, d, b, h);
            const int64_t bh = b * d.heads + h;
            const T* dout_head = dout + bh * d.queries * d.value_dim;
            T* dq_head = dq + bh * d.queries * d.head_dim;
            // Under is_causal, query tiles ending at or before k0 see none of these keys.
            const int64_t first = p.is_causal ? k0 / kQueryTile * kQueryTile : 0;
            for (int64_t q0 = first; q0 < d.queries; q0 += kQueryTile) {
              const int64_t nq = std::min(kQueryTile, d.queries - q0);
              scores(hv, d, p, q0, nq, k0, nk, s.data());
              for (int64_t i = 0; i < nq; ++i) {
                exp_shifted(s.data() + i * nk, nk, lse[bh * d.queries + q0 + i]);
              }
              // dv += p^T dout; dp = dout v^T.
              gemm<T>(true, false, nk, d.value_dim, nq, T(1), s.data(), nk,
                      dout_head + q0 * d.value_dim, d.value_dim, T(1), dv_head + k0 * d.value_dim,
                      d.value_dim);
              gemm<T>(false, true, nq, nk, d.value_dim, T(1), dout_head + q0 * d.value_dim,
                      d.value_dim, hv.v + k0 * d.value_dim, d.value_dim, T(0), dp.data(), nk);
              // ds = p (dp - D), kept in s.
              for (int64_t i = 0; i < nq; ++i) {
                const T di = dsum[bh * d.queries + q0 + i];
                for (int64_t j = 0; j < nk; ++j) {
                  s[i * nk + j] *= dp[i * nk + j] - di;
                }
              }
              // dk += scale ds^T q; dq += scale ds k.
              gemm<T>(true, false, nk, d.head_dim, nq, scale, s.data(), nk, hv.q + q0 * d.head_dim,
                      d.head_dim, T(1), dk_head + k0 * d.head_dim, d.head_dim);
              gemm<T>(false, false, nq, d.head_dim, nk, scale, s.data(), nk, hv.k + k0 * d.head_dim,
                      d.head_dim, T(1), dq_head + q0 * d.head_dim, d.head_dim);
            }
          }
        }
      }
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("scaled_dot_product_attention", kCPU, AttentionKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked", kCPU, AttentionKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_grad", kCPU, AttentionGradKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked_grad", kCPU, AttentionGradKernel, float,
                    double);
// float16 and bfloat16 through the float32 kernels (Note [Widened kernels] in widened.h).
OFL_REGISTER_WIDENED_KERNEL("scaled_dot_product_attention", AttentionKernel);
OFL_REGISTER_WIDENED_KERNEL("scaled_dot_product_attention_masked", AttentionKernel);
OFL_REGISTER_WIDENED_KERNEL("scaled_dot_product_attention_grad", AttentionGradKernel);
OFL_REGISTER_WIDENED_KERNEL("scaled_dot_product_attention_masked_grad", AttentionGradKernel);

}  // namespace ofl::cpu
