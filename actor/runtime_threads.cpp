// The runtime's threads: which actors each runs, how messages reach them, and how they end
// (a shutdown passes the end of stream through every actor; a failure stops them).

#include <glog/logging.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "actor/runtime.h"
#include "actor/runtime_internal.h"
#include "oneflowlike/common/clock.h"

namespace ofl::actor {

namespace {

// SEND and RECV move their bytes through the transport within their act.
bool is_transfer(const PlanIndex& index, const Actor& actor) {
  if (actor.task() < 0) return false;
  const auto kind = index.task(actor.task()).proto.kind();
  return kind == proto::TaskProto::SEND || kind == proto::TaskProto::RECV;
}

bool is_collective(const PlanIndex& index, const Actor& actor) {
  return actor.task() >= 0 && index.task(actor.task()).proto.kind() == proto::TaskProto::COLLECTIVE;
}

}  // namespace

// One thread per (rank, plan thread): 0 is the compute stream, 1 communication. Deterministic
// and caller-run modes put every actor on one thread run by the caller.
void Runtime::assign_threads() {
  std::set<int64_t> compute_ranks;
  for (const auto& actor : actors_) compute_ranks.insert(actor->rank());
  ActorThread::Options thread_options;
  thread_options.spin_microseconds = options_.spin_microseconds;
  thread_options.trace = options_.trace;
  thread_options.kernel_threads =
      options_.kernel_threads > 0 ? options_.kernel_threads : (compute_ranks.size() > 1 ? 1 : 0);
  thread_kernel_threads_ = thread_options.kernel_threads;
  auto on_failure = [this](const Actor* actor, std::exception_ptr error) {
    this->on_failure(actor, error);
  };
  std::map<std::pair<int64_t, int>, ActorThread*> by_key;
  for (const auto& actor : actors_) {
    const int plan_thread = actor->task() >= 0 ? index_.task(actor->task()).proto.thread() : 0;
    const auto key =
        on_caller() ? std::make_pair(int64_t{0}, 0) : std::make_pair(actor->rank(), plan_thread);
    ActorThread*& thread = by_key[key];
    if (thread == nullptr) {
      const std::string name =
          options_.deterministic ? "deterministic"
          : options_.caller_runs
              ? "caller"
              : str_cat("rank ", key.first, key.second == 0 ? " compute" : " communication");
      threads_.push_back(std::make_unique<ActorThread>(name, key.first, key.second, thread_options,
                                                       static_cast<ActorHost*>(this), on_failure));
      thread = threads_.back().get();
      if (options_.record_messages) thread->record_messages(&message_log_);
    }
    thread->add_actor(actor.get());
  }
  // Threads running transfers drive the transport while idle (Note [Spin, then park]).
  if (on_caller()) return;
  comm::Transport* transport = transport_.get();
  for (auto& thread : threads_) {
    for (const Actor* actor : thread->actors()) {
      if (is_transfer(index_, *actor)) {
        thread->set_poll([transport] { return transport->progress(); });
        break;
      }
    }
  }
}

// Note [Event-gated acts] in act_stream.h: with async_cpu_streams each rank's compute thread gets
// a worker stream for its actors; messages between actors of one stream go at the act.
// Streams of a rank's compute thread: its GPU's compute stream for the tasks on the GPU and the
// copies (one stream, so they run in chain order: Note [Devices in a plan]); a CPU worker for
// the host tasks when asked for. Without a stream a task's work runs at its act; deterministic
// mode makes none (its one thread takes no messages from pollers). A GPU task's kernels are
// still asynchronous then, but everything that reads their results is on the same CUDA stream
// or behind a copy to the host, which returns once done, so the order holds.
void Runtime::assign_streams() {
  const char* env = std::getenv("OFL_ASYNC_CPU_STREAMS");
  const bool host_streams = !on_caller() && (options_.async_cpu_streams || options_.make_stream ||
                                             (env != nullptr && std::string(env) == "1"));
  auto on_gpu = [&](const Actor& actor) {
    if (actor.task() < 0) return false;
    const proto::TaskProto& task = index_.task(actor.task()).proto;
    return task.device() == proto::PLAN_DEVICE_CUDA || task.kind() == proto::TaskProto::COPY_H2D ||
           task.kind() == proto::TaskProto::COPY_D2H;
  };
  // Collectives run on the engine (Note [Collective engine] in collective_engine.h), in every
  // mode: in deterministic mode its caller advances it.
  for (const auto& actor : actors_) {
    if (!is_collective(index_, *actor)) continue;
    if (collectives_ == nullptr) {
      collectives_ = std::make_unique<CollectiveEngine>("collectives", !on_caller());
    }
    streams_.push_back(collectives_->make_stream(str_cat(actor->name(), " (collective engine)")));
    actor->set_stream(streams_.back().get());
  }
  for (auto& thread : threads_) {
    if (thread->index() != 0) continue;  // communication threads move bytes themselves
    ActStream* host = nullptr;
    ActStream* gpu = nullptr;
    for (Actor* actor : thread->actors()) {
      // A transfer keeps no stream, so its neighbours on this one send it their messages once
      // their work has run. A collective has its own (above).
      if (is_transfer(index_, *actor) || is_collective(index_, *actor)) continue;
      if (on_gpu(*actor)) {
        if (gpu == nullptr && options_.simulate_cuda && !options_.deterministic) {
          streams_.push_back(make_cpu_worker_stream(str_cat(thread->name(), " (simulated GPU)"),
                                                    thread_kernel_threads_));
          gpu = streams_.back().get();
        } else if (gpu == nullptr && !options_.simulate_cuda && !options_.deterministic) {
          const int device = gpu_of_rank_.at(thread->rank());
          streams_.push_back(
              make_cuda_stream(str_cat(thread->name(), " (cuda:", device, ")"), device));
          gpu = streams_.back().get();
        }
        if (gpu != nullptr) actor->set_stream(gpu);
      } else if (host_streams) {
        if (host == nullptr) {
          const std::string name = str_cat(thread->name(), " (CPU worker)");
          streams_.push_back(options_.make_stream
                                 ? options_.make_stream(thread->rank(), name)
                                 : make_cpu_worker_stream(name, thread_kernel_threads_));
          host = streams_.back().get();
        }
        actor->set_stream(host);
      }
    }
  }
  auto shares_stream = [&](const Actor& actor, int64_t other) {
    auto it = actor_by_id_.find(other);
    return it != actor_by_id_.end() && actor.stream() != nullptr &&
           it->second->stream() == actor.stream();
  };
  // Note [Acts without events]: what enqueued work throws ends the run as an act's error does.
  const char* every = std::getenv("OFL_EVENT_EVERY_ACT");
  if (options_.event_every_act || (every != nullptr && std::string(every) == "1")) {
    for (const auto& actor : actors_) actor->set_enqueues(false);
  }
  for (const auto& stream : streams_) {
    stream->set_failure_handler([this](const ActStream::Origin& origin, std::exception_ptr error) {
      on_failure(origin.actor, origin.act, error);
    });
  }
  for (const auto& actor : actors_) {
    for (InputEdge& in : actor->inputs()) {
      in.producer_same_stream = shares_stream(*actor, in.producer);
    }
    for (OutputRegister& out : actor->outputs()) {
      for (OutputRegister::Consumer& c : out.consumers) {
        c.same_stream = shares_stream(*actor, c.actor);
      }
    }
  }
}

// Note [Caller-run runtimes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An eager op on global tensors is a compiled one-op plan run once per call (framework/
// global_tensor.py). With actor threads, every call handed the work to the rank's compute
// thread and back (two cross-core wake-ups on this machine, about 45 us each: MACHINE.md), and
// each of the hundreds of such plans had threads of its own, so consecutive ops ran on different
// threads, often on the other core, far from the caches their inputs were in: measured on the
// small GPT's eager DP2 step, the forward's matmuls took twice their time in isolation. In
// caller-run mode the caller is the one actor thread: run() acts for every actor itself, and
// between acts drives the transport (messages and transfers from other processes arrive during
// its progress()) and the collectives (an engine without a thread), until the iteration is done.
// Waiting for another process it spins, yielding the core, then naps; the watchdog's rule is
// the same as with threads (nothing moved for watchdog_seconds: a stall report). Host plans
// only: a plan with GPU tasks keeps the threads and event-gated streams of the threaded mode.
void Runtime::run_on_caller(const std::function<bool()>& done) {
  const int64_t spin_ns = static_cast<int64_t>(std::max(options_.spin_microseconds, 0.0) * 1e3);
  int64_t last_moved = now_ns();  // for spinning, then napping
  StallClock clock(options_.watchdog_seconds, last_moved);
  for (;;) {
    int64_t acts = 0;
    for (auto& thread : threads_) acts += thread->run_inline();
    bool moved = acts > 0;
    if (collectives_ != nullptr && collectives_->advance()) moved = true;
    if (transport_->progress()) moved = true;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      if (!failure_.empty()) return;
    }
    if (done()) return;
    const int64_t now = now_ns();
    // As in the threaded mode's watchdog, a collective with work under way (waiting for a slow
    // peer) is progress, for a while (StallClock).
    bool busy = false;
    for (const auto& stream : streams_) busy = busy || stream->busy();
    if (moved) last_moved = now;
    const std::string stalled = clock.check(moved, busy, now);
    if (!stalled.empty()) throw_stall(stalled);
    if (now - last_moved > spin_ns) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      sched_yield();
    }
  }
}

