#pragma once
// ActorMessage: the only thing actors send each other. A fixed-size, trivially copyable struct,
// so a transport moves it as bytes (comm::kMessageBytes) between threads, processes and hosts.
//
// Note [Register messages]: a producer that filled a slot of a register sends kRegisterReady
// to each consumer; a consumer done with the slot sends kRegisterAck back. The slot is
// writable again when every consumer has acknowledged it, so a register's slot count
// (register_num) bounds how far a producer runs ahead: that is the back-pressure, and the
// pipelining. kEndOfStream tells a consumer its producer will send nothing more; an actor
// retires once every producer has ended its stream, and passes the end on to its consumers.
//
// Registers here include the virtual ones the runtime adds to the plan's: control edges
// (no data), the tick's edge to each source, and the SEND -> RECV transfer edge, whose ready
// message carries the address of the SEND's input slot for the receiver to read from.

#include <cstdint>
#include <string>
#include <type_traits>

#include "comm/transport.h"

namespace ofl::actor {

struct ActorMessage {
  // kDepartureProgress, kDeparture and kRunPosition go between processes, not actors: Notes
  // [Departures] in actor/session_transport.h and [Program positions] in actor/program_positions.h.
  enum class Kind : int16_t {
    kRegisterReady = 0,
    kRegisterAck = 1,
    kEndOfStream = 2,
    kDepartureProgress = 3,
    kDeparture = 4,
    // From an actor's stream to the actor: its oldest launched act has finished (Note
    // [Event-gated acts] in actor/act_stream.h). Never leaves the process.
    kActDone = 5,
    // Between the runtimes of one session: the sender's run failed (Note [Failed runs across
    // processes] in actor/runtime.cpp).
    kRunFailed = 6,
    // Between processes: the sender starts its run at a program position (Note [Program
    // positions] in actor/program_positions.h).
    kRunPosition = 7,
  };

  Kind kind = Kind::kRegisterReady;
  int16_t slot = 0;         // which slot of the register (PlanIndex bounds register_num)
  uint32_t session = 0;     // which runtime of the receiving process (SessionTransport)
  int32_t src_rank = 0;     // rank of the sender
  int32_t dst_rank = 0;     // rank of the receiver: how transports route the message
  int64_t src_actor = 0;    // task id of the sender (or a virtual actor id)
  int64_t dst_actor = 0;    // task id of the receiver
  int64_t register_id = 0;  // plan register id, or a virtual register id
  int64_t piece = 0;        // how many pieces the producer emitted before this one
  uint64_t address = 0;     // transfer ready: where the data is, in the sender's process
  int64_t bytes = 0;        // transfer ready: how much of it

  /// An endpoint of a message: an actor and the rank it runs on.
  struct Endpoint {
    int64_t actor = 0;
    int64_t rank = 0;
  };
  static ActorMessage register_ready(Endpoint src, Endpoint dst, int64_t register_id, int32_t slot,
                                     int64_t piece);
  static ActorMessage register_ack(Endpoint src, Endpoint dst, int64_t register_id, int32_t slot);
  static ActorMessage end_of_stream(Endpoint src, Endpoint dst, int64_t register_id);
  /// Note [Departures]: `src_rank`'s program has ended after `iterations` iterations of the
  /// runtime of `session` (kDepartureProgress, one per session), and it ran no other
  /// (kDeparture, after them).
  static ActorMessage departure_progress(int64_t src_rank, int64_t dst_rank, uint32_t session,
                                         int64_t iterations);
  static ActorMessage departure(int64_t src_rank, int64_t dst_rank);
  static ActorMessage act_done(Endpoint actor);
  /// Note [Failed runs across processes]: `src_rank`'s run of iteration `iteration` failed with
  /// an error of `code` (an ErrorCode).
  static ActorMessage run_failed(int64_t src_rank, int64_t dst_rank, int64_t iteration,
                                 int64_t code);
  /// Note [Program positions] in actor/program_positions.h: `src_rank` starts its run
  /// `iteration` (in register_id) of `session` as its run `position` (from 0, in piece)
  /// exchanging data with `dst_rank`; an `answer` (slot 1) to another rank's message is not
  /// answered.
  static ActorMessage run_position(int64_t src_rank, int64_t dst_rank, int64_t position,
                                   uint32_t session, int64_t iteration, bool answer);

  /// "register_ready{slot=0 src_actor=3 dst_actor=4 ...}": every field, from one list.
  std::string to_string() const;
};

static_assert(std::is_trivially_copyable_v<ActorMessage>);
static_assert(sizeof(ActorMessage) <= comm::kMessageBytes);

const char* message_kind_name(ActorMessage::Kind kind);

/// A message as the bytes transports move, and back.
comm::MessageBytes to_bytes(const ActorMessage& message);
ActorMessage from_bytes(const comm::MessageBytes& bytes);

}  // namespace ofl::actor
