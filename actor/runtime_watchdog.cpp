// Waiting for an iteration, and Note [Watchdog]: what every waiting actor lacks when none acts.

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "actor/runtime.h"
#include "actor/runtime_internal.h"
#include "oneflowlike/common/clock.h"

namespace ofl::actor {

// Note [Watchdog]: the iteration ends when every actor has acted its share. If for
// watchdog_seconds no actor acts (and none is in the middle of an act, nor has work running on
// its stream: a long kernel is progress), every waiting actor is reported with the registers it
// lacks and from whom, and the cycle among them, if there is one. Work under way counts for at
// most StallClock::kBusyLimitFactor periods with nothing finishing (runtime_internal.h): a
// kernel or an NCCL collective that never ends is a stall too, reported with what was under
// way. In deterministic mode a stall shows at once: no message is pending and no actor can
// act.
void Runtime::wait_for_iteration() {
  if (options_.deterministic) {
    run_deterministic();
    std::unique_lock<std::mutex> lock(done_mu_);
    if (!failure_.empty()) {
      lock.unlock();
      stop_threads();
      throw_error(failure_code_, failure_);
    }
    if (!iteration_done()) {
      lock.unlock();
      const std::string report = stall_report();
      stop_threads();
      throw_error(ErrorCode::kDeadlineExceeded,
                  str_cat(kTag, "no actor can act and no message is pending in iteration ",
                          iteration_, " (deterministic mode).", report));
    }
    return;
  }
  if (options_.caller_runs) {
    run_on_caller([this] { return iteration_done(); });
  }
  int64_t last_remaining = acts_per_iteration_ - acts_done_[iteration_ % kIterationSlots].load();
  StallClock clock(options_.watchdog_seconds, now_ns());
  std::unique_lock<std::mutex> lock(done_mu_);
  while (!iteration_done() && failure_.empty()) {
    done_cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (iteration_done() || !failure_.empty()) break;
    const int64_t remaining = acts_per_iteration_ - acts_done_[iteration_ % kIterationSlots].load();
    bool acting = false;
    for (const auto& thread : threads_) acting = acting || thread->acting() != nullptr;
    for (const auto& stream : streams_) acting = acting || stream->busy();
    const std::string stalled = clock.check(remaining != last_remaining, acting, now_ns());
    last_remaining = remaining;
    if (!stalled.empty()) {
      lock.unlock();
      throw_stall(stalled);
    }
  }
  if (failure_.empty()) {
    // Note [Acts without events]: acts counted at their act had their work queued only; the
    // iteration is over once the streams have run it. Under the same watchdog: work that
    // never ends (a hung kernel) is a stall here too, not a run() that never returns.
    lock.unlock();
    if (await_streams(clock)) synchronize_streams();  // else a failure came: reported below
    lock.lock();
  }
  if (!failure_.empty()) {
    std::string failure = failure_;
    const ErrorCode code = failure_code_;
    const bool departure = failed_by_departure_;
    lock.unlock();
    // The rank that left comes first; what each actor waits for after, for those who want it.
    if (departure) {
      const std::string report = stall_report();
      failure += '\n';
      failure.append(report, report.find_first_not_of(' '));
    }
    stop_threads();
    throw_error(code, failure);
  }
}

bool Runtime::await_streams(StallClock& clock) {
  const auto busy_streams = [&] {
    int busy = 0;
    for (const auto& stream : streams_) busy += stream->busy() ? 1 : 0;
    return busy;
  };
  int busy = busy_streams();
  // Polled, as a CUDA stream has no timed wait: 2 us doubling to at most 256 us between looks,
  // so the end of a GPU step is seen within a quarter of a millisecond.
  std::chrono::microseconds pause(2);
  while (busy > 0) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(256));
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      if (!failure_.empty()) return false;
    }
    const int now_busy = busy_streams();
    const bool finished = now_busy < busy;  // a stream went idle
    busy = now_busy;
    const std::string stalled = clock.check(finished, /*busy=*/busy > 0, now_ns());
    if (!stalled.empty()) throw_stall(stalled);
  }
  return true;
}

void Runtime::synchronize_streams() {
  for (const auto& stream : streams_) {
    try {
      stream->synchronize();
    } catch (...) {
      const auto [code, what] = error_of(std::current_exception());
      fail(code, str_cat(kTag, "stream '", stream->name(), "' failed in iteration ", iteration_,
                         ": ", what));
    }
  }
}

