// GPU communicators kept per process (Note [Communicators kept per process] in the header).

#include "actor/communicator_cache.h"

#include <glog/logging.h>

#include <chrono>
#include <thread>
#include <tuple>

namespace ofl::actor {

bool CommunicatorKey::operator<(const CommunicatorKey& other) const {
  return std::tie(network, backend, members, hosted) <
         std::tie(other.network, other.backend, other.members, other.hosted);
}

SharedCommunicator::SharedCommunicator(CommunicatorKey key, std::string name,
                                       const cuda::NcclUniqueId& id,
                                       std::vector<std::unique_ptr<cuda::NcclCommunicator>> nccl)
    : key_(std::move(key)), name_(std::move(name)), id_(id), nccl_(std::move(nccl)) {}

SharedCommunicator::~SharedCommunicator() {
  CommunicatorCache::process().forget(*this);
  // Every hosted member starts its finalisation before any waits: one member's may wait for
  // the others'. Those still finalising after the deadline are aborted by their destructors.
  for (const auto& comm : nccl_) comm->finalize();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const auto& comm : nccl_) {
    while (comm->finalizing() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

void SharedCommunicator::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
  }
  CommunicatorCache::process().forget(*this);
  for (const auto& comm : nccl_) comm->abort();
}

bool SharedCommunicator::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void SharedCommunicator::set_holder(const void* owner, int64_t iteration) {
  std::lock_guard<std::mutex> lock(mu_);
  holder_ = owner;
  holder_iteration_ = iteration;
}

bool SharedCommunicator::held_by(const void* owner, int64_t iteration) const {
  std::lock_guard<std::mutex> lock(mu_);
  return holder_ == owner && holder_iteration_ == iteration;
}

CommunicatorCache& CommunicatorCache::process() {
  static auto* cache = new CommunicatorCache();  // never destroyed: runtimes may outlive statics
  return *cache;
}

// The shared pointers taken here are dropped after the lock: dropping the last one runs the
// communicator's destructor, which calls forget().
std::shared_ptr<SharedCommunicator> CommunicatorCache::find(const CommunicatorKey& key) {
  std::shared_ptr<SharedCommunicator> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find(key);
    if (it == kept_.end()) return nullptr;
    comm = it->second.lock();
    if (comm != nullptr && !comm->aborted()) return comm;
    kept_.erase(it);
  }
  return nullptr;
}

void CommunicatorCache::keep(const std::shared_ptr<SharedCommunicator>& made) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_[made->key()] = made;
  ++made_;
  VLOG(1) << "[actor] made the GPU communicator of " << made->name() << " (" << made_
          << " made by this process)";
}

void CommunicatorCache::forget(const SharedCommunicator& comm) {
  std::shared_ptr<SharedCommunicator> kept;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kept_.find(comm.key());
  if (it == kept_.end()) return;
  // Null when expired: `comm` itself, from its destructor.
  kept = it->second.lock();
  if (kept == nullptr || kept.get() == &comm) kept_.erase(it);
}

int64_t CommunicatorCache::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

}  // namespace ofl::actor
