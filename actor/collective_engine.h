#pragma once
// The collective engine: where the acts of COLLECTIVE tasks run (Note [Collective tasks] in
// oneflowlike/collective.h).
//
// Note [Collective engine]: a collective actor's act launches its member's part of the
// collective on the engine and returns (Note [Event-gated acts] in act_stream.h); the engine
// advances every launched collective as a state machine over the transport's non-blocking
// tagged transfers (Note [Tagged transfers] in comm/transport.h) and calls each act's `done`
// when its member's part has finished. So:
//  - nothing blocks an actor thread, and collectives of different actors progress at once: a
//    collective waits only for its own members, never behind another collective that some
//    member reaches later. The order in which a rank starts its collectives does not matter,
//    and the plan contract's proof (Note [Collective order] in oneflowlike/plan_contract.h)
//    needs no runtime order on top of the dataflow;
//  - the acts of one actor finish in launch order (one at a time), as the act protocol needs.
// With its own thread the engine spins while collectives are in flight, then naps; without
// (deterministic mode) the caller advances it between passes over the actors.
//
// Note [Ring collectives]: a member of n runs the ring: n - 1 reduce-scatter steps, where at
// step t it sends its running sum of chunk m - t - 1 to member m + 1 and adds chunk m - t - 2
// from member m - 1 to its own (ring_sum_order), then n - 1 all-gather steps, where it sends
// chunk m - t and receives chunk m - t - 1. An all-reduce runs both, a reduce-scatter the
// first, an all-gather the second. Chunks are cut into pieces (a quarter of a chunk, between
// 64 KiB and 1 MiB; OFL_COLLECTIVE_PIECE_BYTES overrides) that move independently: a piece goes
// on to the next member as soon as it has been received and added, and receives are posted up
// to two steps ahead, so sends, receives and adds of one collective overlap.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actor/act_stream.h"
#include "comm/transport.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

/// One member's part of one collective, advanced by the engine until done.
class CollectiveJob {
 public:
  virtual ~CollectiveJob() = default;
  /// Makes what progress it can without blocking; returns whether the part is done, and sets
  /// `progressed` when anything moved. Raises ofl::Error when a transfer fails.
  virtual bool advance(bool* progressed) = 0;
};

/// What a member needs to run its part of a collective.
struct CollectiveSpec {
  proto::CollectiveProto::Op op = proto::CollectiveProto::ALL_REDUCE;
  std::vector<int64_t> members;  // ranks, in ring order
  int64_t member = 0;            // this member's index
  int64_t collective_id = 0;
  int axis = -1;
  int out_axis = 0;  // all-to-all
  proto::CollectiveProto::Algorithm algorithm = proto::CollectiveProto::RING;
  int64_t root = 0;                              // broadcast
  std::vector<CollectiveBlock> sends, receives;  // grouped send/recv (collective_blocks)
  std::string name;                              // for errors: the task
};

/// The task's CollectiveProto as far as `spec` says (what collective_scratch and the blocks
/// read).
proto::CollectiveProto collective_proto(const CollectiveSpec& spec);

/// The spec of the member on `rank` of `collective` (task `name`).
CollectiveSpec collective_spec(const proto::CollectiveProto& collective, int64_t rank,
                               std::string name);

/// Buffers a member keeps between its acts (reused: its acts run one at a time).
struct CollectiveScratch {
  Tensor packed_input;  // the input chunk by chunk, when chunks are not contiguous in it
                        // (all-to-all: the blocks it sends)
  Tensor packed_whole;  // running sums (reduce-scatter) or the gathered whole, chunk by chunk
                        // (all-to-all: the blocks it receives)
  Tensor received;      // two steps of received pieces (reductions)
};

/// OFL_COLLECTIVE_PIECE_BYTES when set and positive, else 0 (collective_piece_limit's default).
int64_t configured_piece_bytes();

/// Points `scratch` at the memory the plan gave `collective` (Note [Collective scratch] in
/// oneflowlike/collective.h) inside `block`, the rank's memory block it names; leaves it
/// alone when the plan gave none or the layout no longer fits (larger pieces configured).
void place_scratch(const proto::CollectiveProto& collective, int64_t member, const Tensor& block,
                   const Shape& input, const Shape& output, DataType dtype,
                   CollectiveScratch* scratch);

/// `spec`'s member's part from `input` (undefined for a broadcast's member other than the root)
/// into `output` (its registers' slots) over `transport`: the ring (Note [Ring collectives]),
/// recursive doubling (Note [Recursive doubling] in oneflowlike/collective.h), the chain or tree
/// of a broadcast (Note [Broadcast] there), or the block exchange of an all-to-all or a grouped
/// send/recv (Note [Grouped send/recv] there).
std::shared_ptr<CollectiveJob> make_collective_job(comm::Transport& transport,
                                                   const CollectiveSpec& spec, Tensor input,
                                                   Tensor output, CollectiveScratch* scratch);

/// The Work (actor.h) of a collective act: the engine takes its job instead of calling it.
struct CollectiveWork {
  std::shared_ptr<CollectiveJob> job;
  void operator()() const;  // not called: a CollectiveWork runs only on a collective stream
};

class CollectiveEngine {
 public:
  /// `threaded`: the engine runs its own thread; otherwise advance() must be called.
  CollectiveEngine(std::string name, bool threaded);
  ~CollectiveEngine();
  CollectiveEngine(const CollectiveEngine&) = delete;
  CollectiveEngine& operator=(const CollectiveEngine&) = delete;

  /// The stream of one collective actor: it takes CollectiveWork (and null work: a fence).
  std::unique_ptr<ActStream> make_stream(std::string name);
  /// Advances every launched collective once; whether anything happened. Nothing after stop().
  bool advance();
  /// Ends the engine's thread (joined; its current pass finishes) and every later advance():
  /// after a failure, before the communicators its jobs use are aborted. Not from the engine's
  /// thread (a done callback). Streams made by it may still be destroyed.
  void stop();

 private:
  class Stream;
  struct Item {
    std::shared_ptr<CollectiveJob> job;  // null: a fence
    ActStream::Done done;
  };
  void launch(Stream* stream, Item item);
  void forget(Stream* stream);
  void loop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Stream*> active_;       // streams with launched items; GUARDED_BY(mu_)
  bool stop_ = false;                 // GUARDED_BY(mu_)
  std::atomic<bool> stopped_{false};  // stop_, for the streams' busy() without the lock
  std::mutex advance_mu_;             // one advance() at a time
  std::thread thread_;
};

}  // namespace ofl::actor
