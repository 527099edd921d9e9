// bfloat16 tile products on AVX512-BF16 (Note [bfloat16 tile products] in the header).

#include "oneflowlike/kernels/cpu/bf16_tiles.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ofl::cpu::bf16_tiles {

namespace {

constexpr int64_t kLanes = 16;  // float32 lanes of a register, and columns of a block half

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The first n of 16 lanes (all for n >= 16, none for n <= 0).
__mmask16 first_lanes(int64_t n) {
  return n >= kLanes ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1);
}

// Whether environment variable `name` turns a path off (set to 0).
bool turned_off(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "0";
}

int64_t padded_columns(int64_t n) { return round_up(std::max<int64_t>(n, 1), kLanes); }

// Pairs of rows stored: a multiple of an AMX tile's 16 rows (zeros past (k + 1) / 2), so a tile
// load never reads past the packing (Note [AMX tile products]).
constexpr int64_t kTileRows = 16;
int64_t padded_pairs(int64_t k) { return round_up(std::max<int64_t>((k + 1) / 2, 1), kTileRows); }

// Sizes `out` for B (k, n) and returns the packed pairs, as 32-bit words (a pair per column).
uint32_t* shape(PackedB* out, int64_t k, int64_t n) {
  out->k = k;
  out->n = n;
  out->n_padded = padded_columns(n);
  out->data.resize(static_cast<size_t>(packed_bytes(k, n)) / sizeof(bfloat16));
  uint32_t* words = reinterpret_cast<uint32_t*>(out->data.data());
  // The padding pairs are zeros (the buffer may hold an earlier packing).
  std::fill(words + (k + 1) / 2 * out->n_padded, words + padded_pairs(k) * out->n_padded, 0u);
  return words;
}

// The pair (lo, hi) as the lane reads it: lo in the low half.
uint32_t pair(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (uint32_t{hi} << 16); }

// R rows x (Two ? 32 : 16) columns of C from row block `a` (R rows, stride lda) and the packed
// pairs starting at column j0; `cols` of the block are stored (masked), `full` pairs are read as
// 32-bit words and an odd k's last element alone (never past the row's end).
template <int R, bool Two>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void block(
    const uint16_t* a, int64_t lda, const PackedB& b, int64_t j0, int64_t cols, float alpha,
    float beta, float* c, int64_t ldc) {
  const int64_t pairs = (b.k + 1) / 2, full = b.k / 2;
  const uint32_t* packed = reinterpret_cast<const uint32_t*>(b.data.data());
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* row = packed + p * b.n_padded + j0;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(row);
    const __m512bh b1 = Two ? (__m512bh)_mm512_loadu_si512(row + kLanes) : b0;
    for (int r = 0; r < R; ++r) {
      const uint16_t* ar = a + r * lda + 2 * p;
      uint32_t word;
      if (p < full) {
        std::memcpy(&word, ar, sizeof(word));
      } else {
        word = ar[0];
      }
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(word));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      if (Two) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 m0 = first_lanes(cols), m1 = first_lanes(cols - kLanes);
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc + j0;
    for (int h = 0; h < (Two ? 2 : 1); ++h) {
      const __mmask16 m = h == 0 ? m0 : m1;
      __m512 v = _mm512_mul_ps(acc[r][h], va);
      if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, cr + h * kLanes), vb, v);
      _mm512_mask_storeu_ps(cr + h * kLanes, m, v);
    }
  }
}

// Rows [i0, i0 + R) of C, every column block.
template <int R>
void rows(const uint16_t* a, int64_t lda, const PackedB& b, float alpha, float beta, float* c,
          int64_t ldc) {
  int64_t j0 = 0;
  for (; b.n - j0 > kLanes; j0 += 2 * kLanes) {  // up to 32 columns
    block<R, true>(a, lda, b, j0, b.n - j0, alpha, beta, c, ldc);
  }
  if (j0 < b.n) block<R, false>(a, lda, b, j0, b.n - j0, alpha, beta, c, ldc);
}

}  // namespace

int64_t packed_bytes(int64_t k, int64_t n) {
  return padded_pairs(k) * padded_columns(n) * 2 * static_cast<int64_t>(sizeof(bfloat16));
}

bool available() {
  // Decided once (kernels register by it when the library loads, and choose by it per call).
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
           !turned_off("OFL_BF16_TILES");
  }();
  return yes;
}

