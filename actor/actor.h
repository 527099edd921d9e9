#pragma once
// Actor: one task of the plan, run by message passing alone (DESIGN.md, data flow step 4).
//
// An actor reads input registers and writes output registers. It may act when every input has a
// readable piece and every output a writable slot; acting runs the kind's work (a kernel, a
// boxing step, a transfer, ...), then acknowledges the inputs it is done with and announces the
// outputs it filled (Note [Register messages] in message.h). Which ready actor of a thread acts
// first is the thread's choice (actor_thread.h); nothing else orders actors.
//
// Note [Acts, pieces and micro-batches]: with m micro-batches an iteration makes a
// per-micro-batch actor act m times and a once actor once. Where the two meet, one piece of a
// register covers several acts:
//  - a once producer read by a per-micro-batch consumer (REPEAT, UNPACK, a control input): the
//    consumer acts m times on the same piece and acknowledges it after the last (`hold` = m);
//  - a per-micro-batch producer read by once consumers (ACCUMULATE, PACK, a control input):
//    the producer keeps one slot through its m acts and announces it after the last
//    (`emit_every` = m).
// Everywhere else a piece is one act of each side.

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/act_stream.h"
#include "actor/message.h"
#include "actor/plan_index.h"
#include "comm/transport.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

class ActorThread;
class DeviceCollectives;

/// What an actor needs from the runtime around it.
class ActorHost {
 public:
  virtual ~ActorHost() = default;
  /// Delivers a message to its dst_actor, wherever that actor runs.
  virtual void send(const ActorMessage& message) = 0;
  /// How register data reaches other ranks (SEND exposes, RECV fetches).
  virtual comm::Transport& transport() = 0;
  /// This iteration's fed tensors (INPUT), by name.
  virtual const std::map<std::string, Tensor>& inputs() const = 0;
  /// This iteration's piece of input `name` for `rank` when the caller fed pieces
  /// (Runtime::run_local), else null.
  virtual const Tensor* input_piece(const std::string& name, int64_t rank) const = 0;
  /// Counts one act towards the end of `iteration` (an actor fed by another process may act for
  /// the next iteration before this process has finished the current one).
  virtual void count_act(int64_t iteration) = 0;
  /// The GPU communicators of the hosted ranks (Note [Device collectives] in
  /// device_collectives.h); null when the plan has no GPU collective.
  virtual DeviceCollectives* device_collectives() { return nullptr; }
  /// Memory block `id` of `rank` as the plan laid it out (Note [Collective scratch] in
  /// oneflowlike/collective.h); undefined when this host has none.
  virtual Tensor memory_block(int64_t /*rank*/, int64_t /*id*/) const { return Tensor(); }
};

/// One input register of an actor, with the pieces its producer announced and not yet acked.
struct InputEdge {
  struct Piece {
    int32_t slot = 0;
    uint64_t address = 0;  // transfer edges: where the sender's data is
    int64_t bytes = 0;
  };
  int64_t register_id = 0;
  int64_t producer = 0;  // actor id
  int64_t producer_rank = 0;
  bool producer_same_stream = false;  // acks go at the act (Note [Event-gated acts])
  std::string what;                   // for reports: "register 'x' (id 3) of task 'y' (...)"
  int hold = 1;                       // acts per piece (Note [Acts, pieces and micro-batches])
  int uses = 0;                       // acts done on the front piece
  std::deque<Piece> readable;
  bool ended = false;
  // Data registers: the producer's slot tensors (same rank, fixed after load).
  const std::vector<Tensor>* slots = nullptr;
  // Which of the task's inputs (op input order) read this register.
  std::vector<int> positions;
  // A small transfer's pieces came with their messages: nothing to acknowledge (the SEND freed
  // its slot when it sent them).
  bool acked_on_send = false;
};

