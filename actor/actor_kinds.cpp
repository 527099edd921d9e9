// The work of each actor kind. Everything here runs on the actor's thread with the pieces the
// act protocol (actor.cpp) claimed: inputs readable, outputs writable.

#include "actor/actor_kinds.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "actor/collective_engine.h"
#include "actor/device_collectives.h"
#include "actor/pieces.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/plan_task.h"

namespace ofl::actor {

namespace {

using TaskInfo = PlanIndex::TaskInfo;

// Note [Transfer actor ids] in the header.
int64_t actor_id(const proto::TaskProto& task) {
  switch (task.kind()) {
    case proto::TaskProto::SEND:
      return kSendActorBase + task.transfer_id();
    case proto::TaskProto::RECV:
      return kRecvActorBase + task.transfer_id();
    default:
      return task.id();
  }
}

// Base of the kinds that run a plan task: keeps the task and plan for the work.
class TaskActor : public Actor {
 public:
  TaskActor(const PlanIndex& index, int task, int priority)
      : Actor(actor_id(index.task(task).proto), index.task(task).proto.rank(),
              index.describe_task(task), task, priority,
              index.per_micro(task) ? index.micro_batches() : 1),
        index_(index),
        info_(index.task(task)) {}

 protected:
  const PlanIndex& index_;
  const TaskInfo& info_;
};

class TickActor final : public Actor {
 public:
  TickActor(int64_t id, int64_t rank)
      : Actor(id, rank, str_cat("tick of rank ", rank), -1, /*priority=*/-1,
              /*acts_per_iteration=*/1) {}

 private:
  Work work(ActorHost&, std::vector<Tensor>, std::vector<Tensor>) override { return nullptr; }
};

class ComputeActor final : public TaskActor {
 public:
  ComputeActor(const PlanIndex& index, int task, int priority, Device device)
      : TaskActor(index, task, priority) {
    const size_t bytes = kernel_temp_bytes(index, task);
    if (bytes > 0) {
      temp_ = Tensor::empty(Shape{static_cast<int64_t>(bytes)}, DataType::kInt8, device);
    }
  }

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    // Note [Micro-batches] in plan.proto: random ops draw stream iteration * m + micro-batch.
    const uint64_t random_stream =
        static_cast<uint64_t>(iteration() * index_.micro_batches() + micro_batch());
    void* temp = temp_.defined() ? temp_.raw_data() : nullptr;
    const size_t temp_bytes = temp_.defined() ? static_cast<size_t>(temp_.nbytes()) : 0;
    return
        [&info = info_, inputs = std::move(inputs), outputs = std::move(outputs), random_stream,
         temp, temp_bytes] { run_kernel(info, inputs, outputs, random_stream, temp, temp_bytes); };
  }
  Tensor temp_;
};

class InputActor final : public TaskActor {
 public:
  InputActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority),
        handed_in_(index.reg(info_.outputs.at(0)).proto.handed_in()) {}

 private:
  // The fed tensors stay alive until the iteration's last act has finished. A register handed
  // in (Note [Fed pieces are handed in] in compiler/physical/in_place_boxing.h) is the caller's
  // piece itself where it fits, otherwise new memory the feed is copied into.
  Work work(ActorHost& host, std::vector<Tensor>, std::vector<Tensor> outputs) override {
    const Tensor* piece = host.input_piece(logical_op_of(info_.proto), rank());
    if (handed_in_) {
      OutputRegister& out = this->outputs()[0];
      const PlanIndex::RegisterInfo& reg = index_.reg(info_.outputs[0]);
      if (piece != nullptr && piece->shape() == reg.shape && piece->dtype() == reg.dtype) {
        out.slots[out.next_slot] = *piece;
        return nullptr;
      }
      out.slots[out.next_slot] = Tensor::empty(reg.shape, reg.dtype);
      outputs[0] = out.slots[out.next_slot];
    }
    if (piece != nullptr) {
      return [piece, out = outputs[0]] {
        copy_region(*piece, whole_region(piece->shape()), out, whole_region(out.shape()));
      };
    }
    return [&index = index_, task = task(), fed = &host.inputs(), out = outputs[0]] {
      feed_input_piece(index, task, *fed, out);
    };
  }
  bool handed_in_;
};

class VariableActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  // The persistent register holds the value across iterations; acting only announces it.
  Work work(ActorHost&, std::vector<Tensor>, std::vector<Tensor>) override { return nullptr; }
};

