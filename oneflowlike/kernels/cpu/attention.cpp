// CPU kernels of fused attention (Note [Fused attention] in ops/attention.h), in the style of
// flash attention: tiles of queries against tiles of keys, products through cpu::gemm, never
// the L x S matrix.
//
//  - Forward: one task per (batch, head, query tile); for each key tile the scores
//    (q k^T * scale + mask, causal entries -inf) update each row's running maximum m and sum l
//    (Note [Online softmax] in kernels/online_softmax.h) and the accumulator acc += p v, whose
//    older terms are rescaled by exp(m_old - m). Key tiles wholly after the tile's last query
//    are skipped under is_causal, with a window those wholly before its first query's first
//    key (Note [Sliding window] in ops/attention.h), and with document ids those whose ids do not
//    meet the query tile's (Note [Packed documents]). out = acc / l and lse = m + log(l).
//  - Backward: D_i = sum(dout_i * out_i) per query row first; then one task per (batch,
//    key/value head), which owns its dk and dv and, through its query heads, their dq rows, so
//    nothing is summed by two threads. Per (key tile, query head, query tile): p = exp(s - lse),
//    dv += p^T dout, dp = dout v^T, ds = p (dp - D), dk += scale ds^T q, dq += scale ds k.
// Every row's sums run in one order fixed by the tile sizes: results do not depend on threads.
//
// Note [Visible keys]: under is_causal a query tile's last key tile is partly hidden (the
// diagonal), and with short sequences that is most of the work: at L = S = 128 each head's
// two query tiles read one 128-key tile, half of it hidden. The products still run over the
// whole tile (they are cheap on the tile instructions), but the softmax steps (the row's max,
// exp, sum, the mask) run over the keys each row sees, and the rest of the row is set to 0, the
// probability exp(-inf) gave it before. The same bits: the lanes of the sums add +0 for those
// entries, and the max passed over -inf. With a window the keys a row sees in a tile are an
// interval [from, to) (SeenKeys): the max and exp run over it, the sum over [0, to) with the
// zeros before it, so each key stays in its lane.
// bfloat16 multiplies its tiles as they are, on AVX512-BF16 (Note [bfloat16 tile products] in
// bf16_tiles.h, Tiles below), with everything else in float32: scores, the softmax steps, the
// accumulators of out, dq, dk and dv (rounded once at the end), and p and ds rounded to bfloat16
// as the operands of their products, as flash attention and our CUDA kernel do. Without those
// instructions, and for float16, the float32 kernel runs on widened copies (Note [Widened
// kernels]).

#include "oneflowlike/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/cpu/bf16_tiles.h"
#include "oneflowlike/kernels/cpu/gemm.h"
#include "oneflowlike/kernels/cpu/row_exp.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 128;

// Where the inputs of one (batch, query head) start, and the mask or the document ids. Rows of
// q, k and v are d.q.row, d.k.row and d.v.row elements apart (Note [Sequence-first attention]).
template <class T>
struct HeadView {
  const T* q;               // (L, E)
  const T* k;               // (S, E) of the head's key/value head
  const T* v;               // (S, Ev)
  const T* mask = nullptr;  // element (i, j) at mask[i * ms.query + j * ms.key]
  MaskStrides ms = MaskStrides();
  DocumentIds docs = DocumentIds();  // Note [Packed documents]
  int64_t b = 0;                     // the batch row, for docs
};

// The inputs of a kernel whose q is input q_at and whose input extra_at, if it has one, is a
// mask or document ids.
template <class T>
AttentionInputs<T> attention_inputs(const KernelContext& ctx, int q_at, int extra_at) {
  AttentionInputs<T> in{ctx.in(q_at).data<T>(), ctx.in(q_at + 1).data<T>(),
                        ctx.in(q_at + 2).data<T>()};
  in.docs = document_ids_of(ctx, extra_at);
  if (static_cast<int>(ctx.inputs.size()) > extra_at && !in.docs.present()) {
    in.ms = attention_mask_strides(ctx.in(extra_at).shape());
    in.mask = ctx.in(extra_at).data<T>();
  }
  return in;
}

// The head view of (b, h).
template <class T>
HeadView<T> head_view(const AttentionInputs<T>& in, const AttentionDims& d, int64_t b, int64_t h) {
  const int64_t kv = h / d.group();
  HeadView<T> view{in.q + d.q.at(b, h, 0), in.k + d.k.at(b, kv, 0), in.v + d.v.at(b, kv, 0)};
  view.b = b;
  view.docs = in.docs;
  if (in.mask != nullptr) {
    view.ms = in.ms;
    view.mask = in.mask + b * view.ms.batch + h * view.ms.head;
  }
  return view;
}

