#pragma once
// What the UCX transport's source files share (comm/ucx_transport.cpp: set-up, progress and
// faults; ucx_bootstrap.cpp: the bootstrap; ucx_messages.cpp: active messages;
// ucx_tagged.cpp: tagged transfers). Internal to the transport: nothing outside comm/
// includes it.

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/ucx_transport.h"

namespace ofl::comm {

inline constexpr const char* kUcxTag = "[ucx] ";

inline std::string hostname() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Sends still in flight, per transport: its progress thread does not sleep while there are any.
struct UcxOutstanding {
  std::atomic<int64_t> count{0};
};
using Outstanding = UcxOutstanding;

// Which transport and which AM id a registered handler is for (the callback is not told).
struct HandlerArg {
  UcxTransport* self;
  uint16_t id;
};

// Which rank an endpoint leads to, for its error callback (-1: a connection still unnamed).
struct EndpointArg {
  UcxTransport* self;
  int64_t rank;
};

// The handler and endpoint arguments the callbacks get; they live as long as the transport.
struct UcxTransport::CallbackArgs {
  std::vector<std::unique_ptr<HandlerArg>> handlers;
  std::vector<std::unique_ptr<EndpointArg>> endpoints;
  std::mutex mu;

  EndpointArg* endpoint(UcxTransport* t, int64_t rank) {
    std::lock_guard<std::mutex> lock(mu);
    endpoints.push_back(std::make_unique<EndpointArg>(EndpointArg{t, rank}));
    return endpoints.back().get();
  }
};

/// The generic datatype that packs a piece from its register slot (Note [Pieces packed by us]
/// in ucx_messages.cpp) into *datatype.
ucs_status_t create_piece_datatype(ucp_datatype_t* datatype);

}  // namespace ofl::comm
