// The conformance suite on the UCX transport: one rank of a 2-process job started by the
// launcher (tests/python/test_multiprocess.py). Skipped when not started by a launcher.

#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/ucx_transport.h"
#include "tests/cpp/comm/transport_conformance.h"

namespace ofl::testing {
namespace {

TEST(TransportConformance, Ucx) {
  if (std::getenv("RANK") == nullptr) GTEST_SKIP() << "start with the launcher, 2 ranks";
  const comm::LaunchEnv env = comm::LaunchEnv::from_environment();
  ASSERT_EQ(env.world_size, 2);
  auto transport = comm::UcxTransport::connect(env);
  run_transport_conformance(*transport, env.rank, [&] { transport->barrier(); });
  transport->leave();
}

}  // namespace
}  // namespace ofl::testing