// Whether any of the queries [q0, q0 + nq) may share a document with the keys stored in rows
// [kr, kr + nk) (Note [Packed documents]): their ranges of ids meet. Always without ids.
template <class T>
bool documents_meet(const HeadView<T>& hv, const AttentionDims& d, int64_t q0, int64_t nq,
                    int64_t kr, int64_t nk) {
  if (!hv.docs.present()) return true;
  auto range = [&](int64_t first, int64_t n) {
    int64_t lo = hv.docs.of(hv.b, first), hi = lo;
    for (int64_t r = first + 1; r < first + n; ++r) {
      const int64_t id = hv.docs.of(hv.b, r);
      lo = std::min(lo, id);
      hi = std::max(hi, id);
    }
    return std::pair<int64_t, int64_t>{lo, hi};
  };
  const auto [q_lo, q_hi] = range(d.query_offset + q0, nq);
  const auto [k_lo, k_hi] = range(kr, nk);
  return q_lo <= k_hi && k_lo <= q_hi;
}

// How a kernel stored in S multiplies its tiles: c = alpha * op(a) op(b) + beta * c in the
// compute type C, `a` in S (ss) or in C (cs, the probabilities and their gradients), `b` in S.
// float and double through cpu::gemm.
template <class S>
struct Tiles {
  using C = S;
  static void fresh() {}
  static void release() {}
  static void ss(bool ta, bool tb, int64_t m, int64_t n, int64_t k, C alpha, const S* a,
                 int64_t lda, const S* b, int64_t ldb, C beta, C* c, int64_t ldc) {
    gemm<S>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  static void cs(bool ta, bool tb, int64_t m, int64_t n, int64_t k, C alpha, const C* a,
                 int64_t lda, const S* b, int64_t ldb, C beta, C* c, int64_t ldc) {
    gemm<S>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
};

// bfloat16: the tile products (needs bf16_tiles::available()), float32 results; a float32 `a`
// is rounded to bfloat16 first. A b packed once is kept until fresh(): the key and value tiles
// are the operands of every query tile of a head, and the query and output-gradient tiles of
// every key tile in the backward. The kernels call fresh() when they start on other heads, so
// what is kept is at most a packed copy of one head's k and v (forward), or of a key/value
// head's k (twice: transposed for the scores, as is for dq), v, and its query heads' q and dout
// (backward), per thread; release() frees it when the thread's part of a call ends, so what a
// thread holds is its largest call's, which the memory report counts (Note [Attention
// workspace] in attention.h).
template <>
struct Tiles<bfloat16> {
  using C = float;
  struct Packed {  // found by b's address in Cache::at
    int64_t ldb = 0, n = 0, k = 0;
    bool tb = false;
    bf16_tiles::PackedB packed;
  };
  // The packed tiles [0, used), found by address; those past `used` keep their memory for the
  // next ones. `held`: bytes of the packs and the rounded a; `peak`: the most held at once.
  struct Cache {
    std::vector<Packed> packs;
    size_t used = 0;
    std::unordered_multimap<const bfloat16*, size_t> at;
    std::vector<bfloat16> rounded;  // the float32 `a` of cs() rounded to bfloat16
    int64_t held = 0, peak = 0;
    // Counts the growth of a buffer from `before` elements of capacity.
    void grew(size_t before, const std::vector<bfloat16>& now) {
      held += static_cast<int64_t>((now.capacity() - before) * sizeof(bfloat16));
      peak = std::max(peak, held);
    }
  };
  static Cache& cache() {
    thread_local Cache c;
    return c;
  }
  static void fresh() {
    Cache& c = cache();
    c.used = 0;
    c.at.clear();
  }
  static void release() {
    fresh();
    Cache& c = cache();
    std::vector<Packed>().swap(c.packs);
    std::vector<bfloat16>().swap(c.rounded);
    bf16_tiles::release_thread_buffers();
    c.held = 0;
  }
  static const bf16_tiles::PackedB& packed(bool tb, int64_t n, int64_t k, const bfloat16* b,
                                           int64_t ldb) {
    Cache& c = cache();
    const auto [first, last] = c.at.equal_range(b);
    for (auto it = first; it != last; ++it) {
      const Packed& p = c.packs[it->second];
      if (p.ldb == ldb && p.n == n && p.k == k && p.tb == tb) return p.packed;
    }
    if (c.used == c.packs.size()) c.packs.emplace_back();
    Packed& p = c.packs[c.used];
    const size_t before = p.packed.data.capacity();
    if (tb) {
      bf16_tiles::pack_transposed(b, ldb, n, k, &p.packed);
    } else {
      bf16_tiles::pack(b, ldb, k, n, &p.packed);
    }
    c.grew(before, p.packed.data);
    p.ldb = ldb;
    p.n = n;
    p.k = k;
    p.tb = tb;
    c.at.emplace(b, c.used++);
    return p.packed;
  }
  static void ss(bool ta, bool tb, int64_t m, int64_t n, int64_t k, C alpha, const bfloat16* a,
                 int64_t lda, const bfloat16* b, int64_t ldb, C beta, C* c, int64_t ldc) {
    OFL_ASSERT(!ta) << "the attention kernel reads its bfloat16 a as rows";
    bf16_tiles::product(m, a, lda, packed(tb, n, k, b, ldb), alpha, beta, c, ldc);
  }
  static void cs(bool ta, bool tb, int64_t m, int64_t n, int64_t k, C alpha, const C* a,
                 int64_t lda, const bfloat16* b, int64_t ldb, C beta, C* c, int64_t ldc) {
    Cache& cached = cache();
    const size_t before = cached.rounded.capacity();
    bf16_tiles::round_to(a, lda, m, k, ta, &cached.rounded);
    cached.grew(before, cached.rounded);
    bf16_tiles::product(m, cached.rounded.data(), k, packed(tb, n, k, b, ldb), alpha, beta, c, ldc);
  }
};

template <class S>
using tile_compute_t = typename Tiles<S>::C;

// Which of the keys [k0, k0 + nk) query q sees, as indexes into the tile [from, to): all, or
// under is_causal those up to q's position (Note [Sequence-split attention], Note [Zigzag
// order]) and, with a window, from its first key on (Note [Sliding window]).
// The kernels' softmax steps run over these only, and give the rest of a row probability 0
// (what exp of -inf gave them before: the same sums, since the lanes add +0; Note [Visible
// keys]).
struct SeenKeys {
  int64_t from = 0, to = 0;
};
SeenKeys seen_keys(const AttentionDims& d, const AttentionParams& p, int64_t q, int64_t k0,
                   int64_t nk) {
  if (!p.is_causal) return {0, nk};
  const int64_t to = std::clamp<int64_t>(d.query_position(q) + 1 - k0, 0, nk);
  return {std::clamp<int64_t>(d.first_key(q) - k0, 0, to), to};
}

// The length of the key tile at position k0: kKeyTile keys, cut at the end of the keys and, in
// the zigzag order, of k0's chunk (Note [Zigzag order]: a tile is then rows of one chunk, stored
// contiguously from d.key_row(k0)).
int64_t key_tile(const AttentionDims& d, int64_t k0) {
  int64_t end = std::min(d.keys, k0 + kKeyTile);
  if (d.zigzag > 0 && d.keys > 0) end = std::min(end, (k0 / d.chunk() + 1) * d.chunk());
  return end - k0;
}

// The start of the key tile holding position `at`, on the grid key_tile cuts from position 0:
// the kernels that skip the tiles before a window start there, and so cut every later tile
// where a walk from 0 does (the same sums in the same order, Note [Sliding window]).
int64_t key_tile_start(const AttentionDims& d, int64_t at) {
  const int64_t chunk_start = d.zigzag > 0 && d.keys > 0 ? at / d.chunk() * d.chunk() : 0;
  return chunk_start + (at - chunk_start) / kKeyTile * kKeyTile;
}

// n rounded up to whole 16-lane vectors, at most `limit`: exp_shifted over a row's visible keys
// also takes the few after them (overwritten with 0 next), so that no key runs through the
// loop's scalar remainder, which for rows of tens of keys had been most of exp's time.
int64_t whole_vectors(int64_t n, int64_t limit) { return std::min(limit, (n + 15) / 16 * 16); }

// Scores of queries [q0, q0 + nq) against the keys at positions [k0, k0 + nk), stored from row
// kr, into s (nq, nk): q k^T * scale, plus the mask over each row's visible keys, or -inf where
// a visible key is of another document (the entries past them are left as they are).
template <class T, class C = tile_compute_t<T>>
void scores(const HeadView<T>& hv, const AttentionDims& d, const AttentionParams& p, int64_t q0,
            int64_t nq, int64_t k0, int64_t kr, int64_t nk, C* s) {
  Tiles<T>::ss(false, true, nq, nk, d.head_dim, static_cast<C>(p.scale), hv.q + q0 * d.q.row,
               d.q.row, hv.k + kr * d.k.row, d.k.row, C(0), s, nk);
  if (hv.docs.present()) {
    for (int64_t i = 0; i < nq; ++i) {
      C* row = s + i * nk;
      const int64_t own = hv.docs.of(hv.b, d.query_offset + q0 + i);
      const SeenKeys seen = seen_keys(d, p, q0 + i, k0, nk);
      for (int64_t j = seen.from; j < seen.to; ++j) {
        if (hv.docs.of(hv.b, kr + j) != own) row[j] = -std::numeric_limits<C>::infinity();
      }
    }
  }
  if (hv.mask == nullptr) return;
  for (int64_t i = 0; i < nq; ++i) {
    C* row = s + i * nk;
    const T* m = hv.mask + (q0 + i) * hv.ms.query + kr * hv.ms.key;
    const SeenKeys seen = seen_keys(d, p, q0 + i, k0, nk);
    for (int64_t j = seen.from; j < seen.to; ++j) row[j] += static_cast<C>(m[j * hv.ms.key]);
  }
}

// op over row[0, n) from `start`, over 16 partial lanes (element j in lane j % 16) combined in a
// fixed tree: GCC vectorises the lanes, and the order of the steps is the same whatever the ISA
// the loop is compiled for (Note [AVX-512 loops]) and the thread count.
template <class C, class Op>
C lanes_reduce(const C* row, int64_t n, C start, Op op) {
  constexpr int kLanes = 16;
  C lane[kLanes];
  std::fill(lane, lane + kLanes, start);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int t = 0; t < kLanes; ++t) lane[t] = op(lane[t], row[j + t]);
  }
  for (int t = 0; j + t < n; ++t) lane[t] = op(lane[t], row[j + t]);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int t = 0; t < width; ++t) lane[t] = op(lane[t], lane[t + width]);
  }
  return lane[0];
}

