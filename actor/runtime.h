#pragma once
// Runtime: loads a plan's ranks as actors on threads and runs iterations by message passing
// alone (DESIGN.md, data flow steps 3, 4 and 6). No central scheduler: run() only starts each
// rank's tick and waits until every actor has acted its share of the iteration.
//
// Note [What the runtime adds to a plan]:
//  - Control inputs become control registers (no data): the task waits for a piece from the
//    task it follows and acknowledges it, like a data register.
//  - Per rank, a tick actor starts each iteration and hands a start to every task with no input
//    at all (INPUT, VARIABLE, ZEROS, ...).
//  - A SEND -> RECV pair is a transfer register: the SEND's ready message carries the address
//    of its input slot; the RECV reads it through the transport (consumer pull) into its own
//    output slot, then acknowledges, and only then does the SEND release its input.
//  - The strict cycle of Note [Memory reuse and the chain] (compiler/physical/
//    memory_planning.cpp): per rank, a control register from the first to the last
//    per-micro-batch task of the compute thread, with pipeline_depth slots. With one slot (no
//    pipeline stages) micro-batch k + 1 cannot start before micro-batch k has finished on that
//    thread, which memory sharing within a micro-batch relies on; with p stages, registers of
//    the micro-batch part are not shared and up to p micro-batches may be in flight.
//  Iterations do not overlap: run() returns after the iteration's last act, so the chain's
//  wrap-around from one iteration to the next holds by construction.
//
// Modes: every rank in one process over an in-process transport (the in-process cluster: a
// whole DP / TP / PP job in one test), or the ranks of one process with a transport to the
// others; and a deterministic mode, where one thread (the caller's) runs every actor and
// delivers messages in a fixed order.

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actor/actor.h"
#include "actor/actor_thread.h"
#include "actor/collective_engine.h"
#include "actor/device_collectives.h"
#include "actor/plan_index.h"
#include "actor/plan_runner.h"
#include "comm/transport.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::actor {

class StallClock;  // runtime_internal.h

struct RuntimeOptions {
  /// Ranks of the plan this runtime hosts; empty: all of them (the in-process cluster).
  std::vector<int64_t> ranks;
  /// Run every actor on the caller's thread, delivering messages in a fixed order.
  bool deterministic = false;
  /// Note [Caller-run runtimes] in runtime_threads.cpp: during run() the caller acts for every
  /// actor of this process itself, driving the transport and the collectives between acts; no
  /// actor thread. Host plans only: a plan with GPU tasks runs on threads whatever this says.
  /// Kernels then use the caller's OpenMP threads (kernel_threads does not apply).
  bool caller_runs = false;
  /// How long an idle thread spins before it parks (Note [Spin, then park]).
  double spin_microseconds = 50;
  /// End run() with an error when no actor acts for this long (Note [Watchdog] in
  /// runtime_watchdog.cpp).
  double watchdog_seconds = 60;
  /// Record each act's start and end (chrome_trace()).
  bool trace = false;
  /// Check at load that the plan has no cycle (off: let the watchdog find it).
  bool check_acyclic = true;
  /// Keep every handled message, in order (message_log()); deterministic mode only.
  bool record_messages = false;
  /// OpenMP threads per compute thread; 0: 1 when the process hosts several compute threads,
  /// otherwise OpenMP's default.
  int kernel_threads = 0;
  /// Each rank's compute thread launches its acts' work on a CPU worker thread and sends their
  /// messages when the worker has run it: the GPUs' event-gated protocol, on the CPU (Note
  /// [Event-gated acts] in act_stream.h). Also on when the environment has
  /// OFL_ASYNC_CPU_STREAMS=1 (to run a whole suite so). Not in deterministic mode.
  bool async_cpu_streams = false;
  /// Every act on a stream waits for its work through the stream's callback (an event on a
  /// GPU), as before Note [Acts without events]: to measure what that Note gives. Also on when
  /// the environment has OFL_EVENT_EVERY_ACT=1.
  bool event_every_act = false;
  /// Makes the stream of a rank's compute thread (tests: a stream they hold back); set, it
  /// implies async_cpu_streams.
  std::function<std::unique_ptr<ActStream>(int64_t rank, std::string name)> make_stream;
  /// How messages and data reach other ranks; null: an in-process transport of this runtime.
  std::shared_ptr<comm::Transport> transport;
  /// Note [The GPU of a rank]: the GPU of the first hosted rank that runs GPU tasks; the next
  /// such ranks take the next GPUs. -1: LOCAL_RANK (the launcher's one process per rank on a
  /// host), 0 without it.
  int first_gpu = -1;
  /// Runs the plan's GPU tasks with CPU kernels in host memory, on one worker stream per rank
  /// standing for its GPU's stream: how CI runs a CUDA plan's device copies, per-device memory
  /// blocks and event-gated handovers without a GPU (Note [Devices in a plan] in
  /// compiler/physical/expansion.h). For tests; also on with OFL_SIMULATE_CUDA=1.
  bool simulate_cuda = false;
  /// Note [Variables bound to the caller's tensors] in runtime_variables.cpp: variables (by
  /// name) whose hosted pieces the caller may give tensors of its own for, with
  /// bind_variable_pieces before the first run; until then they have no memory. Names the plan
  /// lacks are ignored (a process's part of a job holds only its ranks' variables).
  std::set<std::string> bindable_variables;
};