void Runtime::throw_stall(const std::string& why) {
  std::string report = stall_report();
  // What was under way, for a stall of work that does not end.
  std::string busy;
  for (const auto& thread : threads_) {
    if (const Actor* actor = thread->acting()) busy += str_cat(" '", actor->name(), "' acting;");
  }
  for (const auto& stream : streams_) {
    if (stream->busy()) busy += str_cat(" stream '", stream->name(), "' busy;");
  }
  if (!busy.empty()) report = str_cat("\n  Under way:", busy, report);
  const int64_t done = acts_done_[iteration_ % kIterationSlots].load();
  stop_threads();
  throw_error(ErrorCode::kDeadlineExceeded,
              str_cat(kTag, why, " (watchdog ", options_.watchdog_seconds, " s) in iteration ",
                      iteration_, " (", done, " of ", acts_per_iteration_, " acts done).", report));
}

std::string Runtime::stall_report() const {
  std::map<int64_t, std::vector<int64_t>> waits_on;  // actor -> actors it waits for
  std::map<int64_t, const Actor*> waiting;
  std::map<int64_t, std::string> reports;
  std::string lines;
  int listed = 0;
  for (const auto& thread : threads_) {
    auto lock = thread->lock_state(/*seconds=*/1);
    if (!lock.owns_lock()) {  // acting again after all: a long act started late
      lines += str_cat("\n  thread '", thread->name(), "' is busy and was not inspected");
      continue;
    }
    for (const Actor* actor : thread->actors()) {
      if (actor->acts() >= (iteration_ + 1) * actor->acts_per_iteration()) continue;
      std::vector<int64_t> on;
      const std::string waits = actor->waiting_for(&on);
      if (waits.empty()) {  // a bug if it stays so: it could act, yet no thread runs it
        lines += str_cat("\n  ", actor->name(), " could act (", actor->acts(), " acts, ",
                         actor->queued ? "queued" : "not queued", ") but has not");
        continue;
      }
      waiting[actor->id()] = actor;
      waits_on[actor->id()] = on;
      reports[actor->id()] = waits;
    }
  }
  // The frontier first: actors waiting on one that is not waiting itself (a rank elsewhere, a
  // message in flight); the others wait on them.
  std::vector<int64_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [id, on] : waits_on) {
      const bool frontier =
          std::any_of(on.begin(), on.end(), [&](int64_t a) { return waiting.count(a) == 0; });
      if (frontier == (pass == 0)) order.push_back(id);
    }
  }
  for (int64_t id : order) {
    if (listed++ < 20)
      lines += str_cat("\n  ", waiting.at(id)->name(), " waits for ", reports.at(id));
  }
  if (listed > 20) lines += str_cat("\n  and ", listed - 20, " more waiting actors");

  // A cycle among the waiting actors: depth-first search over "waits for".
  std::map<int64_t, int> state;  // 1: on the stack, 2: done
  std::vector<int64_t> stack, cycle;
  std::function<bool(int64_t)> visit = [&](int64_t a) {
    state[a] = 1;
    stack.push_back(a);
    for (int64_t b : waits_on[a]) {
      if (!waiting.count(b)) continue;
      if (state[b] == 1) {
        cycle.assign(std::find(stack.begin(), stack.end(), b), stack.end());
        cycle.push_back(b);
        return true;
      }
      if (state[b] == 0 && visit(b)) return true;
    }
    stack.pop_back();
    state[a] = 2;
    return false;
  };
  for (const auto& [id, actor] : waiting) {
    if (state[id] == 0 && visit(id)) break;
  }
  std::string cycle_text;
  if (!cycle.empty()) {
    cycle_text = "\nCycle:";
    for (size_t i = 0; i < cycle.size(); ++i) {
      cycle_text += str_cat(i ? " -> " : " ", waiting.at(cycle[i])->name());
    }
  } else {
    cycle_text =
        "\nNo cycle among them: they wait for an actor that is not waiting itself (a message "
        "in flight, a busy thread, or a rank outside this process).";
  }
  return str_cat(" Waiting actors:", lines.empty() ? " none" : lines, cycle_text);
}

}  // namespace ofl::actor
