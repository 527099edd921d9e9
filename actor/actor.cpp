// The act protocol shared by every actor kind (Note [Register messages] in message.h, Note
// [Acts, pieces and micro-batches] in actor.h). Kinds only supply work().

#include "actor/actor.h"

#include <algorithm>

#include "actor/actor_thread.h"
#include "oneflowlike/common/error.h"

namespace ofl::actor {

Actor::Actor(int64_t id, int64_t rank, std::string name, int task, int priority,
             int acts_per_iteration)
    : id_(id),
      rank_(rank),
      name_(std::move(name)),
      task_(task),
      priority_(priority),
      acts_per_iteration_(acts_per_iteration) {
  OFL_ASSERT(acts_per_iteration_ >= 1);
}

void Actor::finish_setup() {
  num_data_inputs_ = 0;
  for (const InputEdge& in : inputs_) {
    for (int p : in.positions) num_data_inputs_ = std::max(num_data_inputs_, p + 1);
  }
  for (OutputRegister& out : outputs_) {
    out.free_slots = out.num_slots;
    out.unacked.assign(out.num_slots, {});
  }
}

bool Actor::can_act() const {
  if (retired_) return false;
  for (const InputEdge& in : inputs_) {
    if (in.readable.empty()) return false;
  }
  for (const OutputRegister& out : outputs_) {
    if (!out.holding && out.free_slots == 0) return false;
  }
  return true;
}

void Actor::act(ActorHost& host) {
  OFL_ASSERT(can_act()) << name_;
  std::vector<Tensor> inputs(num_data_inputs_);
  for (const InputEdge& in : inputs_) {
    if (in.slots == nullptr) continue;
    const Tensor& t = (*in.slots)[in.readable.front().slot];
    for (int p : in.positions) inputs[p] = t;
  }
  std::vector<Tensor> outputs;
  for (OutputRegister& out : outputs_) {
    if (!out.holding) {  // claim the next slot
      out.holding = true;
      --out.free_slots;
      if (out.fresh) out.slots[out.next_slot] = Tensor::empty(out.shape, out.dtype);
    }
    if (!out.slots.empty()) outputs.push_back(out.slots[out.next_slot]);
  }

  Deferred later;
  later.counts_act = true;
  later.act = acts_;
  Work work = this->work(host, std::move(inputs), std::move(outputs));
  ++acts_;

  std::vector<std::pair<int, int32_t>> kept;
  for (int i = 0; i < static_cast<int>(inputs_.size()); ++i) {
    InputEdge& in = inputs_[i];
    if (++in.uses < in.hold) continue;
    const int32_t slot = in.readable.front().slot;
    in.readable.pop_front();
    in.uses = 0;
    if (in.acked_on_send) continue;
    if (keeps_inputs_until_output_acked() && !in.positions.empty()) {  // the data, not controls
      kept.emplace_back(i, slot);
    } else {
      ack_input(host, in, slot, &later);
    }
  }
  // One entry per act, empty where no piece was let go (a REPEAT view's first m - 1 acts read
  // the once piece it lets go at the last, Note [Repeated views]): each output piece freed
  // releases its act's entry, in order.
  if (keeps_inputs_until_output_acked()) kept_.push_back(std::move(kept));
  for (int o = 0; o < static_cast<int>(outputs_.size()); ++o) {
    OutputRegister& out = outputs_[o];
    if (++out.acts_in_piece < out.emit_every) continue;
    out.acts_in_piece = 0;
    out.holding = false;
    const int32_t slot = out.next_slot;
    out.next_slot = (out.next_slot + 1) % out.num_slots;
    send_ready(host, o, slot, &later);
  }
  if (stream_ == nullptr) {
    if (work) {
      try {
        work();
      } catch (...) {
        failed_act_ = later.act;
        throw;
      }
    }
    finish(host, later);
  } else if (enqueues_ && later.sends.empty() && stream_->enqueues()) {
    // Nothing waits on its end but the count (Note [Acts without events] in act_stream.h).
    stream_->enqueue(std::move(work), ActStream::Origin{this, later.act});
    finish(host, later);
  } else {
    launch(std::move(work), std::move(later));
  }
  on_slot_maybe_free(host);
}

void Actor::launch(Work work, Deferred later) {
  auto error = std::make_shared<std::exception_ptr>();
  later.error = error;
  in_flight_.push_back(std::move(later));
  ActorThread* thread = thread_;
  const ActorMessage done = ActorMessage::act_done({id_, rank_});
  // The stream's thread hands the end back to the actor's: the post orders the write of
  // `error` before the actor reads it.
  stream_->launch(std::move(work), [thread, done, error](std::exception_ptr e) {
    *error = e;
    thread->post(done);
  });
}

void Actor::finish(ActorHost& host, Deferred& done) {
  for (const auto& [output, message] : done.sends) {
    if (output < 0) {
      host.send(message);
    } else {
      announce(host, outputs_[output], message);
    }
  }
  if (done.counts_act) host.count_act(done.act / acts_per_iteration_);
  end_stream_if_done(host);
}

void Actor::send_after_work(ActorHost& host, const ActorMessage& message, bool same_stream,
                            Deferred* later) {
  if (same_stream) {
    host.send(message);
  } else if (later != nullptr) {
    later->sends.emplace_back(-1, message);
  } else if (stream_ != nullptr) {
    // Whoever acknowledged us at its act (it shares our stream) may still be reading what this
    // releases: send it behind that work.
    Deferred fence;
    fence.sends.emplace_back(-1, message);
    launch(nullptr, std::move(fence));
  } else {
    host.send(message);
  }
}

void Actor::send_ready(ActorHost& host, int output, int32_t slot, Deferred* later) {
  OutputRegister& out = outputs_[output];
  std::vector<int64_t>& unacked = out.unacked[slot];
  OFL_ASSERT(unacked.empty()) << name_ << " reuses a slot still being read";
  if (!out.acked_on_send) {
    for (const OutputRegister::Consumer& c : out.consumers) unacked.push_back(c.actor);
  }
  const int64_t piece = out.pieces++;
  for (const OutputRegister::Consumer& c : out.consumers) {
    ActorMessage ready =
        ActorMessage::register_ready({id_, rank_}, {c.actor, c.rank}, out.register_id, slot, piece);
    describe_transfer(&ready);
    if (c.same_stream) {
      announce(host, out, ready);
    } else {
      later->sends.emplace_back(output, ready);
    }
  }
  // Nobody reads it, or the message carried it: free (after sending, which copied the piece).
  // The act's work holds its own handle on the piece, so a dropped one lives until it is done.
  if (unacked.empty()) {
    if (out.drops_pieces) out.slots.at(slot) = Tensor();
    slot_freed(host, out, later);
  }
}

// Every consumer is done with a slot of `out`. Slots free in the order they were filled, so a
// register that releases inputs (SEND, slice views, concats in place) releases the input pieces
// of the oldest act that kept some.
void Actor::slot_freed(ActorHost& host, OutputRegister& out, Deferred* later) {
  ++out.free_slots;
  if (!out.releases_inputs) return;
  OFL_ASSERT(!kept_.empty()) << name_ << " releases an input it does not keep";
  for (const auto& [input, slot] : kept_.front()) ack_input(host, inputs_[input], slot, later);
  kept_.pop_front();
}

void Actor::ack_input(ActorHost& host, InputEdge& edge, int32_t slot, Deferred* later) {
  send_after_work(host,
                  ActorMessage::register_ack({id_, rank_}, {edge.producer, edge.producer_rank},
                                             edge.register_id, slot),
                  edge.producer_same_stream, later);
}

void Actor::on_message(const ActorMessage& message, ActorHost& host) {
  switch (message.kind) {
    case ActorMessage::Kind::kRegisterReady:
    case ActorMessage::Kind::kEndOfStream: {
      auto it = std::find_if(inputs_.begin(), inputs_.end(), [&](const InputEdge& in) {
        return in.register_id == message.register_id;
      });
      OFL_ASSERT(it != inputs_.end())
          << name_ << " got a message for a register it does not read: " << message.to_string();
      if (message.kind == ActorMessage::Kind::kRegisterReady) {
        it->readable.push_back(InputEdge::Piece{message.slot, message.address, message.bytes});
      } else {
        it->ended = true;
        end_stream_if_done(host);
      }
      break;
    }
    case ActorMessage::Kind::kRegisterAck: {
      auto it = std::find_if(outputs_.begin(), outputs_.end(), [&](const OutputRegister& out) {
        return out.register_id == message.register_id;
      });
      OFL_ASSERT(it != outputs_.end())
          << name_ << " got an ack for a register it does not write: " << message.to_string();
      std::vector<int64_t>& unacked = it->unacked.at(message.slot);
      auto who = std::find(unacked.begin(), unacked.end(), message.src_actor);
      OFL_ASSERT(who != unacked.end()) << name_ << " got an unexpected ack " << message.to_string();
      unacked.erase(who);
      if (unacked.empty()) {
        if (it->drops_pieces) it->slots.at(message.slot) = Tensor();
        slot_freed(host, *it, /*later=*/nullptr);
        on_slot_maybe_free(host);
      }
      break;
    }
    case ActorMessage::Kind::kActDone: {
      OFL_ASSERT(!in_flight_.empty()) << name_ << " got act_done with nothing launched";
      Deferred done = std::move(in_flight_.front());
      in_flight_.pop_front();
      if (*done.error) {
        failed_act_ = done.act;
        std::rethrow_exception(*done.error);
      }
      finish(host, done);
      break;
    }
    case ActorMessage::Kind::kDepartureProgress:
    case ActorMessage::Kind::kDeparture:    // TransportSessions takes these (Note [Departures])
    case ActorMessage::Kind::kRunPosition:  // and these (Note [Program positions])
    case ActorMessage::Kind::kRunFailed:    // the runtime takes these (Runtime::on_message)
      OFL_ASSERT(false) << name_ << " got a message meant for the process: " << message.to_string();
      break;
  }
}

// An actor retires when every producer has ended its stream, nothing it read is left over and
// its launched work has finished; it ends its own stream to each consumer.
void Actor::end_stream_if_done(ActorHost& host) {
  if (retired_ || !in_flight_.empty()) return;
  for (const InputEdge& in : inputs_) {
    if (!in.ended || !in.readable.empty()) return;
  }
  retired_ = true;
  for (const OutputRegister& out : outputs_) {
    for (const OutputRegister::Consumer& c : out.consumers) {
      host.send(ActorMessage::end_of_stream({id_, rank_}, {c.actor, c.rank}, out.register_id));
    }
  }
}

std::string Actor::waiting_for(std::vector<int64_t>* waits_on) const {
  std::string waits;
  auto add = [&](const std::string& what) { waits += (waits.empty() ? "" : "; ") + what; };
  if (!in_flight_.empty()) {
    add(str_cat(in_flight_.size(), in_flight_.size() == 1 ? " act" : " acts",
                " launched on stream '", stream_->name(), "' to finish"));
  }
  for (const InputEdge& in : inputs_) {
    if (!in.readable.empty()) continue;
    add(str_cat("a ready ", in.what));
    waits_on->push_back(in.producer);
  }
  for (const OutputRegister& out : outputs_) {
    if (out.holding || out.free_slots > 0) continue;
    std::string who;
    for (int64_t actor : out.unacked[out.next_slot]) {
      for (const OutputRegister::Consumer& c : out.consumers) {
        if (c.actor != actor) continue;
        who += (who.empty() ? "" : ", ") + c.name;
        waits_on->push_back(actor);
      }
    }
    add(str_cat("a free slot of ", out.what, " (", out.num_slots,
                out.num_slots == 1 ? " slot" : " slots", "; not yet acknowledged by ", who, ")"));
  }
  return waits;
}

}  // namespace ofl::actor
