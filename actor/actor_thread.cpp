#include "actor/actor_thread.h"

#include <omp.h>
#include <sched.h>

#include <chrono>

#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ofl::actor {

namespace {

thread_local ActorThread* tls_current = nullptr;

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Sets tls_current for a scope (the inline loop runs on the caller's thread).
class CurrentThreadScope {
 public:
  explicit CurrentThreadScope(ActorThread* thread) : previous_(tls_current) {
    tls_current = thread;
  }
  ~CurrentThreadScope() { tls_current = previous_; }

 private:
  ActorThread* previous_;
};

}  // namespace

ActorThread::ActorThread(std::string name, int64_t rank, int index, Options options,
                         ActorHost* host, FailureHandler on_failure)
    : name_(std::move(name)),
      rank_(rank),
      index_(index),
      options_(options),
      host_(host),
      on_failure_(std::move(on_failure)) {}

ActorThread::~ActorThread() { stop(); }

ActorThread* ActorThread::current() { return tls_current; }

void ActorThread::add_actor(Actor* actor) {
  actors_.push_back(actor);
  by_id_[actor->id()] = actor;
  actor->set_thread(this);
}

void ActorThread::start() {
  OFL_ASSERT(!thread_.joinable());
  thread_ = std::thread([this] { loop(); });
}

void ActorThread::stop() {
  stop_.store(true, std::memory_order_seq_cst);
  wake_epoch_.fetch_add(1, std::memory_order_seq_cst);
  wake_epoch_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool ActorThread::join(double seconds) {
  if (!thread_.joinable()) return true;
  const int64_t deadline = now_ns() + static_cast<int64_t>(seconds * 1e9);
  while (!finished_.load(std::memory_order_acquire) && now_ns() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const bool finished = finished_.load(std::memory_order_acquire);
  stop();
  return finished;
}

void ActorThread::post(const ActorMessage& message) {
  if (tls_current == this) {
    local_.push_back(message);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    incoming_.push_back(message);
    incoming_size_.store(incoming_.size(), std::memory_order_seq_cst);
  }
  // Note [Spin, then park]: pairs with wait_for_messages (store size, then read parked; the
  // thread stores parked, then reads size), so one of the two sees the other.
  if (parked_.load(std::memory_order_seq_cst)) {
    wake_epoch_.fetch_add(1, std::memory_order_seq_cst);
    wake_epoch_.notify_one();
  }
}

void ActorThread::loop() {
  tls_current = this;
  if (options_.kernel_threads > 0) omp_set_num_threads(options_.kernel_threads);
  while (!stop_.load(std::memory_order_relaxed)) {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      drain();
      // After a failure the thread acts no more (the runtime stops every thread).
      if (failed_ || retired_ == static_cast<int>(actors_.size())) break;
    }
    wait_for_messages();
  }
  finished_.store(true, std::memory_order_release);
  tls_current = nullptr;
}

int64_t ActorThread::run_inline() {
  CurrentThreadScope scope(this);
  std::lock_guard<std::mutex> lock(state_mu_);
  return drain();
}

void ActorThread::wait_for_messages() {
  const auto spin_until = now_ns() + static_cast<int64_t>(options_.spin_microseconds * 1000.0);
  for (int i = 0;; ++i) {
    if (has_incoming() || stop_.load(std::memory_order_relaxed)) return;
    // A communication thread drives the transport while it spins: a message from another
    // process then reaches its actor on this thread without a hand-off (Note [Spin, then park]).
    if (options_.poll && options_.poll()) {
      if (!local_.empty()) return;
      i = 0;
      continue;
    }
    if ((i & 63) == 63) {
      if (now_ns() >= spin_until) break;
      sched_yield();  // let another runnable thread have the core
    }
    cpu_relax();
  }
  parked_.store(true, std::memory_order_seq_cst);
  const uint32_t epoch = wake_epoch_.load(std::memory_order_seq_cst);
  if (!has_incoming() && !stop_.load(std::memory_order_seq_cst)) wake_epoch_.wait(epoch);
  parked_.store(false, std::memory_order_relaxed);
}

int64_t ActorThread::drain() {
  int64_t acts = 0;
  std::vector<ActorMessage> batch;
  // The actor being handled or acting, for the failure report.
  const Actor* current = nullptr;
  try {
    while (!failed_ && !stop_.load(std::memory_order_relaxed)) {
      if (!local_.empty()) {
        const ActorMessage message = local_.front();
        local_.pop_front();
        handle(message, &current);
        continue;
      }
      if (has_incoming()) {
        {
          std::lock_guard<std::mutex> lock(queue_mu_);
          batch.swap(incoming_);
          incoming_size_.store(0, std::memory_order_seq_cst);
        }
        for (const ActorMessage& message : batch) handle(message, &current);
        batch.clear();
        continue;
      }
      if (ready_.empty()) break;
      Actor* actor = ready_.top().actor;
      current = actor;
      ready_.pop();
      actor->queued = false;
      TraceEvent event;
      if (options_.trace) {
        event = TraceEvent{actor, actor->iteration(), actor->micro_batch(), now_ns(), 0};
      }
      acting_.store(actor, std::memory_order_release);
      actor->act(*host_);
      acting_.store(nullptr, std::memory_order_release);
      if (options_.trace) {
        event.end_ns = now_ns();
        trace_.push_back(event);
      }
      ++acts;
      if (actor->retired()) ++retired_;
      make_ready_if_can_act(actor);
    }
  } catch (...) {
    failed_ = true;
    acting_.store(nullptr, std::memory_order_release);
    on_failure_(current, std::current_exception());
  }
  return acts;
}

void ActorThread::handle(const ActorMessage& message, const Actor** current) {
  if (message_log_ != nullptr) message_log_->push_back(message.to_string());
  auto it = by_id_.find(message.dst_actor);
  OFL_ASSERT(it != by_id_.end()) << name_ << " got a message for an actor it does not run: "
                                 << message.to_string();
  Actor* actor = it->second;
  *current = actor;  // before it can throw (a stream's act that failed)
  const bool was_retired = actor->retired();
  actor->on_message(message, *host_);
  if (!was_retired && actor->retired()) ++retired_;
  make_ready_if_can_act(actor);
}

void ActorThread::make_ready_if_can_act(Actor* actor) {
  if (actor->queued || !actor->can_act()) return;
  actor->queued = true;
  ready_.push(ReadyEntry{actor->priority(), actor->id(), actor});
}

std::unique_lock<std::mutex> ActorThread::lock_state(double seconds) {
  std::unique_lock<std::mutex> lock(state_mu_, std::try_to_lock);
  const int64_t deadline = now_ns() + static_cast<int64_t>(seconds * 1e9);
  while (!lock.owns_lock() && now_ns() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.try_lock();
  }
  return lock;
}

std::vector<TraceEvent> ActorThread::take_trace() {
  std::lock_guard<std::mutex> lock(state_mu_);
  std::vector<TraceEvent> events;
  events.swap(trace_);
  return events;
}

}  // namespace ofl::actor