class OutputActor final : public TaskActor {
 public:
  OutputActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority),
        handed_over_(index.reg(info_.inputs.at(0)).proto.fresh_each_piece() ||
                     index.reg(info_.inputs.at(0)).proto.donated()) {}
  Tensor take(int64_t iteration) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fetched_.find(iteration);
    if (it == fetched_.end()) return Tensor();
    Tensor t = it->second;
    fetched_.erase(it);
    return t;
  }
  const Tensor& last() const { return last_; }

 private:
  // A snapshot: a later in-place update must not change what was fetched, unless the piece is
  // new memory nobody writes again (Note [Fetched pieces are handed over] in
  // compiler/physical/in_place_boxing.h) or memory the caller gave up (Note [Donated pieces]). Kept
  // by iteration: fed by another process, the sink may act for the next one before run() collects
  // this one.
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor>) override {
    return [this, in = inputs[0], iteration = iteration(), handed_over = handed_over_] {
      Tensor snapshot = handed_over ? in : in.clone();
      std::lock_guard<std::mutex> lock(mu_);
      fetched_[iteration] = snapshot;
      last_ = snapshot;
    };
  }
  bool handed_over_;
  std::mutex mu_;
  std::map<int64_t, Tensor> fetched_;  // GUARDED_BY(mu_)
  Tensor last_;                        // GUARDED_BY(mu_); read between iterations
};

// A view (Note [Slice views] in compiler/physical/in_place_boxing.h) hands out the region of the
// input piece in place and keeps the piece until the view's consumers are done with it.
class SliceActor final : public TaskActor {
 public:
  SliceActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority), view_(info_.proto.view()) {
    if (view_) {
      const PlanIndex::RegisterInfo& in = index.reg(info_.inputs[0]);
      view_offset_ = *contiguous_offset(in.shape, info_.regions[0]) *
                     static_cast<int64_t>(dtype_size(in.dtype));
    }
  }

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    if (!view_ && info_.kernel != nullptr) {  // on a GPU: the slice op's kernel
      return [&info = info_, in = inputs[0], out = outputs[0]] {
        run_kernel(info, {in}, {out}, /*random_stream=*/0, nullptr, 0);
      };
    }
    if (!view_) {
      return [&region = info_.regions[0], in = inputs[0], out = outputs[0]] {
        copy_region(in, region, out, whole_region(out.shape()));
      };
    }
    OutputRegister& out = this->outputs()[0];
    const PlanIndex::RegisterInfo& reg = index_.reg(info_.outputs[0]);
    out.slots[out.next_slot] = view_of_bytes(inputs[0], view_offset_, reg.shape, reg.dtype);
    return nullptr;
  }
  bool keeps_inputs_until_output_acked() const override { return view_; }
  bool view_;
  int64_t view_offset_ = 0;  // bytes into the input piece
};

class AddActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    if (info_.kernel == nullptr) {
      return [inputs = std::move(inputs), out = outputs[0]] { sum_into(inputs, out); };
    }
    // On a GPU: the add op's kernel, input after input (sum_into's order and roundings).
    return [&info = info_, inputs = std::move(inputs), out = outputs[0]] {
      if (inputs.size() == 1) {
        out.copy_from(inputs[0]);
        return;
      }
      run_kernel(info, {inputs[0], inputs[1]}, {out}, /*random_stream=*/0, nullptr, 0);
      for (size_t k = 2; k < inputs.size(); ++k) {
        run_kernel(info, {out, inputs[k]}, {out}, /*random_stream=*/0, nullptr, 0);
      }
    };
  }
};

// In place (Note [Concats in place] in compiler/physical/in_place_boxing.h) the inputs'
// producers wrote the pieces into the output already; the actor keeps them until the output's
// consumers are done.
class ConcatActor final : public TaskActor {
 public:
  ConcatActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority),
        tiles_(regions_tile(info_.regions, index.reg(info_.outputs[0]).shape)),
        in_place_(info_.proto.in_place()) {}

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    if (in_place_) return nullptr;
    return
        [&regions = info_.regions, tiles = tiles_, inputs = std::move(inputs), out = outputs[0]] {
          if (!tiles) fill(out, 0.0);  // the regions leave parts of the output out
          for (size_t i = 0; i < inputs.size(); ++i) {
            copy_region(inputs[i], whole_region(inputs[i].shape()), out, regions[i]);
          }
        };
  }
  bool keeps_inputs_until_output_acked() const override { return in_place_; }
  bool tiles_;
  bool in_place_;
};

class ZerosActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  Work work(ActorHost&, std::vector<Tensor>, std::vector<Tensor> outputs) override {
    return [out = outputs[0]] { fill(out, 0.0); };
  }
};

