#pragma once
// The actor kinds: one per TaskProto kind, plus the tick that starts an iteration. Each kind
// supplies only its work; the act protocol is Actor's.

#include <memory>
#include <optional>

#include "actor/actor.h"
#include "actor/plan_index.h"

namespace ofl::actor {

/// Note [Transfer actor ids]: a SEND and its RECV run in different processes when their ranks
/// do, and neither plan part names the other's task. Both are addressed by their transfer id
/// instead: the SEND of transfer t is actor kSendActorBase + t, its RECV kRecvActorBase + t.
constexpr int64_t kSendActorBase = int64_t{1} << 61;
constexpr int64_t kRecvActorBase = int64_t{1} << 62;

/// Whether a transfer of `bytes` travels inside its ready message (Note [Small transfers
/// travel with their message] in comm/transport.h). Both ends decide by the size alone.
inline bool is_inline_transfer(int64_t bytes) {
  return bytes <= static_cast<int64_t>(comm::kInlineTransferBytes);
}

/// The actor running task `task` of `index`. `priority` orders ready actors of one thread;
/// `device` holds the task's memory (its kernel's scratch).
std::unique_ptr<Actor> make_task_actor(const PlanIndex& index, int task, int priority,
                                       Device device);

/// The tick of `rank`: acts once per iteration when the runtime starts one, and hands each
/// source actor of the rank (tasks with no input at all) its start.
std::unique_ptr<Actor> make_tick_actor(int64_t id, int64_t rank);

/// Takes what an OUTPUT actor fetched in `iteration` (undefined if it has not acted in it);
/// null for other actors.
std::optional<Tensor> take_fetched_piece(Actor& actor, int64_t iteration);
/// What an OUTPUT actor fetched last; null for other actors.
const Tensor* last_fetched_piece(const Actor& actor);

}  // namespace ofl::actor
