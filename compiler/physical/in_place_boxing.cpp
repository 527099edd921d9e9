#include "compiler/physical/in_place_boxing.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/plan_contract.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"
#include "oneflowlike/sbp.h"

namespace ofl::compiler::physical {
namespace {

// One rank's tasks and registers by id.
struct RankView {
  explicit RankView(const proto::RankPlanProto& rank_plan) {
    for (const proto::TaskProto& task : rank_plan.tasks()) tasks[task.id()] = &task;
    for (const proto::RegisterProto& reg : rank_plan.registers()) registers[reg.id()] = &reg;
  }
  const proto::TaskProto* task(int64_t id) const {
    auto it = tasks.find(id);
    return it == tasks.end() ? nullptr : it->second;
  }
  const proto::RegisterProto* reg(int64_t id) const {
    auto it = registers.find(id);
    return it == registers.end() ? nullptr : it->second;
  }
  std::unordered_map<int64_t, const proto::TaskProto*> tasks;
  std::unordered_map<int64_t, const proto::RegisterProto*> registers;
};

// Whether any consumer of `reg` writes it in place.
bool written_in_place(const proto::RegisterProto& reg, const RankView& rank) {
  for (int64_t id : reg.consumers()) {
    if (writes_in_place(*rank.task(id), reg.id())) return true;
  }
  return false;
}

// A transient register with one slot that nobody writes in place: it may share its memory.
bool shareable(const proto::RegisterProto& reg, const RankView& rank) {
  return !reg.persistent() && reg.register_num() <= 1 && !written_in_place(reg, rank);
}

// Whether `reg`'s producer and consumers all act at the rate of `task`.
bool same_rate(const proto::RegisterProto& reg, const proto::TaskProto& task,
               const RankView& rank) {
  const proto::TaskProto* producer = rank.task(reg.producer());
  if (producer == nullptr || producer->per_micro_batch() != task.per_micro_batch()) return false;
  for (int64_t id : reg.consumers()) {
    if (rank.task(id)->per_micro_batch() != task.per_micro_batch()) return false;
  }
  return true;
}

// Note [Repeated views]: a REPEAT whose readers write nothing in place, of a one-slot value made
// by a variable, a kernel or a copy, whose in-place writers all wait for the value's readers
// through REPEATs.
bool repeats_in_place(const proto::TaskProto& task, const RankView& rank,
                      const RepeatedReaders& repeated) {
  if (task.inputs_size() != 1 || task.outputs_size() != 1) return false;
  const proto::RegisterProto* input = rank.reg(task.inputs(0));
  const proto::RegisterProto* output = rank.reg(task.outputs(0));
  if (input == nullptr || output == nullptr || input->register_num() > 1 ||
      !repeated.may_be_view(task) || !same_rate(*output, task, rank)) {
    return false;
  }
  const proto::TaskProto* producer = rank.task(input->producer());
  if (producer == nullptr || producer->per_micro_batch() || producer->view() ||
      (producer->kind() != proto::TaskProto::VARIABLE &&
       producer->kind() != proto::TaskProto::COMPUTE &&
       producer->kind() != proto::TaskProto::COPY)) {
    return false;
  }
  const std::vector<int64_t> readers = repeated.of(input->id());
  for (int64_t id : input->consumers()) {
    const proto::TaskProto& consumer = *rank.task(id);
    if (!writes_in_place(consumer, input->id())) continue;
    for (int64_t reader : readers) {
      const auto& waits = consumer.control_inputs();
      if (reader != consumer.id() && std::find(waits.begin(), waits.end(), reader) == waits.end()) {
        return false;
      }
    }
  }
  return true;
}

bool is_view(const proto::TaskProto& task, const RankView& rank, const RepeatedReaders* repeated) {
  if (task.kind() == proto::TaskProto::REPEAT) {
    return repeated != nullptr && repeats_in_place(task, rank, *repeated);
  }
  const bool slice = task.kind() == proto::TaskProto::SLICE;
  // A COPY within one device (a reshape's, or a boxing copy) is the input's bytes under another
  // shape, on the host or a GPU alike.
  const bool copy = task.kind() == proto::TaskProto::COPY;
  if ((!slice && !copy) || task.inputs_size() != 1 || task.outputs_size() != 1) return false;
  const proto::RegisterProto* input = rank.reg(task.inputs(0));
  const proto::RegisterProto* output = rank.reg(task.outputs(0));
  if (input == nullptr || output == nullptr) return false;
  const Shape shape = from_proto(input->shape());
  if (slice && (task.slice_size() != shape.ndim() ||
                !contiguous_offset(shape, ranges_from_proto(task.slice(), 0, shape.ndim())))) {
    return false;
  }
  if (copy && (input->dtype() != output->dtype() || input->device() != output->device() ||
               shape.numel() != from_proto(output->shape()).numel())) {
    return false;
  }
  // The input may be read by others at any rate; the view's own neighbours must match it.
  // A pipelined input (several slots) stays a copy: holding its slot for the view's readers
  // would leave the producer fewer pieces in flight.
  if (input->persistent() || input->register_num() > 1 || written_in_place(*input, rank) ||
      written_in_place(*output, rank)) {
    return false;
  }
  const proto::TaskProto* producer = rank.task(input->producer());
  return producer != nullptr && producer->per_micro_batch() == task.per_micro_batch() &&
         same_rate(*output, task, rank);
}

// Note [All-reduces in place]: a host all-reduce whose input nobody else reads.
bool reduces_in_place(const proto::TaskProto& task, const RankView& rank) {
  if (task.kind() != proto::TaskProto::COLLECTIVE || task.device() != proto::PLAN_DEVICE_CPU ||
      task.collective().op() != proto::CollectiveProto::ALL_REDUCE || task.inputs_size() != 1 ||
      task.outputs_size() != 1) {
    return false;
  }
  const proto::RegisterProto* input = rank.reg(task.inputs(0));
  const proto::RegisterProto* output = rank.reg(task.outputs(0));
  if (input == nullptr || output == nullptr || input->dtype() != output->dtype() ||
      from_proto(input->shape()).numel() != from_proto(output->shape()).numel() ||
      input->persistent() || input->register_num() > 1 || written_in_place(*output, rank)) {
    return false;
  }
  // An output written into an in-place concat (decided before, not knowing the all-reduce would
  // be a view) is that concat's memory, not the input's.
  for (int64_t id : output->consumers()) {
    const proto::TaskProto* consumer = rank.task(id);
    if (consumer == nullptr ||
        (consumer->kind() == proto::TaskProto::CONCAT && consumer->in_place())) {
      return false;
    }
  }
  // The sums overwrite the input: nobody else may read it, nor the registers its memory holds
  // (an in-place concat's pieces) be read but by that concat.
  auto only_reader = [](const proto::RegisterProto& reg, int64_t id) {
    return reg.consumers_size() == 1 && reg.consumers(0) == id;
  };
  if (!only_reader(*input, task.id())) return false;
  const proto::TaskProto* producer = rank.task(input->producer());
  if (producer == nullptr || producer->view() ||
      outputs_per_micro_batch(*producer) != task.per_micro_batch()) {
    return false;
  }
  if (producer->in_place()) {
    for (int64_t id : producer->inputs()) {
      const proto::RegisterProto* piece = rank.reg(id);
      if (piece == nullptr || !only_reader(*piece, producer->id())) return false;
    }
  }
  return same_rate(*output, task, rank);
}

// Whether the regions of `concat` are contiguous runs of its output that tile it exactly.
bool regions_tile_in_runs(const proto::TaskProto& concat, const Shape& shape) {
  const int ndim = shape.ndim();
  if (concat.concat_regions_size() != ndim * concat.inputs_size()) return false;
  std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end) in elements
  for (int i = 0; i < concat.inputs_size(); ++i) {
    const std::vector<Range> region = ranges_from_proto(concat.concat_regions(), i * ndim, ndim);
    const std::optional<int64_t> offset = contiguous_offset(shape, region);
    if (!offset) return false;
    int64_t numel = 1;
    for (const Range& r : region) numel *= r.size();
    runs.emplace_back(*offset, *offset + numel);
  }
  std::sort(runs.begin(), runs.end());
  int64_t covered = 0;
  for (const auto& [begin, end] : runs) {
    if (begin != covered) return false;
    covered = end;
  }
  return covered == shape.numel();
}

bool can_be_in_place(const proto::TaskProto& task, const RankView& rank,
                     const std::unordered_set<int64_t>& aliased) {
  if (task.kind() != proto::TaskProto::CONCAT || task.outputs_size() != 1) return false;
  const proto::RegisterProto* output = rank.reg(task.outputs(0));
  if (output == nullptr || !shareable(*output, rank) || !same_rate(*output, task, rank) ||
      !regions_tile_in_runs(task, from_proto(output->shape()))) {
    return false;
  }
  std::unordered_set<int64_t> seen;
  for (int64_t id : task.inputs()) {
    const proto::RegisterProto* input = rank.reg(id);
    if (input == nullptr || !seen.insert(id).second || aliased.count(id) ||
        !shareable(*input, rank)) {
      return false;
    }
    const proto::TaskProto* producer = rank.task(input->producer());
    if (producer == nullptr || outputs_per_micro_batch(*producer) != task.per_micro_batch() ||
        producer->view() || producer->in_place()) {
      return false;
    }
  }
  return true;
}

// Whether a SEND reads `reg`'s memory (itself or through views of it): its peer's RECV fetches
// the bytes after the SEND has acted, possibly after this rank's run has returned.
bool read_by_a_send(const proto::RegisterProto& reg, const RankView& rank) {
  std::vector<const proto::RegisterProto*> pending{&reg};
  while (!pending.empty()) {
    const proto::RegisterProto* at = pending.back();
    pending.pop_back();
    for (int64_t id : at->consumers()) {
      const proto::TaskProto* consumer = rank.task(id);
      if (consumer == nullptr || consumer->kind() == proto::TaskProto::SEND) return true;
      if (!consumer->view()) continue;
      for (int64_t out : consumer->outputs()) {
        if (const proto::RegisterProto* viewed = rank.reg(out)) pending.push_back(viewed);
      }
    }
  }
  return false;
}

// Note [Fetched pieces are handed over].
bool handed_over(const proto::RegisterProto& reg, const RankView& rank) {
  if (reg.persistent() || reg.device() != proto::PLAN_DEVICE_CPU || written_in_place(reg, rank) ||
      read_by_a_send(reg, rank)) {
    return false;
  }
  bool fetched = false;
  for (int64_t id : reg.consumers()) {
    const proto::TaskProto* consumer = rank.task(id);
    if (consumer == nullptr) return false;
    fetched = fetched || consumer->kind() == proto::TaskProto::OUTPUT;
    // Its pieces are written into this concat's output: not memory of their own.
    if (consumer->kind() == proto::TaskProto::CONCAT && consumer->in_place()) return false;
  }
  const proto::TaskProto* producer = rank.task(reg.producer());
  if (!fetched || producer == nullptr || producer->view() || producer->in_place()) return false;
  switch (producer->kind()) {
    case proto::TaskProto::COMPUTE:
    case proto::TaskProto::COPY:
    case proto::TaskProto::SLICE:
    case proto::TaskProto::ADD:
    case proto::TaskProto::CONCAT:
    case proto::TaskProto::COLLECTIVE:
      return true;
    default:
      return false;
  }
}

// Note [Fed pieces are handed in]; a donating INPUT's may be written (Note [Donated pieces]).
bool handed_in(const proto::RegisterProto& reg, const RankView& rank) {
  const proto::TaskProto* producer = rank.task(reg.producer());
  if (producer == nullptr || producer->kind() != proto::TaskProto::INPUT || reg.persistent() ||
      reg.device() != proto::PLAN_DEVICE_CPU || read_by_a_send(reg, rank)) {
    return false;
  }
  const bool donated = producer->donates();
  if (!donated && written_in_place(reg, rank)) return false;
  for (int64_t id : reg.consumers()) {
    const proto::TaskProto* consumer = rank.task(id);
    if (consumer == nullptr) return false;
    if (consumer->kind() == proto::TaskProto::CONCAT && consumer->in_place()) return false;
    if (consumer->kind() == proto::TaskProto::COLLECTIVE && consumer->view() && !donated) {
      return false;
    }
  }
  return true;
}

// Note [Donated pieces]: a donating INPUT's handed-in register, and the outputs of view tasks
// reading a donated register, view of view included; not one a kernel writes in place (its
// OUTPUT, which acts before the write, must still snapshot it).
void mark_donated(proto::RankPlanProto* rank_plan, const RankView& rank) {
  std::unordered_map<int64_t, proto::RegisterProto*> registers;
  for (proto::RegisterProto& reg : *rank_plan->mutable_registers()) {
    const proto::TaskProto* producer = rank.task(reg.producer());
    reg.set_donated(reg.handed_in() && producer != nullptr && producer->donates() &&
                    !written_in_place(reg, rank));
    registers[reg.id()] = &reg;
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (const proto::TaskProto& task : rank_plan->tasks()) {
      if (!task.view() || task.inputs_size() != 1 || task.outputs_size() != 1) continue;
      const auto input = registers.find(task.inputs(0));
      const auto output = registers.find(task.outputs(0));
      if (input == registers.end() || output == registers.end() || !input->second->donated() ||
          output->second->donated() || written_in_place(*output->second, rank)) {
        continue;
      }
      output->second->set_donated(true);
      grew = true;
    }
  }
}

void mark_rank(proto::RankPlanProto* rank_plan) {
  for (proto::TaskProto& task : *rank_plan->mutable_tasks()) {
    task.set_view(false);
    task.set_in_place(false);
  }
  const RankView rank(*rank_plan);
  std::optional<RepeatedReaders> repeated;  // only where a REPEAT is
  for (const proto::TaskProto& task : rank_plan->tasks()) {
    if (task.kind() == proto::TaskProto::REPEAT && !repeated) repeated.emplace(*rank_plan);
  }
  for (proto::TaskProto& task : *rank_plan->mutable_tasks()) {
    task.set_view(is_view(task, rank, repeated ? &*repeated : nullptr));
  }
  // In plan order, so that a concat feeding another is decided first (and then is not nested).
  std::unordered_set<int64_t> aliased;  // registers already written into some concat's output
  for (proto::TaskProto& task : *rank_plan->mutable_tasks()) {
    if (!can_be_in_place(task, rank, aliased)) continue;
    task.set_in_place(true);
    aliased.insert(task.inputs().begin(), task.inputs().end());
  }
  // After the views and the concats: an all-reduce's input must not be a view, and may be an
  // in-place concat's output.
  for (proto::TaskProto& task : *rank_plan->mutable_tasks()) {
    if (reduces_in_place(task, rank)) task.set_view(true);
  }
  // Last: a register written into an in-place concat is not its own memory.
  for (proto::RegisterProto& reg : *rank_plan->mutable_registers()) {
    reg.set_fresh_each_piece(handed_over(reg, rank));
    reg.set_handed_in(handed_in(reg, rank));
  }
  mark_donated(rank_plan, rank);
}

}  // namespace

