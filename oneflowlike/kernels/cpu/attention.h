#pragma once
// What the CPU kernels of fused attention (attention.cpp) take besides their inputs and outputs.
//
// Note [Attention workspace]
// --------------------------
// Each thread of a call keeps its tiles' scratch: scores and an accumulator (forward), scores
// and their gradients (backward), in the compute type. The backward's caller keeps D (one value
// per query row). bfloat16 on the tile products (Note [bfloat16 tile products]) also keeps, per
// thread, the packed tiles of the key/value head it works on (forward: its k and v; backward:
// k twice, v, and its query heads' q and dout; under is_causal not the key tiles no query
// reads), the rounded probabilities, and in the backward the float32 sums of dq, dk and dv; a
// thread frees them when its part of the call ends. The memory report counts the largest call
// of a rank's compute thread as kernel workspace (Note [Memory report]), on the threads this
// process's kernels use (omp_get_max_threads() where the report is made: `oneflowlike-plan` on
// another machine may count another number). float16, and bfloat16 without AVX512-BF16, run
// the float32 kernel on widened copies: its scratch here, the copies in the widening arena
// (Note [Widening arena]). Not counted: on AMX, the padded copy of a product's A whose tiles are
// not whole (Note [AMX tile products]: a query or key tile at the end of a sequence whose length
// is not a multiple of 16 rows or 32 columns, or a head size not a multiple of 32; at most a few
// tens of KiB per thread, freed with the rest when the thread's part of the call ends).

#include <cstdint>
#include <type_traits>

#include "oneflowlike/dtype.h"
#include "oneflowlike/ops/attention.h"

namespace ofl::cpu {

/// Where a fused-attention call's inputs start (the strides are AttentionDims'), and its mask
/// or document ids (at most one).
template <class T>
struct AttentionInputs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* mask = nullptr;  // element (b, h, i, j) at b * ms.batch + ... + j * ms.key
  MaskStrides ms = MaskStrides();
  DocumentIds docs = DocumentIds();  // Note [Packed documents]
};

/// The log-sum-exp's element type: float for the 16-bit dtypes, else the dtype.
template <class T>
using attention_lse_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// The forward kernel over `d` (strides, query offset, window as it says): out and lse (B, H, L)
/// from `in`. For float, double, and bfloat16 where bf16_tiles::available() (others widen
/// first). The cached attention's kernel calls it on a cache's rows (Note [Cached attention]).
template <class T>
void attention_forward(const AttentionDims& d, const AttentionParams& p,
                       const AttentionInputs<T>& in, T* out, attention_lse_t<T>* lse);

/// The bytes a CPU attention call of `dtype` over `d` (causal or not) takes on `threads`
/// threads (the backward's when `backward`).
int64_t attention_workspace_bytes(bool backward, DataType dtype, const AttentionDims& d,
                                  bool causal, int threads);

/// The most bytes the calling thread's bfloat16 attention has held at once (packed tiles and
/// rounded probabilities) since it last asked, to test the count above.
int64_t attention_thread_peak_bytes();

}  // namespace ofl::cpu