// COPY and REPEAT: the same bytes into the output slot (a REPEAT that is no view copies so that
// a micro-batch writing its input in place cannot change the once value); COPY_H2D and
// COPY_D2H: the same
// between a rank's host and GPU memory (Note [Devices in a plan]). On the GPU's event-gated
// stream a host/GPU copy is queued like a kernel (cuda::copy_queued): its readers, and the
// producer waiting for the input's release, hear of it only once the stream has run it (Note
// [Event-gated acts]), and from the rank's pinned host block (Note [Pinned host blocks]) it
// overlaps the host's work. Without a stream (deterministic mode) it returns once done.
// A COPY marked a view (Note [Slice views]; on the host or a GPU) hands out the input piece under
// the output's shape and keeps it until the consumers are done, as a SLICE view does; a REPEAT
// view (Note [Repeated views]) hands out the once piece every micro-batch and lets it go after
// the last micro-batch's readers are done.
class CopyActor final : public TaskActor {
 public:
  CopyActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority),
        view_(info_.proto.view()),
        host_gpu_(info_.proto.kind() == proto::TaskProto::COPY_H2D ||
                  info_.proto.kind() == proto::TaskProto::COPY_D2H) {}

 private:
  // -1 for host memory (the CPU's, or a simulated GPU's), else the GPU (cuda::copy's convention).
  static int cuda_index(const Tensor& t) {
    return in_host_memory(t.device()) ? -1 : t.device().index;
  }
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    if (!view_ && host_gpu_ && stream() != nullptr &&
        (cuda_index(inputs[0]) >= 0 || cuda_index(outputs[0]) >= 0)) {
      return [in = inputs[0], out = outputs[0]] {
        cuda::copy_queued(out.raw_data(), cuda_index(out), in.raw_data(), cuda_index(in),
                          out.nbytes());
      };
    }
    if (!view_) return [in = inputs[0], out = outputs[0]] { out.copy_from(in); };
    OutputRegister& out = this->outputs()[0];
    const PlanIndex::RegisterInfo& reg = index_.reg(info_.outputs[0]);
    out.slots[out.next_slot] = view_of_bytes(inputs[0], 0, reg.shape, reg.dtype);
    return nullptr;
  }
  bool keeps_inputs_until_output_acked() const override { return view_; }
  bool view_;
  bool host_gpu_;
};

// The micro-batch kinds run on the host or on a GPU (Note [Micro-batch tasks on a GPU] in
// compiler/physical/expansion.h): their copies are Tensor::copy_from, a copy queued on the GPU's
// stream there, and the sum on a GPU is the add op's kernel, queued likewise.

// Rows [k * r0, (k + 1) * r0) of the whole batch for micro-batch k.
class UnpackActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    return [in = inputs[0], out = outputs[0], k = micro_batch()] {
      out.copy_from(
          view_of_bytes(in, k * static_cast<int64_t>(out.nbytes()), out.shape(), out.dtype()));
    };
  }
};

// The running sum lives in the output slot, held through the m acts.
class AccumulateActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    return [&info = info_, in = inputs[0], out = outputs[0], first = micro_batch() == 0] {
      if (first) {
        out.copy_from(in);
      } else if (info.kernel != nullptr) {  // on a GPU: out = out + in
        run_kernel(info, {out, in}, {out}, /*random_stream=*/0, nullptr, 0);
      } else {
        add_region(in, whole_region(in.shape()), out, whole_region(in.shape()));
      }
    };
  }
};

// Row k of (m, *shape) from micro-batch k.
class PackActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  Work work(ActorHost&, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    return [in = inputs[0], out = outputs[0], k = micro_batch()] {
      view_of_bytes(out, k * static_cast<int64_t>(in.nbytes()), in.shape(), in.dtype())
          .copy_from(in);
    };
  }
};

// SEND moves nothing itself: its ready message tells the RECV where the input slot is, and it
// keeps that slot until the RECV has read it (consumer pull). A small piece goes inside the
// ready message instead, and the slot is free once that is sent (Note [Small transfers travel
// with their message] in comm/transport.h).
class SendActor final : public TaskActor {
 public:
  using TaskActor::TaskActor;

