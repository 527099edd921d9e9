// UCX transport (Notes [Bootstrap] and [Faults] in the header).

#include "comm/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/proto/bootstrap.pb.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

namespace ofl::comm {

// Sends still in flight, per transport: its progress thread does not sleep while there are any.
struct UcxOutstanding {
  std::atomic<int64_t> count{0};
};
using Outstanding = UcxOutstanding;

namespace {

constexpr const char* kTag = "[ucx] ";

std::string hostname() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// A message in flight: UCX reads header and data until the send completes, so both live on the
// heap until the completion callback (or an immediate completion) frees them.
struct Outgoing {
  int64_t sender = 0;  // the AM header: the sending rank
  std::vector<char> data;
  Outstanding* outstanding = nullptr;
};

void free_outgoing(void* request, ucs_status_t /*status*/, void* user_data) {
  auto* out = static_cast<Outgoing*>(user_data);
  out->outstanding->count.fetch_sub(1, std::memory_order_relaxed);
  delete out;
  if (request != nullptr) ucp_request_free(request);
}

void free_request(void* request, ucs_status_t /*status*/, void* /*user_data*/) {
  ucp_request_free(request);
}

// Which transport and which AM id a registered handler is for (the callback is not told).
struct HandlerArg {
  UcxTransport* self;
  uint16_t id;
};

// Which rank an endpoint leads to, for its error callback (-1: a connection still unnamed).
struct EndpointArg {
  UcxTransport* self;
  int64_t rank;
};

sockaddr_storage resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  OFL_CHECK_CODE(rc == 0 && result != nullptr, ErrorCode::kUnavailable, kTag,
                 "MASTER_ADDR must resolve to an IPv4 address. However, '", host,
                 "' does not: ", gai_strerror(rc), ".");
  sockaddr_storage addr{};
  std::memcpy(&addr, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return addr;
}

}  // namespace

// The handler and endpoint arguments the callbacks get; they live as long as the transport.
struct UcxTransport::CallbackArgs {
  std::vector<std::unique_ptr<HandlerArg>> handlers;
  std::vector<std::unique_ptr<EndpointArg>> endpoints;
  std::mutex mu;

  EndpointArg* endpoint(UcxTransport* t, int64_t rank) {
    std::lock_guard<std::mutex> lock(mu);
    endpoints.push_back(std::make_unique<EndpointArg>(EndpointArg{t, rank}));
    return endpoints.back().get();
  }
};

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

namespace {

// Note [Pieces packed by us]: send_with_data hands UCX a PieceSource through a generic datatype
// whose pack copies from the source's `data`, so UCX copies the piece straight from the SEND's
// register slot into the peer's queue. A send given up on (the peer failed while its queue was
// full) may still be packed later: UCX 1.13 ran such a pending send once the stopped peer
// resumed, even after its endpoint was closed by force. So a given-up source is pointed at
// zeros (under ucx_mu_, which every pack runs under) and never freed: the slot is never read
// after send_with_data returns.
struct PieceSource {
  const char* data = nullptr;  // null: pack zeros
  size_t bytes = 0;
};

void* piece_start_pack(void* /*context*/, const void* buffer, size_t /*count*/) {
  return const_cast<void*>(buffer);
}
void* piece_start_unpack(void* /*context*/, void* buffer, size_t /*count*/) { return buffer; }
size_t piece_packed_size(void* state) { return static_cast<PieceSource*>(state)->bytes; }
size_t piece_pack(void* state, size_t offset, void* dest, size_t max_length) {
  const auto* source = static_cast<PieceSource*>(state);
  const size_t n = std::min(max_length, source->bytes - offset);
  if (source->data != nullptr) {
    std::memcpy(dest, source->data + offset, n);
  } else {
    std::memset(dest, 0, n);
  }
  return n;
}
ucs_status_t piece_unpack(void* /*state*/, size_t /*offset*/, const void* /*src*/,
                          size_t /*length*/) {
  return UCS_ERR_UNSUPPORTED;  // pieces arrive as active-message data, never unpacked
}
void piece_finish(void* /*state*/) {}
const ucp_generic_dt_ops_t kPieceOps{piece_start_pack, piece_start_unpack, piece_packed_size,
                                     piece_pack,       piece_unpack,       piece_finish};

}  // namespace

void UcxTransport::create_worker() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
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
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
                 "UCX must initialise. However, got ", ucs_status_string(status), ".");
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Serialized, with ucx_mu_ around every call: UCX's multi-thread mode leaves out the shared
  // memory transports (everything went over TCP here).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
                 "a UCX worker must be created. However, got ", ucs_status_string(status), ".");
  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(worker_, &address, &length);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
                 "the UCX worker must have an address. However, got ", ucs_status_string(status),
                 ".");
  worker_address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  status = ucp_dt_create_generic(&kPieceOps, nullptr, &piece_datatype_);
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
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
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag,
                   "an active-message handler must register. However, got ",
                   ucs_status_string(status), ".");
  }
}

