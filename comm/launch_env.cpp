#include "comm/launch_env.h"

#include <cstdlib>
#include <optional>

#include "oneflowlike/common/error.h"

extern char** environ;

namespace ofl::comm {

namespace {

constexpr const char* kTag = "[launch_env] ";

std::optional<std::string> lookup(const std::map<std::string, std::string>& env,
                                  const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t parse_int(const std::string& name, const std::string& value) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OFL_CHECK(used == value.size() && used > 0, kTag, name, " must be an integer. However, got '",
            value, "'.");
  return v;
}

double parse_seconds(const std::string& name, const std::string& value) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OFL_CHECK(used == value.size() && used > 0 && v > 0, kTag, name,
            " must be a positive number of seconds. However, got '", value, "'.");
  return v;
}

// The first of `names` that is set, as (name, value).
std::optional<std::pair<std::string, std::string>> first_of(
    const std::map<std::string, std::string>& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto v = lookup(env, name)) return std::make_pair(std::string(name), *v);
  }
  return std::nullopt;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to a comma outside brackets.
  std::string entry;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    entry += c;
  }
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  // "node[03-05,9]": the prefix and the first number of the range list, zero padding kept.
  std::string first = entry.substr(open + 1);
  const size_t end = first.find_first_of(",-]");
  return entry.substr(0, open) + first.substr(0, end);
}

LaunchEnv LaunchEnv::from_map(const std::map<std::string, std::string>& env) {
  LaunchEnv e;
  auto rank = first_of(env, {"RANK", "SLURM_PROCID"});
  auto world = first_of(env, {"WORLD_SIZE", "SLURM_NTASKS"});
  OFL_CHECK(rank.has_value(), kTag,
            "RANK (or SLURM_PROCID) must be set: start ranks with python -m "
            "oneflowlike.distributed.launch or srun. However, neither is set.");
  OFL_CHECK(world.has_value(), kTag,
            "WORLD_SIZE (or SLURM_NTASKS) must be set: start ranks with python -m "
            "oneflowlike.distributed.launch or srun. However, neither is set.");
  e.rank = parse_int(rank->first, rank->second);
  e.world_size = parse_int(world->first, world->second);
  OFL_CHECK(e.world_size >= 1, kTag, world->first, " must be at least 1. However, got ",
            e.world_size, ".");
  OFL_CHECK(e.rank >= 0 && e.rank < e.world_size, kTag, rank->first, " must be in [0, ",
            world->first, " = ", e.world_size, "). However, got ", e.rank, ".");
  if (auto local = first_of(env, {"LOCAL_RANK", "SLURM_LOCALID"})) {
    e.local_rank = parse_int(local->first, local->second);
  }
  if (auto addr = lookup(env, "MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (auto nodes =
                 first_of(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"})) {
    e.master_addr = first_slurm_host(nodes->second);
  }
  if (auto port = lookup(env, "MASTER_PORT")) {
    const int64_t p = parse_int("MASTER_PORT", *port);
    OFL_CHECK(p > 0 && p < 65536, kTag, "MASTER_PORT must be in [1, 65535]. However, got ", p, ".");
    e.master_port = static_cast<int>(p);
  }
  if (auto secret = lookup(env, "OFL_JOB_SECRET")) e.secret = *secret;
  // As oneflowlike.distributed.env: without a secret any process could join the job.
  OFL_CHECK(e.world_size == 1 || !e.secret.empty(), kTag,
            "OFL_JOB_SECRET must be set when WORLD_SIZE > 1, to the same value on every rank. "
            "However, it is missing (world size ",
            e.world_size,
            "). HINT: the launcher sets it; "
            "under srun, export OFL_JOB_SECRET=$(python3 -c 'import secrets; "
            "print(secrets.token_hex(16))') before srun.");
  if (auto t = lookup(env, "OFL_BOOTSTRAP_TIMEOUT")) {
    e.bootstrap_timeout = parse_seconds("OFL_BOOTSTRAP_TIMEOUT", *t);
  }
  if (auto t = lookup(env, "OFL_FAULT_TIMEOUT")) {
    e.fault_timeout = parse_seconds("OFL_FAULT_TIMEOUT", *t);
  }
  return e;
}

LaunchEnv LaunchEnv::from_environment() {
  std::map<std::string, std::string> env;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string kv = *p;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return from_map(env);
}

}  // namespace ofl::comm