void Runtime::run_deterministic() {
  for (;;) {
    const int64_t acts = threads_.at(0)->run_inline();
    const bool moved = collectives_ != nullptr && collectives_->advance();
    if (acts == 0 && !moved) return;
  }
}

void Runtime::send(const ActorMessage& message) {
  if (message.dst_actor == kCallerActor) return;  // the tick's ack of a start
  if (message.src_rank != message.dst_rank) {
    transport_->send(message.dst_rank, to_bytes(message));
    return;
  }
  deliver(message);
}

void Runtime::deliver(const ActorMessage& message) {
  auto it = actor_by_id_.find(message.dst_actor);
  OFL_ASSERT(it != actor_by_id_.end()) << "no actor for " << message.to_string();
  it->second->thread()->post(message);
}

// After a failure or a stall no actor may act on: the caller's inputs go away when run()
// throws, and variables are read afterwards. Stops every thread (each finishes its current act).
void Runtime::stop_threads() {
  tell_peers_of_failure();
  for (auto& thread : threads_) thread->stop();
  // The collectives: the engine first, so no thread is inside a communicator, then the NCCL
  // communicators are aborted (Note [Nonblocking communicators] in cuda/nccl.h), or a GPU
  // stream below could wait for ever for a collective whose peer never comes.
  if (collectives_ != nullptr) collectives_->stop();
  if (device_collectives_ != nullptr) device_collectives_->abort();
  // And the work launched on streams (dropped if not started): nothing may write a register
  // once run() has thrown.
  for (const auto& actor : actors_) actor->set_stream(nullptr);
  abandon_if_streams_hang();
  streams_.clear();
  broken_ = true;
  inputs_ = nullptr;
}