std::string UcxTransport::where() const {
  return str_cat("master ", env_.master_addr, ":", env_.master_port);
}

template <class F>
bool UcxTransport::wait_for(F ready, double seconds) {
  const int64_t deadline = now_ns() + static_cast<int64_t>(seconds * 1e9);
  std::unique_lock<std::mutex> lock(mu_);
  while (!ready()) {
    if (now_ns() >= deadline) return false;
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return true;
}

// ---- bootstrap ---------------------------------------------------------------------------

void UcxTransport::run_master() {
  const sockaddr_storage addr = resolve(env_.master_addr, env_.master_port);
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = sizeof(sockaddr_in);
  params.conn_handler.cb = &UcxTransport::on_connection;
  params.conn_handler.arg = this;
  ucs_status_t status;
  {
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    status = ucp_listener_create(worker_, &params, &listener_);
  }
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag, "rank 0 must listen on ",
                 env_.master_addr, ":", env_.master_port, " (MASTER_ADDR:MASTER_PORT). However, ",
                 ucs_status_string(status),
                 status == UCS_ERR_BUSY ? " (the port is taken: pick another MASTER_PORT)" : "",
                 ". HINT: MASTER_ADDR must be an address of this host.");
  LOG(INFO) << kTag << "rank 0 listening on " << env_.master_addr << ":" << env_.master_port
            << " for " << env_.world_size - 1 << " ranks";

  const bool joined = wait_for(
      [&] {
        return !bootstrap_error_.empty() ||
               static_cast<int64_t>(joined_.size()) == env_.world_size - 1;
      },
      env_.bootstrap_timeout);
  std::unique_lock<std::mutex> lock(mu_);
  proto::WelcomeProto welcome;
  std::string error = bootstrap_error_;
  if (error.empty() && !joined) {
    std::string missing;
    for (int64_t r = 1; r < env_.world_size; ++r) {
      if (!joined_.count(r)) missing += str_cat(missing.empty() ? "" : ", ", r);
    }
    error = str_cat(kTag, "every rank must join the ", where(), " within ", env_.bootstrap_timeout,
                    " s (OFL_BOOTSTRAP_TIMEOUT). However, ranks [", missing, "] of ",
                    env_.world_size, " never joined.");
  }
  if (!error.empty()) {
    welcome.set_refused(error);
  } else {
    welcome.add_worker_addresses(worker_address_);
    welcome.add_hosts(hostname());
    welcome.add_pids(getpid());
    for (const auto& [rank, joined_rank] : joined_) {
      proto::HelloProto hello;
      hello.ParseFromString(joined_rank.second);
      welcome.add_worker_addresses(hello.worker_address());
      welcome.add_hosts(hello.host());
      welcome.add_pids(hello.pid());
    }
  }
  const std::string bytes = welcome.SerializeAsString();
  std::vector<ucp_ep_h> joined_eps;
  for (const auto& [rank, joined_rank] : joined_) joined_eps.push_back(joined_rank.first);
  // Lock order: ucx_mu_ before mu_ (the progress thread holds ucx_mu_ when a handler takes
  // mu_), so nothing is sent while mu_ is held here.
  lock.unlock();
  for (ucp_ep_h ep : joined_eps) send_am(ep, kWelcome, bytes.data(), bytes.size());
  if (!error.empty()) {
    // Give the refusals a moment to leave before this process ends.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    throw_error(ErrorCode::kUnavailable, error);
  }
  std::vector<std::string> addresses(welcome.worker_addresses().begin(),
                                     welcome.worker_addresses().end());
  learn_peers(welcome);
  connect_peers(addresses);
}

