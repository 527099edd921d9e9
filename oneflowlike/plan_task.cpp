// Implicit fields of a plan's tasks (Note [Implicit plan fields] in the header).

#include "oneflowlike/plan_task.h"

#include "oneflowlike/common/error.h"

namespace ofl {

const proto::ParamsProto& params_of(const proto::PlanProto& plan, const proto::TaskProto& task) {
  if (task.params_index() <= 0) return task.params();
  OFL_CHECK(task.params_index() <= plan.op_params_size(), "[plan] task '", task.name(),
            "' must name params the plan holds. However, its params_index is ", task.params_index(),
            " and the plan holds ", plan.op_params_size(), ".");
  return plan.op_params(task.params_index() - 1);
}

namespace {

// The name register `id` has when its plan leaves it out.
std::string default_register_name(const proto::TaskProto& producer, int64_t id) {
  if (producer.kind() != proto::TaskProto::COMPUTE) return producer.name();
  for (int k = 0; k < producer.outputs_size(); ++k) {
    if (producer.outputs(k) == id) return str_cat(producer.name(), "/out", k);
  }
  return str_cat(producer.name(), "/out?");  // not its producer's output: a malformed plan
}

}  // namespace

std::string register_name_of(const proto::TaskProto* producer, const proto::RegisterProto& reg) {
  if (!reg.name().empty()) return reg.name();
  return producer != nullptr ? default_register_name(*producer, reg.id()) : str_cat("#", reg.id());
}

std::string register_name_of(const proto::RankPlanProto& rank_plan,
                             const proto::RegisterProto& reg) {
  const proto::TaskProto* producer = nullptr;
  if (reg.name().empty()) {
    for (const proto::TaskProto& task : rank_plan.tasks()) {
      if (task.id() == reg.producer()) producer = &task;
    }
  }
  return register_name_of(producer, reg);
}

void set_register_name(proto::RegisterProto* reg, const proto::TaskProto& producer,
                       const std::string& name) {
  // Compared in place: the compiler names millions of registers.
  const std::string& base = producer.name();
  bool implied = name.size() >= base.size() && name.compare(0, base.size(), base) == 0;
  if (implied && producer.kind() == proto::TaskProto::COMPUTE) {
    const int k = producer.outputs_size() - 1;  // the output just added
    implied = k >= 0 && producer.outputs(k) == reg->id() &&
              name.compare(base.size(), std::string::npos, str_cat("/out", k)) == 0;
  } else {
    implied = implied && name.size() == base.size();
  }
  if (implied) {
    reg->clear_name();
  } else {
    reg->set_name(name);
  }
}

}  // namespace ofl