// Note [Hung streams]: a stream whose work never ends (a kernel that hangs) cannot be waited
// for, and its registers cannot be freed while the device may still write them. So after a
// failed run each stream drops the work it has not started (a CPU worker's queue; kernels
// already on a device stay), and the work under way gets the watchdog's period (at least 1 s)
// to finish. If some has not, the runtime logs it, tells every stream that nothing may be
// called back from work that ends later (ActStream::abandon: no done, no failure report), and
// leaves what that work could touch allocated for the life of the process: its streams,
// actors, threads, collectives and memory (a failed job's leak, instead of a hang in the
// destructor or a write into freed memory). A kernel that hangs is assumed not to read the
// plan's index again should it ever end: the index goes with the runtime.
void Runtime::abandon_if_streams_hang() {
  if (streams_.empty()) return;
  for (const auto& stream : streams_) stream->drop_pending();
  const double limit_s = std::max(options_.watchdog_seconds, 1.0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  std::string hung;
  for (const auto& stream : streams_) {
    while (stream->busy() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (stream->busy()) hung += str_cat(" '", stream->name(), "'");
  }
  if (hung.empty()) return;
  for (const auto& stream : streams_) stream->abandon();
  LOG(ERROR) << kTag << "stream(s)" << hung << " still ran work " << limit_s
             << " s after the run stopped: this runtime's memory, streams and threads are left "
                "allocated, as that work may still use them (Note [Hung streams]).";
  struct Abandoned {
    std::vector<std::unique_ptr<ActStream>> streams;
    std::vector<std::unique_ptr<Actor>> actors;
    std::vector<std::unique_ptr<ActorThread>> threads;
    std::unique_ptr<CollectiveEngine> collectives;
    std::unique_ptr<DeviceCollectives> device_collectives;
    std::map<std::pair<int64_t, int64_t>, Tensor> blocks;
    std::vector<PinnedBlock> pinned;
  };
  static std::mutex mu;
  static auto* abandoned = new std::vector<Abandoned>();  // never freed, by design
  Abandoned a{std::move(streams_),
              std::move(actors_),
              std::move(threads_),
              std::move(collectives_),
              std::move(device_collectives_),
              std::move(blocks_),
              std::move(pinned_)};
  std::lock_guard<std::mutex> lock(mu);
  abandoned->push_back(std::move(a));
  streams_.clear();
  actors_.clear();
  threads_.clear();
  blocks_.clear();
  pinned_.clear();
}

bool Runtime::shutdown() {
  if (shut_down_) return all_retired_;
  shut_down_ = true;
  {
    // Note [Failed runs across processes]: a peer's runtime has gone; the end of stream would
    // wait for it in vain.
    std::lock_guard<std::mutex> lock(done_mu_);
    if (!peer_failures_.empty()) broken_ = true;
  }
  bool retired = !broken_;
  if (!broken_) {
    for (Actor* tick : ticks_) {
      deliver(ActorMessage::end_of_stream({kCallerActor, tick->rank()}, {tick->id(), tick->rank()},
                                          kRunRegisterBase + tick->rank()));
    }
    if (options_.deterministic && !threads_.empty()) run_deterministic();
    if (options_.caller_runs && !threads_.empty()) {
      // The end of stream passes between the ranks: act until every actor here retired (those
      // that did not are reported below; the destructor calls this, so nothing may throw).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      try {
        run_on_caller([&] {
          bool retired = true;
          for (const auto& actor : actors_) retired = retired && actor->retired();
          return retired || std::chrono::steady_clock::now() > until;
        });
      } catch (const std::exception& e) {
        LOG(ERROR) << kTag << "the end of stream did not pass: " << e.what();
      }
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& thread : threads_) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (broken_) {
      thread->stop();
    } else if (!thread->join(std::max(0.0, left))) {
      retired = false;
      std::string names;
      for (const Actor* actor : thread->actors()) {
        if (!actor->retired()) names += "\n  " + actor->name();
      }
      LOG(ERROR) << kTag << "thread '" << thread->name()
                 << "' still had actors that had not retired 10 s after the end of stream:"
                 << names;
    }
  }
  for (const auto& actor : actors_) retired = retired && actor->retired();
  // Work the last acts enqueued (Note [Acts without events]: acts fed by another process may
  // have acted for an iteration this one never ran) runs before what it writes goes away.
  for (const auto& stream : streams_) {
    try {
      stream->synchronize();
    } catch (const std::exception& e) {
      LOG(ERROR) << kTag << "stream '" << stream->name() << "' at shutdown: " << e.what();
    }
  }
  for (int64_t rank : ranks_) transport_->stop_serving_rank(rank);
  transport_->set_fault_handler(nullptr);
  transport_->set_departure_handler(nullptr);
  transport_->set_position_handler(nullptr);
  broken_ = true;  // nothing runs after this
  all_retired_ = retired;
  return retired;
}

}  // namespace ofl::actor
