// GPU communicators, their bootstrap and order, and the jobs of GPU collectives (Note [Device
// collectives] in the header).

#include "actor/device_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "actor/runtime_internal.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::actor {

namespace {

using Clock = std::chrono::steady_clock;

enum ControlKind : int64_t { kBootstrap = 1, kTurn = 2, kReply = 3, kVerdict = 4 };

cuda::NcclUniqueId random_id() {
  std::random_device device;
  cuda::NcclUniqueId id;
  for (std::byte& b : id) b = static_cast<std::byte>(device() & 0xff);
  return id;
}

}  // namespace

const char* device_collective_backend_name(DeviceCollectiveBackend backend) {
  switch (backend) {
    case DeviceCollectiveBackend::kNccl:
      return "nccl";
    case DeviceCollectiveBackend::kHost:
      return "host";
    case DeviceCollectiveBackend::kSimulated:
      return "simulated";
  }
  return "unknown";
}

DeviceCollectiveBackend choose_device_collective_backend(bool simulate_cuda, bool deterministic) {
  if (simulate_cuda) return DeviceCollectiveBackend::kSimulated;
  const char* chosen = std::getenv("OFL_CUDA_COLLECTIVES");
  if (chosen != nullptr && *chosen != '\0') {
    const std::string value = chosen;
    OFL_CHECK(value == "nccl" || value == "host", kTag,
              "OFL_CUDA_COLLECTIVES must be 'nccl' or 'host'. However, got '", value, "'.");
    OFL_CHECK(value == "host" || !deterministic, kTag,
              "OFL_CUDA_COLLECTIVES=nccl cannot run in deterministic mode: its GPU tasks end "
              "when their kernels are queued, so NCCL's stream could read a register before the "
              "kernel writing it ran. Use the threaded runtime, or OFL_CUDA_COLLECTIVES=host.");
    OFL_CHECK_CODE(value == "host" || cuda::built_with_nccl(), ErrorCode::kUnavailable, kTag,
                   "OFL_CUDA_COLLECTIVES=nccl needs NCCL. However, this build has none.");
    return value == "nccl" ? DeviceCollectiveBackend::kNccl : DeviceCollectiveBackend::kHost;
  }
  const char* shared_gpu = std::getenv("OFL_CUDA_DEVICE");
  if (deterministic || shared_gpu != nullptr || !cuda::nccl_available()) {
    return DeviceCollectiveBackend::kHost;
  }
  return DeviceCollectiveBackend::kNccl;
}

// ---------------------------------------------------------------------------------------------
// DeviceCommunicator

// Every control message has this one size (tagged transfers match sizes).
struct DeviceCommunicator::Control {
  int64_t kind = 0;
  int64_t collective_id = -1;  // kTurn; kReply: who, and whether it agrees; kVerdict: reuse
  int32_t backend = 0;         // kBootstrap, kReply
  int32_t kept = 0;            // kBootstrap: offered; kReply: keeps the offered one
  cuda::NcclUniqueId id{};     // kBootstrap, kVerdict
};

struct DeviceCommunicator::Pending {
  Control message;
  std::vector<comm::Transport::TaggedRequest> requests;
};

DeviceCommunicator::DeviceCommunicator(comm::Transport& transport, std::string name,
                                       std::vector<int64_t> members, int64_t member,
                                       int64_t control_id)
    : transport_(transport),
      name_(std::move(name)),
      members_(std::move(members)),
      member_(member),
      control_id_(control_id),
      incoming_(std::make_unique<Control>()) {
  OFL_ASSERT(member_ >= 0 && member_ < static_cast<int64_t>(members_.size()));
}

DeviceCommunicator::~DeviceCommunicator() {
  // Member 0's last orders may still be in flight: give them a moment before their buffers go.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  try {
    while (!pending_.empty() && Clock::now() < deadline) {
      test_sends();
      std::this_thread::yield();
    }
  } catch (const std::exception&) {
    // A failed peer: nothing is waiting for these any more.
  }
}

