#pragma once
// The transport conformance suite: what the actor runtime relies on from any comm::Transport,
// checked the same way against the in-process transport (two ranks on two threads,
// transport_conformance_test.cpp) and the UCX transport (two processes started by the
// launcher, ucx_conformance_main.cpp, run by tests/python/test_multiprocess.py).
//
// Both ranks call run_transport_conformance at once; rank 0 and rank 1 play both parts of
// each check. `barrier` waits until both ranks reach it.

#include <cstdint>
#include <functional>

#include "comm/transport.h"

namespace ofl::testing {

/// Runs every check as `rank` (0 or 1) of a 2-rank job; failures are GoogleTest failures.
void run_transport_conformance(comm::Transport& transport, int64_t rank,
                               const std::function<void()>& barrier);

}  // namespace ofl::testing
