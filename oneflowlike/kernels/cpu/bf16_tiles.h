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
//    one lane multiplies), k padded to even (and its pairs to a multiple of 16, for the AMX
//    tiles below) and n to a multiple of 16 with zeros;
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
//
// Note [AMX tile products]
// ------------------------
// Where the CPU also has AMX (Sapphire Rapids and later) and Linux lends the process its tile
// registers (arch_prctl(ARCH_REQ_XCOMP_PERM)), product() runs on the tiles instead: TDPBF16PS
// multiplies a 16 x 32 tile of A by a 16-pair x 16-column tile of B into a 16 x 16 float32
// tile, the pairs laid out exactly as the packing above (VNNI), so the same PackedB serves both.
// B is packed with its pairs padded to a multiple of 16 (zeros) and A's rows are copied to a
// multiple of 16 rows and 32 columns (zeros), so every tile load reads whole tiles; 2 x 2 tiles
// of C are summed over k at a time and combined into C with alpha and beta. Each element sums
// its pairs in one order fixed by k, so results do not depend on threads; they may differ from
// the AVX512-BF16 loop's in the last bits (the tile sums a chunk of 16 pairs its own way), and
// both are tested against the float64 product. The tile configuration is loaded at each call
// and the tiles released after it, since oneDNN loads its own on the same threads.
// OFL_BF16_AMX=0 keeps the AVX512-BF16 loop (to measure it). Measured in docs/benchmarks.md,
// "Fused attention".

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

/// The bytes of B (k, n) packed (its (k + 1) / 2 pairs padded to a multiple of 16, n to a
/// multiple of 16).
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
/// stride lda, C float32 with row stride ldc. Needs available(); on AMX where amx_available().
void product(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha, float beta,
             float* c, int64_t ldc);

/// Whether product() runs on AMX tiles (Note [AMX tile products]): the CPU has them, Linux lent
/// them, and OFL_BF16_AMX was not 0; decided once per process.
bool amx_available();

/// Frees the calling thread's padded copy of A (product_amx), kept between calls otherwise.
void release_thread_buffers();

/// product() on the AVX512-BF16 loop, and on AMX tiles (needs amx_available()): for tests and
/// benchmarks of each.
void product_avx512(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha,
                    float beta, float* c, int64_t ldc);
void product_amx(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha,
                 float beta, float* c, int64_t ldc);

}  // namespace ofl::cpu::bf16_tiles