void pack(const bfloat16* x, int64_t ld, int64_t k, int64_t n, PackedB* out) {
  uint32_t* dst = shape(out, k, n);
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    const bfloat16* lo = x + 2 * p * ld;
    const bfloat16* hi = 2 * p + 1 < k ? lo + ld : nullptr;
    uint32_t* d = dst + p * out->n_padded;
    for (int64_t j = 0; j < n; ++j) d[j] = pair(lo[j].bits, hi != nullptr ? hi[j].bits : 0);
    std::fill(d + n, d + out->n_padded, 0u);
  }
}

void pack_transposed(const bfloat16* x, int64_t ld, int64_t n, int64_t k, PackedB* out) {
  uint32_t* dst = shape(out, k, n);
  const int64_t pairs = (k + 1) / 2, full = k / 2;
  for (int64_t j = 0; j < n; ++j) {  // row j of x is column j of B: its pairs are adjacent
    const bfloat16* row = x + j * ld;
    for (int64_t p = 0; p < full; ++p)
      dst[p * out->n_padded + j] = pair(row[2 * p].bits, row[2 * p + 1].bits);
    if (full < pairs) dst[full * out->n_padded + j] = pair(row[k - 1].bits, 0);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    std::fill(dst + p * out->n_padded + n, dst + (p + 1) * out->n_padded, 0u);
  }
}

namespace {

// 16 float32 values (n of them, masked) rounded to nearest even, as bfloat16 bits.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) __m256i rounded16(const float* x,
                                                                                  int64_t n) {
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first_lanes(n), x));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_rows(
    const float* x, int64_t ld, int64_t m, int64_t k, uint16_t* y) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; j += kLanes) {
      const int64_t n = std::min(kLanes, k - j);
      _mm256_mask_storeu_epi16(y + i * k + j, first_lanes(n), rounded16(x + i * ld + j, n));
    }
  }
}

// Columns [i0, m) of rows [j0, j1) of x into y (m, k) = x^T: 16 consecutive values of a row of
// x become a column of y, stored one by one.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_columns_scalar(
    const float* x, int64_t ld, int64_t j0, int64_t j1, int64_t i0, int64_t m, int64_t k,
    uint16_t* y) {
  alignas(32) uint16_t lanes[kLanes];
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t i = i0; i < m; i += kLanes) {
      const int64_t n = std::min(kLanes, m - i);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), rounded16(x + j * ld + i, n));
      for (int64_t t = 0; t < n; ++t) y[(i + t) * k + j] = lanes[t];
    }
  }
}

// r[t] (16 values each) -> r[c] = (r[0][c], ..., r[15][c]): 16-bit interleaves within 128-bit
// lanes (pairs of rows, then fours, then eights), then the lanes of rows 0-7 and 8-15 joined.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void transpose16(__m256i r[16]) {
  __m256i lo[8], hi[8];  // rows 2p, 2p+1: elements {0-3 | 8-11} and {4-7 | 12-15}
  for (int p = 0; p < 8; ++p) {
    lo[p] = _mm256_unpacklo_epi16(r[2 * p], r[2 * p + 1]);
    hi[p] = _mm256_unpackhi_epi16(r[2 * p], r[2 * p + 1]);
  }
  __m256i four[4][4];  // rows 4q..4q+3: elements {0,1 | 8,9}, {2,3 | 10,11}, {4,5 | ..}, {6,7 | ..}
  for (int q = 0; q < 4; ++q) {
    four[q][0] = _mm256_unpacklo_epi32(lo[2 * q], lo[2 * q + 1]);
    four[q][1] = _mm256_unpackhi_epi32(lo[2 * q], lo[2 * q + 1]);
    four[q][2] = _mm256_unpacklo_epi32(hi[2 * q], hi[2 * q + 1]);
    four[q][3] = _mm256_unpackhi_epi32(hi[2 * q], hi[2 * q + 1]);
  }
  __m256i eight[2][8];  // rows 8o..8o+7: element c | element c + 8
  for (int o = 0; o < 2; ++o) {
    for (int g = 0; g < 4; ++g) {
      eight[o][2 * g] = _mm256_unpacklo_epi64(four[2 * o][g], four[2 * o + 1][g]);
      eight[o][2 * g + 1] = _mm256_unpackhi_epi64(four[2 * o][g], four[2 * o + 1][g]);
    }
  }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm256_permute2x128_si256(eight[0][c], eight[1][c], 0x20);
    r[c + 8] = _mm256_permute2x128_si256(eight[0][c], eight[1][c], 0x31);
  }
}

