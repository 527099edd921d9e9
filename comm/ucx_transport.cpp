// UCX transport (Notes [Bootstrap] and [Faults] in the header): creating the context and the
// worker, the progress thread, heartbeats, faults and shutting down. The bootstrap is in
// ucx_bootstrap.cpp, active messages in ucx_messages.cpp, tagged transfers in ucx_tagged.cpp.

#include "comm/ucx_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/proto/bootstrap.pb.h"
#include "comm/ucx_internal.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

namespace ofl::comm {

UcxTransport::UcxTransport(const LaunchEnv& env)
    : env_(env),
      args_(std::make_unique<CallbackArgs>()),
      outstanding_(std::make_unique<Outstanding>()) {
  for (int64_t r = 0; r < env_.world_size; ++r) peers_.push_back(std::make_unique<Peer>());
}

std::shared_ptr<UcxTransport> UcxTransport::connect(const LaunchEnv& env) {
  std::shared_ptr<UcxTransport> t(new UcxTransport(env));
  t->create_worker();
  t->register_handlers();
  t->start_progress_thread();
  if (env.world_size > 1) {
    if (env.rank == 0) {
      t->run_master();
    } else {
      t->run_client();
    }
    t->barrier();
    t->close_bootstrap();
  }
  t->connected_ = true;
  return t;
}

UcxTransport::~UcxTransport() { shut_down(/*goodbye=*/false); }

void UcxTransport::create_worker() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                 "reading the UCX configuration must succeed. However, got ",
                 ucs_status_string(status), ".");
  // A master restarted on the same MASTER_PORT must be able to listen while the last run's
  // connections are in TIME_WAIT (a port another process listens on still fails). The user's
  // own UCX_TCP_CM_REUSEADDR wins.
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // No UCP_FEATURE_WAKEUP: it leaves out transports without wake-up events, which sent
  // everything over TCP here (1 GB/s instead of shared memory's 13). The progress thread
  // polls instead (progress_loop).
  params.features = UCP_FEATURE_AM | UCP_FEATURE_TAG;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                 "UCX must initialise. However, got ", ucs_status_string(status), ".");
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Serialized, with ucx_mu_ around every call: UCX's multi-thread mode leaves out the shared
  // memory transports (everything went over TCP here).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                 "a UCX worker must be created. However, got ", ucs_status_string(status), ".");
  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(worker_, &address, &length);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                 "the UCX worker must have an address. However, got ", ucs_status_string(status),
                 ".");
  worker_address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  status = create_piece_datatype(&piece_datatype_);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                 "a UCX datatype must be created. However, got ", ucs_status_string(status), ".");
}

void UcxTransport::register_handlers() {
  CallbackArgs& args = *args_;
  for (uint16_t id : {kHello, kWelcome, kActorMessage, kHeartbeat, kBarrier, kBarrierRelease,
                      kGoodbye, kActorMessageWithData}) {
    args.handlers.push_back(std::make_unique<HandlerArg>(HandlerArg{this, id}));
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id = id;
    param.cb = &UcxTransport::on_am;
    param.arg = args.handlers.back().get();
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    const ucs_status_t status = ucp_worker_set_am_recv_handler(worker_, &param);
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag,
                   "an active-message handler must register. However, got ",
                   ucs_status_string(status), ".");
  }
}

std::string UcxTransport::where() const {
  return str_cat("master ", env_.master_addr, ":", env_.master_port);
}

namespace {

// The transport whose peers a UCX error may be about (one per process).
std::atomic<UcxTransport*> g_watched{nullptr};
std::once_flag g_log_handler_once;

}  // namespace

// Note [A peer's death inside UCX]: the data endpoints have no UCX error handling (it would
// drop shared memory, Note [Bootstrap]), so when a peer process dies in the middle of a
// shared-memory rendezvous, UCX's cross-memory attach finds the process gone and UCX aborts
// this one (process_vm_readv(pid=...) returned -1: No such process). Before it does, this
// handler names the rank that is gone, from the pids exchanged at the bootstrap, and ends the
// process with that message; the launcher then reports the dead rank, and every survivor says
// which rank failed as a heartbeat timeout would.
void UcxTransport::learn_peers(const proto::WelcomeProto& welcome) {
  for (int64_t r = 0; r < env_.world_size; ++r) {
    peers_[r]->host = welcome.hosts(r);
    peers_[r]->pid = r < welcome.pids_size() ? welcome.pids(r) : 0;
  }
  g_watched.store(this, std::memory_order_release);
  std::call_once(g_log_handler_once, [] { ucs_log_push_handler(&UcxTransport::on_ucx_log); });
}

