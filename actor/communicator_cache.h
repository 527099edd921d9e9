#pragma once
// GPU communicators kept per process, shared by the runtimes that need them.
//
// Note [Communicators kept per process]
// -------------------------------------
// Every nn.Graph and every cached eager op on global tensors is a runtime of its own (Note
// [Session ids] in actor/session_transport.h), and each needs communicators over the same few
// rank sets. An NCCL communicator costs a collective creation (tens to hundreds of milliseconds)
// and device memory for its buffers, so a process makes one per (job, backend, members in
// order, its hosted members and their GPUs) and every runtime loading later takes that one, as
// PyTorch's process groups and OneFlow's communicator manager do. The process holds entries
// weakly: a communicator ends (finalised, Note [Nonblocking communicators] in cuda/nccl.h) when
// the last runtime using it goes.
//
// Agreement. Whether to take a kept communicator is decided per communicator at load, by the
// bootstrap (Note [Device collectives], "Communicators"): member 0 offers the id of the one it
// keeps, each member answers whether it keeps one made from that id, and member 0's verdict
// (reuse, or a fresh id when any member lacks it: it was ended after a failure there, or that
// process loaded other graphs) comes back to every member. So either every member takes the kept
// one or every member makes a new one, and the NCCL creations happen in the same order on every
// rank.
//
// One run at a time. NCCL runs a communicator's collectives in the order they are queued, and
// only member 0's order within one runtime keeps members in step. So a runtime's run holds each
// shared communicator it uses for the whole run (DeviceCollectives::lease), and a collective
// starts only while the run of its own iteration holds it: an actor fed from another process
// may act for iteration i + 1 before this process starts that run (Note [Iterations across
// processes] in actor/runtime.cpp), while another runtime's run holds the communicator, or
// while run i still does (and would hand it on with the collective in flight); such a
// collective waits for its run. The runs of one process that share communicators take turns,
// in the order one thread starts them, and every process of an SPMD program queues them in
// that same order. A run waits for another's lease without a deadline of its own: the holding
// run's watchdog ends it if it stalls. A nonblocking communicator (Note [Nonblocking
// communicators]) is ready again when a run ends, since a run waits for its collectives' events.
//
// Failure. A failed run aborts its communicators, kept ones included (a peer may be gone): the
// process forgets them, and another runtime holding one is refused at its next run, naming the
// communicator, instead of calling into an aborted communicator; that runtime is then unusable
// (Runtime::usable). An eager op whose runtime is unusable is compiled and loaded again at its
// next call (framework/global_tensor.py), which makes a new communicator. Member 0 that refuses
// at load (a member's backend differs) tells the members waiting for its verdict.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "oneflowlike/cuda/nccl.h"

namespace ofl::actor {

enum class DeviceCollectiveBackend : int32_t { kNccl = 1, kHost = 2, kSimulated = 3 };

/// What makes two runtimes' communicators the same one.
struct CommunicatorKey {
  const comm::Transport* network = nullptr;  // the job (comm::Transport::network)
  DeviceCollectiveBackend backend = DeviceCollectiveBackend::kSimulated;
  std::vector<int64_t> members;  // ranks, in member order
  // The members this process hosts and their GPUs (-1 where no GPU is used: simulated).
  std::vector<std::pair<int64_t, int>> hosted;

  bool operator<(const CommunicatorKey& other) const;
};

/// One communicator as this process keeps it: the id it was made from and, with NCCL, the
/// communicators of the hosted members (in the key's order).
class SharedCommunicator {
 public:
  SharedCommunicator(CommunicatorKey key, std::string name, const cuda::NcclUniqueId& id,
                     std::vector<std::unique_ptr<cuda::NcclCommunicator>> nccl);
  /// Finalises its NCCL communicators together (a finalisation may wait for the process's other
  /// members), at most 10 s, then frees them (aborting those still finalising).
  ~SharedCommunicator();
  SharedCommunicator(const SharedCommunicator&) = delete;
  SharedCommunicator& operator=(const SharedCommunicator&) = delete;

  const CommunicatorKey& key() const { return key_; }
  const std::string& name() const { return name_; }
  const cuda::NcclUniqueId& id() const { return id_; }
  /// The NCCL communicator of hosted member `i` (the key's order); null without NCCL.
  cuda::NcclCommunicator* nccl(size_t i) const {
    return i < nccl_.size() ? nccl_[i].get() : nullptr;
  }

  /// Held by a run for its whole length (Note [Communicators kept per process], "One run at a
  /// time").
  std::mutex& run_mutex() { return run_mu_; }
  /// The run holding run_mutex(): its runtime (`owner`) and iteration; null and -1 between runs.
  void set_holder(const void* owner, int64_t iteration);
  /// Whether a collective of `owner`'s iteration `iteration` may start.
  bool held_by(const void* owner, int64_t iteration) const;
  /// After a failed run (no thread inside it): aborts the NCCL communicators, and the process
  /// forgets this one. Idempotent.
  void abort();
  bool aborted() const;

 private:
  CommunicatorKey key_;
  std::string name_;
  cuda::NcclUniqueId id_;
  std::vector<std::unique_ptr<cuda::NcclCommunicator>> nccl_;
  std::mutex run_mu_;
  mutable std::mutex mu_;
  bool aborted_ = false;           // GUARDED_BY(mu_)
  const void* holder_ = nullptr;   // GUARDED_BY(mu_)
  int64_t holder_iteration_ = -1;  // GUARDED_BY(mu_)
};

/// The process's communicators (Note [Communicators kept per process]).
class CommunicatorCache {
 public:
  static CommunicatorCache& process();

  /// The live, not aborted communicator of `key`; null if none.
  std::shared_ptr<SharedCommunicator> find(const CommunicatorKey& key);
  /// Keeps `made` (a new communicator) for later runtimes, in place of any other of its key.
  void keep(const std::shared_ptr<SharedCommunicator>& made);
  /// Forgets `comm` if it is the one kept for its key.
  void forget(const SharedCommunicator& comm);
  /// How many communicators this process has made (kept): for tests and diagnostics.
  int64_t made() const;

 private:
  mutable std::mutex mu_;
  std::map<CommunicatorKey, std::weak_ptr<SharedCommunicator>> kept_;  // GUARDED_BY(mu_)
  int64_t made_ = 0;                                                   // GUARDED_BY(mu_)
};

}  // namespace ofl::actor