void UcxTransport::run_client() {
  const sockaddr_storage addr = resolve(env_.master_addr, env_.master_port);
  proto::HelloProto hello;
  hello.set_rank(env_.rank);
  hello.set_world_size(env_.world_size);
  hello.set_secret(env_.secret);
  hello.set_worker_address(worker_address_);
  hello.set_host(hostname());
  hello.set_pid(getpid());
  const std::string bytes = hello.SerializeAsString();
  const int64_t deadline = now_ns() + static_cast<int64_t>(env_.bootstrap_timeout * 1e9);
  while (true) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    params.sockaddr.addrlen = sizeof(sockaddr_in);
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxTransport::on_ep_error;
    params.err_handler.arg = args_->endpoint(this, -2);  // -2: the master, while bootstrapping
    {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      master_unreachable_ = false;
      const ucs_status_t status = ucp_ep_create(worker_, &params, &master_ep_);
      OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                     " must open a connection to the ", where(), ". However, got ",
                     ucs_status_string(status), ".");
      send_am(master_ep_, kHello, bytes.data(), bytes.size(), /*reply=*/true);
    }
    const double left = (deadline - now_ns()) / 1e9;
    wait_for([&] { return welcome_.has_value() || master_unreachable_; }, std::max(0.0, left));
    std::unique_lock<std::mutex> lock(mu_);
    if (welcome_.has_value()) break;
    // Not reachable (yet): the master may not be listening; retry until the deadline.
    ucp_ep_h ep = master_ep_;
    master_ep_ = nullptr;
    lock.unlock();
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &close);
      if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
    }
    OFL_CHECK_CODE(now_ns() < deadline, ErrorCode::kDeadlineExceeded, kTag, "rank ", env_.rank,
                   " must reach the ", where(), " within ", env_.bootstrap_timeout,
                   " s (OFL_BOOTSTRAP_TIMEOUT). However, it could not connect, or the master did "
                   "not answer. HINT: is rank 0 running, and are MASTER_ADDR and MASTER_PORT the "
                   "same on every rank?");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  proto::WelcomeProto welcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    welcome.ParseFromString(*welcome_);
  }
  OFL_CHECK_CODE(welcome.refused().empty(), ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                 " was refused by the ", where(), ": ", welcome.refused());
  OFL_CHECK_CODE(welcome.worker_addresses_size() == env_.world_size, ErrorCode::kInternal, kTag,
                 "the master must send ", env_.world_size, " addresses. However, got ",
                 welcome.worker_addresses_size(), ".");
  std::vector<std::string> addresses(welcome.worker_addresses().begin(),
                                     welcome.worker_addresses().end());
  learn_peers(welcome);
  connect_peers(addresses);
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
                 kTag, static_cast<long long>(r), static_cast<long long>(pid), peer.host.c_str(),
                 static_cast<long long>(t->env_.rank), text);
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(1);
  }
  return UCS_LOG_FUNC_RC_CONTINUE;
}

void UcxTransport::connect_peers(const std::vector<std::string>& addresses) {
  for (int64_t r = 0; r < env_.world_size; ++r) {
    if (r == env_.rank) continue;
    ucp_ep_params_t params{};
    // No peer error handling on these: UCX then leaves out transports that cannot detect a
    // failed peer, shared memory among them (everything went over TCP here). Heartbeats
    // detect failed peers instead (Note [Faults]).
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[r].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h ep = nullptr;
    ucs_status_t status;
    {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      status = ucp_ep_create(worker_, &params, &ep);
    }
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                   " must connect to rank ", r, " (", peers_[r]->host, "). However, got ",
                   ucs_status_string(status), ".");
    peers_[r]->ep = ep;
    peers_[r]->last_heard_ns = now_ns();
    if (std::getenv("OFL_UCX_PRINT_ENDPOINTS") != nullptr) {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      ucp_ep_print_info(ep, stderr);
    }
  }
}

void UcxTransport::barrier() {
  if (env_.world_size == 1) return;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = ++barrier_generation_;
  }
  const int64_t others = env_.world_size - 1;
  // The bootstrap's barrier has the bootstrap timeout; later ones (a rank done with its steps
  // waiting for the slowest) wait as long as every rank is alive (Note [Faults]).
  const double timeout = connected_ ? 1e9 : env_.bootstrap_timeout;
  auto failed = [&] {
    for (const auto& peer : peers_) {
      if (peer->failed) return true;
    }
    return false;
  };
  if (env_.rank == 0) {
    const bool all =
        wait_for([&] { return barrier_arrivals_ >= generation * others || failed(); }, timeout);
    OFL_CHECK_CODE(!failed(), ErrorCode::kUnavailable, kTag, "every rank must reach barrier ",
                   generation, ". However, ", faults());
    OFL_CHECK_CODE(all, ErrorCode::kDeadlineExceeded, kTag, "every rank must reach barrier ",
                   generation, " within ", timeout, " s. However, ",
                   barrier_arrivals_ - (generation - 1) * others, " of ", others,
                   " other ranks arrived.");
    for (int64_t r = 1; r < env_.world_size; ++r) send_am(peers_[r]->ep, kBarrierRelease, "", 0);
  } else {
    send_am(peers_[0]->ep, kBarrier, "", 0);
    const bool released =
        wait_for([&] { return barrier_released_ >= generation || failed(); }, timeout);
    OFL_CHECK_CODE(!failed(), ErrorCode::kUnavailable, kTag, "every rank must reach barrier ",
                   generation, ". However, ", faults());
    OFL_CHECK_CODE(released, ErrorCode::kDeadlineExceeded, kTag, "rank ", env_.rank,
                   " must be released from barrier ", generation, " by the ", where(), " within ",
                   timeout, " s. However, it was not.");
  }
  // The bootstrap connection stays open until close(): UCX may share its TCP connection with
  // the endpoint to rank 0, and closing it by force would break that one too.
}