ucs_log_func_rc_t UcxTransport::on_ucx_log(const char* /*file*/, unsigned /*line*/,
                                           const char* /*function*/, ucs_log_level_t level,
                                           const ucs_log_component_config_t* /*component*/,
                                           const char* format, va_list ap) {
  UcxTransport* t = g_watched.load(std::memory_order_acquire);
  if (t == nullptr || level > UCS_LOG_LEVEL_ERROR) return UCS_LOG_FUNC_RC_CONTINUE;
  char text[1024];
  va_list copy;
  va_copy(copy, ap);
  std::vsnprintf(text, sizeof(text), format, copy);
  va_end(copy);
  const char* at = std::strstr(text, "pid=");
  if (at == nullptr || std::strstr(text, "No such process") == nullptr) {
    return UCS_LOG_FUNC_RC_CONTINUE;
  }
  const int64_t pid = std::atoll(at + 4);
  const std::string here = hostname();
  for (int64_t r = 0; r < t->env_.world_size; ++r) {
    const Peer& peer = *t->peers_[r];
    if (r == t->env_.rank || peer.pid != pid || peer.host != here) continue;
    std::fprintf(stderr,
                 "%srank %lld failed: its process (pid %lld on %s) is gone, seen by rank %lld "
                 "while moving data with it (UCX: %s).\n",
                 kUcxTag, static_cast<long long>(r), static_cast<long long>(pid), peer.host.c_str(),
                 static_cast<long long>(t->env_.rank), text);
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(1);
  }
  return UCS_LOG_FUNC_RC_CONTINUE;
}

// ---- progress, heartbeats, faults ---------------------------------------------------------

void UcxTransport::start_progress_thread() {
  progress_ = std::thread([this] { progress_loop(); });
}

// Progress: progress while there is work, then sleep in naps of OFL_UCX_PROGRESS_NAP_US
// (default 500 us), growing to 1 ms with idleness. Without wake-up events (create_worker) a nap
// is how long a message for a parked communication thread may wait; a communication thread
// that acted recently progresses the worker itself while it spins, and an actor waiting for
// data does (fetch). Measured (docs/benchmarks.md, GPT DP2 on 2 cores): 50 us naps took so much
// CPU from the compute threads that a step took 62-69 ms instead of 53-56 ms.
void UcxTransport::progress_loop() {
  const int64_t interval_ns = static_cast<int64_t>(std::min(1.0, env_.fault_timeout / 4) * 1e9);
  int64_t next_heartbeat = now_ns() + interval_ns;
  int64_t idle_since = now_ns();
  // Communication actor threads progress the worker while they spin; this thread spinning too
  // would only take a core from them.
  const int64_t spin_ns = std::getenv("OFL_UCX_PROGRESS_SPIN_US") != nullptr
                              ? std::atoll(std::getenv("OFL_UCX_PROGRESS_SPIN_US")) * 1000
                              : 0;
  const int64_t nap_us = std::getenv("OFL_UCX_PROGRESS_NAP_US") != nullptr
                             ? std::atoll(std::getenv("OFL_UCX_PROGRESS_NAP_US"))
                             : 500;
  while (!stop_.load(std::memory_order_acquire)) {
    bool busy = false;
    {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      while (ucp_worker_progress(worker_) != 0) busy = true;
    }
    const int64_t now = now_ns();
    if (connected_ && now >= next_heartbeat) {
      next_heartbeat = now + interval_ns;
      for (int64_t r = 0; r < env_.world_size; ++r) {
        Peer& peer = *peers_[r];
        if (r == env_.rank || peer.ep == nullptr || peer.failed || peer.left) continue;
        try {
          send_am(peer.ep, kHeartbeat, "", 0);
        } catch (const Error&) {
        }
      }
      check_heartbeats();
    }
    if (busy || outstanding_->count.load(std::memory_order_relaxed) > 0) {
      idle_since = now;
      continue;
    }
    const int64_t idle = now - idle_since;
    if (idle < spin_ns) continue;
    // Naps grow with idleness (a quarter of it, from nap_us up to 1 ms): each wake-up takes
    // a core from the actor threads, which on a small machine costs more than the latency.
    const int64_t nap = std::clamp<int64_t>(idle / 4000, nap_us, std::max<int64_t>(nap_us, 1000));
    std::this_thread::sleep_for(std::chrono::microseconds(nap));
  }
}