// The same for float with the lanes as two GCC vectors of eight: GCC had left the array of
// lanes scalar for the max (a ?: on floats is not if-converted) and the sum alike, a fifth of
// the forward's time at L = 128. Element j still goes to lane j % 16 and the tail and the tree
// are the scalar ones, so the bits are those of the template above.
template <class Op>
float lanes_reduce(const float* row, int64_t n, float start, Op op) {
  using Lanes = float __attribute__((vector_size(8 * sizeof(float))));
  Lanes lo, hi;
  for (int t = 0; t < 8; ++t) lo[t] = hi[t] = start;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    Lanes a, b;
    std::memcpy(&a, row + j, sizeof(a));
    std::memcpy(&b, row + j + 8, sizeof(b));
    lo = op(lo, a);
    hi = op(hi, b);
  }
  float lane[16];
  std::memcpy(lane, &lo, sizeof(lo));
  std::memcpy(lane + 8, &hi, sizeof(hi));
  for (int t = 0; j + t < n; ++t) lane[t] = op(lane[t], row[j + t]);
  for (int width = 8; width > 0; width /= 2) {
    for (int t = 0; t < width; ++t) lane[t] = op(lane[t], lane[t + width]);
  }
  return lane[0];
}

// The largest value of row[0, n) (-inf for none; a NaN is passed over, as std::max passes over
// it) and its sum.
template <class C>
C lanes_max(const C* row, int64_t n) {
  return lanes_reduce(row, n, -std::numeric_limits<C>::infinity(),
                      [](auto a, auto b) { return a < b ? b : a; });
}
template <class C>
C lanes_sum(const C* row, int64_t n) {
  return lanes_reduce(row, n, C(0), [](auto a, auto b) { return a + b; });
}

