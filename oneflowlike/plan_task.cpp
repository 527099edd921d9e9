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

}  // namespace ofl
