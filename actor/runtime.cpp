// The runtime: runs iterations fed and fetched by name or by pieces, reads and writes
// variables, and ends a run that fails (an actor, a rank, a departure). Loading and wiring,
// threads, the watchdog and the trace are in runtime_loading.cpp, runtime_threads.cpp,
// runtime_watchdog.cpp and runtime_trace.cpp.

#include "actor/runtime.h"

#include <algorithm>
#include <optional>

#include "actor/actor_kinds.h"
#include "actor/pieces.h"
#include "actor/runtime_internal.h"
#include "oneflowlike/common/parallel.h"
#include "oneflowlike/plan_task.h"

namespace ofl::actor {

Runtime::~Runtime() { shutdown(); }

// Note [Iterations across processes]: a process's tick starts its iteration i + 1 only after
// run() returned for i, but actors fed by other processes (RECV and what follows from it) may
// act for i + 1 while this process still finishes i. Acts are therefore counted by their own
// iteration, and run() waits for the count of its iteration. No actor runs kIterationSlots
// iterations ahead: every iteration needs this process's tick.
void Runtime::count_act(int64_t iteration) {
  const int64_t n =
      acts_done_[iteration % kIterationSlots].fetch_add(1, std::memory_order_acq_rel) + 1;
  OFL_ASSERT(n <= acts_per_iteration_) << "an actor ran " << kIterationSlots << " iterations ahead";
  if (n == acts_per_iteration_) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

bool Runtime::iteration_done() const {
  return acts_done_[iteration_ % kIterationSlots].load(std::memory_order_acquire) ==
         acts_per_iteration_;
}

void Runtime::on_failure(const Actor* actor, std::exception_ptr error) {
  on_failure(actor, actor == nullptr ? 0 : actor->failed_act(), error);
}

std::pair<ErrorCode, std::string> error_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::exception& e) {
    return {ErrorCode::kInternal, e.what()};
  } catch (...) {
  }
  return {ErrorCode::kInternal, "unknown error"};
}

void Runtime::on_failure(const Actor* actor, int64_t act, std::exception_ptr error) {
  const std::string where =
      actor == nullptr ? "an actor thread"
                       : str_cat(actor->name(), " in iteration ", act / actor->acts_per_iteration(),
                                 index_.micro_batches() > 1
                                     ? str_cat(", micro-batch ", act % actor->acts_per_iteration())
                                     : "");
  const auto [code, what] = error_of(error);
  fail(code, str_cat(kTag, where, " failed: ", what));
}

void Runtime::fail(ErrorCode code, std::string failure) {
  std::lock_guard<std::mutex> lock(done_mu_);
  if (failure_.empty()) {
    failure_ = std::move(failure);
    failure_code_ = code;
  }
  done_cv_.notify_all();
}

// Note [Faults] in comm/ucx_transport.h: another rank failed; the run ends naming it.
void Runtime::on_rank_failure(int64_t rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(done_mu_);
  if (failure_.empty()) {
    failure_ = str_cat(kTag, "rank ", rank, " failed: ", why);
    failure_code_ = ErrorCode::kUnavailable;
    failure_from_fault_ = true;
  }
  done_cv_.notify_all();
}