// y (m, k) = x^T, x (k, m): blocks of 16 x 16 rounded row by row and transposed in registers
// (what the attention backward's p^T and ds^T take), the edges one by one.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_columns(
    const float* x, int64_t ld, int64_t m, int64_t k, uint16_t* y) {
  const int64_t whole_j = k / kLanes * kLanes, whole_i = m / kLanes * kLanes;
  __m256i r[kLanes];
  for (int64_t j = 0; j < whole_j; j += kLanes) {
    for (int64_t i = 0; i < whole_i; i += kLanes) {
      for (int t = 0; t < kLanes; ++t) r[t] = rounded16(x + (j + t) * ld + i, kLanes);
      transpose16(r);
      for (int c = 0; c < kLanes; ++c) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + (i + c) * k + j), r[c]);
      }
    }
    round_columns_scalar(x, ld, j, j + kLanes, whole_i, m, k, y);
  }
  round_columns_scalar(x, ld, whole_j, k, 0, m, k, y);
}

}  // namespace

void round_to(const float* x, int64_t ld, int64_t m, int64_t k, bool transpose,
              std::vector<bfloat16>* out) {
  out->resize(static_cast<size_t>(m * k));
  uint16_t* y = reinterpret_cast<uint16_t*>(out->data());
  if (transpose) {
    round_columns(x, ld, m, k, y);
  } else {
    round_rows(x, ld, m, k, y);
  }
}

void product(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha, float beta,
             float* c, int64_t ldc) {
  if (amx_available()) {
    product_amx(m, a, lda, b, alpha, beta, c, ldc);
  } else {
    product_avx512(m, a, lda, b, alpha, beta, c, ldc);
  }
}

void product_avx512(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha,
                    float beta, float* c, int64_t ldc) {
  if (m == 0 || b.n == 0) return;
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(a);
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) rows<8>(bits + i * lda, lda, b, alpha, beta, c + i * ldc, ldc);
  for (; i + 4 <= m; i += 4) rows<4>(bits + i * lda, lda, b, alpha, beta, c + i * ldc, ldc);
  for (; i < m; ++i) rows<1>(bits + i * lda, lda, b, alpha, beta, c + i * ldc, ldc);
}

// Note [AMX tile products] in the header.
namespace {

// Linux lends the AMX tile registers to a process that asks (kernel 5.16 and later).
bool request_amx() {
  constexpr int kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr int kXtiledata = 18;         // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
}

// Palette 1, every tile 16 rows of 64 bytes: C 16 x 16 float32, A 16 rows x 32 bfloat16, B 16
// pairs x 16 columns.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

// A 16 x 16 float32 tile of products into C rows [i, i + rows), columns [j, j + cols):
// C = alpha * tile + beta * C.
__attribute__((target("avx512f"))) void combine(const float* tile, int64_t rows, int64_t cols,
                                                float alpha, float beta, float* c, int64_t ldc) {
  const __mmask16 m = first_lanes(cols);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(tile + r * kLanes), va);
    if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c + r * ldc), vb, v);
    _mm512_mask_storeu_ps(c + r * ldc, m, v);
  }
}