// The bootstrap's listener and TCP connections are not needed once the ranks are connected
// directly; left open, every ucp_worker_progress polls their sockets (an epoll_wait system call
// that was most of an actor message's latency).
void UcxTransport::close_bootstrap() {
  std::vector<ucp_ep_h> eps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (master_ep_ != nullptr) eps.push_back(master_ep_);
    for (ucp_ep_h ep : accepted_) eps.push_back(ep);
    master_ep_ = nullptr;
    accepted_.clear();
  }
  close_endpoints(eps);
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  listener_ = nullptr;
}

// Closes endpoints by force (each peer closes its own end, or has gone), waiting up to a second
// for each.
void UcxTransport::close_endpoints(const std::vector<ucp_ep_h>& eps) {
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  for (ucp_ep_h ep : eps) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (!UCS_PTR_IS_PTR(request)) continue;
    const int64_t deadline = now_ns() + 1'000'000'000;
    while (ucp_request_check_status(request) == UCS_INPROGRESS && now_ns() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(request);
  }
}

// ---- callbacks ---------------------------------------------------------------------------

void UcxTransport::on_connection(ucp_conn_request_h request, void* arg) try {
  auto* self = static_cast<UcxTransport*>(arg);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxTransport::on_ep_error;
  params.err_handler.arg = self->args_->endpoint(self, -1);
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(self->worker_, &params, &ep) == UCS_OK) {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->accepted_.push_back(ep);
  }
} catch (const std::exception& e) {
  LOG(ERROR) << kTag << "a connection could not be accepted: " << e.what();
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) try {
  auto* a = static_cast<EndpointArg*>(arg);
  UcxTransport* self = a->self;
  if (a->rank == -2) {  // the master, while this rank bootstraps
    std::lock_guard<std::mutex> lock(self->mu_);
    self->master_unreachable_ = true;
    self->cv_.notify_all();
  } else if (a->rank >= 0) {
    self->fail_peer(a->rank, str_cat("its connection broke (", ucs_status_string(status), ")"));
  }
} catch (const std::exception& e) {
  LOG(ERROR) << kTag << "an endpoint error could not be handled: " << e.what();
}

// Exceptions must not unwind through UCX's C frames: every callback body is caught.
ucs_status_t UcxTransport::on_am(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  try {
    return handle_am(arg, header, header_length, data, length, param);
  } catch (const std::exception& e) {
    LOG(ERROR) << kTag << "an active message could not be handled: " << e.what();
  }
  return UCS_OK;
}

