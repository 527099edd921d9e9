// The launch environment: the launcher's variables, Slurm's in their place, and clear errors.

#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include "tests/cpp/ops/test_util.h"

namespace ofl::comm {
namespace {

using ofl::testing::expect_error;

TEST(LaunchEnv, ReadsTheLaunchersVariables) {
  const LaunchEnv e = LaunchEnv::from_map({{"RANK", "3"},
                                           {"WORLD_SIZE", "4"},
                                           {"LOCAL_RANK", "1"},
                                           {"MASTER_ADDR", "10.0.0.7"},
                                           {"MASTER_PORT", "1234"},
                                           {"OFL_JOB_SECRET", "s"},
                                           {"OFL_BOOTSTRAP_TIMEOUT", "5"},
                                           {"OFL_FAULT_TIMEOUT", "2.5"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.secret, "s");
  EXPECT_EQ(e.bootstrap_timeout, 5);
  EXPECT_EQ(e.fault_timeout, 2.5);
}

TEST(LaunchEnv, FallsBackToSlurmsVariables) {
  const LaunchEnv e = LaunchEnv::from_map({{"SLURM_PROCID", "5"},
                                           {"SLURM_NTASKS", "8"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_NODELIST", "node[03-06,9]"},
                                           {"OFL_JOB_SECRET", "s"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "node03");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("gpu-[10-11],cpu1"), "gpu-10");
  EXPECT_EQ(first_slurm_host("host"), "host");
}

TEST(LaunchEnv, NamesTheVariableThatIsWrong) {
  expect_error(
      [] {
        LaunchEnv::from_map({{"WORLD_SIZE", "2"}});
      },
      ErrorCode::kInvalidArgument, "RANK (or SLURM_PROCID) must be set");
  expect_error(
      [] {
        LaunchEnv::from_map({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
      },
      ErrorCode::kInvalidArgument, "RANK must be in [0, WORLD_SIZE = 2). However, got 2");
  expect_error(
      [] {
        LaunchEnv::from_map({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
      },
      ErrorCode::kInvalidArgument, "RANK must be an integer. However, got 'x'");
  expect_error(
      [] {
        LaunchEnv::from_map({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
      },
      ErrorCode::kInvalidArgument, "OFL_JOB_SECRET must be set when WORLD_SIZE > 1");
  expect_error(
      [] {
        LaunchEnv::from_map({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}});
      },
      ErrorCode::kInvalidArgument, "MASTER_PORT must be in [1, 65535]");
  EXPECT_EQ(LaunchEnv::from_map({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).secret, "");
}

}  // namespace
}  // namespace ofl::comm