RepeatedReaders::RepeatedReaders(const proto::RankPlanProto& rank_plan) : rank_plan_(rank_plan) {
  for (int t = 0; t < rank_plan.tasks_size(); ++t) tasks_[rank_plan.tasks(t).id()] = t;
  for (int r = 0; r < rank_plan.registers_size(); ++r) registers_[rank_plan.registers(r).id()] = r;
}

const proto::TaskProto* RepeatedReaders::task(int64_t id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &rank_plan_.tasks(it->second);
}

const proto::RegisterProto* RepeatedReaders::reg(int64_t id) const {
  auto it = registers_.find(id);
  return it == registers_.end() ? nullptr : &rank_plan_.registers(it->second);
}

std::vector<int64_t> RepeatedReaders::readers_of(int64_t id) const {
  std::vector<int64_t> readers, pending{id};  // pending: registers whose readers count
  while (!pending.empty()) {
    const proto::RegisterProto* at = reg(pending.back());
    pending.pop_back();
    if (at == nullptr) continue;
    for (int64_t consumer : at->consumers()) {
      const proto::TaskProto* t = task(consumer);
      if (t == nullptr) consumer = -1;
      if (std::find(readers.begin(), readers.end(), consumer) == readers.end()) {
        readers.push_back(consumer);
      }
      if (t != nullptr && t->outputs_size() == 1 &&
          (t->kind() == proto::TaskProto::COPY || t->kind() == proto::TaskProto::SLICE)) {
        pending.push_back(t->outputs(0));
      }
    }
  }
  return readers;
}