ucs_status_t UcxTransport::handle_am(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param) {
  const auto* a = static_cast<HandlerArg*>(arg);
  UcxTransport* self = a->self;
  int64_t sender = -1;
  if (header_length == sizeof(int64_t)) std::memcpy(&sender, header, sizeof(sender));
  // Liveness comes from the heartbeats (several per fault timeout); stamping every actor
  // message with the clock as well would only slow the message path.
  if (a->id != kActorMessage && a->id != kActorMessageWithData && sender >= 0 &&
      sender < self->env_.world_size) {
    self->peers_[sender]->last_heard_ns.store(now_ns(), std::memory_order_relaxed);
  }
  // The bootstrap messages are protobufs; actor messages are used in place (no copy).
  auto bytes = [&] { return std::string(static_cast<const char*>(data), length); };
  switch (a->id) {
    case kActorMessage: {
      MessageBytes message{};
      if (length != message.size()) break;
      std::memcpy(message.data(), data, length);
      self->deliver_message(message);
      break;
    }
    case kActorMessageWithData: {
      // Note [Small transfers travel with their message]: the piece is kept before the message
      // goes on, so the RECV that acts on the message finds it.
      WithDataHeader head;
      if (header_length != sizeof(head)) break;
      std::memcpy(&head, header, sizeof(head));
      if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        // UCX lets us keep its buffer: the RECV copies out of it, then it is given back
        // (ucp_am_data_release in fetch), one copy fewer than keeping a copy of our own.
        self->inline_.put_borrowed(head.tag, data, length, data);
        self->deliver_message(head.message);
        return UCS_INPROGRESS;
      }
      self->inline_.put(head.tag, data, length);
      self->deliver_message(head.message);
      break;
    }
    case kHello: {
      proto::HelloProto hello;
      std::lock_guard<std::mutex> lock(self->mu_);
      const bool parsed = hello.ParseFromArray(data, static_cast<int>(length));
      if (!parsed || hello.secret() != self->env_.secret) {
        LOG(WARNING) << kTag << "refused a connection from " << (parsed ? hello.host() : "?")
                     << " claiming rank " << (parsed ? hello.rank() : -1)
                     << ": it did not present the job secret (OFL_JOB_SECRET)";
        proto::WelcomeProto refused;
        refused.set_refused("the job secret does not match (OFL_JOB_SECRET)");
        const std::string answer = refused.SerializeAsString();
        if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
          self->send_am(param->reply_ep, kWelcome, answer.data(), answer.size());
        }
        break;
      }
      if (hello.world_size() != self->env_.world_size) {
        self->bootstrap_error_ =
            str_cat(kTag, "every rank must have the master's WORLD_SIZE ", self->env_.world_size,
                    ". However, rank ", hello.rank(), " on ", hello.host(), " has WORLD_SIZE ",
                    hello.world_size(), ".");
      } else if (hello.rank() <= 0 || hello.rank() >= self->env_.world_size ||
                 self->joined_.count(hello.rank())) {
        self->bootstrap_error_ =
            str_cat(kTag, "each rank in [1, ", self->env_.world_size,
                    ") must join once. However, rank ", hello.rank(), " on ", hello.host(),
                    self->joined_.count(hello.rank()) ? " joined twice." : " is out of range.");
      } else if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        self->joined_[hello.rank()] = {param->reply_ep, bytes()};
      }
      if (!self->bootstrap_error_.empty() && (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        // The offender learns too: the master's answer to every joined rank follows.
        proto::WelcomeProto refused;
        refused.set_refused(self->bootstrap_error_);
        const std::string answer = refused.SerializeAsString();
        self->send_am(param->reply_ep, kWelcome, answer.data(), answer.size());
      }
      self->cv_.notify_all();
      break;
    }
    case kWelcome: {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (!self->welcome_.has_value()) self->welcome_ = bytes();
      self->cv_.notify_all();
      break;
    }
    case kBarrier: {
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->barrier_arrivals_;
      self->cv_.notify_all();
      break;
    }
    case kBarrierRelease: {
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->barrier_released_;
      self->cv_.notify_all();
      break;
    }
    case kGoodbye:
      if (sender >= 0 && sender < self->env_.world_size) self->peers_[sender]->left = true;
      break;
    default:  // kHeartbeat: last_heard above is all
      break;
  }
  return UCS_OK;
}

void UcxTransport::deliver_message(const MessageBytes& message) {
  {
    // Called under the lock: stop_serving_rank then waits for a call under way, so the
    // runtime behind the handler is not freed in the middle of it. Handlers do not block.
    std::shared_lock<std::shared_mutex> lock(handler_mu_);
    auto it = handlers_.find(env_.rank);
    if (it != handlers_.end()) {
      it->second(message);
      return;
    }
  }
  // Another rank's runtime may start before this one's: keep its messages for serve_rank.
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  auto it = handlers_.find(env_.rank);
  if (it != handlers_.end()) {
    it->second(message);
  } else {
    early_messages_.push_back(message);
  }
}

// ---- sending -----------------------------------------------------------------------------

