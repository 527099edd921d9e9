#pragma once
// Collectives of COLLECTIVE tasks on GPUs.
//
// Note [Device collectives]
// -------------------------
// On a CUDA placement the compiler puts a collective's task and registers on the GPU (Note
// [Devices in a plan] in compiler/physical/expansion.h), and the task's act runs one of three
// backends, chosen per process when the plan loads (choose_device_collective_backend):
//  - nccl: the member's part is queued on its NCCL communicator's stream (cuda/nccl.h) and the
//    act is done when an event recorded after it has completed. The default on GPUs.
//  - host: the input is copied to the host, the CPU engine's job runs it (Note [Ring
//    collectives]) and the result is copied back. For ranks sharing one GPU
//    (OFL_CUDA_DEVICE, Note [The GPU of a rank]), which NCCL refuses (one GPU per member of a
//    communicator), for OFL_CUDA_COLLECTIVES=host, and in deterministic mode.
//  - simulated (RuntimeOptions::simulate_cuda, no GPU, CI): registers are in host memory and
//    the CPU engine's job runs, but as NCCL would: in member 0's order (below), one at a time
//    per communicator. So the bootstrap and the order protocol run in CI.
//
// Communicators. When the plan loads, before any actor runs, the runtime takes one per
// (communicator, hosted member) of its GPU collectives, in ascending order of the
// communicator's control id (CollectiveProto.control_id), the same order on every rank: the one
// this process keeps from an earlier runtime when every member keeps it (Note [Communicators
// kept per process] in communicator_cache.h), else a new one. NCCL's
// creation waits until every member has joined (at most the watchdog's period: Note
// [Nonblocking communicators] in cuda/nccl.h), and one global order cannot wait in a cycle. A
// failed run aborts them (DeviceCollectives::abort) once the collective engine has stopped.
// Member 0 makes the NCCL unique id and sends it, with its backend, to every other member as a
// tagged transfer under the control id (collective_tag(control_id, member)): the UCX bootstrap
// the job already has. A member whose backend differs refuses, naming both ranks, and tells
// member 0, which waits for every member's answer before NCCL's creation (that could otherwise
// wait for the refusing member forever): two ranks never run one collective two ways. The
// answers also say whether each member keeps the communicator member 0 offered to reuse. Several
// hosted members of one communicator join it in one NCCL group.
//
// Order. NCCL runs a communicator's collectives in the order its members queue them; members
// that queue two in different orders wait for each other forever. On the CPU engine order does
// not matter (Note [Collective engine]), and a rank's actors become ready in whatever order its
// dataflow gives. So member 0 decides: when it queues a collective it sends the collective's
// id on the control channel to every other member, and they queue theirs in that order. A
// collective member 0 queued had its inputs ready there; the members run the same plan (the
// collective-order proof, Note [Collective order] in oneflowlike/plan_contract.h), so no
// member's copy of it waits on a collective queued after it. That needs member 0 to read an
// input: a member reading nothing (a broadcast's members but the root, a grouped send/recv's
// members that send nothing) is ready at once. So the compiler makes member 0 of every GPU
// collective a reader: a broadcast's root comes first, a transfer between GPUs has the sender
// first, and a grouped send/recv whose member 0 would send nothing moves by generic steps. Each act
// costs member 0 one small message per member, sent as it queues. One thread (the collective
// engine) queues the calls of all the members a process hosts, and NCCL may block a thread's call
// for one member until the others have called: so a process's members of one communicator queue
// each collective together, in one NCCL group, once the last of them has its turn.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/collective_engine.h"
#include "actor/communicator_cache.h"
#include "actor/plan_index.h"
#include "comm/transport.h"
#include "oneflowlike/cuda/nccl.h"