// The keys the query tile [q0, q_end) reads: all, or under is_causal those up to the largest
// position among its queries.
int64_t keys_read(const AttentionDims& d, const AttentionParams& p, int64_t q0, int64_t q_end) {
  return p.is_causal ? std::min(d.keys, d.last_query_position(q0, q_end) + 1) : d.keys;
}

// The first key position any query of [q0, q_end) sees: 0, or with a window the least of their
// first keys (a scan of the tile's rows: in the zigzag order positions fall at chunk edges).
int64_t first_key_read(const AttentionDims& d, const AttentionParams& p, int64_t q0,
                       int64_t q_end) {
  if (!p.is_causal || d.window == 0) return 0;
  int64_t first = d.keys;
  for (int64_t i = q0; i < q_end; ++i) first = std::min(first, d.first_key(i));
  return first;
}

}  // namespace

template <class T>
void attention_forward(const AttentionDims& d, const AttentionParams& p,
                       const AttentionInputs<T>& in, T* out, attention_lse_t<T>* lse) {
  using C = tile_compute_t<T>;
  static_assert(std::is_same_v<C, attention_lse_t<T>>);
  const int64_t tiles = (d.queries + kQueryTile - 1) / kQueryTile;
  const int64_t tasks = d.batch * d.heads * tiles;
  const C inf = std::numeric_limits<C>::infinity();
  parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> s(kQueryTile * kKeyTile), acc(kQueryTile * d.value_dim), m(kQueryTile),
        l(kQueryTile);
    int64_t kv_head = -1;  // whose key and value tiles Tiles<T> keeps (query heads share them)
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / tiles, q0 = (task % tiles) * kQueryTile;
      if (bh / d.group() != kv_head) {
        Tiles<T>::fresh();
        kv_head = bh / d.group();
      }
      const int64_t b = bh / d.heads, h = bh % d.heads;
      const int64_t nq = std::min(kQueryTile, d.queries - q0);
      const HeadView<T> hv = head_view<T>(in, d, b, h);
      std::fill(m.begin(), m.end(), -inf);
      std::fill(l.begin(), l.end(), C(0));
      std::fill(acc.begin(), acc.end(), C(0));
      const int64_t last = keys_read(d, p, q0, q0 + nq);
      const int64_t first = key_tile_start(d, first_key_read(d, p, q0, q0 + nq));
      for (int64_t k0 = first, nk = 0; k0 < last; k0 += nk) {
        nk = key_tile(d, k0);
        const int64_t kr = d.key_row(k0);
        if (!documents_meet(hv, d, q0, nq, kr, nk)) continue;
        scores(hv, d, p, q0, nq, k0, kr, nk, s.data());
        for (int64_t i = 0; i < nq; ++i) {
          C* row = s.data() + i * nk;
          const auto [from, visible] = seen_keys(d, p, q0 + i, k0, nk);
          const C top = std::max(m[i], lanes_max(row + from, visible - from));
          if (top == -inf) {  // nothing seen yet in this row: no mass, nothing to rescale
            std::fill(row, row + nk, C(0));
            continue;
          }
          const C rescale = std::exp(m[i] - top);
          exp_shifted(row + from, row + from, whole_vectors(visible - from, nk - from), top);
          std::fill(row, row + from, C(0));  // no probability for hidden keys
          std::fill(row + visible, row + nk, C(0));
          l[i] = l[i] * rescale + lanes_sum(row, visible);
          m[i] = top;
          if (rescale != C(1)) {
            C* a = acc.data() + i * d.value_dim;
            for (int64_t c = 0; c < d.value_dim; ++c) a[c] *= rescale;
          }
        }
        Tiles<T>::cs(false, false, nq, d.value_dim, nk, C(1), s.data(), nk, hv.v + kr * d.v.row,
                     d.v.row, C(1), acc.data(), d.value_dim);
      }
      T* o = out + d.out.at(b, h, q0);
      for (int64_t i = 0; i < nq; ++i) {
        // Note [Rows with every key masked]: such a row attends to nothing, so out is 0 (as
        // PyTorch's SDPA gives; its softmax alone would give NaN) and lse is +inf, which makes
        // every p of the row exp(s - lse) = 0 in the backward: a dq of 0, nothing added to dk
        // and dv. Without keys at all (S = 0) out is 0 too.
        const bool nothing = l[i] == C(0);
        const C sum = nothing ? C(1) : l[i];
        for (int64_t c = 0; c < d.value_dim; ++c) {
          o[i * d.out.row + c] = static_cast<T>(acc[i * d.value_dim + c] / sum);
        }
        lse[bh * d.queries + q0 + i] =
            nothing ? std::numeric_limits<C>::infinity() : m[i] + std::log(l[i]);
      }
    }
    Tiles<T>::release();
  });
}