// Note [Failed runs across processes]
// -----------------------------------
// A run can fail on one rank alone: a kernel's error (an index out of range in its piece), a
// stall of its own. Its peers would then wait for it until their watchdogs fire, or, having
// finished the iteration first, run the next one against a runtime that is gone. So a runtime
// whose run failed for a reason of its own tells every peer of the session which iteration
// failed and how (kRunFailed; the text stays on the failing rank). A peer running that
// iteration or a later one ends its run at once naming the rank; one that has not reached it
// refuses the run of that iteration when it comes. Ending or refusing so, a peer passes the
// notice on to its own peers (naming the rank it came from), so a pipeline's far stages hear
// of it too; each runtime tells its peers once. Either way every member of the session is then
// unusable (Runtime::usable) and has aborted its GPU communicators (a refused run stops as a
// failed one does), so ranks sharing a runtime's communicators abort the same ones: no rank
// goes on alone with a runtime whose peer has gone, and an eager op on global tensors compiles
// again on every rank at its next call, so their sessions stay in step (Note [Session ids] in
// actor/session_transport.h). A run refused because another runtime aborted its communicator
// (Note [Communicators kept per process]) tells its peers the same way.
void Runtime::on_message(const ActorMessage& message) {
  if (message.kind == ActorMessage::Kind::kRunFailed) {
    on_peer_run_failure(message.src_rank, message.piece,
                        static_cast<ErrorCode>(message.register_id));
    return;
  }
  deliver(message);
}

std::string Runtime::peer_run_failure(const PeerFailure& f) const {
  return str_cat(kTag, "rank ", f.rank, "'s run of '", job_name_, "' failed in iteration ",
                 f.iteration, " (", error_code_name(f.code),
                 "; its error on that rank says why), so this rank's cannot finish and the graph "
                 "cannot run again here.");
}

void Runtime::on_peer_run_failure(int64_t rank, int64_t iteration, ErrorCode code) {
  // Passed on back to a process hosting the rank it came from.
  if (std::binary_search(ranks_.begin(), ranks_.end(), rank)) return;
  std::lock_guard<std::mutex> lock(done_mu_);
  const PeerFailure failure{rank, iteration, code};
  peer_failures_.try_emplace(rank, failure);
  if (running_ && iteration_ >= iteration && failure_.empty()) {
    failure_ = peer_run_failure(failure);
    failure_code_ = ErrorCode::kUnavailable;
    failure_origin_ = failure;
  }
  done_cv_.notify_all();
}

// From stop_threads, on the runtime's own thread (never a transport's), once.
void Runtime::tell_peers_of_failure() {
  PeerFailure told;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    if (shut_down_ || failure_from_fault_ || failed_by_departure_) return;
    if (failure_origin_.has_value()) {
      told = *failure_origin_;  // passed on
    } else {
      told.rank = ranks_.front();
      told.iteration = iteration_;
      told.code = failure_.empty() ? ErrorCode::kDeadlineExceeded : failure_code_;  // a stall
    }
  }
  // Note [Program positions]: no rank runs this session after the failed iteration; a start of
  // a later one here (a peer's failure heard while it ran) is taken back.
  transport_->abandon_runs_after(told.iteration, announced_to_);
  for (int64_t peer : peers_) {
    if (peer == told.rank) continue;
    try {
      transport_->send(peer, to_bytes(ActorMessage::run_failed(told.rank, peer, told.iteration,
                                                               static_cast<int64_t>(told.code))));
    } catch (const std::exception& e) {
      VLOG(1) << kTag << "could not tell rank " << peer << " of the failed run: " << e.what();
    }
  }
}

void Runtime::on_rank_departure(int64_t rank, int64_t iterations) {
  if (peers_.count(rank) == 0) return;  // this runtime never needs it
  std::lock_guard<std::mutex> lock(done_mu_);
  departed_[rank] = iterations;
  if (running_ && iteration_ >= iterations && failure_.empty()) {
    failure_ = departure_failure(rank, iterations);
    failure_code_ = ErrorCode::kUnavailable;
    failed_by_departure_ = true;
  }
  done_cv_.notify_all();
}

void Runtime::on_position_difference(const std::string& why) {
  std::lock_guard<std::mutex> lock(done_mu_);
  // Not running: that run finished (it needed nothing more of the rank that differs); the next
  // run with that rank is refused (TransportSessions::begin_run).
  if (running_ && failure_.empty()) {
    failure_ = why;
    failure_code_ = ErrorCode::kFailedPrecondition;
  }
  done_cv_.notify_all();
}

