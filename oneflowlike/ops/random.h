#pragma once
// Random ops: random_normal, random_uniform and dropout. Values come from Philox (philox.h), so
// element e of a result is a pure function of (seed, offset, logical flat index of e) and a
// split tensor holds the values of the whole one (Note [Random element counters]).
//
// The ops take seed and offset as parameters, which makes them deterministic and lets the
// compiler replay them (dropout's backward redraws its mask instead of storing it). The
// functional API takes both from the global generator below.

#include <cstdint>
#include <optional>
#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/tensor.h"

namespace ofl {

/// random_normal: mean a, standard deviation b. random_uniform: [a, b).
///
/// Note [16-bit random values]: a float16 or bfloat16 draw is the float32 draw rounded to
/// nearest, as torch draws in its accumulate type and rounds; so randn(bfloat16) equals
/// randn(float32) cast to bfloat16. A uniform value that rounds up to b becomes the largest
/// 16-bit value below it (largest_below in half.h): the interval stays half-open.
struct RandomParams {
  Shape shape;
  DataType dtype = DataType::kFloat32;
  double a = 0.0;
  double b = 1.0;
  int64_t seed = 0;
  int64_t offset = 0;
  OFL_PARAMS(RandomParams, shape, dtype, a, b, seed, offset)
};

/// y = x * (uniform(seed, offset, e) >= p) / (1 - p) for each logical flat index e.
struct DropoutParams {
  double p = 0.5;
  int64_t seed = 0;
  int64_t offset = 0;
  OFL_PARAMS(DropoutParams, p, seed, offset)
};

/// The seed torch starts from, so that runs are reproducible without manual_seed.
constexpr uint64_t kDefaultRandomSeed = 67280421310721ull;

/// Seeds the global generator and restarts its counters at 0.
void manual_seed(uint64_t seed);
/// The seed of the global generator.
uint64_t initial_seed();
/// Reserves `count` counters of the global generator and returns the first one, so that
/// successive calls draw fresh numbers (deterministic after manual_seed).
int64_t next_offset(int64_t count);

/// Seed and first counter of one draw from the global generator, read under one lock.
struct RandomState {
  int64_t seed = 0;
  int64_t offset = 0;
};
RandomState reserve_random(int64_t count);
/// The global generator's seed and next counter, without reserving any (get_rng_state).
RandomState random_state();
/// Puts the global generator back at `state` (set_rng_state): the draws after it repeat.
void set_random_state(const RandomState& state);

/// Raises ValueError unless 0 <= p <= 1 (shared by the op and its functional form).
void check_dropout_probability(double p);

/// Note [Sharded creation]: a global tensor made by a random creation function on a placement
/// computes only this rank's piece. The piece holds the values the whole draw would hold there
/// (Note [Random element counters]), and the whole draw's counters are reserved from the global
/// generator as a one-device call does, on every rank (a rank holding nothing too), so the
/// generator moves on alike everywhere and the values equal a one-device run's.
namespace functional {
/// The piece `region` of random_normal (`normal`) or random_uniform with its seed and offset
/// given: the values a whole draw with those counters holds there. How a meta tensor's recorded
/// draw becomes a global tensor's piece.
Tensor random_region(bool normal, double a, double b, const Shape& shape, DataType dtype,
                     int64_t seed, int64_t offset, const std::vector<Range>& region);
/// The piece `region` of normal(mean, std, shape, dtype); without a region, only the reservation.
std::optional<Tensor> normal_region(double mean, double std, const Shape& shape, DataType dtype,
                                    const std::optional<std::vector<Range>>& region);
/// The piece `region` of uniform(low, high, shape, dtype); without a region, only the
/// reservation.
std::optional<Tensor> uniform_region(double low, double high, const Shape& shape, DataType dtype,
                                     const std::optional<std::vector<Range>>& region);
}  // namespace functional

namespace functional {
// The functions without an input tensor make their result on `device` (eager mode; CPU in a
// graph), with the values the CPU would give (Note [Random values on every device]).
/// Standard normal values.
Tensor randn(const Shape& shape, DataType dtype = DataType::kFloat32,
             const Device& device = Device::cpu());
/// Uniform values in [0, 1).
Tensor rand(const Shape& shape, DataType dtype = DataType::kFloat32,
            const Device& device = Device::cpu());
Tensor normal(double mean, double std, const Shape& shape, DataType dtype = DataType::kFloat32,
              const Device& device = Device::cpu());
/// Uniform values in [low, high).
Tensor uniform(double low, double high, const Shape& shape, DataType dtype = DataType::kFloat32,
               const Device& device = Device::cpu());
/// Zeroes each element with probability p and scales the rest by 1 / (1 - p); x itself when
/// !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training = true);

/// The ops with explicit seed and offset (deterministic; for tests and replay).
Tensor random_normal(const Shape& shape, DataType dtype, double mean, double std, int64_t seed,
                     int64_t offset, const Device& device = Device::cpu());
Tensor random_uniform(const Shape& shape, DataType dtype, double low, double high, int64_t seed,
                      int64_t offset, const Device& device = Device::cpu());
Tensor dropout_with_seed(const Tensor& x, double p, int64_t seed, int64_t offset);
}  // namespace functional

}  // namespace ofl