template void attention_forward<float>(const AttentionDims&, const AttentionParams&,
                                       const AttentionInputs<float>&, float*, float*);
template void attention_forward<double>(const AttentionDims&, const AttentionParams&,
                                        const AttentionInputs<double>&, double*, double*);
template void attention_forward<bfloat16>(const AttentionDims&, const AttentionParams&,
                                          const AttentionInputs<bfloat16>&, bfloat16*, float*);

namespace {

// (q, k, v[, mask]) -> (out, lse).
template <class T>
struct AttentionKernel {
  static void run(const KernelContext& ctx) {
    attention_forward<T>(attention_dims(ctx, 0), ctx.p<AttentionParams>(),
                         attention_inputs<T>(ctx, 0, 3), ctx.out(0).data<T>(),
                         ctx.out(1).data<attention_lse_t<T>>());
  }
};

// What a backward task sums dq, dk and dv into: the outputs themselves when they are in the
// compute type (zeroed first), at the outputs' strides, else float32 buffers of the task's
// heads, rounded into the outputs once the task is done.
template <class T>
struct GradSums {
  using C = tile_compute_t<T>;
  static constexpr bool kDirect = std::is_same_v<T, C>;
  C* dq = nullptr;  // the task's group of query heads: head j's row i at j * dq_head + i * dq_row
  C* dk = nullptr;  // row j at j * dk_row
  C* dv = nullptr;  // row j at j * dv_row
  int64_t dq_head = 0, dq_row = 0, dk_row = 0, dv_row = 0;
  std::vector<C> buffer;
  // The buffer's elements (unless kDirect): dq of the group, dk and dv.
  static int64_t size(const AttentionDims& d) {
    return d.group() * d.queries * d.head_dim + d.keys * (d.head_dim + d.value_dim);
  }
  void start(T* dq_out, T* dk_out, T* dv_out, const AttentionDims& d) {
    if constexpr (kDirect) {
      dq = dq_out;
      dk = dk_out;
      dv = dv_out;
      dq_head = d.q.head;
      dq_row = d.q.row;
      dk_row = d.k.row;
      dv_row = d.v.row;
    } else {
      const int64_t nq = d.group() * d.queries * d.head_dim, nk = d.keys * d.head_dim;
      buffer.assign(size(d), C(0));
      dq = buffer.data();
      dk = dq + nq;
      dv = dk + nk;
      dq_head = d.queries * d.head_dim;
      dq_row = dk_row = d.head_dim;
      dv_row = d.value_dim;
    }
  }
  void finish(T* dq_out, T* dk_out, T* dv_out, const AttentionDims& d) const {
    if constexpr (!kDirect) {
      // `rows` rows of `width` from the packed buffer into rows `to_row` apart.
      const auto round = [](const C* from, T* to, int64_t rows, int64_t width, int64_t to_row) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < width; ++c) to[r * to_row + c] = static_cast<T>(from[c]);
          from += width;
        }
      };
      for (int64_t j = 0; j < d.group(); ++j) {
        round(dq + j * dq_head, dq_out + j * d.q.head, d.queries, d.head_dim, d.q.row);
      }
      round(dk, dk_out, d.keys, d.head_dim, d.k.row);
      round(dv, dv_out, d.keys, d.value_dim, d.v.row);
    }
  }
};