class Runtime final : public PlanRunner, private ActorHost {
 public:
  /// Checks the plan (PlanIndex), allocates its memory blocks and registers once, creates the
  /// actors and starts the threads. Raises ofl::Error naming what is wrong with the plan.
  explicit Runtime(const proto::PlanProto& plan, RuntimeOptions options = {});
  /// Calls shutdown() unless done.
  ~Runtime() override;

  /// Ends every tick's stream; the end passes from actor to actor and each thread stops once
  /// its actors have all retired. Returns whether every actor retired (false after a failed run,
  /// whose threads are stopped instead). The runtime cannot run afterwards.
  bool shutdown();

  void initialize_variables() override;
  /// One iteration: feeds `inputs` (logical tensors by name), waits for every actor's acts and
  /// returns the fetched logical tensors. Raises ofl::Error when a kernel fails (naming the task
  /// and rank) or when the watchdog finds no progress (naming what each actor waits for).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override;
  /// Whether run() may be called again: false after a failed run, a refused one (a GPU
  /// communicator aborted by another runtime's failure) or shutdown.
  bool usable() const { return !broken_; }
  Tensor read_variable(const std::string& name) const override;
  void write_variable(const std::string& name, const Tensor& value) override;

  /// Pieces by name, then rank: what a process of a job holds of its tensors (a global
  /// tensor's local parts).
  using Pieces = std::map<std::string, std::map<int64_t, Tensor>>;
  /// run() fed and fetched by pieces: every INPUT task of a hosted rank takes the piece fed for
  /// its (input, rank) — its region of the logical input, micro-batches stacked on axis 0, the
  /// register's shape — and the result holds every hosted OUTPUT task's piece (a partial-sum
  /// output's pieces add up to the value).
  Pieces run_local(const Pieces& inputs);
  /// The hosted pieces of variable `name`, and writing them.
  std::map<int64_t, Tensor> read_variable_pieces(const std::string& name) const;
  void write_variable_pieces(const std::string& name, const std::map<int64_t, Tensor>& pieces);
  /// Note [Variables bound to the caller's tensors]: makes `pieces` (by rank) the hosted pieces
  /// of variable `name` themselves, all of them or none. Returns "" when bound; otherwise why
  /// not, and the variable then has memory of its own (zeros) for the caller to write.
  std::string bind_variable_pieces(const std::string& name,
                                   const std::map<int64_t, Tensor>& pieces);

  /// One recorded act (trace option).
  struct Act {
    int64_t rank = 0;
    int thread = 0;    // 0: compute, 1: communication
    std::string task;  // task name ("" for a tick)
    proto::TaskProto::Kind kind = proto::TaskProto::COMPUTE;
    bool tick = false;
    int64_t iteration = 0;
    int micro_batch = 0;
    double begin_us = 0;  // since the runtime started
    double end_us = 0;
  };
  /// The acts recorded since the last take (trace option), by thread then time.
  std::vector<Act> take_acts();
  /// take_acts() as Chrome trace JSON: one complete event per act, process = rank, thread =
  /// actor thread. Open in chrome://tracing or Perfetto.
  std::string chrome_trace();
  /// Deterministic mode with record_messages: every message handled so far, in order.
  const std::vector<std::string>& message_log() const { return message_log_; }

  /// This process's pieces by "rank<r>/<task name>": every VARIABLE task's current value and
  /// every OUTPUT task's last fetched value (tests compare runs piece by piece).
  std::map<std::string, Tensor> local_pieces() const;