 private:
  // Runs on the communication thread, which has no stream: the transport moves the bytes.
  Work work(ActorHost& host, std::vector<Tensor> inputs, std::vector<Tensor>) override {
    address_ = reinterpret_cast<uint64_t>(inputs[0].raw_data());
    bytes_ = static_cast<int64_t>(inputs[0].nbytes());
    if (is_inline_transfer(bytes_)) return nullptr;  // announce() sends it
    host.transport().expose(info_.proto.peer(), static_cast<uint64_t>(info_.proto.transfer_id()),
                            inputs[0].raw_data(), inputs[0].nbytes());
    return nullptr;
  }
  bool keeps_inputs_until_output_acked() const override { return true; }
  void describe_transfer(ActorMessage* ready) const override {
    ready->address = address_;
    ready->bytes = bytes_;
  }
  void announce(ActorHost& host, const OutputRegister& out, const ActorMessage& ready) override {
    if (!out.acked_on_send) {  // a large transfer, or a control register
      host.send(ready);
      return;
    }
    OFL_ASSERT(is_inline_transfer(bytes_)) << name() << " sends " << bytes_ << " bytes inline";
    host.transport().send_with_data(
        ready.dst_rank, to_bytes(ready), static_cast<uint64_t>(info_.proto.transfer_id()),
        reinterpret_cast<const void*>(address_), static_cast<size_t>(bytes_));
  }
  uint64_t address_ = 0;
  int64_t bytes_ = 0;
};

class RecvActor final : public TaskActor {
 public:
  RecvActor(const PlanIndex& index, int task, int priority, int transfer_input)
      : TaskActor(index, task, priority), transfer_input_(transfer_input) {}

 private:
  // Runs on the communication thread, which has no stream: the transport moves the bytes.
  Work work(ActorHost& host, std::vector<Tensor>, std::vector<Tensor> outputs) override {
    const InputEdge::Piece& piece = front_piece(transfer_input_);
    OFL_ASSERT(piece.bytes == static_cast<int64_t>(outputs[0].nbytes()))
        << name() << " receives " << piece.bytes << " bytes into " << outputs[0].nbytes();
    OFL_ASSERT(prepared_slot_ < 0 || outputs[0].raw_data() == prepared_data_)
        << name() << " prepared another slot";
    prepared_slot_ = -1;
    const InputEdge& transfer = inputs()[transfer_input_];
    if (is_inline_transfer(piece.bytes) && transfer.hold > 1) {
      // One piece for several acts (a once SEND, a per-micro-batch RECV): it came with its
      // message once, so keep it for the other acts.
      if (transfer.uses == 0) {
        held_.resize(static_cast<size_t>(piece.bytes));
        host.transport().fetch(info_.proto.peer(), static_cast<uint64_t>(info_.proto.transfer_id()),
                               piece.address, held_.data(), held_.size());
      }
      std::memcpy(outputs[0].raw_data(), held_.data(), held_.size());
      return nullptr;
    }
    host.transport().fetch(info_.proto.peer(), static_cast<uint64_t>(info_.proto.transfer_id()),
                           piece.address, outputs[0].raw_data(), static_cast<size_t>(piece.bytes));
    return nullptr;
  }
  // Note [Receives posted ahead] in comm/transport.h: once the slot the next piece goes into is
  // free (every consumer acked it), its receive is posted before the sender announces it.
  void on_slot_maybe_free(ActorHost& host) override {
    if (prepared_slot_ >= 0 || retired() || outputs().empty()) return;
    const OutputRegister& out = outputs()[0];
    if (out.holding || out.slots.empty() || !out.unacked[out.next_slot].empty()) return;
    const Tensor& slot = out.slots[out.next_slot];
    prepared_slot_ = out.next_slot;
    prepared_data_ = slot.raw_data();
    host.transport().prepare_fetch(info_.proto.peer(),
                                   static_cast<uint64_t>(info_.proto.transfer_id()),
                                   slot.raw_data(), slot.nbytes());
  }
  int transfer_input_;
  std::vector<char> held_;  // a small piece read by several acts
  int prepared_slot_ = -1;  // the slot whose receive is posted, -1: none
  const void* prepared_data_ = nullptr;
};

// COLLECTIVE: its member's part runs on the collective engine of the runtime (Note [Collective
// engine] in collective_engine.h); the act launches it there and returns. On a GPU the job is
// the device backend's (Note [Device collectives] in device_collectives.h). An all-reduce marked
// a view sums into its input piece, which it hands out as its output and keeps until the
// readers are done (Note [All-reduces in place] in compiler/physical/in_place_boxing.h).
class CollectiveActor final : public TaskActor {
 public:
  CollectiveActor(const PlanIndex& index, int task, int priority)
      : TaskActor(index, task, priority),
        spec_(collective_spec(info_.proto.collective(), rank(), name())),
        in_place_(info_.proto.view()) {}

