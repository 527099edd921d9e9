#pragma once
// Helpers for op tests: build tensors from values, compare against references, and check
// gradients against central finite differences in float64.

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/tensor.h"

namespace ofl::testing {

/// A tensor of `dtype` holding `values` (converted), shaped `shape`.
Tensor make_tensor(const std::vector<double>& values, const Shape& shape,
                   DataType dtype = DataType::kFloat32);
/// Uniform random values in [lo, hi) from a fixed seed.
Tensor random_tensor(const Shape& shape, DataType dtype, uint64_t seed, double lo = -1.0,
                     double hi = 1.0);
/// The values, converted to double.
std::vector<double> values_of(const Tensor& t);
/// Expects equal shapes and |actual - expected| <= atol + rtol * |expected| everywhere.
void expect_close(const Tensor& actual, const std::vector<double>& expected, const Shape& shape,
                  double rtol = 1e-5, double atol = 1e-6);

/// Note [Low-precision tolerances]: the relative (and, for values near 0, absolute) distance a
/// kernel computing in `dtype` may keep from a float64 reference on the same inputs (already
/// rounded to `dtype`): a few roundings of the result, 2^-8 for bfloat16 and 2^-11 for
/// float16 (times 4), 1e-5 for float32, 1e-12 for float64. The one place tests take them from.
double dtype_tolerance(DataType dtype);

/// f applied to every value of x (a reference computed in double).
std::vector<double> map_values(const Tensor& x, const std::function<double(double)>& f);

/// Expects f() to raise ofl::Error with `code` and a message containing `phrase`.
template <class F>
void expect_error(F&& f, ErrorCode code, const std::string& phrase) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << phrase << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

/// Expects f() to raise ofl::Error with `code` and a message containing every phrase.
template <class F>
void expect_error_phrases(F&& f, ErrorCode code, const std::vector<std::string>& phrases) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& phrase : phrases) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos)
          << "'" << phrase << "' not in: " << e.what();
    }
  }
}

/// Checks autograd against central differences: the function's outputs are reduced with fixed
/// random weights to a scalar L; dL/dinput from backward() must match (L(x+h)-L(x-h))/2h for
/// every element of every input that requires grad. Inputs should be float64.
void expect_gradients_match(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, double eps = 1e-6,
                            double tol = 1e-6);

/// The number of threads of this process (/proc/self/task).
int process_threads();

}  // namespace ofl::testing
