// The conformance suite on the UCX transport: one rank of a 2-process job started by the
// launcher (tests/python/test_multiprocess.py). Skipped when not started by a launcher.
// UcxFaults runs alone (its own launch, --gtest_filter=UcxFaults.*): it leaves the job's
// transports unusable.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/ucx_transport.h"
#include "oneflowlike/common/error.h"
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

// Rank 0 stops (SIGSTOP) while rank 1 streams small transfers to it. Rank 1's queue to it fills,
// the send waits, the heartbeats find rank 0 failed and the send gives up, naming it, within the
// fault timeout. The send's piece lives on a page of its own, unmapped once the send has given
// up; then rank 0 resumes and drains its queue: a send UCX still held would read the unmapped
// page and crash rank 1 (send_with_data closes the endpoint by force so that none is left).
TEST(UcxFaults, SmallTransfersToAStoppedRankGiveUpAndLetGoOfTheirPiece) {
  if (std::getenv("OFL_TEST_STOPPED_PEER") == nullptr) {
    GTEST_SKIP() << "run alone by tests/python/test_multiprocess.py (OFL_TEST_STOPPED_PEER=1)";
  }
  using Clock = std::chrono::steady_clock;
  const comm::LaunchEnv env = comm::LaunchEnv::from_environment();
  ASSERT_EQ(env.world_size, 2);
  auto transport = comm::UcxTransport::connect(env);
  std::atomic<int64_t> stopped_pid{0};
  std::atomic<int64_t> received{0};
  transport->serve_rank(env.rank, [&](const comm::MessageBytes& message) {
    int64_t pid = 0;
    std::memcpy(&pid, message.data(), sizeof(pid));
    if (pid > 0) stopped_pid.store(pid);
    received.fetch_add(1);
  });
  transport->barrier();
  // First a few pieces that arrive, so the endpoint is in use when rank 0 stops.
  constexpr int kFirst = 16;
  constexpr size_t kBytes = comm::kInlineTransferBytes;
  std::vector<char> first(kBytes, 1);
  for (uint64_t tag = 1; tag <= kFirst; ++tag) {
    if (env.rank == 1)
      transport->send_with_data(0, comm::MessageBytes{}, tag, first.data(), kBytes);
    if (env.rank == 0) {
      while (received.load() < static_cast<int64_t>(tag)) transport->progress();
      transport->fetch(1, tag, 0, first.data(), kBytes);
    }
  }
  transport->barrier();
  if (env.rank == 0) {
    comm::MessageBytes message{};
    const int64_t pid = getpid();
    std::memcpy(message.data(), &pid, sizeof(pid));
    transport->send(1, message);
    raise(SIGSTOP);  // until rank 1 has given up on this rank
    transport->stop_serving_rank(0);
    transport->close();
    return;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (stopped_pid.load() == 0 && Clock::now() < deadline) transport->progress();
  ASSERT_NE(stopped_pid.load(), 0) << "rank 0 never sent its pid";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 has stopped

  void* piece = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(piece, MAP_FAILED);
  std::memset(piece, 7, kBytes);
  const auto start = Clock::now();
  int64_t sent = 0;
  std::string error;
  try {
    for (uint64_t tag = kFirst + 1;; ++tag) {
      transport->send_with_data(0, comm::MessageBytes{}, tag, piece, kBytes);
      ++sent;
    }
  } catch (const Error& e) {
    error = e.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(munmap(piece, kBytes), 0);
  ASSERT_EQ(kill(static_cast<pid_t>(stopped_pid.load()), SIGCONT), 0);

  EXPECT_GT(sent, 0);
  // The send that waited gave up (not a later one refused up front).
  EXPECT_NE(error.find(std::to_string(kFirst + sent + 1) + " to rank 0. However, that rank failed"),
            std::string::npos)
      << error;
  EXPECT_LT(seconds, env.fault_timeout + 5) << error;
  const auto drained = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < drained) transport->progress();  // rank 0 drains its queue meanwhile
  EXPECT_NE(transport->faults().find("rank 0"), std::string::npos) << transport->faults();
  transport->stop_serving_rank(1);
  transport->close();
}

}  // namespace
}  // namespace ofl::testing