  int64_t iterations() const { return iteration_; }
  int num_threads() const { return static_cast<int>(threads_.size()); }
  int num_actors() const { return static_cast<int>(actors_.size()); }
  const PlanIndex& plan_index() const { return index_; }
  /// The GPU communicators of the hosted ranks (Note [Device collectives]); null when the plan
  /// has no GPU collective. (ActorHost's, public for tests.)
  DeviceCollectives* device_collectives() override { return device_collectives_.get(); }
  /// Memory block `id` of hosted rank `rank`, undefined when there is none. (ActorHost's,
  /// public for tests.)
  Tensor memory_block(int64_t rank, int64_t id) const override {
    const auto it = blocks_.find({rank, id});
    return it == blocks_.end() ? Tensor() : it->second;
  }

 private:
  // ActorHost
  void send(const ActorMessage& message) override;
  comm::Transport& transport() override { return *transport_; }
  const std::map<std::string, Tensor>& inputs() const override { return *inputs_; }
  const Tensor* input_piece(const std::string& name, int64_t rank) const override;
  // One iteration fed by `inputs` or by `pieces` (one is null); the hosted fetched pieces.
  std::vector<std::pair<int, Tensor>> run_iteration(const std::map<std::string, Tensor>* inputs,
                                                    const Pieces* pieces);
  void count_act(int64_t iteration) override;
  bool iteration_done() const;  // every act of iteration_ counted

  void deliver(const ActorMessage& message);
  void allocate_registers(int64_t rank);
  std::vector<Tensor> allocate_slots(int64_t rank, const PlanIndex::RegisterInfo& reg,
                                     int num_slots) const;
  void connect_task(int task, int* next_virtual);
  void add_control_edge(int from, int to, int slots, int64_t register_id);
  void add_ticks(int* next_virtual);
  void link_slots();
  void assign_threads();
  void assign_streams();
  void on_failure(const Actor* actor, std::exception_ptr error);  // at actor->failed_act()
  void on_failure(const Actor* actor, int64_t act, std::exception_ptr error);
  void fail(ErrorCode code, std::string failure);  // the run's first failure wins
  void stop_threads();
  // Deterministic mode: runs the one thread and advances the collectives until neither moves.
  void run_deterministic();
  // Note [Caller-run runtimes]: runs the actors until `done` holds or a failure; raises when
  // nothing moved for the watchdog's time.
  void run_on_caller(const std::function<bool()>& done);
  // Whether the caller runs the actors (deterministic or caller-run mode): no actor thread.
  bool on_caller() const { return options_.deterministic || options_.caller_runs; }
  void on_rank_failure(int64_t rank, const std::string& why);
  // Note [Departures] in actor/session_transport.h.
  void on_rank_departure(int64_t rank, int64_t iterations);
  // Why rank `rank`, gone after `iterations` iterations, stops this one. Under done_mu_.
  std::string departure_failure(int64_t rank, int64_t iterations) const;
  // Note [Program positions] in actor/program_positions.h: a peer ran something else where
  // this runtime's latest run is in its program.
  void on_position_difference(const std::string& why);
  // Note [Failed runs across processes] in runtime.cpp: a message from the transport, and a
  // peer's failed run (the rank it failed on, its iteration and its error's kind);
  // tell_peers_of_failure sends this process's, or passes a peer's on.
  struct PeerFailure {
    int64_t rank = -1;
    int64_t iteration = 0;
    ErrorCode code = ErrorCode::kInternal;
  };
  void on_message(const ActorMessage& message);
  void on_peer_run_failure(int64_t rank, int64_t iteration, ErrorCode code);
  std::string peer_run_failure(const PeerFailure& failure) const;
  void tell_peers_of_failure();
  void check_virtual_ids() const;
  void wait_for_iteration();
  // Waits until no stream is busy, under the watchdog's `clock` (Note [Watchdog]): throws the
  // stall report if their work does not end. Returns false, early, on a failure.
  bool await_streams(StallClock& clock);
  // Waits for every stream's queued work (Note [Acts without events]); a failure it reports
  // becomes the run's.
  void synchronize_streams();
  // Note [Hung streams] in runtime_threads.cpp: after a failed run, gives the streams the
  // watchdog's period to finish, and leaves everything their work could touch allocated if one
  // has not.
  void abandon_if_streams_hang();
  // Ends the run with the stall report; `why`: what StallClock::check said.
  [[noreturn]] void throw_stall(const std::string& why = "no actor made progress");
  std::string stall_report() const;
  Tensor variable_piece(int task) const;
  static void write_through_host(const Tensor& piece,
                                 const std::function<void(const Tensor&)>& write);
  // Where `rank` keeps the memory of `device` (Note [The GPU of a rank]).
  Device device_of(int64_t rank, proto::PlanDevice device) const;
  void choose_gpus();
  void make_device_collectives();
  std::vector<int> hosted_variable_tasks(const std::string& name, const char* caller) const;
  // Why `piece` cannot be the piece of VARIABLE task `task` ("" when it can); `offered`: the
  // pieces being bound with it, by task.
  std::string why_not_bound(int task, const Tensor& piece,
                            const std::map<int, Tensor>& offered) const;
  // Raises when a variable offered for binding has no memory yet, or a piece of `fed` (may be
  // null) shares storage with a bound one.
  void check_variables_placed(const Pieces* fed) const;