// (dout, q, k, v, out, lse[, mask]) -> (dq, dk, dv).
template <class T>
struct AttentionGradKernel {
  using C = tile_compute_t<T>;
  static void run(const KernelContext& ctx) {
    const AttentionParams& p = ctx.p<AttentionParams>();
    const AttentionDims d = attention_dims(ctx, 1);
    const AttentionInputs<T> inputs = attention_inputs<T>(ctx, 1, 6);
    const T* dout = ctx.in(0).data<T>();
    const T* out = ctx.in(4).data<T>();
    const C* lse = ctx.in(5).data<C>();
    T* dq = ctx.out(0).data<T>();
    T* dk = ctx.out(1).data<T>();
    T* dv = ctx.out(2).data<T>();
    if constexpr (GradSums<T>::kDirect) {
      std::fill(dq, dq + ctx.out(0).numel(), T(0));
      std::fill(dk, dk + ctx.out(1).numel(), T(0));
      std::fill(dv, dv + ctx.out(2).numel(), T(0));
    }
    // D_i = sum_c dout_ic out_ic, one per query row.
    const int64_t rows = d.batch * d.heads * d.queries;
    std::vector<C> dsum(rows);
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, d.value_dim)),
                 [&](int64_t begin, int64_t end) {
                   // Row r of (B, H, L): query i of head h of batch b, stepped along (no
                   // division per row).
                   int64_t i = begin % d.queries, h = begin / d.queries % d.heads,
                           b = begin / (d.queries * d.heads);
                   for (int64_t r = begin; r < end; ++r) {
                     const T* dout_row = dout + d.out.at(b, h, i);
                     const T* out_row = out + d.out.at(b, h, i);
                     C acc = 0;
                     for (int64_t c = 0; c < d.value_dim; ++c) {
                       acc += static_cast<C>(dout_row[c]) * static_cast<C>(out_row[c]);
                     }
                     dsum[r] = acc;
                     if (++i == d.queries) {
                       i = 0;
                       if (++h == d.heads) h = 0, ++b;
                     }
                   }
                 });
    const C scale = static_cast<C>(p.scale);
    parallel_for(d.batch * d.kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<C> s(kQueryTile * kKeyTile), dp(kQueryTile * kKeyTile);
      GradSums<T> sums;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / d.kv_heads, kv = task % d.kv_heads;
        T* dq_group = dq + d.q.at(b, kv * d.group(), 0);
        T* dk_head = dk + d.k.at(b, kv, 0);
        T* dv_head = dv + d.v.at(b, kv, 0);
        sums.start(dq_group, dk_head, dv_head, d);
        Tiles<T>::fresh();
        for (int64_t k0 = 0, nk = 0; k0 < d.keys; k0 += nk) {
          nk = key_tile(d, k0);
          const int64_t kr = d.key_row(k0);
          for (int64_t h = kv * d.group(); h < (kv + 1) * d.group(); ++h) {
            const HeadView<T> hv = head_view<T>(inputs, d, b, h);
            const int64_t bh = b * d.heads + h;
            const T* dout_head = dout + d.out.at(b, h, 0);
            C* dq_head = sums.dq + (h - kv * d.group()) * sums.dq_head;
            for (int64_t q0 = 0; q0 < d.queries; q0 += kQueryTile) {
              const int64_t nq = std::min(kQueryTile, d.queries - q0);
              // Under is_causal a query tile whose positions are all before k0 sees none of
              // these keys, nor one whose first keys (with a window) are all after them, nor
              // one whose documents are not theirs.
              if (keys_read(d, p, q0, q0 + nq) <= k0 ||
                  first_key_read(d, p, q0, q0 + nq) >= k0 + nk ||
                  !documents_meet(hv, d, q0, nq, kr, nk)) {
                continue;
              }
              scores(hv, d, p, q0, nq, k0, kr, nk, s.data());
              for (int64_t i = 0; i < nq; ++i) {
                C* row = s.data() + i * nk;
                const auto [from, visible] = seen_keys(d, p, q0 + i, k0, nk);
                exp_shifted(row + from, row + from, whole_vectors(visible - from, nk - from),
                            lse[bh * d.queries + q0 + i]);
                std::fill(row, row + from, C(0));
                std::fill(row + visible, row + nk, C(0));
              }
              // dv += p^T dout; dp = dout v^T.
              Tiles<T>::cs(true, false, nk, d.value_dim, nq, C(1), s.data(), nk,
                           dout_head + q0 * d.out.row, d.out.row, C(1), sums.dv + kr * sums.dv_row,
                           sums.dv_row);
              Tiles<T>::ss(false, true, nq, nk, d.value_dim, C(1), dout_head + q0 * d.out.row,
                           d.out.row, hv.v + kr * d.v.row, d.v.row, C(0), dp.data(), nk);
              // ds = p (dp - D), kept in s; over the whole row, hidden keys included (their p is
              // 0, but a NaN D, from a row whose keys are all masked, makes their ds NaN, as the
              // CUDA kernel's does).
              for (int64_t i = 0; i < nq; ++i) {
                const C di = dsum[bh * d.queries + q0 + i];
                for (int64_t j = 0; j < nk; ++j) {
                  s[i * nk + j] *= dp[i * nk + j] - di;
                }
              }
              // dk += scale ds^T q; dq += scale ds k.
              Tiles<T>::cs(true, false, nk, d.head_dim, nq, scale, s.data(), nk,
                           hv.q + q0 * d.q.row, d.q.row, C(1), sums.dk + kr * sums.dk_row,
                           sums.dk_row);
              Tiles<T>::cs(false, false, nq, d.head_dim, nk, scale, s.data(), nk,
                           hv.k + kr * d.k.row, d.k.row, C(1), dq_head + q0 * sums.dq_row,
                           sums.dq_row);
            }
          }
        }
        sums.finish(dq_group, dk_head, dv_head, d);
      }
      Tiles<T>::release();
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("scaled_dot_product_attention", kCPU, AttentionKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked", kCPU, AttentionKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_grad", kCPU, AttentionGradKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked_grad", kCPU, AttentionGradKernel, float,
                    double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_documents", kCPU, AttentionKernel, float, double);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_documents_grad", kCPU, AttentionGradKernel, float,
                    double);
