#pragma once
// How model tests run a compiled plan: a RunnerFactory makes the executor, so one training
// routine checks the reference executor and the actor runtime alike.

#include <functional>
#include <memory>

#include "actor/plan_runner.h"
#include "actor/reference_executor.h"
#include "oneflowlike/proto/plan.pb.h"

namespace ofl::testing {

/// Makes the executor that runs a plan.
using RunnerFactory = std::function<std::unique_ptr<actor::PlanRunner>(proto::PlanProto)>;

/// The reference executor backing registers with the planned memory blocks, so registers that
/// share memory really overwrite each other and a wrong memory plan fails the training tests.
inline RunnerFactory reference_runner() {
  return [](proto::PlanProto plan) -> std::unique_ptr<actor::PlanRunner> {
    auto executor = std::make_unique<actor::ReferenceExecutor>(std::move(plan));
    executor->use_planned_memory();
    return executor;
  };
}

}  // namespace ofl::testing