void UcxTransport::send_am(ucp_ep_h ep, AmId id, const void* data, size_t bytes, bool reply) {
  {
    // Fast path: most small messages leave at once (shared memory, eager), and then the
    // caller's buffers can be used as they are. FORCE_IMM_CMPL makes UCX say when they cannot.
    const int64_t sender = env_.rank;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    ucs_status_ptr_t request =
        ucp_am_send_nbx(ep, id, &sender, sizeof(sender), data, bytes, &param);
    if (UCS_PTR_STATUS(request) == UCS_OK) return;
    OFL_ASSERT(!UCS_PTR_IS_PTR(request));
    OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_ERR_NO_RESOURCE, ErrorCode::kUnavailable, kTag,
                   "rank ", env_.rank, " must send to its peer. However, UCX says ",
                   ucs_status_string(UCS_PTR_STATUS(request)), ".");
  }
  auto* out = new Outgoing{
      env_.rank,
      std::vector<char>(static_cast<const char*>(data), static_cast<const char*>(data) + bytes),
      outstanding_.get()};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
  param.cb.send = &free_outgoing;
  param.user_data = out;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_am_send_nbx(ep, id, &out->sender, sizeof(out->sender),
                                             out->data.data(), out->data.size(), &param);
  if (UCS_PTR_IS_PTR(request)) {
    outstanding_->count.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  delete out;
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ",
                 env_.rank, " must send to its peer. However, UCX says ",
                 ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

void UcxTransport::serve_rank(int64_t rank, MessageHandler handler) {
  OFL_CHECK(rank == env_.rank, kTag, "a process serves its own rank (", env_.rank,
            "). However, got rank ", rank, ".");
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  auto [it, inserted] = handlers_.emplace(rank, std::move(handler));
  OFL_CHECK(inserted, kTag, "rank ", rank, " is served already.");
  for (const MessageBytes& message : early_messages_) it->second(message);
  early_messages_.clear();
}

void UcxTransport::stop_serving_rank(int64_t rank) {
  {
    std::unique_lock<std::shared_mutex> lock(handler_mu_);
    handlers_.erase(rank);
    early_messages_.clear();  // a later runtime on this transport must not see them
  }
  {
    std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
    for (void* token : inline_.clear()) ucp_am_data_release(worker_, token);
  }
  // The receives the runtime posted ahead point into its registers, which are about to go.
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  for (auto& [tag, queue] : prepared_) {
    for (Posted& posted : queue) cancel_receive(posted, 100'000'000);
  }
  prepared_.clear();
}

void UcxTransport::set_fault_handler(FaultHandler handler) {
  std::unique_lock<std::shared_mutex> lock(handler_mu_);
  fault_handler_ = std::move(handler);
}

const UcxTransport::Peer& UcxTransport::reachable_peer(int64_t dst_rank) const {
  OFL_CHECK_CODE(dst_rank >= 0 && dst_rank < env_.world_size && dst_rank != env_.rank,
                 ErrorCode::kUnavailable, kTag,
                 "a message must go to another rank of the job. However, got rank ", dst_rank,
                 " (world size ", env_.world_size, ").");
  const Peer& peer = *peers_[dst_rank];
  OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kTag, "rank ", dst_rank, " (", peer.host,
                 ") failed; no message can reach it.");
  return peer;
}

void UcxTransport::send(int64_t dst_rank, const MessageBytes& message) {
  send_am(reachable_peer(dst_rank).ep, kActorMessage, message.data(), message.size());
}

void UcxTransport::send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag,
                                  const void* data, size_t bytes) {
  OFL_ASSERT(bytes <= kInlineTransferBytes) << "transfer " << tag << " is too large to inline";
  const Peer& peer = reachable_peer(dst_rank);
  // One active message: the actor message and the tag in its header, the piece as its data,
  // packed by UCX from `data` itself (Note [Pieces packed by us]). UCX sends at once when the
  // peer's queue has room (eager bcopy); otherwise the request stays in flight, and this waits
  // for it, driving the worker (the peer drains its queue).
  struct Outbox {
    WithDataHeader header;
    PieceSource source;
  };
  thread_local std::unique_ptr<Outbox> outbox;
  if (outbox == nullptr) outbox = std::make_unique<Outbox>();
  outbox->header = WithDataHeader{env_.rank, message, tag};
  outbox->source = PieceSource{static_cast<const char*>(data), bytes};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.datatype = piece_datatype_;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_am_send_nbx(peer.ep, kActorMessageWithData, &outbox->header,
                                             sizeof(outbox->header), &outbox->source, 1, &param);
  if (UCS_PTR_IS_PTR(request)) {
    // The lock is let go every turn, as in fetch: the progress thread's heartbeats are what
    // find a peer that stopped draining its queue failed (holding the lock, this waited forever).
    while (ucp_request_check_status(request) == UCS_INPROGRESS && !peer.failed) {
      const unsigned progressed = ucp_worker_progress(worker_);
      ucx.unlock();
      if (progressed == 0) std::this_thread::yield();
      ucx.lock();
    }
    const ucs_status_t status = ucp_request_check_status(request);
    if (status == UCS_INPROGRESS) {  // given up on: UCX may still pack it
      outbox->source.data = nullptr;
      (void)outbox.release();
    }
    ucp_request_free(request);
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                   " must send transfer ", tag, " to rank ", dst_rank, ". However, ",
                   status == UCS_INPROGRESS ? "that rank failed" : ucs_status_string(status), ".");
    return;
  }
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ",
                 env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                 ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