namespace {

// float16 through the float32 kernels (Note [Widened kernels] in widened.h); bfloat16 on the
// tile products where the CPU has them, else as float16.
template <template <class> class Kernel>
struct Bf16Tiled {
  static void run(const KernelContext& ctx) {
    if (bf16_tiles::available()) {
      Kernel<bfloat16>::run(ctx);
    } else {
      Widened<bfloat16, Kernel>::run(ctx);
    }
  }
};

template <template <class> class Kernel>
bool register_16_bit(const char* name) {
  OpSchema& op = OpRegistry::global().get_or_create(name);
  op.add_kernel(DeviceType::kCPU, DataType::kFloat16, &Widened<float16, Kernel>::run);
  op.add_kernel(DeviceType::kCPU, DataType::kBFloat16, &Bf16Tiled<Kernel>::run);
  note_widened_kernel(&Widened<float16, Kernel>::run);
  // The memory report counts the widening arena where the fallback widens.
  if (!bf16_tiles::available()) note_widened_kernel(&Bf16Tiled<Kernel>::run);
  return true;
}

[[maybe_unused]] const bool kRegistered16Bit =
    register_16_bit<AttentionKernel>("scaled_dot_product_attention") &&
    register_16_bit<AttentionKernel>("scaled_dot_product_attention_masked") &&
    register_16_bit<AttentionGradKernel>("scaled_dot_product_attention_grad") &&
    register_16_bit<AttentionGradKernel>("scaled_dot_product_attention_masked_grad") &&
    register_16_bit<AttentionKernel>("scaled_dot_product_attention_documents") &&
    register_16_bit<AttentionGradKernel>("scaled_dot_product_attention_documents_grad");

}  // namespace

