#pragma once
// ActorThread: one OS thread (a device's compute stream, or communication) and the actors
// pinned to it. Messages from other threads arrive in a locked queue the thread drains in
// batches; messages between actors of the same thread go through a local queue without locks.
//
// Note [Thread schedule]: the thread first applies every pending message, then lets one ready
// actor act, and repeats. Among ready actors the one with the highest priority (the latest plan
// position) acts first: when forward and backward work of different micro-batches are both
// ready, backward goes first, which gives the 1F1B order and its memory bound under pipeline
// parallelism (DESIGN.md, "Pipeline stages are placements").
//
// Note [Spin, then park]: waking a thread parked on a futex costs ~45 us on this VM (the idle
// core halts), while a spinning thread sees a new message within ~0.2 us. An idle thread
// therefore spins for a bounded time (RuntimeOptions::spin_microseconds) and then parks.
// While spinning it yields the core to any other runnable thread, so on a machine with fewer
// cores than threads a spinning communication thread does not starve a compute thread.

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actor/actor.h"
#include "actor/message.h"

namespace ofl::actor {

/// One act, for the Chrome trace (RuntimeOptions::trace).
struct TraceEvent {
  const Actor* actor = nullptr;
  int64_t iteration = 0;
  int micro_batch = 0;
  int64_t begin_ns = 0;  // steady clock
  int64_t end_ns = 0;
};

class ActorThread {
 public:
  struct Options {
    double spin_microseconds = 50;
    bool trace = false;
    int kernel_threads = 0;  // OpenMP threads for kernels on this thread; 0: the default
    // Called while spinning (communication threads: the transport's progress); returns whether
    // it did something.
    std::function<bool()> poll;
  };
  /// Called when an act (or handling a message) throws, with the actor involved (null when
  /// none was): the thread stops acting and its loop ends.
  using FailureHandler = std::function<void(const Actor* actor, std::exception_ptr error)>;

  ActorThread(std::string name, int64_t rank, int index, Options options, ActorHost* host,
              FailureHandler on_failure);
  ~ActorThread();
  ActorThread(const ActorThread&) = delete;
  ActorThread& operator=(const ActorThread&) = delete;

  const std::string& name() const { return name_; }
  int64_t rank() const { return rank_; }
  int index() const { return index_; }
  void add_actor(Actor* actor);
  /// Sets Options::poll; before start().
  void set_poll(std::function<bool()> poll) { options_.poll = std::move(poll); }
  const std::vector<Actor*>& actors() const { return actors_; }

  /// Starts the OS thread; it runs until every actor retired or stop().
  void start();
  /// Asks the thread to stop now (after a failure) and joins it.
  void stop();
  /// Joins a thread whose actors all retire (after end-of-stream); stops it if they have not
  /// within `seconds`. Returns whether they had.
  bool join(double seconds);

  /// Queues a message for one of this thread's actors; from any thread.
  void post(const ActorMessage& message);
  /// The thread running the caller, or null when the caller is no actor thread.
  static ActorThread* current();

  /// Deterministic mode: runs this thread's loop on the caller's thread until no message is
  /// pending and no actor can act. Returns the number of acts.
  int64_t run_inline();

  /// The actor acting right now, or null (the watchdog tells a long kernel from a hang).
  const Actor* acting() const { return acting_.load(std::memory_order_acquire); }
  /// Locks the actors' state against this thread's loop (the watchdog reads it); gives up
  /// after `seconds` (the lock is not owned then).
  std::unique_lock<std::mutex> lock_state(double seconds);

  /// Acts recorded since the last call (trace option).
  std::vector<TraceEvent> take_trace();
  /// Deterministic mode: every message handled, in order, when recording is on.
  void record_messages(std::vector<std::string>* log) { message_log_ = log; }

 private:
  void loop();
  // Applies pending messages and runs ready actors until both are exhausted (or a failure).
  // Returns the number of acts. Caller holds state_mu_.
  int64_t drain();
  // Applies one message; `current` gets the actor it is for (the failure report's).
  void handle(const ActorMessage& message, const Actor** current);
  void make_ready_if_can_act(Actor* actor);
  bool has_incoming() const { return incoming_size_.load(std::memory_order_seq_cst) != 0; }
  void wait_for_messages();

  std::string name_;
  int64_t rank_;
  int index_;
  Options options_;
  ActorHost* host_;
  FailureHandler on_failure_;
  std::vector<Actor*> actors_;
  std::unordered_map<int64_t, Actor*> by_id_;

  // Other threads' messages.
  std::mutex queue_mu_;
  std::vector<ActorMessage> incoming_;  // GUARDED_BY(queue_mu_)
  std::atomic<size_t> incoming_size_{0};
  std::atomic<bool> parked_{false};
  std::atomic<uint32_t> wake_epoch_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};

  // Owned by the thread's loop (and the watchdog, under state_mu_).
  std::mutex state_mu_;
  std::deque<ActorMessage> local_;
  struct ReadyEntry {
    int priority;
    int64_t id;
    Actor* actor;
    bool operator<(const ReadyEntry& o) const {
      return priority != o.priority ? priority < o.priority : id > o.id;
    }
  };
  std::priority_queue<ReadyEntry> ready_;
  int retired_ = 0;
  bool failed_ = false;
  std::atomic<const Actor*> acting_{nullptr};
  std::vector<TraceEvent> trace_;
  std::vector<std::string>* message_log_ = nullptr;
  std::thread thread_;
};

}  // namespace ofl::actor
