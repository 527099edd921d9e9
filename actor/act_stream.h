#pragma once
// ActStream: where an actor's work runs when it does not run on the actor's thread.
//
// Note [Event-gated acts]: on a GPU an actor enqueues its kernels on its device's stream and
// returns; the data is there only once the stream has run them. So the act protocol (actor.cpp)
// splits an act in two:
//  - at the act, on the actor's thread: claim the pieces, launch the work on the stream, and
//    send the messages whose receiver runs on the same stream (stream order puts its work after
//    ours, and an ack to a producer on it puts the producer's next write after our read);
//  - when the stream reports the work done (a poller per device polls an event recorded after
//    it; a CPU worker stream calls back after running it): on the actor's thread again, through
//    a kActDone message, send every other message (ready, ack, end of stream) and count the act.
// Messages that only release inputs kept past an act (Note [Acts, pieces and micro-batches])
// go through the stream too, behind the work of whoever acknowledged them early.
// Nothing blocks the actor's thread: it may act again while earlier acts are in flight, as far
// as its register slots allow.
//
// Note [Acts without events]: most acts on a GPU send every message at the act (their readers
// and their producers share the stream), so their end tells no one anything but the count of
// the iteration. Such an act only enqueues its work (ActStream::enqueue): no event, no poll, no
// act-done message back to the actor's thread; it is counted at once. What the count stood for
// comes back at the end of the iteration: the runtime waits for its streams
// (ActStream::synchronize) before run() returns, so an iteration is still over only when its
// work has run. What such work throws reaches the runtime through the stream's failure handler,
// naming the act, as a launched act's error does; a fault the device reports later (a CUDA
// kernel's) names the stream, or the next launched act, instead. The runtime also waits for its
// streams before it frees registers (shutdown, and a CUDA stream's end), and a CUDA stream is
// busy (progress, for the watchdog) while the device still runs what it was given. Acts with a
// message for another stream, thread or rank are launched as above; a stream that cannot
// enqueue (the collective engine's) launches everything.
//
// The CPU has the same protocol as an option (RuntimeOptions::async_cpu_streams: a worker
// thread per stream), so it runs in CI, where there is no GPU.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace ofl::actor {

class Actor;

class ActStream {
 public:
  /// Called once the work has finished (on the stream's own thread), with what it threw.
  using Done = std::function<void(std::exception_ptr error)>;
  /// Whose act enqueued work was (Note [Acts without events]), for the report when it throws.
  struct Origin {
    const Actor* actor = nullptr;
    int64_t act = 0;
  };
  /// Told what enqueued work threw, on whichever thread ran it; set once, before any enqueue.
  using Failed = std::function<void(const Origin& origin, std::exception_ptr error)>;
  virtual ~ActStream() = default;
  /// "rank 0 compute (CPU worker)", for reports.
  virtual const std::string& name() const = 0;
  /// Queues `work` (may be empty: a marker) after everything queued before, and `done` after it.
  /// From the actor's thread only.
  virtual void launch(std::function<void()> work, Done done) = 0;
  /// Whether launched work has not finished yet (the watchdog counts it as progress).
  virtual bool busy() const = 0;
  /// Whether enqueue() may be called: work queued with no callback.
  virtual bool enqueues() const { return false; }
  /// Queues `work` after everything queued before, like launch() with nothing to call after it
  /// (Note [Acts without events]); what it throws goes to the failure handler. From the
  /// actor's thread only, and only where enqueues().
  virtual void enqueue(std::function<void()> work, Origin origin);
  /// Blocks until everything queued or launched so far has run; throws what the device reports
  /// while waiting (a CUDA error).
  virtual void synchronize() {}
  /// After a failed run (Note [Hung streams] in runtime_threads.cpp): drops the work not started
  /// yet, where the stream can (a CPU worker's queue; a device's queued kernels cannot be).
  virtual void drop_pending() {}
  /// The runtime gives the stream up (Note [Hung streams]): work that ends from now on calls no
  /// callback (its done, the failure handler), as nothing that would hear of it may remain.
  virtual void abandon() {}
  void set_failure_handler(Failed failed) { failed_ = std::move(failed); }

 protected:
  /// Hands what enqueued work of `origin` threw to the failure handler.
  void report(const Origin& origin, std::exception_ptr error) const;

 private:
  Failed failed_;
};

/// A worker thread that runs launched work in order; `kernel_threads` OpenMP threads for it
/// (0: OpenMP's default).
std::unique_ptr<ActStream> make_cpu_worker_stream(std::string name, int kernel_threads);

/// CUDA device `device`'s compute stream: work runs on the caller's thread and enqueues its
/// kernels there; an event recorded after it is polled by the device's poller, which calls
/// `done`. Raises "no CUDA device" (Note [No CUDA device] in oneflowlike/cuda/device.h) without
/// one.
std::unique_ptr<ActStream> make_cuda_stream(std::string name, int device);

}  // namespace ofl::actor