/// One output register of an actor: its slots and who still reads each.
struct OutputRegister {
  struct Consumer {
    int64_t actor = 0;
    int64_t rank = 0;
    std::string name;          // for reports
    bool same_stream = false;  // ready messages go at the act (Note [Event-gated acts])
  };
  int64_t register_id = 0;
  std::string what;       // for reports
  int emit_every = 1;     // acts per piece (Note [Acts, pieces and micro-batches])
  int acts_in_piece = 0;  // acts into the held slot so far
  int num_slots = 1;
  std::vector<Tensor> slots;  // data registers: one tensor per slot; empty for control edges
  std::vector<std::vector<int64_t>> unacked;  // per slot: consumers yet to acknowledge it
  int next_slot = 0;                          // the slot the next piece goes into
  int free_slots = 1;
  bool holding = false;  // next_slot is taken by a piece still being written
  // Its pieces are the actor's input pieces, released when every consumer has acknowledged
  // them: a SEND's transfer (the RECV reads the SEND's input), a slice view's register and an
  // in-place concat's output (its inputs are written in it).
  bool releases_inputs = false;
  int64_t pieces = 0;  // announced so far
  // A small transfer's register (Note [Small transfers travel with their message] in
  // comm/transport.h): the ready message carries the piece, so the slot is free once it is sent
  // and the RECV does not acknowledge it.
  bool acked_on_send = false;
  // Note [Fetched pieces are handed over] in compiler/physical/in_place_boxing.h: each claimed
  // slot gets new memory of the register's shape and dtype (the OUTPUT task keeps the last).
  bool fresh = false;
  Shape shape;
  DataType dtype = DataType::kFloat32;
  // A slot's tensor is let go once every consumer has acknowledged it (fresh pieces, and
  // Note [Fed pieces are handed in]: the caller's memory is not kept past its iteration).
  bool drops_pieces = false;
  std::vector<Consumer> consumers;
};

class Actor {
 public:
  /// `task` is -1 for actors the runtime adds (the tick).
  Actor(int64_t id, int64_t rank, std::string name, int task, int priority, int acts_per_iteration);
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  int64_t id() const { return id_; }
  int64_t rank() const { return rank_; }
  const std::string& name() const { return name_; }
  int task() const { return task_; }
  /// Among ready actors of one thread the higher priority acts first (later plan position:
  /// backward before forward, Note [Thread schedule] in actor_thread.h).
  int priority() const { return priority_; }
  int acts_per_iteration() const { return acts_per_iteration_; }
  int64_t acts() const { return acts_; }
  bool retired() const { return retired_; }

  std::vector<InputEdge>& inputs() { return inputs_; }
  std::vector<OutputRegister>& outputs() { return outputs_; }
  const std::vector<InputEdge>& inputs() const { return inputs_; }
  const std::vector<OutputRegister>& outputs() const { return outputs_; }

  ActorThread* thread() const { return thread_; }
  void set_thread(ActorThread* thread) { thread_ = thread; }
  /// Where the work runs; null: on the actor's thread, within the act (Note [Event-gated acts]
  /// in act_stream.h).
  ActStream* stream() const { return stream_; }
  void set_stream(ActStream* stream) { stream_ = stream; }
  /// false: every act is launched with a callback, none only enqueued (RuntimeOptions::
  /// event_every_act).
  void set_enqueues(bool enqueues) { enqueues_ = enqueues; }
  /// Acts launched on the stream that have not finished yet.
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  /// The thread's bookkeeping: whether the actor sits in its ready queue.
  bool queued = false;

  /// Called once all edges are added: sizes the kernel's input list.
  void finish_setup();

  /// Every input has a readable piece and every output a writable slot.
  bool can_act() const;
  /// One act: the kind's work, then acks and ready messages. Requires can_act().
  void act(ActorHost& host);
  /// Applies a register message addressed to this actor.
  void on_message(const ActorMessage& message, ActorHost& host);

  /// The iteration of the next act.
  int64_t iteration() const { return acts_ / acts_per_iteration_; }
  /// The micro-batch of the next act (0 for once actors).
  int micro_batch() const { return static_cast<int>(acts_ % acts_per_iteration_); }
  /// The act whose work threw (it may have finished on its stream after later acts were
  /// made), else the next act: what a failure report names.
  int64_t failed_act() const { return failed_act_ >= 0 ? failed_act_ : acts_; }