std::string Runtime::departure_failure(int64_t rank, int64_t iterations) const {
  std::string hosted;
  for (int64_t r : ranks_) hosted += str_cat(hosted.empty() ? "" : ", ", r);
  return str_cat(kTag, "rank ", rank, " ended its program after ", iterations, " iteration",
                 iterations == 1 ? "" : "s", " of '", job_name_, "', while rank",
                 ranks_.size() == 1 ? " " : "s ", hosted, " needs it in iteration ", iteration_ + 1,
                 ": every rank must run each graph (and each op on global tensors) the same "
                 "number of times. Rank ",
                 rank, " left early (a loop with fewer steps, or an exception it caught?).");
}

std::map<std::string, Tensor> Runtime::local_pieces() const {
  std::map<std::string, Tensor> pieces;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    const Actor* actor = actor_of_task_[t];
    if (actor == nullptr) continue;
    const std::string name = str_cat("rank", actor->rank(), "/", index_.task(t).proto.name());
    if (index_.task(t).proto.kind() == proto::TaskProto::VARIABLE) {
      pieces[name] = variable_piece(t).to(Device::cpu());
    } else if (const Tensor* fetched = last_fetched_piece(*actor)) {
      if (fetched->defined()) pieces[name] = *fetched;
    }
  }
  return pieces;
}

std::map<std::string, Tensor> Runtime::run(const std::map<std::string, Tensor>& inputs) {
  return assemble_outputs(index_, run_iteration(&inputs, nullptr));
}

Runtime::Pieces Runtime::run_local(const Pieces& inputs) {
  Pieces out;
  for (auto& [t, piece] : run_iteration(nullptr, &inputs)) {
    out[logical_op_of(index_.task(t).proto)][index_.task(t).proto.rank()] = std::move(piece);
  }
  return out;
}

const Tensor* Runtime::input_piece(const std::string& name, int64_t rank) const {
  if (input_pieces_ == nullptr) return nullptr;
  return &input_pieces_->at(name).at(rank);  // checked by run_iteration
}