void DeviceCommunicator::send_to_others(const Control& message) {
  auto pending = std::make_unique<Pending>();
  pending->message = message;
  for (int64_t m = 1; m < static_cast<int64_t>(members_.size()); ++m) {
    pending->requests.push_back(transport_.send_tagged(members_[m], collective_tag(control_id_, m),
                                                       &pending->message, sizeof(Control)));
  }
  pending_.push_back(std::move(pending));
}

void DeviceCommunicator::test_sends() {
  auto done = [&](const std::unique_ptr<Pending>& p) {
    for (comm::Transport::TaggedRequest& r : p->requests) {
      if (!r.done && !transport_.test(r)) return false;
    }
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

void DeviceCommunicator::post_receive() {
  receive_ = transport_.receive_tagged(members_[0], collective_tag(control_id_, member_),
                                       incoming_.get(), sizeof(Control));
  posted_ = true;
}

void DeviceCommunicator::send_bootstrap(const cuda::NcclUniqueId& id,
                                        DeviceCollectiveBackend backend, bool offered) {
  OFL_ASSERT(member_ == 0);
  Control message;
  message.kind = kBootstrap;
  message.backend = static_cast<int32_t>(backend);
  message.kept = offered ? 1 : 0;
  message.id = id;
  unique_id_ = id;
  send_to_others(message);
}

void DeviceCommunicator::await_receive(double timeout_s, const char* what) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!transport_.test(receive_)) {
    OFL_CHECK_CODE(Clock::now() < deadline, ErrorCode::kDeadlineExceeded, kTag, "rank ", rank(),
                   " waited ", timeout_s, " s for member 0 (rank ", members_[0], ") of ", name_,
                   " to send ", what,
                   "; that rank has not loaded its part of the plan, or has "
                   "failed.");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

DeviceCommunicator::Bootstrap DeviceCommunicator::receive_bootstrap(double timeout_s) {
  OFL_ASSERT(member_ > 0);
  post_receive();
  await_receive(timeout_s, "the communicator's id");
  OFL_CHECK_CODE(incoming_->kind == kBootstrap, ErrorCode::kInternal, kTag, "rank ", rank(),
                 " expected the bootstrap of ", name_, " from rank ", members_[0],
                 ". However, got control message kind ", incoming_->kind, ".");
  unique_id_ = incoming_->id;
  const Bootstrap bootstrap{static_cast<DeviceCollectiveBackend>(incoming_->backend),
                            incoming_->kept != 0};
  post_receive();  // the verdict after an offer, else the first turn
  return bootstrap;
}

void DeviceCommunicator::send_reply(bool agrees, DeviceCollectiveBackend mine, bool keeps) {
  OFL_ASSERT(member_ > 0);
  auto pending = std::make_unique<Pending>();
  pending->message.kind = kReply;
  pending->message.collective_id = agrees ? rank() : -1 - rank();  // who, and whether
  pending->message.backend = static_cast<int32_t>(mine);
  pending->message.kept = keeps ? 1 : 0;
  pending->requests.push_back(transport_.send_tagged(members_[0], collective_tag(control_id_, 0),
                                                     &pending->message, sizeof(Control)));
  pending_.push_back(std::move(pending));
}

void DeviceCommunicator::send_verdict(bool reuse, const cuda::NcclUniqueId& id) {
  OFL_ASSERT(member_ == 0);
  Control message;
  message.kind = kVerdict;
  message.collective_id = reuse ? 1 : 0;
  message.id = id;
  unique_id_ = id;
  send_to_others(message);
}

void DeviceCommunicator::send_refusal() {
  OFL_ASSERT(member_ == 0);
  Control message;
  message.kind = kVerdict;
  message.collective_id = -1;
  send_to_others(message);
  test_sends();
}

bool DeviceCommunicator::receive_verdict(double timeout_s) {
  OFL_ASSERT(member_ > 0);
  await_receive(timeout_s, "whether its kept communicator is used");
  OFL_CHECK_CODE(incoming_->kind == kVerdict, ErrorCode::kInternal, kTag, "rank ", rank(),
                 " expected the verdict of ", name_, " from rank ", members_[0],
                 ". However, got control message kind ", incoming_->kind, ".");
  OFL_CHECK_CODE(incoming_->collective_id >= 0, ErrorCode::kFailedPrecondition, kTag, "rank ",
                 rank(), ": member 0 (rank ", members_[0], ") of ", name_,
                 " refused to make it; its error says why (a member running the collectives "
                 "another way, or one that never answered).");
  unique_id_ = incoming_->id;
  const bool reuse = incoming_->collective_id == 1;
  post_receive();  // the first turn
  return reuse;
}

// The replies share one tag (to member 0) and match whatever their sender: each names its rank.
bool DeviceCommunicator::await_replies(DeviceCollectiveBackend mine, double timeout_s) {
  OFL_ASSERT(member_ == 0);
  bool all_keep = true;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (size_t m = 1; m < members_.size(); ++m) {
    Control reply;
    comm::Transport::TaggedRequest request = transport_.receive_tagged(
        members_[m], collective_tag(control_id_, 0), &reply, sizeof(Control));
    while (!transport_.test(request)) {
      OFL_CHECK_CODE(Clock::now() < deadline, ErrorCode::kDeadlineExceeded, kTag, "rank ", rank(),
                     " (member 0 of ", name_, ") waited ", timeout_s, " s for ",
                     members_.size() - m,
                     " member(s) to answer its id; they have not loaded their part of the plan, "
                     "or have failed.");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    OFL_CHECK_CODE(reply.kind == kReply, ErrorCode::kInternal, kTag, "rank ", rank(),
                   " expected answers from the members of ", name_,
                   ". However, got control message kind ", reply.kind, ".");
    if (reply.collective_id < 0) {
      const auto theirs = static_cast<DeviceCollectiveBackend>(reply.backend);
      OFL_CHECK(false, kTag, "rank ", -1 - reply.collective_id, " runs the collectives of ", name_,
                " with ", device_collective_backend_name(theirs), ", but rank ", rank(), " with ",
                device_collective_backend_name(mine),
                ": every member must run them one way (OFL_CUDA_COLLECTIVES, OFL_CUDA_DEVICE).");
    }
    all_keep = all_keep && reply.kept != 0;
  }
  test_sends();
  return all_keep;
}

bool DeviceCommunicator::take_turn(int64_t collective_id) {
  if (member_ == 0) {
    test_sends();
    Control message;
    message.kind = kTurn;
    message.collective_id = collective_id;
    send_to_others(message);
    return true;
  }
  while (posted_ && transport_.test(receive_)) {
    OFL_CHECK_CODE(incoming_->kind == kTurn, ErrorCode::kInternal, kTag, "rank ", rank(),
                   " expected an order of ", name_, " from rank ", members_[0],
                   ". However, got control message kind ", incoming_->kind, ".");
    orders_.push_back(incoming_->collective_id);
    post_receive();
  }
  if (orders_.empty() || orders_.front() != collective_id) return false;
  orders_.erase(orders_.begin());
  return true;
}

// ---------------------------------------------------------------------------------------------
// Jobs

namespace {

// Simulated: the CPU job in member 0's order, one at a time per communicator.
class SimulatedJob final : public CollectiveJob {
 public:
  SimulatedJob(DeviceCommunicator& comm, comm::Transport& transport, const CollectiveSpec& spec,
               int64_t iteration, Tensor input, Tensor output, CollectiveScratch* scratch)
      : comm_(comm),
        transport_(transport),
        spec_(spec),
        iteration_(iteration),
        input_(std::move(input)),
        output_(std::move(output)),
        scratch_(scratch) {}
  bool advance(bool* progressed) override {
    if (inner_ == nullptr) {
      if (comm_.running >= 0 || !comm_.may_start(iteration_) ||
          !comm_.take_turn(spec_.collective_id)) {
        return false;
      }
      comm_.running = spec_.collective_id;
      inner_ = make_collective_job(transport_, spec_, input_, output_, scratch_);
      *progressed = true;
    }
    if (!inner_->advance(progressed)) return false;
    comm_.running = -1;
    return true;
  }

 private:
  DeviceCommunicator& comm_;
  comm::Transport& transport_;
  CollectiveSpec spec_;
  int64_t iteration_;
  Tensor input_, output_;
  CollectiveScratch* scratch_;
  std::shared_ptr<CollectiveJob> inner_;
};

// Host: the input copied to the host, the CPU job, the result copied back. The copies return
// once done (cuda::copy), on the engine's thread: this backend is the fallback, not the fast
// path.
class HostStagedJob final : public CollectiveJob {
 public:
  HostStagedJob(comm::Transport& transport, const CollectiveSpec& spec, int device, Tensor input,
                Tensor output, CollectiveScratch* scratch)
      : transport_(transport),
        spec_(spec),
        device_(device),
        input_(std::move(input)),
        output_(std::move(output)),
        scratch_(scratch) {}
  bool advance(bool* progressed) override {
    if (inner_ == nullptr) {
      host_output_ = Tensor::empty(output_.shape(), output_.dtype());
      if (input_.defined()) {  // a broadcast's members other than the root read nothing
        host_input_ = Tensor::empty(input_.shape(), input_.dtype());
        cuda::copy(host_input_.raw_data(), -1, input_.raw_data(), device_, input_.nbytes());
      }
      inner_ = make_collective_job(transport_, spec_, host_input_, host_output_, scratch_);
      *progressed = true;
    }
    if (!inner_->advance(progressed)) return false;
    cuda::copy(output_.raw_data(), device_, host_output_.raw_data(), -1, output_.nbytes());
    return true;
  }

 private:
  comm::Transport& transport_;
  CollectiveSpec spec_;
  int device_;
  Tensor input_, output_, host_input_, host_output_;
  CollectiveScratch* scratch_;
  std::shared_ptr<CollectiveJob> inner_;
};

// NCCL: queued in member 0's order on the communicator's stream, together with the process's
// other members of it (DeviceCommunicator::HostedMembers); done when an event recorded after it
// has completed.
class NcclJob final : public CollectiveJob, public std::enable_shared_from_this<NcclJob> {
 public:
  NcclJob(DeviceCommunicator& comm, const CollectiveSpec& spec, int64_t iteration, Tensor input,
          Tensor output)
      : comm_(comm),
        spec_(spec),
        iteration_(iteration),
        input_(std::move(input)),
        output_(std::move(output)) {}
  bool advance(bool* progressed) override {
    if (!turn_) {
      // Note [Nonblocking communicators] in cuda/nccl.h: one call in the background at a time
      // per communicator, so the member's last collective has been queued for good first.
      if (comm_.launching || !comm_.may_start(iteration_) || !comm_.nccl->ready(spec_.name)) {
        return false;
      }
      if (!comm_.take_turn(spec_.collective_id)) return false;
      turn_ = true;
      comm_.launching = true;
      *progressed = true;
      DeviceCommunicator::HostedMembers& hosted = *comm_.hosted;
      std::vector<std::shared_ptr<CollectiveJob>>& ready = hosted.waiting[spec_.collective_id];
      ready.push_back(shared_from_this());
      if (static_cast<int64_t>(ready.size()) == hosted.count) {
        std::vector<std::shared_ptr<NcclJob>> jobs;
        for (const auto& job : ready) jobs.push_back(std::static_pointer_cast<NcclJob>(job));
        hosted.waiting.erase(spec_.collective_id);
        const std::string group =
            str_cat(spec_.name, " (collective ", spec_.collective_id, " of ", comm_.name(), ")");
        if (jobs.size() > 1) cuda::nccl_group_start(group);
        try {
          for (const auto& job : jobs) job->queue();
        } catch (...) {
          if (jobs.size() > 1) cuda::nccl_group_end(group);
          throw;
        }
        if (jobs.size() > 1) cuda::nccl_group_end(group);
        for (const auto& job : jobs) job->sent_ = true;
      }
    }
    if (!sent_) return false;  // the process's other members of it have not had their turn
    // While it launches and runs: an error NCCL found (a peer gone, a broken link) ends the act
    // now, naming the collective, rather than at the next collective, which a stuck one never
    // reaches. Its kernels may still write the scratch, so the scratch is never given back (a
    // failed run's last megabytes; the caching allocator would hand them to the next tensor).
    try {
      if (event_ == nullptr) {
        // Launched in the background until ready (Note [Nonblocking communicators]); then the
        // unpacking and the event go on its stream, and the member may take its next turn.
        if (!comm_.nccl->ready(spec_.name)) return false;
        finish();
        comm_.launching = false;
        *progressed = true;
      }
      if (event_->done()) return true;
      (void)comm_.nccl->ready(spec_.name);  // raises on an error; in progress: the next one
    } catch (...) {
      static auto* kept = new std::vector<Tensor>();  // GUARDED_BY(kept_mu)
      static std::mutex kept_mu;
      std::lock_guard<std::mutex> lock(kept_mu);
      for (Tensor& t : queued_.scratch) kept->push_back(std::move(t));
      queued_.scratch.clear();
      throw;
    }
    return false;
  }

 private:
  void queue() {
    queued_ = comm_.nccl->collective(collective_proto(spec_), input_, output_, spec_.name);
  }
  void finish() {
    if (queued_.finish) queued_.finish();
    event_ = std::make_unique<cuda::Event>(comm_.nccl->device());
    event_->record(comm_.nccl->stream());
  }

  DeviceCommunicator& comm_;
  CollectiveSpec spec_;
  int64_t iteration_;
  Tensor input_, output_;
  bool turn_ = false;
  bool sent_ = false;  // queued to NCCL (maybe still launching in the background)
  cuda::NcclCommunicator::Queued queued_;  // the scratch the queued work uses, its unpacking
  std::unique_ptr<cuda::Event> event_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// DeviceCollectives

DeviceCollectives::DeviceCollectives(comm::Transport& transport, const PlanIndex& index,
                                     const std::vector<int64_t>& hosted,
                                     const std::map<int64_t, int>& gpu_of_rank,
                                     DeviceCollectiveBackend backend, double timeout_s)
    : backend_(backend), gpu_of_rank_(gpu_of_rank) {
  struct Communicator {
    std::string name;
    std::vector<int64_t> members;
    std::set<int64_t> hosted;
  };
  // By control id: ascending, the one order every rank creates them in.
  std::map<int64_t, Communicator> by_control;
  for (int t = 0; t < index.num_tasks(); ++t) {
    const proto::TaskProto& task = index.task(t).proto;
    if (task.kind() != proto::TaskProto::COLLECTIVE || task.device() != proto::PLAN_DEVICE_CUDA ||
        !std::binary_search(hosted.begin(), hosted.end(), task.rank())) {
      continue;
    }
    const proto::CollectiveProto& c = task.collective();
    const std::vector<int64_t> members(c.members().begin(), c.members().end());
    auto [it, fresh] = by_control.try_emplace(c.control_id());
    if (fresh) {
      it->second.name = c.communicator();
      it->second.members = members;
    }
    OFL_CHECK(it->second.members == members, kTag, index.describe_task(t), " has control id ",
              c.control_id(), ", which another GPU collective uses for ", it->second.name,
              " with other members: the plan is inconsistent.");
    it->second.hosted.insert(task.rank());
  }
  for (const auto& [control_id, c] : by_control) {
    std::vector<DeviceCommunicator*> mine;
    for (int64_t rank : c.hosted) {
      const int64_t member =
          std::find(c.members.begin(), c.members.end(), rank) - c.members.begin();
      auto comm =
          std::make_unique<DeviceCommunicator>(transport, c.name, c.members, member, control_id);
      mine.push_back(comm.get());
      communicators_[{rank, control_id}] = std::move(comm);
    }
    // Member 0 first, so members it shares this process with find its id waiting.
    std::stable_partition(mine.begin(), mine.end(),
                          [](const DeviceCommunicator* comm) { return comm->member() == 0; });
    // Note [Communicators kept per process]: what this process keeps of it, if anything.
    CommunicatorKey key{transport.network(), backend, c.members, {}};
    for (const DeviceCommunicator* comm : mine) {
      key.hosted.emplace_back(comm->member(), backend == DeviceCollectiveBackend::kNccl
                                                  ? gpu_of_rank_.at(comm->rank())
                                                  : -1);
    }
    const bool keeps = backend != DeviceCollectiveBackend::kHost;  // nothing worth keeping
    std::shared_ptr<SharedCommunicator> kept =
        keeps ? CommunicatorCache::process().find(key) : nullptr;
    auto fresh_id = [&] {
      return backend == DeviceCollectiveBackend::kNccl ? cuda::nccl_unique_id() : random_id();
    };
    const bool member_zero = mine[0]->member() == 0;
    bool offered = false;
    for (DeviceCommunicator* comm : mine) {
      if (comm->member() == 0) {
        offered = kept != nullptr;
        comm->send_bootstrap(offered ? kept->id() : fresh_id(), backend, offered);
        continue;
      }
      const DeviceCommunicator::Bootstrap theirs = comm->receive_bootstrap(timeout_s);
      offered = theirs.offered;
      comm->send_reply(theirs.backend == backend, backend,
                       kept != nullptr && kept->id() == comm->unique_id());
      OFL_CHECK(theirs.backend == backend, kTag, "rank ", comm->rank(), " runs the collectives of ",
                c.name, " with ", device_collective_backend_name(backend), ", but rank ",
                c.members[0], " with ", device_collective_backend_name(theirs.backend),
                ": every member must run them one way (OFL_CUDA_COLLECTIVES, OFL_CUDA_DEVICE).");
    }
    bool reuse = false;
    if (member_zero) {
      bool all_keep = false;
      try {
        all_keep = mine[0]->await_replies(backend, timeout_s);
      } catch (const Error&) {
        // The members waiting for a verdict hear of the refusal instead of waiting it out.
        if (offered) mine[0]->send_refusal();
        throw;
      }
      if (offered) {
        reuse = all_keep;
        mine[0]->send_verdict(reuse, reuse ? kept->id() : fresh_id());
      }
    }
    if (offered) {
      for (DeviceCommunicator* comm : mine) {
        if (comm->member() != 0) reuse = comm->receive_verdict(timeout_s);
      }
    }
    const cuda::NcclUniqueId id = mine[0]->unique_id();
    if (reuse) {
      OFL_CHECK_CODE(kept != nullptr && kept->id() == id, ErrorCode::kInternal, kTag,
                     "the members of ", c.name,
                     " chose to reuse a communicator this process "
                     "does not keep.");
      OFL_CHECK_CODE(!kept->aborted(), ErrorCode::kFailedPrecondition, kTag,
                     "the GPU communicator of ", c.name,
                     " was aborted by a failed run of another "
                     "graph while this one loaded; load it again.");
      VLOG(1) << kTag << "reuses the GPU communicator of " << c.name;
    } else if (keeps) {
      std::vector<std::unique_ptr<cuda::NcclCommunicator>> made;
      if (backend == DeviceCollectiveBackend::kNccl) {
        std::vector<cuda::NcclCommunicator::HostedMember> members;
        for (const auto& [member, device] : key.hosted) members.push_back({member, device});
        made = cuda::NcclCommunicator::create(id, static_cast<int64_t>(c.members.size()), members,
                                              c.name, timeout_s);
      }
      kept = std::make_shared<SharedCommunicator>(key, c.name, id, std::move(made));
      CommunicatorCache::process().keep(kept);
    }
    if (!keeps) continue;
    shared_[control_id] = kept;
    auto hosted = std::make_shared<DeviceCommunicator::HostedMembers>();
    hosted->count = static_cast<int64_t>(mine.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      mine[i]->nccl = kept->nccl(i);
      mine[i]->shared = kept.get();
      mine[i]->owner = this;
      mine[i]->hosted = hosted;
    }
  }
}

// The communicators end with the last runtime holding them (SharedCommunicator's destructor).
DeviceCollectives::~DeviceCollectives() = default;

void DeviceCollectives::abort() {
  for (const auto& [control_id, comm] : shared_) comm->abort();
}

void DeviceCollectives::abort_when_free() {
  std::vector<SharedCommunicator*> all;
  for (const auto& [control_id, comm] : shared_) all.push_back(comm.get());
  std::sort(all.begin(), all.end(), std::less<>());  // lease()'s order
  for (SharedCommunicator* comm : all) {
    std::lock_guard<std::mutex> lock(comm->run_mutex());
    comm->abort();
  }
}

DeviceCollectives::Lease::~Lease() {
  for (SharedCommunicator* comm : held_) {
    comm->set_holder(nullptr, -1);
    comm->run_mutex().unlock();
  }
}

// In one order (by address) in every runtime, so two runs sharing several never wait in a
// cycle.
DeviceCollectives::Lease DeviceCollectives::lease(int64_t iteration) {
  Lease lease;
  for (const auto& [control_id, comm] : shared_) lease.held_.push_back(comm.get());
  std::sort(lease.held_.begin(), lease.held_.end(), std::less<>());
  for (size_t i = 0; i < lease.held_.size(); ++i) {
    lease.held_[i]->run_mutex().lock();
    lease.held_[i]->set_holder(this, iteration);
    if (!lease.held_[i]->aborted()) continue;
    const std::string name = lease.held_[i]->name();
    lease.held_.resize(i + 1);  // the destructor unlocks these
    OFL_CHECK_CODE(false, ErrorCode::kFailedPrecondition, kTag, "the GPU communicator of ", name,
                   " was aborted after a failed run of another graph in this process, so this "
                   "graph cannot run its collectives any more.");
  }
  return lease;
}

DeviceCommunicator& DeviceCollectives::communicator(int64_t rank, int64_t control_id) {
  auto it = communicators_.find({rank, control_id});
  OFL_ASSERT(it != communicators_.end()) << "rank " << rank << " control id " << control_id;
  return *it->second;
}

std::shared_ptr<CollectiveJob> DeviceCollectives::make_job(comm::Transport& transport,
                                                           const CollectiveSpec& spec, int64_t rank,
                                                           int64_t control_id, int64_t iteration,
                                                           Tensor input, Tensor output,
                                                           CollectiveScratch* scratch) {
  DeviceCommunicator& comm = communicator(rank, control_id);
  switch (backend_) {
    case DeviceCollectiveBackend::kSimulated:
      return std::make_shared<SimulatedJob>(comm, transport, spec, iteration, std::move(input),
                                            std::move(output), scratch);
    case DeviceCollectiveBackend::kHost:
      return std::make_shared<HostStagedJob>(transport, spec, gpu_of_rank_.at(rank),
                                             std::move(input), std::move(output), scratch);
    case DeviceCollectiveBackend::kNccl:
      return std::make_shared<NcclJob>(comm, spec, iteration, std::move(input), std::move(output));
  }
  OFL_ASSERT(false);
  return nullptr;
}

}  // namespace ofl::actor