void UcxTransport::expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) {
  const Peer& peer = *peers_.at(dst_rank);
  ucp_request_param_t param{};
  // Not counted as outstanding: a rendezvous send completes only when the receiver reads it,
  // and the progress thread must not spin all that while (the RECV's thread drives UCX).
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
  param.cb.send = &free_request;
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_send_nbx(peer.ep, data, bytes, tag, &param);
  ucx.unlock();
  if (UCS_PTR_IS_PTR(request)) return;
  OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ",
                 env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                 ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
}

// A tagged transfer in flight: the UCX request of a send, or the posted receive. Dropped
// unfinished (a failed collective), a receive is cancelled and a send left to UCX to free.
struct UcxTransport::TaggedState {
  UcxTransport* self = nullptr;
  bool is_send = false;
  void* send_request = nullptr;
  Posted posted;
  ~TaggedState() {
    if (is_send) {
      if (send_request != nullptr) {
        std::lock_guard<std::recursive_mutex> ucx(self->ucx_mu_);
        ucp_request_free(send_request);  // UCX frees it once it completes
      }
    } else if (posted.request != nullptr) {
      self->cancel_receive(posted, 1'000'000'000);
    }
  }
};

Transport::TaggedRequest UcxTransport::send_tagged(int64_t dst_rank, uint64_t tag, const void* data,
                                                   size_t bytes) {
  const Peer& peer = *peers_.at(dst_rank);
  OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                 " must send transfer ", tag, " to rank ", dst_rank, " (", peer.host,
                 "). However, that rank failed.");
  auto state = std::make_shared<TaggedState>();
  state->self = this;
  state->is_send = true;
  ucp_request_param_t param{};
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_send_nbx(peer.ep, data, bytes, tag, &param);
  ucx.unlock();
  TaggedRequest out;
  out.peer = dst_rank;
  out.tag = tag;
  out.bytes = bytes;
  if (UCS_PTR_IS_PTR(request)) {
    state->send_request = request;
    out.state = state;
  } else {
    OFL_CHECK_CODE(UCS_PTR_STATUS(request) == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ",
                   env_.rank, " must send transfer ", tag, " to rank ", dst_rank,
                   ". However, UCX says ", ucs_status_string(UCS_PTR_STATUS(request)), ".");
    out.done = true;
  }
  return out;
}

Transport::TaggedRequest UcxTransport::receive_tagged(int64_t src_rank, uint64_t tag, void* dst,
                                                      size_t bytes) {
  auto state = std::make_shared<TaggedState>();
  state->self = this;
  state->posted = post_receive(tag, dst, bytes);
  TaggedRequest out;
  out.peer = src_rank;
  out.tag = tag;
  out.bytes = bytes;
  out.state = state;
  return out;
}

bool UcxTransport::test(TaggedRequest& request) {
  if (request.done) return true;
  auto* state = static_cast<TaggedState*>(request.state.get());
  const Peer& peer = *peers_.at(request.peer);
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_, std::try_to_lock);
  if (!ucx.owns_lock()) return false;  // another thread is progressing the worker
  ucp_worker_progress(worker_);
  if (state->is_send) {
    const ucs_status_t status = ucp_request_check_status(state->send_request);
    if (status == UCS_INPROGRESS) {
      ucx.unlock();
      OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kTag, "rank ", request.peer, " (",
                     peer.host, ") failed while rank ", env_.rank, " sent it transfer ",
                     request.tag, ".");
      return false;
    }
    ucp_request_free(state->send_request);
    state->send_request = nullptr;
    ucx.unlock();
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kTag, "rank ", env_.rank,
                   " must send transfer ", request.tag, " to rank ", request.peer,
                   ". However, UCX says ", ucs_status_string(status), ".");
  } else {
    if (!receive_done(state->posted)) {
      ucx.unlock();
      OFL_CHECK_CODE(!peer.failed, ErrorCode::kUnavailable, kTag, "rank ", request.peer, " (",
                     peer.host, ") failed while rank ", env_.rank, " waited for transfer ",
                     request.tag, ".");
      return false;
    }
    ucx.unlock();
    const auto status = static_cast<ucs_status_t>(state->posted.status);
    OFL_CHECK_CODE(status == UCS_OK && state->posted.length == request.bytes,
                   ErrorCode::kUnavailable, kTag, "transfer ", request.tag, " from rank ",
                   request.peer, " must deliver ", request.bytes, " bytes. However, got ",
                   state->posted.length, " (", ucs_status_string(status), ").");
  }
  request.done = true;
  request.state.reset();
  return true;
}