namespace ofl::actor {

/// "nccl", "host", "simulated".
const char* device_collective_backend_name(DeviceCollectiveBackend backend);

/// This process's backend (Note [Device collectives]): simulated when simulating CUDA;
/// otherwise OFL_CUDA_COLLECTIVES ("nccl" or "host"; anything else is refused naming it) when
/// set; otherwise host when NCCL does not load (cuda::nccl_available), OFL_CUDA_DEVICE puts
/// ranks on one GPU or the runtime is deterministic, else nccl. Deterministic mode refuses
/// nccl: its GPU tasks have no events (Runtime::assign_streams), so only the host backend's
/// copies, which wait for the compute stream, order a collective after its input's kernel.
DeviceCollectiveBackend choose_device_collective_backend(bool simulate_cuda,
                                                         bool deterministic = false);

/// One hosted member of one GPU communicator: its bootstrap and its place in member 0's order.
/// Used by the collective engine's jobs only, one at a time (the engine advances one job at a
/// time), so it needs no lock.
class DeviceCommunicator {
 public:
  DeviceCommunicator(comm::Transport& transport, std::string name, std::vector<int64_t> members,
                     int64_t member, int64_t control_id);
  ~DeviceCommunicator();
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<int64_t>& members() const { return members_; }
  int64_t member() const { return member_; }
  int64_t rank() const { return members_[member_]; }
  int64_t control_id() const { return control_id_; }
  /// What member 0 sent at the bootstrap (or in its verdict): the NCCL unique id (random bytes
  /// for the other backends).
  const cuda::NcclUniqueId& unique_id() const { return unique_id_; }

  /// Note [Device collectives], "Order": whether this member may queue collective
  /// `collective_id` now. Member 0 always may, and tells the others; another member may when
  /// member 0's next order names it (that order is then used up). Never blocks.
  bool take_turn(int64_t collective_id);
  /// The collective this member runs now (simulated backend: one at a time), -1 if none.
  int64_t running = -1;
  /// NCCL: from the turn of a collective until it has been queued for good (Note [Nonblocking
  /// communicators] in cuda/nccl.h); the member takes no other turn meanwhile.
  bool launching = false;
  /// The NCCL backend's communicator (owned by the process's SharedCommunicator).
  cuda::NcclCommunicator* nccl = nullptr;
  /// What the process keeps of it (null for the host backend), and the runtime's collectives.
  SharedCommunicator* shared = nullptr;
  const void* owner = nullptr;
  /// Note [Communicators kept per process], "One run at a time": whether a collective of
  /// iteration `iteration` may start now.
  bool may_start(int64_t iteration) const {
    return shared == nullptr || shared->held_by(owner, iteration);
  }
  /// NCCL: the members of this communicator this process hosts, shared by them. One thread
  /// (the collective engine) queues all their calls, so the calls of one collective go in one
  /// NCCL group, made when the last of them has its turn (Note [Device collectives], "Order").
  struct HostedMembers {
    int64_t count = 1;
    std::map<int64_t, std::vector<std::shared_ptr<CollectiveJob>>> waiting;  // by collective id
  };
  std::shared_ptr<HostedMembers> hosted;

 private:
  friend class DeviceCollectives;
  struct Control;  // one control message
  struct Pending;  // member 0's sends not yet done
  // Bootstrap: member 0 sends `id` and `backend` to every other member; `offered`: the id is
  // that of a communicator it keeps (Note [Communicators kept per process]).
  void send_bootstrap(const cuda::NcclUniqueId& id, DeviceCollectiveBackend backend, bool offered);
  // Bootstrap: the other members wait for member 0's (at most `timeout_s`).
  struct Bootstrap {
    DeviceCollectiveBackend backend;
    bool offered;
  };
  Bootstrap receive_bootstrap(double timeout_s);
  // Bootstrap, second half: the other members tell member 0 whether they agree on the backend
  // and whether they keep the offered communicator; member 0 waits for all of them (at most
  // `timeout_s`) before it blocks in NCCL's creation, raises naming a member that refused, and
  // returns whether every member keeps it.
  void send_reply(bool agrees, DeviceCollectiveBackend mine, bool keeps);
  bool await_replies(DeviceCollectiveBackend mine, double timeout_s);
  // After an offer: member 0 tells every member whether they take the kept communicator, or
  // else the id of a new one; the others wait for it (at most `timeout_s`) and return it.
  void send_verdict(bool reuse, const cuda::NcclUniqueId& id);
  // Member 0, raising in await_replies after an offer: tells the members waiting for a verdict.
  void send_refusal();
  bool receive_verdict(double timeout_s);
  // Waits for the receive posted last (at most `timeout_s`, `what`: the message awaited).
  void await_receive(double timeout_s, const char* what);
  void send_to_others(const Control& message);
  void test_sends();
  // Posts the receive of member 0's next control message.
  void post_receive();

