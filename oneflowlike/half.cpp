#include "oneflowlike/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ofl {

void floats_to_halves(const float* x, float16* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
#endif
  for (; i < n; ++i) y[i] = float16(x[i]);
}

void halves_to_floats(const float16* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

}  // namespace ofl