 private:
  Work work(ActorHost& host, std::vector<Tensor> inputs, std::vector<Tensor> outputs) override {
    const proto::CollectiveProto& c = info_.proto.collective();
    // A broadcast's members other than the root read nothing.
    Tensor input = inputs.empty() ? Tensor() : std::move(inputs[0]);
    if (in_place_) {
      OutputRegister& out = this->outputs()[0];
      const PlanIndex::RegisterInfo& reg = index_.reg(info_.outputs[0]);
      out.slots[out.next_slot] = view_of_bytes(input, 0, reg.shape, reg.dtype);
      outputs[0] = out.slots[out.next_slot];
    }
    if (!scratch_placed_) {  // Note [Collective scratch]: the plan's memory, once
      scratch_placed_ = true;
      if (c.scratch_in_block()) {
        place_scratch(c, spec_.member, host.memory_block(rank(), c.scratch_block()),
                      input.defined() ? input.shape() : Shape{}, outputs[0].shape(),
                      outputs[0].dtype(), &scratch_);
      }
    }
    if (info_.proto.device() == proto::PLAN_DEVICE_CUDA) {
      DeviceCollectives* device = host.device_collectives();
      OFL_ASSERT(device != nullptr) << name() << ": the runtime made no GPU communicators";
      return CollectiveWork{device->make_job(host.transport(), spec_, rank(), c.control_id(),
                                             iteration(), std::move(input), outputs[0], &scratch_)};
    }
    return CollectiveWork{
        make_collective_job(host.transport(), spec_, std::move(input), outputs[0], &scratch_)};
  }
  bool keeps_inputs_until_output_acked() const override { return in_place_; }
  CollectiveSpec spec_;
  CollectiveScratch scratch_;  // its acts run one at a time
  bool scratch_placed_ = false;
  bool in_place_;
};

}  // namespace

std::unique_ptr<Actor> make_task_actor(const PlanIndex& index, int task, int priority,
                                       Device device) {
  switch (index.task(task).proto.kind()) {
    case proto::TaskProto::COMPUTE:
      return std::make_unique<ComputeActor>(index, task, priority, device);
    case proto::TaskProto::INPUT:
      return std::make_unique<InputActor>(index, task, priority);
    case proto::TaskProto::VARIABLE:
      return std::make_unique<VariableActor>(index, task, priority);
    case proto::TaskProto::OUTPUT:
      return std::make_unique<OutputActor>(index, task, priority);
    case proto::TaskProto::SLICE:
      return std::make_unique<SliceActor>(index, task, priority);
    case proto::TaskProto::SEND:
      return std::make_unique<SendActor>(index, task, priority);
    case proto::TaskProto::RECV:
      // The transfer edge is the RECV's first input (the runtime adds it first).
      return std::make_unique<RecvActor>(index, task, priority, /*transfer_input=*/0);
    case proto::TaskProto::ADD:
      return std::make_unique<AddActor>(index, task, priority);
    case proto::TaskProto::CONCAT:
      return std::make_unique<ConcatActor>(index, task, priority);
    case proto::TaskProto::ZEROS:
      return std::make_unique<ZerosActor>(index, task, priority);
    case proto::TaskProto::COPY:
    case proto::TaskProto::REPEAT:
    case proto::TaskProto::COPY_H2D:
    case proto::TaskProto::COPY_D2H:
      return std::make_unique<CopyActor>(index, task, priority);
    case proto::TaskProto::UNPACK:
      return std::make_unique<UnpackActor>(index, task, priority);
    case proto::TaskProto::ACCUMULATE:
      return std::make_unique<AccumulateActor>(index, task, priority);
    case proto::TaskProto::PACK:
      return std::make_unique<PackActor>(index, task, priority);
    case proto::TaskProto::COLLECTIVE:
      return std::make_unique<CollectiveActor>(index, task, priority);
    default:
      OFL_ASSERT(false) << "kinds are checked when the plan is loaded";
      return nullptr;
  }
}

std::unique_ptr<Actor> make_tick_actor(int64_t id, int64_t rank) {
  return std::make_unique<TickActor>(id, rank);
}

std::optional<Tensor> take_fetched_piece(Actor& actor, int64_t iteration) {
  auto* output = dynamic_cast<OutputActor*>(&actor);
  if (output == nullptr) return std::nullopt;
  return output->take(iteration);
}

const Tensor* last_fetched_piece(const Actor& actor) {
  const auto* output = dynamic_cast<const OutputActor*>(&actor);
  return output ? &output->last() : nullptr;
}

}  // namespace ofl::actor
