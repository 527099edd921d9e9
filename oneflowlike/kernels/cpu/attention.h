#pragma once
// What the CPU kernels of fused attention (attention.cpp) take besides their inputs and outputs.
//
// Note [Attention workspace]
// --------------------------
// Each thread of a call keeps its tiles' scratch: scores and an accumulator (forward), scores
// and their gradients (backward), in the compute type. The backward's caller keeps D (one value
// per query row). bfloat16 on the tile products (Note [bfloat16 tile products]) also keeps, per
// thread, the packed tiles of the key/value head it works on (forward: its k and v; backward:
// k, v and its query heads' q and dout), the rounded probabilities, and in the backward the
// float32 sums of dq, dk and dv; the packed tiles stay allocated between calls, at the largest
// head seen. The memory report counts the largest call of a rank's compute thread as kernel
// workspace (Note [Memory report]), with the threads this process's kernels use. float16, and
// bfloat16 without AVX512-BF16, run the float32 kernel on widened copies: its scratch here, the
// copies in the widening arena (Note [Widening arena]).

#include <cstdint>

#include "oneflowlike/dtype.h"
#include "oneflowlike/ops/attention.h"

namespace ofl::cpu {

/// The bytes a CPU attention call of `dtype` over `d` takes on `threads` threads (the
/// backward's when `backward`).
int64_t attention_workspace_bytes(bool backward, DataType dtype, const AttentionDims& d,
                                  int threads);

/// The bytes the calling thread's bfloat16 attention keeps between calls (its packed tiles and
/// rounded probabilities), to test the count above.
int64_t attention_thread_cache_bytes();

}  // namespace ofl::cpu
