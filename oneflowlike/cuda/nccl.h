#pragma once
// NCCL communicators and the collectives of COLLECTIVE tasks on GPUs (Note [Device collectives]
// in actor/device_collectives.h). Like device.h this header names no CUDA or NCCL type: a CUDA
// build compiles nccl.cpp against NCCL, a build without CUDA compiles the stubs in no_cuda.cpp,
// where built_with_nccl() is false and everything else raises.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/tensor.h"

namespace ofl::cuda {

class Stream;

/// Whether this build has the NCCL backend (it does whenever it has the CUDA backend).
bool built_with_nccl();
/// Whether NCCL loads in this process (Note [NCCL loaded on first use] in nccl.cpp): opens it
/// on the first call.
bool nccl_available();
/// "2.28.9", or "" when NCCL is not available.
std::string nccl_version();

/// ncclUniqueId's bytes: what the members of a communicator must share before they create it.
constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueId = std::array<std::byte, kNcclUniqueIdBytes>;
/// A fresh id (ncclGetUniqueId), made by one member and handed to the others.
NcclUniqueId nccl_unique_id();

/// ncclGroupStart / ncclGroupEnd: the calls between them are one launch. A thread driving
/// several members of one communicator must put their calls for one collective in one group,
/// or the first call may wait for the others forever (NCCL's "group calls").
/// `what` (the collective and its communicator) names them in errors.
void nccl_group_start(const std::string& what);
void nccl_group_end(const std::string& what);

// Note [Nonblocking communicators]: every communicator is made nonblocking (ncclConfig_t's
// blocking = 0), so no NCCL call waits for a peer: creation, a collective's launch (its
// connections are set up on first use) and the finalisation return ncclInProgress while NCCL
// works in the background, and the caller polls ready() without holding its thread. That gives
// creation a deadline (a member that died after the bootstrap would otherwise keep the others
// in ncclCommInitRank for ever), and it is what lets a failed run abort its communicators: the
// collective engine's thread, never stuck inside NCCL, stops first, then abort() runs with no
// other thread in the communicator. NCCL's rule for such communicators: after a call returned
// ncclInProgress, no NCCL call and no work on the communicator's stream until ready() says so;
// so a collective's unpacking (Queued::finish) and its event come once ready() is true, and the
// next collective starts only then.

/// One member's NCCL communicator, with a stream of its own for its collectives.
class NcclCommunicator {
 public:
  /// The members of one communicator that this process hosts: their index in it and their GPU.
  struct HostedMember {
    int64_t member = 0;
    int device = 0;
  };
  /// Creates the hosted members' communicators for `id` over `size` members, in one NCCL group
  /// (so one process may host several members). Waits until every member has joined, at most
  /// `timeout_s`: then it aborts them and raises (kDeadlineExceeded) naming the communicator
  /// and the hosted members. `name` ("dimension 0 of cuda:[0, 1]") is for errors.
  static std::vector<std::unique_ptr<NcclCommunicator>> create(
      const NcclUniqueId& id, int64_t size, const std::vector<HostedMember>& hosted,
      const std::string& name, double timeout_s);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int device() const { return device_; }
  int64_t member() const { return member_; }
  int64_t size() const { return size_; }
  /// The stream its collectives are queued on.
  Stream& stream() { return *stream_; }

  /// What collective() queued: the device scratch its work uses (the caller keeps it until an
  /// event recorded after `finish` has completed), and `finish` (may be empty): the unpacking
  /// of the result, to call once the NCCL group the call was in has ended (inside a group NCCL
  /// queues nothing until the outermost ncclGroupEnd).
  struct Queued {
    std::vector<Tensor> scratch;
    std::function<void()> finish;
  };
  /// Queues member `member()`'s part of `collective` (Note [Collective tasks] in
  /// oneflowlike/collective.h: its op, chunks along `axis`, the all-to-all's along `out_axis`,
  /// a broadcast's root, a grouped send/recv's blocks) from `input` (undefined for a
  /// broadcast's member other than the root) into `output`, both in this GPU's memory, on
  /// stream(). Returns at once; the data is there when an event recorded on stream() after
  /// Queued::finish has completed. Raises ofl::Error naming `what` (the task) when NCCL
  /// refuses, or when an earlier collective failed asynchronously.
  [[nodiscard]] Queued collective(const proto::CollectiveProto& collective, const Tensor& input,
                                  const Tensor& output, const std::string& what);

  /// Whether the last call's background work is done (Note [Nonblocking communicators]): the
  /// communicator takes the next call, and what follows a queued collective on stream() may be
  /// queued. Raises ofl::Error naming `what` when NCCL reports an error on this communicator
  /// (a peer gone, a broken link): also polled while a collective runs.
  bool ready(const std::string& what) const;

  /// Starts the orderly end (ncclCommFinalize: flushes what was queued), once; the
  /// destructor then frees the communicator when NCCL is done, or aborts it when it failed or is
  /// still finalising. Callers ending several communicators finalise all of them, wait with
  /// finalizing() under one deadline, then destroy them, so none waits on another.
  void finalize();
  /// Whether a finalize() is still under way in the background (false once done or failed).
  bool finalizing() const;
  /// Ends the communicator now, whatever is queued or running on it (ncclCommAbort), then
  /// waits for its stream (the unpacking copies behind an aborted collective): after a failed
  /// run, so no stream waits on a collective whose peer never comes and nothing writes a
  /// register afterwards. Only when no other thread can call into it (the collective engine
  /// stopped). The destructor then does nothing.
  void abort();

 private:
  NcclCommunicator(void* comm, int64_t member, int64_t size, int device, std::string name);

  void* comm_ = nullptr;  // ncclComm_t
  int64_t member_ = 0;
  int64_t size_ = 0;
  int device_ = 0;
  std::string name_;
  std::unique_ptr<Stream> stream_;
  bool finalize_called_ = false;  // ncclCommFinalize is called at most once
};

}  // namespace ofl::cuda