// Posts the receive of `tag` into `dst`.
UcxTransport::Posted UcxTransport::post_receive(uint64_t tag, void* dst, size_t bytes) {
  Posted posted;
  posted.dst = dst;
  posted.bytes = bytes;
  // UCX 1.13 does not fill the length on an immediate completion; a message of another size
  // would have completed with UCS_ERR_MESSAGE_TRUNCATED.
  ucp_tag_recv_info_t info{0, bytes};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
  param.recv_info.tag_info = &info;
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_, dst, bytes, tag, ~uint64_t{0}, &param);
  if (UCS_PTR_IS_PTR(request)) {
    posted.request = request;
  } else {  // done at once (an eager message that had come unexpected), or failed
    posted.status = UCS_PTR_STATUS(request);
    posted.length = info.length;
  }
  return posted;
}

bool UcxTransport::receive_done(Posted& posted) {
  if (posted.request == nullptr) return true;
  ucp_tag_recv_info_t info{};
  const ucs_status_t status = ucp_tag_recv_request_test(posted.request, &info);
  if (status == UCS_INPROGRESS) return false;
  posted.status = status;
  posted.length = info.length;
  ucp_request_free(posted.request);
  posted.request = nullptr;
  return true;
}

void UcxTransport::cancel_receive(Posted& posted, int64_t wait_ns) {
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  if (posted.request == nullptr) return;
  ucp_request_cancel(worker_, posted.request);
  const int64_t deadline = now_ns() + wait_ns;
  while (!receive_done(posted) && now_ns() < deadline) ucp_worker_progress(worker_);
  if (posted.request != nullptr) {  // given up on: UCX frees it when it completes
    ucp_request_free(posted.request);
    posted.request = nullptr;
  }
}

void UcxTransport::prepare_fetch(int64_t /*src_rank*/, uint64_t tag, void* dst, size_t bytes) {
  // Small messages: taking an eager message that came unexpected is cheaper than keeping a
  // request posted for it (measured: 4 KiB transfers 12-17 GB/s unposted, 4 GB/s posted).
  if (bytes < kPrepareMinBytes) return;
  Posted posted = post_receive(tag, dst, bytes);
  std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
  prepared_[tag].push_back(posted);
}

void UcxTransport::fetch(int64_t src_rank, uint64_t tag, uint64_t /*address*/, void* dst,
                         size_t bytes) {
  if (bytes <= kInlineTransferBytes) {  // it came with its message (send_with_data)
    if (void* token = inline_.take(tag, src_rank, dst, bytes)) {
      std::lock_guard<std::recursive_mutex> ucx(ucx_mu_);
      ucp_am_data_release(worker_, token);
    }
    return;
  }
  std::unique_lock<std::recursive_mutex> ucx(ucx_mu_);
  Posted posted;
  auto it = prepared_.find(tag);
  if (it != prepared_.end() && !it->second.empty()) {
    // Posted ahead by prepare_fetch (Note [Receives posted ahead] in transport.h).
    posted = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) prepared_.erase(it);
    OFL_ASSERT(posted.dst == dst && posted.bytes == bytes)
        << "transfer " << tag << " was prepared for another buffer";
  } else {
    posted = post_receive(tag, dst, bytes);
  }
  const Peer& peer = *peers_.at(src_rank);
  // Progress the worker here too: the data arrives sooner than the progress thread's next turn.
  // The lock is let go every turn, so the progress thread (heartbeats) is never shut out.
  while (!receive_done(posted)) {
    const unsigned progressed = ucp_worker_progress(worker_);
    if (receive_done(posted)) break;
    if (peer.failed) {
      // A receive already matched (a rendezvous under way) may not cancel: wait a little, then
      // leave the request to UCX (cancel_receive).
      cancel_receive(posted, 1'000'000'000);
      throw_error(ErrorCode::kUnavailable,
                  str_cat(kTag, "rank ", src_rank, " (", peer.host, ") failed while rank ",
                          env_.rank, " waited for transfer ", tag, "."));
    }
    ucx.unlock();
    if (progressed == 0) std::this_thread::yield();
    ucx.lock();
  }
  ucx.unlock();
  const auto status = static_cast<ucs_status_t>(posted.status);
  OFL_CHECK_CODE(status == UCS_OK && posted.length == bytes, ErrorCode::kUnavailable, kTag,
                 "transfer ", tag, " from rank ", src_rank, " must deliver ", bytes,
                 " bytes. However, got ", posted.length, " (", ucs_status_string(status), ").");
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
  LOG(ERROR) << kTag << "rank " << env_.rank << " sees " << what;
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
