#pragma once
// Transport: how the actor runtime reaches actors of ranks hosted elsewhere. Two
// implementations: InProcessTransport (every rank in one process: the in-process cluster of
// DESIGN.md, for tests and debugging) and, for separate processes and hosts, UCX.
//
// The runtime gives a transport two kinds of traffic: small fixed-size messages (actor register
// messages, kMessageBytes each) and bulk reads of register data, which the receiver pulls from
// the sender's memory (the sender names the address in its message).

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ofl::comm {

/// Room for one actor message; transports move messages as this many bytes.
constexpr size_t kMessageBytes = 64;
using MessageBytes = std::array<std::byte, kMessageBytes>;

/// Note [Small transfers travel with their message]: register pieces of at most this many
/// bytes are copied into the SEND's ready message (send_with_data) instead of being read from
/// the sender's memory. The receiver takes them from there (fetch); the SEND's input is free as
/// soon as the message is sent, so the RECV does not acknowledge them: one message where every
/// other transfer has three (ready, data, acknowledgement). Measured (docs/benchmarks.md): a
/// 4-byte hop between processes 0.45-0.67 us against 0.55-1.58; 4 KiB streams reach 0.97 of
/// ucx_perftest (medians of interleaved runs), against 0.59-0.71 with the acknowledgement.
constexpr size_t kInlineTransferBytes = 4096;

/// Called, on a transport-owned or sender's thread, with each message addressed to a rank the
/// receiving runtime hosts. Must not block.
using MessageHandler = std::function<void(const MessageBytes& message)>;

class Transport {
 public:
  virtual ~Transport() = default;

  /// The transport this one sends through: itself, or for a view of one (a runtime's session,
  /// actor/session_transport.h) the one under it. Runtimes of one process over one network
  /// belong to one job (Note [Communicators kept per process] in actor/communicator_cache.h).
  virtual const Transport* network() const { return this; }

  /// Routes messages for `rank` to `handler` from now on (a runtime hosting `rank` calls it when
  /// it loads). Raises ofl::Error if the rank is already served.
  virtual void serve_rank(int64_t rank, MessageHandler handler) = 0;
  /// Stops routing messages for `rank`; sending to it afterwards raises, as for a rank no
  /// runtime serves.
  virtual void stop_serving_rank(int64_t rank) = 0;

  /// Delivers `message` to the handler serving `dst_rank`. Raises ofl::Error naming the rank if
  /// none serves it.
  virtual void send(int64_t dst_rank, const MessageBytes& message) = 0;

  /// Delivers `message` as send() does, with `bytes` (at most kInlineTransferBytes) at `data`
  /// carried along for transfer `tag`: the receiver's fetch() of `tag` copies them out, in the
  /// order they were sent. `data` may be reused when this returns.
  virtual void send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag,
                              const void* data, size_t bytes) = 0;

  /// Register data, sender side: makes `bytes` at `data` (this process) available to the
  /// receiver of transfer `tag` on `dst_rank`. Does not wait; the sender keeps the buffer
  /// unchanged until the receiver has acknowledged it (the RECV's register_ack).
  virtual void expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) = 0;
  /// Register data, receiver side: copies transfer `tag`'s `bytes` from `src_rank` (exposed at
  /// `address` in that rank's process, or, for at most kInlineTransferBytes, carried by the
  /// message send_with_data sent) into `dst`. Returns when the data is in `dst`; raises
  /// ofl::Error when the sender's rank fails.
  virtual void fetch(int64_t src_rank, uint64_t tag, uint64_t address, void* dst, size_t bytes) = 0;

  /// Makes progress on communication without blocking, if another thread is not doing so
  /// already; returns whether anything happened. Communication threads call it while idle.
  virtual bool progress() { return false; }

  /// Note [Receives posted ahead]: a receiver that knows where transfer `tag`'s next piece will
  /// go (a RECV whose next slot is free) may post the receive before the sender's ready
  /// message; the next fetch() of `tag` into `dst` then completes it. With UCX that saves
  /// the extra copy of an eager message that arrived before its receive. Optional.
  virtual void prepare_fetch(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) {
    (void)src_rank, (void)tag, (void)dst, (void)bytes;
  }

  /// Note [Tagged transfers]: collectives (actor/collective_engine.h) move their pieces as
  /// tagged, non-blocking sends and receives, matched by (receiving rank, tag). Between two
  /// ranks, transfers of one tag match in the order they were started on each side. A send's
  /// buffer stays unchanged, and a receive's untouched by the caller, until test() says done.
  /// Tags are below 2^32 (Note [Collective tags] in oneflowlike/collective.h).
  struct TaggedRequest {
    std::shared_ptr<void> state;  // the transport's
    int64_t peer = -1;
    uint64_t tag = 0;
    size_t bytes = 0;
    bool done = false;
  };
  virtual TaggedRequest send_tagged(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes);
  virtual TaggedRequest receive_tagged(int64_t src_rank, uint64_t tag, void* dst, size_t bytes);
  /// Whether `request` has completed, progressing the transport without blocking. Raises
  /// ofl::Error (kUnavailable) naming the peer when it failed or the peer did.
  virtual bool test(TaggedRequest& request);

  /// Called (on a transport thread) when a rank this process talks to fails: its rank and why.
  /// Transports whose peers cannot fail (in-process) never call it.
  using FaultHandler = std::function<void(int64_t rank, const std::string& why)>;
  virtual void set_fault_handler(FaultHandler handler) { (void)handler; }

  /// Called (on a transport thread) when rank `rank`'s program has ended after running
  /// `iterations` iterations of the receiving runtime (Note [Departures] in
  /// actor/session_transport.h): a runtime still needing it from a later iteration ends at
  /// once, naming it. Transports without sessions never call it.
  using DepartureHandler = std::function<void(int64_t rank, int64_t iterations)>;
  virtual void set_departure_handler(DepartureHandler handler) { (void)handler; }

  /// Note [Program positions] in actor/program_positions.h: the receiving runtime starts a run
  /// exchanging data with `peers`. Returns why it must not ("" when it may): one of them ran
  /// something else at this point. Transports without sessions return "".
  virtual std::string begin_run(const std::vector<int64_t>& peers) {
    (void)peers;
    return {};
  }
  /// Note [Program positions]: the receiving runtime's runs after `iteration` never happen on
  /// some rank (a run failed); its start of one with `peers`, if any, is taken back.
  virtual void abandon_runs_after(int64_t iteration, const std::vector<int64_t>& peers) {
    (void)iteration, (void)peers;
  }
  /// Called (on a transport thread) when a peer of the receiving runtime's latest run turns out
  /// to have run something else at that point, with why; `job` names the runtime's job
  /// in such errors, here and on its peers.
  using PositionHandler = std::function<void(const std::string& why)>;
  virtual void set_position_handler(PositionHandler handler, const std::string& job = "") {
    (void)handler, (void)job;
  }
};

}  // namespace ofl::comm