// TA (1 or 2) row tiles of A against TB (1 or 2) column tiles of B, over kp (a multiple of 32)
// columns of A: C tiles 0-3, A tiles 4-5, B tiles 6-7. `a` rows of stride lda elements, `b` the
// packed pairs from column j0; the products go to `out` (TA x TB tiles of 16 x 16).
template <int TA, int TB>
__attribute__((target("amx-tile,amx-bf16"))) void tile_block(const uint16_t* a, int64_t lda,
                                                             int64_t kp, const uint32_t* b,
                                                             int64_t n_padded, float* out) {
  // GCC's tile loads are asm without a memory clobber: the stores of A's padded copy must be
  // done before them, which this makes explicit (not only the call boundary).
  asm volatile("" ::: "memory");
  _tile_zero(0);
  if (TB == 2) _tile_zero(1);
  if (TA == 2) _tile_zero(2);
  if (TA == 2 && TB == 2) _tile_zero(3);
  const int64_t a_stride = lda * 2, b_stride = n_padded * 4;
  for (int64_t chunk = 0; chunk < kp / 32; ++chunk) {
    _tile_loadd(4, a + chunk * 32, a_stride);
    if (TA == 2) _tile_loadd(5, a + 16 * lda + chunk * 32, a_stride);
    const uint32_t* rows = b + chunk * kTileRows * n_padded;
    _tile_loadd(6, rows, b_stride);
    if (TB == 2) _tile_loadd(7, rows + kLanes, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if (TB == 2) _tile_dpbf16ps(1, 4, 7);
    if (TA == 2) _tile_dpbf16ps(2, 5, 6);
    if (TA == 2 && TB == 2) _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t kTile = kLanes * kLanes;
  _tile_stored(0, out, 64);
  if (TB == 2) _tile_stored(1, out + kTile, 64);
  if (TA == 2) _tile_stored(2, out + 2 * kTile, 64);
  if (TA == 2 && TB == 2) _tile_stored(3, out + 3 * kTile, 64);
}

__attribute__((target("amx-tile"))) void load_tile_config(const TileConfig& config) {
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// The calling thread's copy of an A whose tiles are not whole (product_amx).
std::vector<uint16_t>& padded_rows() {
  thread_local std::vector<uint16_t> rows;
  return rows;
}

}  // namespace

void release_thread_buffers() { std::vector<uint16_t>().swap(padded_rows()); }

bool amx_available() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return available() && __builtin_cpu_supports("amx-tile") &&
           __builtin_cpu_supports("amx-bf16") && !turned_off("OFL_BF16_AMX") && request_amx();
  }();
  return yes;
}

void product_amx(int64_t m, const bfloat16* a, int64_t lda, const PackedB& b, float alpha,
                 float beta, float* c, int64_t ldc) {
  if (m == 0 || b.n == 0) return;
  // A as it is when its tiles are whole (m a multiple of 16 rows, k of 32 columns: attention's
  // tiles at the usual head sizes); else its rows copied to such a size, zeros around them, so
  // every tile load reads inside the copy (an odd k's last pair, rows past m).
  const int64_t kp = padded_pairs(b.k) * 2, mp = round_up(m, kTileRows);
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(a);
  int64_t a_ld = lda;
  if (mp != m || kp != b.k) {
    std::vector<uint16_t>& rows = padded_rows();
    rows.assign(static_cast<size_t>(mp * kp), 0);
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(rows.data() + i * kp, bits + i * lda, static_cast<size_t>(b.k) * 2);
    }
    bits = rows.data();
    a_ld = kp;
  }
  const uint32_t* packed = reinterpret_cast<const uint32_t*>(b.data.data());
  // Another user of the tiles on this thread (oneDNN) may have loaded its own configuration.
  static const TileConfig kConfig;
  load_tile_config(kConfig);
  alignas(64) float out[4 * kLanes * kLanes];
  for (int64_t i0 = 0; i0 < mp; i0 += 2 * kTileRows) {
    const bool two_a = mp - i0 > kTileRows;
    for (int64_t j0 = 0; j0 < b.n; j0 += 2 * kLanes) {
      const bool two_b = b.n - j0 > kLanes;
      const uint16_t* ar = bits + i0 * a_ld;
      const uint32_t* bc = packed + j0;
      if (two_a && two_b) {
        tile_block<2, 2>(ar, a_ld, kp, bc, b.n_padded, out);
      } else if (two_a) {
        tile_block<2, 1>(ar, a_ld, kp, bc, b.n_padded, out);
      } else if (two_b) {
        tile_block<1, 2>(ar, a_ld, kp, bc, b.n_padded, out);
      } else {
        tile_block<1, 1>(ar, a_ld, kp, bc, b.n_padded, out);
      }
      for (int ta = 0; ta < (two_a ? 2 : 1); ++ta) {
        for (int tb = 0; tb < (two_b ? 2 : 1); ++tb) {
          const int64_t i = i0 + ta * kTileRows, j = j0 + tb * kLanes;
          if (i >= m) continue;
          const float* tile = out + (ta * 2 + tb) * kLanes * kLanes;
          combine(tile, std::min(kTileRows, m - i), std::min(kLanes, b.n - j), alpha, beta,
                  c + i * ldc + j, ldc);
        }
      }
    }
  }
  release_tiles();
}

}  // namespace ofl::cpu::bf16_tiles