bool UcxTransport::progress() {
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_, std::try_to_lock);
  if (!ucx.owns_lock() || worker_ == nullptr) return false;
  return ucp_worker_progress(worker_) != 0;  // once: the caller polls again soon
}

void UcxTransport::check_heartbeats() {
  const int64_t now = now_ns();
  for (int64_t r = 0; r < env_.world_size; ++r) {
    const Peer& peer = *peers_[r];
    if (r == env_.rank || peer.ep == nullptr || peer.failed || peer.left) continue;
    const double silent = (now - peer.last_heard_ns.load()) / 1e9;
    if (silent > env_.fault_timeout) {
      fail_peer(r, str_cat("nothing came from it for ", silent, " s (OFL_FAULT_TIMEOUT ",
                           env_.fault_timeout, " s)"));
    }
  }
}

void UcxTransport::fail_peer(int64_t rank, const std::string& why) {
  Peer& peer = *peers_[rank];
  if (peer.left || peer.reported.exchange(true)) return;
  const std::string what = str_cat("rank ", rank, " (", peer.host, ") failed: ", why);
  LOG(ERROR) << kUcxTag << "rank " << env_.rank << " sees " << what;
  // The handler (the runtime) hears of the failure before any transfer with the rank fails, so
  // the run ends naming the rank and why, not a transfer the failure broke.
  {
    std::shared_lock<std::shared_mutex> lock(handler_mu_);  // as for messages: see on_am
    if (fault_handler_) fault_handler_(rank, why);
  }
  peer.failed = true;
  std::lock_guard<std::mutex> lock(mu_);
  faults_ += (faults_.empty() ? "" : "; ") + what;
  cv_.notify_all();
}

std::string UcxTransport::faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}

void UcxTransport::close() { shut_down(/*goodbye=*/true); }

void UcxTransport::leave() {
  barrier();  // everyone is done before anyone says goodbye
  close();
}

void UcxTransport::shut_down(bool goodbye) {
  if (closed_.exchange(true)) return;
  if (connected_ && goodbye) {
    for (int64_t r = 0; r < env_.world_size; ++r) {
      Peer& peer = *peers_[r];
      if (r == env_.rank || peer.ep == nullptr || peer.failed) continue;
      try {
        send_am(peer.ep, kGoodbye, "", 0);
      } catch (const Error&) {
      }
    }
    // Let the goodbyes leave.
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    ucp_request_param_t flush{};
    ucs_status_ptr_t request = ucp_worker_flush_nbx(worker_, &flush);
    if (UCS_PTR_IS_PTR(request)) {
      const int64_t deadline = now_ns() + 2'000'000'000;
      while (ucp_request_check_status(request) == UCS_INPROGRESS && now_ns() < deadline) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(request);
    }
  }
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  {
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    for (auto& [tag, queue] : prepared_) {
      for (Posted& posted : queue) {
        if (posted.request != nullptr) ucp_request_cancel(worker_, posted.request);
      }
    }
    prepared_.clear();  // requests not given back are left to UCX (not freed: it is ending)
    for (void* token : inline_.clear()) ucp_am_data_release(worker_, token);
  }
  std::vector<ucp_ep_h> eps;
  for (auto& peer : peers_) {
    if (peer->ep != nullptr) eps.push_back(peer->ep);
    peer->ep = nullptr;
  }
  close_endpoints(eps);
  close_bootstrap();
  // Watched until its endpoints are closed: a peer may die while this rank says goodbye.
  UcxTransport* self = this;
  g_watched.compare_exchange_strong(self, nullptr);
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  if (piece_datatype_ != 0) ucp_dt_destroy(piece_datatype_);
  piece_datatype_ = 0;
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
}

}  // namespace ofl::comm
