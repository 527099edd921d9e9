#include "compiler/physical/slice_views.h"

#include <unordered_map>
#include <vector>

#include "oneflowlike/proto_convert.h"
#include "oneflowlike/sbp.h"

namespace ofl::compiler::physical {
namespace {

// Whether any consumer of `reg` writes it in place.
bool written_in_place(const proto::RegisterProto& reg,
                      const std::unordered_map<int64_t, const proto::TaskProto*>& tasks) {
  for (int64_t id : reg.consumers()) {
    const proto::TaskProto& consumer = *tasks.at(id);
    for (int position : consumer.mutated_inputs()) {
      if (position >= 0 && position < consumer.inputs_size() &&
          consumer.inputs(position) == reg.id()) {
        return true;
      }
    }
  }
  return false;
}

void mark_rank(proto::RankPlanProto* rank_plan) {
  std::unordered_map<int64_t, const proto::TaskProto*> tasks;
  for (const proto::TaskProto& task : rank_plan->tasks()) tasks[task.id()] = &task;
  std::unordered_map<int64_t, const proto::RegisterProto*> registers;
  for (const proto::RegisterProto& reg : rank_plan->registers()) registers[reg.id()] = &reg;

  for (proto::TaskProto& task : *rank_plan->mutable_tasks()) {
    task.set_view(false);
    if (task.kind() != proto::TaskProto::SLICE || task.inputs_size() != 1 ||
        task.outputs_size() != 1) {
      continue;
    }
    auto in = registers.find(task.inputs(0));
    auto out = registers.find(task.outputs(0));
    if (in == registers.end() || out == registers.end()) continue;
    const proto::RegisterProto& input = *in->second;
    const proto::RegisterProto& output = *out->second;
    std::vector<Range> region;
    for (const proto::RangeProto& r : task.slice()) region.push_back(Range{r.begin(), r.end()});
    if (!contiguous_offset(from_proto(input.shape()), region)) continue;
    if (input.persistent() || written_in_place(input, tasks) || written_in_place(output, tasks)) {
      continue;
    }
    auto producer = tasks.find(input.producer());
    bool same_rate =
        producer != tasks.end() && producer->second->per_micro_batch() == task.per_micro_batch();
    for (int64_t id : output.consumers()) {
      same_rate = same_rate && tasks.at(id)->per_micro_batch() == task.per_micro_batch();
    }
    if (same_rate) task.set_view(true);
  }
}

}  // namespace

void mark_slice_views(proto::PlanProto* plan) {
  for (proto::RankPlanProto& rank_plan : *plan->mutable_ranks()) mark_rank(&rank_plan);
}

}  // namespace ofl::compiler::physical
