// The UCX transport's bootstrap (Note [Bootstrap] in ucx_transport.h): the master's listener,
// the clients' connections to it, the worker addresses exchanged, the data endpoints and the
// barrier; then the bootstrap connections closed.

#include <arpa/inet.h>
#include <netdb.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/proto/bootstrap.pb.h"
#include "comm/ucx_internal.h"
#include "comm/ucx_transport.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"

namespace ofl::comm {

namespace {

sockaddr_storage resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  OFL_CHECK_CODE(rc == 0 && result != nullptr, ErrorCode::kUnavailable, kUcxTag,
                 "MASTER_ADDR must resolve to an IPv4 address. However, '", host,
                 "' does not: ", gai_strerror(rc), ".");
  sockaddr_storage addr{};
  std::memcpy(&addr, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return addr;
}

}  // namespace

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
  OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank 0 must listen on ",
                 env_.master_addr, ":", env_.master_port, " (MASTER_ADDR:MASTER_PORT). However, ",
                 ucs_status_string(status),
                 status == UCS_ERR_BUSY ? " (the port is taken: pick another MASTER_PORT)" : "",
                 ". HINT: MASTER_ADDR must be an address of this host.");
  LOG(INFO) << kUcxTag << "rank 0 listening on " << env_.master_addr << ":" << env_.master_port
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
    error = str_cat(kUcxTag, "every rank must join the ", where(), " within ",
                    env_.bootstrap_timeout, " s (OFL_BOOTSTRAP_TIMEOUT). However, ranks [", missing,
                    "] of ", env_.world_size, " never joined.");
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
      OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
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
    OFL_CHECK_CODE(now_ns() < deadline, ErrorCode::kDeadlineExceeded, kUcxTag, "rank ", env_.rank,
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
  OFL_CHECK_CODE(welcome.refused().empty(), ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
                 " was refused by the ", where(), ": ", welcome.refused());
  OFL_CHECK_CODE(welcome.worker_addresses_size() == env_.world_size, ErrorCode::kInternal, kUcxTag,
                 "the master must send ", env_.world_size, " addresses. However, got ",
                 welcome.worker_addresses_size(), ".");
  std::vector<std::string> addresses(welcome.worker_addresses().begin(),
                                     welcome.worker_addresses().end());
  learn_peers(welcome);
  connect_peers(addresses);
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
    OFL_CHECK_CODE(status == UCS_OK, ErrorCode::kUnavailable, kUcxTag, "rank ", env_.rank,
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
    OFL_CHECK_CODE(!failed(), ErrorCode::kUnavailable, kUcxTag, "every rank must reach barrier ",
                   generation, ". However, ", faults());
    OFL_CHECK_CODE(all, ErrorCode::kDeadlineExceeded, kUcxTag, "every rank must reach barrier ",
                   generation, " within ", timeout, " s. However, ",
                   barrier_arrivals_ - (generation - 1) * others, " of ", others,
                   " other ranks arrived.");
    for (int64_t r = 1; r < env_.world_size; ++r) send_am(peers_[r]->ep, kBarrierRelease, "", 0);
  } else {
    send_am(peers_[0]->ep, kBarrier, "", 0);
    const bool released =
        wait_for([&] { return barrier_released_ >= generation || failed(); }, timeout);
    OFL_CHECK_CODE(!failed(), ErrorCode::kUnavailable, kUcxTag, "every rank must reach barrier ",
                   generation, ". However, ", faults());
    OFL_CHECK_CODE(released, ErrorCode::kDeadlineExceeded, kUcxTag, "rank ", env_.rank,
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
  LOG(ERROR) << kUcxTag << "a connection could not be accepted: " << e.what();
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
  LOG(ERROR) << kUcxTag << "an endpoint error could not be handled: " << e.what();
}

}  // namespace ofl::comm