  comm::Transport& transport_;
  std::string name_;
  std::vector<int64_t> members_;
  int64_t member_;
  int64_t control_id_;
  cuda::NcclUniqueId unique_id_{};
  std::vector<std::unique_ptr<Pending>> pending_;  // member 0
  std::unique_ptr<Control> incoming_;              // the others
  comm::Transport::TaggedRequest receive_;
  bool posted_ = false;
  std::vector<int64_t> orders_;  // member 0's orders received and not used yet, oldest first
};

/// The GPU communicators of a runtime's hosted ranks and the jobs of their collectives.
class DeviceCollectives {
 public:
  /// Makes the communicators of every GPU COLLECTIVE task of `hosted` ranks (Note [Device
  /// collectives], "Communicators"); blocks until member 0 of each has been heard from (at most
  /// `timeout_s`) and, with NCCL, until every member has joined (at most `timeout_s` again).
  /// `gpu_of_rank`: the GPU of each hosted rank with GPU tasks.
  DeviceCollectives(comm::Transport& transport, const PlanIndex& index,
                    const std::vector<int64_t>& hosted, const std::map<int64_t, int>& gpu_of_rank,
                    DeviceCollectiveBackend backend, double timeout_s);
  ~DeviceCollectives();

  /// After a failed run, with the collective engine stopped: aborts every NCCL communicator
  /// (cuda::NcclCommunicator::abort), so no stream waits for a collective whose peer never
  /// comes, and the process forgets them (Note [Communicators kept per process]).
  void abort();
  /// abort() by a runtime that holds no lease (a refused run): each communicator once no other
  /// runtime's run holds it, as NCCL allows no call beside an abort.
  void abort_when_free();

  /// The communicators run `iteration` uses, held for its length (Note [Communicators kept per
  /// process], "One run at a time"): waits while another runtime's run holds one. Raises
  /// ofl::Error naming the communicator when one was aborted (a failed run of another
  /// runtime).
  class Lease {
   public:
    Lease(Lease&&) = default;
    ~Lease();

   private:
    friend class DeviceCollectives;
    Lease() = default;
    std::vector<SharedCommunicator*> held_;
  };
  [[nodiscard]] Lease lease(int64_t iteration);

  DeviceCollectiveBackend backend() const { return backend_; }
  /// The hosted member `rank` of the communicator whose control id is `control_id`.
  DeviceCommunicator& communicator(int64_t rank, int64_t control_id);
  /// The job of one act of a GPU COLLECTIVE task of `rank` (`spec`, its control id) in
  /// iteration `iteration`: what the collective engine advances.
  std::shared_ptr<CollectiveJob> make_job(comm::Transport& transport, const CollectiveSpec& spec,
                                          int64_t rank, int64_t control_id, int64_t iteration,
                                          Tensor input, Tensor output, CollectiveScratch* scratch);

 private:
  DeviceCollectiveBackend backend_;
  std::map<int64_t, int> gpu_of_rank_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<DeviceCommunicator>>
      communicators_;  // by (rank, control id)
  // What the process keeps for them (not for the host backend), by control id.
  std::map<int64_t, std::shared_ptr<SharedCommunicator>> shared_;
};

}  // namespace ofl::actor
