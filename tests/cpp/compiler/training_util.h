#pragma once
// What a training run leaves behind (loss per step, final weights) and the comparison every
// layout test makes against the 1-rank run.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace ofl::testing {

struct TrainingRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;  // by variable name
};

/// Losses and every weight within 1e-5 relative (absolute for weights below 1).
inline void expect_same_training(const TrainingRun& expected, const TrainingRun& actual,
                                 const std::string& name) {
  ASSERT_EQ(expected.losses.size(), actual.losses.size()) << name;
  for (size_t i = 0; i < expected.losses.size(); ++i) {
    EXPECT_NEAR(actual.losses[i], expected.losses[i], 1e-5 * std::abs(expected.losses[i]))
        << name << " step " << i + 1;
  }
  for (const auto& [w, values] : expected.weights) {
    ASSERT_TRUE(actual.weights.count(w)) << name << " has no weight " << w;
    const std::vector<double>& got = actual.weights.at(w);
    ASSERT_EQ(got.size(), values.size()) << name << " " << w;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(got[i], values[i], 1e-5 * std::max(1.0, std::abs(values[i])))
          << name << " " << w << "[" << i << "]";
    }
  }
}

}  // namespace ofl::testing