  /// For the watchdog: what the actor waits for, or "" when it could act. Names registers and
  /// the actors they wait on; `waits_on` gets those actors' ids.
  std::string waiting_for(std::vector<int64_t>* waits_on) const;

 protected:
  /// The data work of an act, which runs on the actor's stream when it has one.
  using Work = std::function<void()>;
  /// The kind's act on the current pieces: input tensors by op input position (data inputs
  /// only), output tensors of the slots being written. Bookkeeping happens here, on the actor's
  /// thread; what touches the data is returned (null: nothing), with every value it needs from
  /// the actor captured, since the actor may act again before it runs.
  virtual Work work(ActorHost& host, std::vector<Tensor> inputs, std::vector<Tensor> outputs) = 0;
  /// SEND keeps its input until the receiver has read it (true): the input is acked when the
  /// output register marked releases_inputs is. So do slice views and concats in place. Others
  /// ack after acting.
  virtual bool keeps_inputs_until_output_acked() const { return false; }
  /// The address and size a transfer's ready message carries (SEND).
  virtual void describe_transfer(ActorMessage* /*ready*/) const {}
  /// Sends a ready message for `out` (a SEND sends a small transfer's, `out.acked_on_send`,
  /// with its piece; its control registers' go as usual).
  virtual void announce(ActorHost& host, const OutputRegister& out, const ActorMessage& ready) {
    (void)out;
    host.send(ready);
  }
  /// Called after each act and each ack that frees a slot (RECV posts its next receive).
  virtual void on_slot_maybe_free(ActorHost& /*host*/) {}
  /// The input piece the act reads, for kinds that read remote data (RECV).
  const InputEdge::Piece& front_piece(int input) const { return inputs_[input].readable.front(); }

 private:
  // What an act leaves for when its work has finished (Note [Event-gated acts]).
  struct Deferred {
    // In the order the act made them: (output, ready) goes through announce(), (-1, message)
    // is sent as it is. The order matters: a SEND's small piece leaves with its announcement,
    // and only then may the ack that releases its input go.
    std::vector<std::pair<int, ActorMessage>> sends;
    bool counts_act = false;                    // an act, not a fence
    int64_t act = 0;                            // its number
    std::shared_ptr<std::exception_ptr> error;  // what the work threw, set by the stream
  };
  void send_ready(ActorHost& host, int output, int32_t slot, Deferred* later);
  void ack_input(ActorHost& host, InputEdge& edge, int32_t slot, Deferred* later);
  // Sends `message` now when its receiver shares the stream, into `later` when an act is being
  // made, else behind everything launched so far (a fence).
  void send_after_work(ActorHost& host, const ActorMessage& message, bool same_stream,
                       Deferred* later);
  void launch(Work work, Deferred later);
  void finish(ActorHost& host, Deferred& done);
  void slot_freed(ActorHost& host, OutputRegister& out, Deferred* later);
  void end_stream_if_done(ActorHost& host);

  int64_t id_;
  int64_t rank_;
  std::string name_;
  int task_;
  int priority_;
  int acts_per_iteration_;
  int64_t acts_ = 0;
  int64_t failed_act_ = -1;
  bool retired_ = false;
  ActorThread* thread_ = nullptr;
  ActStream* stream_ = nullptr;
  bool enqueues_ = true;
  std::deque<Deferred> in_flight_;  // launched, oldest first
  std::vector<InputEdge> inputs_;
  std::vector<OutputRegister> outputs_;
  int num_data_inputs_ = 0;  // how many op inputs the kernel reads (max position + 1)
  // Input pieces (input, slot) kept past an act, per act, oldest first: acked when the output
  // piece of that act is (SEND, slice views, concats in place).
  std::deque<std::vector<std::pair<int, int32_t>>> kept_;
};

}  // namespace ofl::actor