std::vector<std::pair<int, Tensor>> Runtime::run_iteration(
    const std::map<std::string, Tensor>* inputs, const Pieces* pieces) {
  OFL_CHECK_CODE(!broken_, ErrorCode::kFailedPrecondition, kTag,
                 shut_down_ ? "the runtime was shut down and cannot be used again."
                            : "the runtime stopped after an error and cannot be used again.");
  // Every feed is checked before any actor acts, so a bad one leaves the runtime usable. A
  // process holding part of a job's ranks ignores the inputs only other ranks read.
  if (inputs != nullptr && static_cast<int64_t>(index_.ranks().size()) == index_.world_size()) {
    check_fed_inputs(index_, *inputs);
  }
  static const std::map<std::string, Tensor> kNoInputs;
  check_variables_placed(pieces);
  for (const auto& [name, tasks] : index_.inputs_by_name()) {
    for (int t : tasks) {
      if (actor_of_task_[t] == nullptr) continue;
      if (inputs != nullptr) {
        check_fed_input(index_, t, *inputs);
      } else {
        check_fed_piece(index_, t, *pieces);
      }
    }
  }
  // Running from here, so a difference of program positions found while this run starts ends it
  // (Runtime::on_position_difference). Not running once this returns or throws (Note
  // [Departures] reads iteration_ only then).
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    running_ = true;
  }
  struct NotRunning {
    explicit NotRunning(Runtime* r) : runtime(r) {}
    NotRunning(const NotRunning&) = delete;
    ~NotRunning() {
      std::lock_guard<std::mutex> lock(runtime->done_mu_);
      runtime->running_ = false;
    }
    Runtime* runtime;
  };
  std::optional<NotRunning> running;
  running.emplace(this);
  // Note [Failed runs across processes]: refused for good, stopped as a failed run is. A run
  // after a peer's failed one is refused before it takes a program position (the failed rank
  // never starts it); the run of the failed iteration itself after (the failed rank started it).
  const auto refuse_after_peer_failure = [&](bool later_only) {
    std::unique_lock<std::mutex> lock(done_mu_);
    for (const auto& [rank, failed] : peer_failures_) {
      if (iteration_ < failed.iteration || (later_only && iteration_ == failed.iteration)) continue;
      const std::string why = peer_run_failure(failed);
      failure_origin_ = failed;
      lock.unlock();
      if (device_collectives_ != nullptr) device_collectives_->abort_when_free();
      stop_threads();
      throw_error(ErrorCode::kUnavailable, why);
    }
  };
  refuse_after_peer_failure(/*later_only=*/true);
  // Note [Program positions]: counted before the refusals below, so a run refused here still
  // takes its position, as its peers' runs (failed or refused alike) do.
  const std::string position_refused = transport_->begin_run(announced_to_);
  if (!position_refused.empty()) {
    {
      // The refusal is this rank's own account of the difference, given whatever else came
      // since running_ was set: a peer's notice of its refused run of this iteration (the same
      // difference, seen from there) arrives at a time the machine's load decides, and the
      // error must not depend on it. A fault or a departure still names itself.
      std::lock_guard<std::mutex> lock(done_mu_);
      if (!failure_from_fault_ && !failed_by_departure_) {
        failure_ = position_refused;
        failure_code_ = ErrorCode::kFailedPrecondition;
        failure_origin_.reset();
      }
    }
    done_cv_.notify_all();
    wait_for_iteration();  // ends it as a failed run: raises
  }
  {
    std::unique_lock<std::mutex> lock(done_mu_);
    for (const auto& [rank, ran] : departed_) {
      if (iteration_ >= ran) throw_error(ErrorCode::kUnavailable, departure_failure(rank, ran));
    }
  }
  refuse_after_peer_failure(/*later_only=*/false);
  // Note [Communicators kept per process]: the run holds the GPU communicators it shares with
  // other runtimes of this process until it ends. A refusal (a communicator aborted by another
  // runtime's failed run) is for good, and the peers hear of it.
  std::optional<DeviceCollectives::Lease> communicators;
  if (device_collectives_ != nullptr) {
    try {
      communicators.emplace(device_collectives_->lease(iteration_));
    } catch (const Error& e) {
      {
        std::lock_guard<std::mutex> lock(done_mu_);
        failure_ = e.what();
        failure_code_ = e.code();
      }
      device_collectives_->abort_when_free();  // holds no lease any more
      stop_threads();
      throw;
    }
  }
  inputs_ = inputs != nullptr ? inputs : &kNoInputs;
  input_pieces_ = pieces;
  // The caller only waits from here: its kernel threads would throttle the compute threads'
  // ones (Note [One OpenMP pool at a time]). In deterministic mode the caller runs the kernels.
  if (!on_caller() && thread_kernel_threads_ != 1) release_kernel_threads();
  bool start = true;  // not after a failure: the run ends at once (wait_for_iteration)
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    start = failure_.empty();
  }
  if (start) {
    for (Actor* tick : ticks_) {
      deliver(ActorMessage::register_ready({kCallerActor, tick->rank()}, {tick->id(), tick->rank()},
                                           kRunRegisterBase + tick->rank(), /*slot=*/0,
                                           iteration_));
    }
  }
  wait_for_iteration();
  running.reset();
  inputs_ = nullptr;
  input_pieces_ = nullptr;
  std::vector<std::pair<int, Tensor>> fetched;
  for (int t = 0; t < index_.num_tasks(); ++t) {
    if (actor_of_task_[t] == nullptr) continue;
    auto piece = take_fetched_piece(*actor_of_task_[t], iteration_);
    if (piece && piece->defined()) {
      fetched.emplace_back(t, *piece);
    }
  }
  acts_done_[iteration_ % kIterationSlots].store(0, std::memory_order_release);
  ++iteration_;
  return fetched;
}

}  // namespace ofl::actor
