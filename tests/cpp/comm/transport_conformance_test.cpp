// The conformance suite on the in-process transport: two ranks on two threads.

#include "tests/cpp/comm/transport_conformance.h"

#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "comm/in_process_transport.h"

namespace ofl::testing {
namespace {

TEST(TransportConformance, InProcess) {
  comm::InProcessTransport transport;
  std::barrier<> both(2);
  std::thread other(
      [&] { run_transport_conformance(transport, 1, [&] { both.arrive_and_wait(); }); });
  run_transport_conformance(transport, 0, [&] { both.arrive_and_wait(); });
  other.join();
}

}  // namespace
}  // namespace ofl::testing
