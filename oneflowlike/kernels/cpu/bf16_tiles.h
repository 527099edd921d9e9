#pragma once
// Small matrix products of bfloat16 operands with float32 results, for kernels that multiply
// tiles (fused attention).
//
// Note [bfloat16 tile products]
// -----------------------------
// AVX512-BF16's VDPBF16PS multiplies 16 pairs of bfloat16 and adds each pair's two products
// into a float32 lane: twice the products of a float32 FMA per instruction, from operands half
// the size. A product C (m, n) = alpha * A (m, k) @ B (k, n) + beta * C runs as follows:
//  - B is packed first: the pairs (B[2p][j], B[2p+1][j]) side by side for every column j (what
//    one lane multiplies), k padded to even and n to a multiple of 16 with zeros;
//  - A's rows are read as they are: a pair of consecutive elements is one 32-bit value,
//    broadcast to all 16 lanes;
//  - 8 rows x 32 columns of C stay in 16 registers over the whole sum (a 16-column block at the
//    right edge), stored masked at the edges.
// Each element of C sums its k products in one order fixed by k (pairs in order; within a pair
// the instruction adds the odd element's product, then the even one's, rounding after each), on
// any thread count, so results are reproducible. The products of two bfloat16 values are exact
// in float32 (short of overflow and underflow); the instruction rounds to nearest even and
// reads denormal inputs and accumulators as zero. So a product differs from the float32 sgemm of
// the same bfloat16 values by the order and rounding of its float32 sums and by flushed
// denormals.
// Operands in float32 (attention's probabilities) are rounded to bfloat16 first (round_to),
// which is where a kernel using these loses precision against its float32 twin.
// The products need the instructions: available() says whether this CPU has them (the library
// targets x86-64-v3; these functions alone are compiled for AVX-512 and chosen at run time).

#include <cstdint>
#include <vector>

#include "oneflowlike/half.h"

namespace ofl::cpu::bf16_tiles {

/// Whether this CPU runs the products (AVX512-BF16), and OFL_BF16_TILES was not 0 when first
/// asked (to measure or test the kernels' fallbacks): decided once per process.
bool available();

/// B (k, n) packed for product(): see the Note. Reused across calls to keep its memory.
struct PackedB {
  std::vector<bfloat16> data;
  int64_t k = 0, n = 0;
  int64_t n_padded = 0;  // columns stored per pair of rows (a multiple of 16)
};

/// The bytes of B (k, n) packed (k padded to even, n to a multiple of 16).
int64_t packed_bytes(int64_t k, int64_t n);

/// Packs B = x, x (k, n) row-major with row stride ld.
void pack(const bfloat16* x, int64_t ld, int64_t k, int64_t n, PackedB* out);
/// Packs B = x^T, x (n, k) row-major with row stride ld.
void pack_transposed(const bfloat16* x, int64_t ld, int64_t n, int64_t k, PackedB* out);

/// Rounds x (m, k) (row stride ld), or x^T when `transpose` (x then (k, m)), into `out`
/// row-major (m, k) with row stride k: the A of a product from float32 values. To nearest even,
/// 16 at a time (VCVTNEPS2BF16, which reads denormal inputs as zero); needs available().
void round_to(const float* x, int64_t ld, int64_t m, int64_t k, bool transpose,
              std::vector<bfloat16>* out);

/// C (m, b.n) = alpha * A (m, b.k) @ B + beta * C (beta 0: C is not read). A row-major with row
/// stride lda, C float32 with row stride ldc. Needs available().
void product(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha, float beta,
             float* c, int64_t ldc);

}  // namespace ofl::cpu::bf16_tiles
