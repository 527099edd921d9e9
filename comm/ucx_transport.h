#pragma once
// UcxTransport: the transport between processes (and hosts). One UCX worker per process; actor
// messages travel as UCX active messages, register data as tagged send / receive (the tag is
// the plan's transfer id; UCX picks eager or rendezvous, and shared memory within a host or
// TCP / RDMA across hosts: choose with UCX's own settings, e.g. UCX_TLS).
//
// Note [Bootstrap]: rank 0 (the master) listens on MASTER_ADDR:MASTER_PORT with a UCX
// listener. Every other rank connects to it and says hello (its rank, WORLD_SIZE, the job
// secret and its worker address, as a HelloProto). The master refuses a hello with a wrong
// secret (logged; the job goes on), and fails the bootstrap on every rank for a WORLD_SIZE that
// differs from its own or a rank that joins twice. Once every rank has joined it answers each
// with every worker address (WelcomeProto); the ranks connect to each other directly and meet
// in a barrier. Each step has the bootstrap timeout: a master that cannot be reached, a port
// already in use, or ranks that never join end the bootstrap with an error naming the address
// and the missing ranks.
//
// Note [Faults]: after the bootstrap every rank sends every other a heartbeat several times
// per fault timeout. A rank is declared failed when nothing has come from it for the fault
// timeout (the data endpoints have no UCX peer error handling: it would leave out shared
// memory); the fault handler (the runtime's) then ends the run with the rank named. A rank
// that leaves on purpose (close()) says goodbye first. After the bootstrap, barriers wait for
// as long as the other ranks are alive.

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/inline_data.h"
#include "comm/launch_env.h"
#include "comm/transport.h"

namespace ofl::comm::proto {
class WelcomeProto;
}

namespace ofl::comm {

struct UcxOutstanding;
class UcxTransport final : public Transport {
 public:
  /// Creates the worker and runs the bootstrap (Note [Bootstrap]); returns when every rank of
  /// the job is connected. Raises ofl::Error (kUnavailable, kDeadlineExceeded,
  /// kInvalidArgument) naming the master address, the port, or the ranks that never joined.
  static std::shared_ptr<UcxTransport> connect(const LaunchEnv& env);
  ~UcxTransport() override;

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }

  void serve_rank(int64_t rank, MessageHandler handler) override;
  void stop_serving_rank(int64_t rank) override;
  void send(int64_t dst_rank, const MessageBytes& message) override;
  void send_with_data(int64_t dst_rank, const MessageBytes& message, uint64_t tag, const void* data,
                      size_t bytes) override;
  void expose(int64_t dst_rank, uint64_t tag, const void* data, size_t bytes) override;
  void fetch(int64_t src_rank, uint64_t tag, uint64_t address, void* dst, size_t bytes) override;
  void prepare_fetch(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) override;
  // Tagged transfers (Note [Tagged transfers] in transport.h): UCX tag sends and receives,
  // polled; UCX keeps the order of one tag between two endpoints.
  TaggedRequest send_tagged(int64_t dst_rank, uint64_t tag, const void* data,
                            size_t bytes) override;
  TaggedRequest receive_tagged(int64_t src_rank, uint64_t tag, void* dst, size_t bytes) override;
  bool test(TaggedRequest& request) override;
  void set_fault_handler(FaultHandler handler) override;
  bool progress() override;

  /// Waits until every rank has called barrier(); raises ofl::Error when a rank fails or the
  /// bootstrap timeout passes.
  void barrier();
  /// Says goodbye to every rank (so none reports this one as failed) and stops. Call after a
  /// final barrier(), when this rank is done. The destructor stops without a goodbye: a rank
  /// that ends by an error is reported as failed by the others (Note [Faults]).
  void close();

  /// The end of a job: waits until every rank has called leave() (a barrier), then close().
  void leave();

  /// Faults seen so far, "rank 3: why" (empty when none).
  std::string faults() const;

 private:
  explicit UcxTransport(const LaunchEnv& env);