bool RepeatedReaders::may_be_view(const proto::TaskProto& repeat) const {
  if (repeat.kind() != proto::TaskProto::REPEAT || repeat.inputs_size() != 1 ||
      repeat.outputs_size() != 1) {
    return false;
  }
  const proto::RegisterProto* input = reg(repeat.inputs(0));
  const proto::RegisterProto* output = reg(repeat.outputs(0));
  if (input == nullptr || output == nullptr || input->device() != output->device()) return false;
  for (int64_t consumer : output->consumers()) {
    const proto::TaskProto* t = task(consumer);
    if (t == nullptr || writes_in_place(*t, output->id())) return false;
  }
  for (int64_t reader : readers_of(output->id())) {
    const proto::TaskProto* t = task(reader);
    if (t == nullptr || t->kind() == proto::TaskProto::SEND) return false;
  }
  return true;
}

std::vector<int64_t> RepeatedReaders::of(int64_t id) const {
  std::vector<int64_t> readers;
  const proto::RegisterProto* r = reg(id);
  if (r == nullptr) return readers;
  for (int64_t consumer : r->consumers()) {
    const proto::TaskProto* t = task(consumer);
    if (t == nullptr || !may_be_view(*t)) continue;
    for (int64_t reader : readers_of(t->outputs(0))) {
      if (std::find(readers.begin(), readers.end(), reader) == readers.end()) {
        readers.push_back(reader);
      }
    }
  }
  return readers;
}

void mark_in_place_boxing(proto::PlanProto* plan) {
  parallel_each(plan->ranks_size(),
                [&](int64_t r) { mark_rank(plan->mutable_ranks(static_cast<int>(r))); });
}

}  // namespace ofl::compiler::physical