  PlanIndex index_;
  RuntimeOptions options_;
  std::shared_ptr<comm::Transport> transport_;
  std::vector<int64_t> ranks_;  // hosted, ascending
  // Note [Pinned host blocks]: the host blocks of ranks with GPU tasks, page-locked. Before
  // every member that can run work (actors, threads, streams): destroyed after them, so no copy
  // is in flight when a block is unlocked; each keeps its memory until then.
  struct PinnedBlock {
    Tensor memory;
    std::unique_ptr<cuda::PinnedRange> range;  // after memory: unlocked before it is dropped
  };
  std::vector<PinnedBlock> pinned_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::vector<Actor*> actor_of_task_;  // by task index; null when not hosted
  std::unordered_map<int64_t, Actor*> actor_by_id_;
  std::vector<Actor*> ticks_;
  std::vector<std::unique_ptr<ActorThread>> threads_;
  // GPU communicators (Note [Device collectives]): before collectives_, whose jobs use them.
  std::unique_ptr<DeviceCollectives> device_collectives_;
  // The rank's collectives run here (Note [Collective engine]); before streams_, which hold
  // some of its streams.
  std::unique_ptr<CollectiveEngine> collectives_;
  // After threads_: streams end first, so no stream posts to a thread that is gone.
  std::vector<std::unique_ptr<ActStream>> streams_;
  std::map<std::pair<int64_t, int64_t>, Tensor> blocks_;  // (rank, block id) -> memory
  std::map<int64_t, int> gpu_of_rank_;                    // hosted ranks with GPU tasks
  // Note [Variables bound to the caller's tensors]: VARIABLE tasks (by index) offered for
  // binding and not yet placed, and those whose piece is the caller's tensor.
  std::set<int> unplaced_variables_;
  std::set<int> bound_variables_;

  int64_t iteration_ = 0;
  int64_t acts_per_iteration_ = 0;
  const std::map<std::string, Tensor>* inputs_ = nullptr;
  const Pieces* input_pieces_ = nullptr;
  // Acts counted per iteration, by iteration % kIterationSlots (count_act).
  static constexpr int kIterationSlots = 4;
  std::array<std::atomic<int64_t>, kIterationSlots> acts_done_{};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;                    // GUARDED_BY(done_mu_)
  bool running_ = false;                 // an iteration is under way; GUARDED_BY(done_mu_)
  std::map<int64_t, int64_t> departed_;  // rank -> iterations it ran; GUARDED_BY(done_mu_)
  bool failed_by_departure_ = false;     // GUARDED_BY(done_mu_)
  // Note [Failed runs across processes]: peers' failed runs (origin rank -> iteration, error
  // code); whether this run's failure came from another rank's fault (Note [Faults]), which is
  // told no one; and the peer failure that ended or refused this runtime, which is passed on.
  std::map<int64_t, PeerFailure> peer_failures_;   // GUARDED_BY(done_mu_)
  bool failure_from_fault_ = false;                // GUARDED_BY(done_mu_)
  std::optional<PeerFailure> failure_origin_;      // GUARDED_BY(done_mu_)
  std::string failure_;                            // GUARDED_BY(done_mu_)
  ErrorCode failure_code_ = ErrorCode::kInternal;  // GUARDED_BY(done_mu_)
  bool broken_ = false;                            // a run failed: the actors' state is unusable
  bool shut_down_ = false;
  bool all_retired_ = false;  // what shutdown() found
  std::vector<std::string> message_log_;
  std::string job_name_;
  // Ranks this runtime needs that it does not host: the peers of its SENDs and RECVs, the
  // members of its collectives (a plan compiled for some ranks holds only theirs) and the
  // plan's other ranks.
  std::set<int64_t> peers_;
  // peers_ as begin_run takes them, made once at load, not at every run (Note [Program
  // positions]).
  std::vector<int64_t> announced_to_;
  int64_t trace_origin_ns_ = 0;
  int thread_kernel_threads_ = 0;  // OpenMP threads of each compute thread (and its stream)
};

}  // namespace ofl::actor
