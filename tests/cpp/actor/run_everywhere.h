#pragma once
// Runs a plan on the reference executor and on the actor runtime in its four modes
// (deterministic, threaded, event-gated CPU streams, caller-run) and expects the same fetches
// and variables from all (tests of hand-built plans).

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "actor/reference_executor.h"
#include "actor/runtime.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

inline void expect_same_tensors(const std::map<std::string, Tensor>& expected,
                                const std::map<std::string, Tensor>& actual,
                                const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [name, tensor] : expected) {
    ASSERT_TRUE(actual.count(name)) << what << " lacks " << name;
    EXPECT_EQ(actual.at(name).shape(), tensor.shape()) << what << " " << name;
    EXPECT_EQ(values_of(actual.at(name)), values_of(tensor)) << what << " " << name;
  }
}

// Runs `plan` for `iterations` iterations on the reference executor and on the runtime in
// deterministic, threaded, streamed and caller-run mode; every fetched tensor and variable must be
// equal. Returns the runtime's (deterministic) fetches of the last iteration.
inline std::map<std::string, Tensor> run_everywhere(const proto::PlanProto& plan,
                                                    const std::map<std::string, Tensor>& feed,
                                                    int iterations = 2) {
  actor::RuntimeOptions serial_options;
  serial_options.deterministic = true;
  actor::RuntimeOptions threaded_options;
  threaded_options.watchdog_seconds = 20;
  actor::RuntimeOptions streamed_options = threaded_options;
  streamed_options.async_cpu_streams = true;
  actor::RuntimeOptions caller_options = threaded_options;
  caller_options.caller_runs = true;  // Note [Caller-run runtimes]
  actor::ReferenceExecutor reference(plan);
  actor::Runtime serial(plan, serial_options);
  actor::Runtime parallel(plan, threaded_options);
  actor::Runtime streamed(plan, streamed_options);
  actor::Runtime caller(plan, caller_options);
  reference.initialize_variables();
  serial.initialize_variables();
  parallel.initialize_variables();
  streamed.initialize_variables();
  caller.initialize_variables();
  std::map<std::string, Tensor> last;
  for (int i = 0; i < iterations; ++i) {
    const auto expected = reference.run(feed);
    last = serial.run(feed);
    expect_same_tensors(expected, last, str_cat("deterministic iteration ", i));
    expect_same_tensors(expected, parallel.run(feed), str_cat("threaded iteration ", i));
    expect_same_tensors(expected, streamed.run(feed), str_cat("streamed iteration ", i));
    expect_same_tensors(expected, caller.run(feed), str_cat("caller-run iteration ", i));
  }
  for (const auto& [name, pieces] : serial.plan_index().variables_by_name()) {
    const auto want = values_of(reference.read_variable(name));
    EXPECT_EQ(values_of(serial.read_variable(name)), want) << name;
    EXPECT_EQ(values_of(parallel.read_variable(name)), want) << name;
    EXPECT_EQ(values_of(streamed.read_variable(name)), want) << name;
    EXPECT_EQ(values_of(caller.read_variable(name)), want) << name;
  }
  return last;
}

}  // namespace ofl::testing