  enum AmId : uint16_t {
    kHello = 1,
    kWelcome = 2,
    kActorMessage = 3,
    kHeartbeat = 4,
    kBarrier = 5,
    kBarrierRelease = 6,
    kGoodbye = 7,
    kActorMessageWithData = 8,  // header: WithDataHeader; data: the piece
  };
  // The header of a kActorMessageWithData: who sends, the actor message, the transfer's tag.
  struct WithDataHeader {
    int64_t sender = 0;
    MessageBytes message{};
    uint64_t tag = 0;
  };
  // prepare_fetch posts receives of at least this many bytes only.
  static constexpr size_t kPrepareMinBytes = 128 << 10;
  // A receive posted for a transfer (prepare_fetch, fetch).
  // No completion callback: the receiver polls the request (ucp_tag_recv_request_test), so
  // nothing of ours is left for UCX to write to if a cancelled request is given up on.
  struct Posted {
    void* request = nullptr;  // null when it completed at once (or failed at once)
    int status = 0;           // the outcome when it did (ucs_status_t)
    size_t length = 0;        // the bytes received when it did
    void* dst = nullptr;
    size_t bytes = 0;
  };
  // Polls `posted` once: whether it is done; fills its status and length when it is.
  static bool receive_done(Posted& posted);
  // Cancels `posted` and waits up to `wait_ns` for UCX to give it back; frees it if so, else
  // leaves it to UCX (it may still write to its buffer, which the caller keeps or leaks).
  void cancel_receive(Posted& posted, int64_t wait_ns);
  struct TaggedState;
  struct Peer {
    ucp_ep_h ep = nullptr;
    std::string host;
    int64_t pid = 0;
    std::atomic<int64_t> last_heard_ns{0};
    std::atomic<bool> left{false};
    std::atomic<bool> reported{false};  // fail_peer ran (once)
    std::atomic<bool> failed{false};    // transfers with it now fail
  };

  void create_worker();
  void register_handlers();
  void run_master();
  void run_client();
  void connect_peers(const std::vector<std::string>& addresses);
  // Records each rank's host and pid from the master's welcome.
  void learn_peers(const proto::WelcomeProto& welcome);
  // Note [A peer's death inside UCX]: UCX's log handler.
  static ucs_log_func_rc_t on_ucx_log(const char* file, unsigned line, const char* function,
                                      ucs_log_level_t level,
                                      const ucs_log_component_config_t* component,
                                      const char* format, va_list ap);
  void close_bootstrap();
  void close_endpoints(const std::vector<ucp_ep_h>& eps);
  Posted post_receive(uint64_t tag, void* dst, size_t bytes);
  void start_progress_thread();
  void progress_loop();
  void send_am(ucp_ep_h ep, AmId id, const void* data, size_t bytes, bool reply = false);
  void fail_peer(int64_t rank, const std::string& why);
  void check_heartbeats();
  void shut_down(bool goodbye);
  // Waits on cv_ for `ready` up to `seconds` (the progress thread progresses the worker).
  template <class F>
  bool wait_for(F ready, double seconds);
  std::string where() const;  // "master 10.0.0.1:29500"

  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);
  // The peer a message to `dst_rank` goes to; raises (kUnavailable) naming the rank when it is
  // not another rank of the job or has failed.
  const Peer& reachable_peer(int64_t dst_rank) const;
  // Hands an actor message to the runtime serving this rank, or keeps it until one does.
  void deliver_message(const MessageBytes& message);
  static ucs_status_t handle_am(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  static void on_connection(ucp_conn_request_h request, void* arg);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  struct CallbackArgs;
  LaunchEnv env_;
  std::unique_ptr<CallbackArgs> args_;
  std::unique_ptr<struct UcxOutstanding> outstanding_;
  // Every UCX call holds it (the worker is UCS_THREAD_MODE_SERIALIZED). Recursive: callbacks
  // run inside ucp_worker_progress and may send.
  std::recursive_mutex ucx_mu_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_datatype_t piece_datatype_ = 0;  // Note [Pieces packed by us]; 0 until created
  ucp_listener_h listener_ = nullptr;
  std::string worker_address_;
  std::vector<std::unique_ptr<Peer>> peers_;         // by rank; peers_[rank()] unused
  std::map<uint64_t, std::deque<Posted>> prepared_;  // by tag, in order; GUARDED_BY(ucx_mu_)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Bootstrap state, GUARDED_BY(mu_).
  ucp_ep_h master_ep_ = nullptr;                                // clients: the listener connection
  std::vector<ucp_ep_h> accepted_;                              // master: every accepted connection
  std::map<int64_t, std::pair<ucp_ep_h, std::string>> joined_;  // master: rank -> (ep, hello)
  std::string bootstrap_error_;
  std::optional<std::string> welcome_;  // clients: the WelcomeProto bytes
  bool master_unreachable_ = false;
  int barrier_arrivals_ = 0;
  int64_t barrier_generation_ = 0;
  int64_t barrier_released_ = 0;
  std::string faults_;

  mutable std::shared_mutex handler_mu_;
  std::map<int64_t, MessageHandler> handlers_;  // GUARDED_BY(handler_mu_)
  // Messages that arrived before this rank was served, in order. GUARDED_BY(handler_mu_)
  std::vector<MessageBytes> early_messages_;
  InlineData inline_;           // small pieces that came with their messages
  FaultHandler fault_handler_;  // GUARDED_BY(handler_mu_)

  std::atomic<bool> connected_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};
  std::thread progress_;
};

}  // namespace ofl::comm
