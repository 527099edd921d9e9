#pragma once
// LaunchEnv: where this process stands in a job, read from the environment the launcher
// (python -m oneflowlike.distributed.launch) sets, or that Slurm sets when `srun` starts ranks
// directly.

#include <cstdint>
#include <map>
#include <string>

namespace ofl::comm {

struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string secret;             // OFL_JOB_SECRET: connections without it are refused
  double bootstrap_timeout = 60;  // OFL_BOOTSTRAP_TIMEOUT, seconds
  double fault_timeout = 10;      // OFL_FAULT_TIMEOUT, seconds

  /// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, OFL_JOB_SECRET,
  /// OFL_BOOTSTRAP_TIMEOUT and OFL_FAULT_TIMEOUT; where RANK / WORLD_SIZE / LOCAL_RANK /
  /// MASTER_ADDR are absent, Slurm's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / the first
  /// host of SLURM_STEP_NODELIST (or SLURM_NODELIST, SLURM_JOB_NODELIST). OFL_JOB_SECRET is
  /// required when WORLD_SIZE > 1. Raises ofl::Error naming the variable that is missing or
  /// malformed.
  static LaunchEnv from_environment();
  /// The same from a given map (tests).
  static LaunchEnv from_map(const std::map<std::string, std::string>& env);
};

/// The first host of a Slurm node list: "node[03-05,9]" -> "node03", "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ofl::comm