int64_t attention_thread_peak_bytes() {
  Tiles<bfloat16>::Cache& cache = Tiles<bfloat16>::cache();
  const int64_t peak = cache.peak;
  cache.peak = cache.held;
  return peak;
}

// Note [Attention workspace] in the header; the sizes of what the kernels above allocate.
int64_t attention_workspace_bytes(bool backward, DataType dtype, const AttentionDims& d,
                                  bool causal, int threads) {
  const bool tiles = dtype == DataType::kBFloat16 && bf16_tiles::available();
  const int64_t c = dtype == DataType::kFloat64 ? 8 : 4;  // the compute type
  const int64_t query_tiles = (d.queries + kQueryTile - 1) / kQueryTile;
  const int64_t tasks = backward ? d.batch * d.kv_heads : d.batch * d.heads * query_tiles;
  const int64_t used = std::max<int64_t>(1, std::min<int64_t>(threads, tasks));
  // Packed B operands of tiles of `rows` rows: rows along the product's k (`along_k`) or its n.
  auto pack = [](int64_t rows, int64_t width, bool along_k) {
    return along_k ? bf16_tiles::packed_bytes(rows, width) : bf16_tiles::packed_bytes(width, rows);
  };
  // Under is_causal no query reads a key tile starting after the last query's position.
  const int64_t key_limit = keys_read(d, AttentionParams{1.0, causal}, 0, d.queries);
  // Those of the key tiles the kernels read, cut as they cut them, and of the query tiles.
  auto key_packs = [&](int64_t width, bool along_k) {
    int64_t bytes = 0;
    for (int64_t at = 0, rows = 0; at < key_limit; at += rows) {
      rows = key_tile(d, at);
      bytes += pack(rows, width, along_k);
    }
    return bytes;
  };
  auto query_packs = [&](int64_t width) {
    int64_t bytes = 0;
    for (int64_t at = 0; at < d.queries; at += kQueryTile) {
      bytes += pack(std::min(kQueryTile, d.queries - at), width, true);
    }
    return bytes;
  };
  const int64_t rounded =  // the largest probability tile, (queries, keys) or transposed
      tiles ? std::min(kQueryTile, d.queries) * key_tile(d, 0) * 2 : 0;
  if (!backward) {
    int64_t per_thread = (kQueryTile * kKeyTile + kQueryTile * d.value_dim + 2 * kQueryTile) * c;
    if (tiles) {
      // k^T (scores: n = keys of the tile, k = head_dim) and v (k = keys, n = value_dim).
      per_thread += key_packs(d.head_dim, false) + key_packs(d.value_dim, true) + rounded;
    }
    return used * per_thread;
  }
  int64_t per_thread = 2 * kQueryTile * kKeyTile * c;  // scores and their gradients
  if (tiles) {
    // k^T (the scores again), v^T (dp = dout v^T), k (dq += ds k), and per query head q
    // (dk += ds^T q) and dout (dv += p^T dout); GradSums in float32.
    per_thread += key_packs(d.head_dim, false) + key_packs(d.value_dim, false) +
                  key_packs(d.head_dim, true) +
                  d.group() * (query_packs(d.head_dim) + query_packs(d.value_dim)) + rounded +
                  GradSums<bfloat16>::size(d) * static_cast<int64_t>(sizeof(float));
  }
  return d.batch * d.heads * d.queries * c + used * per_thread;
}

}  // namespace ofl::cpu
