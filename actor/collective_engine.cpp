// The collective engine (Note [Collective engine] in the header): the stream collective acts
// launch on and the thread that advances their jobs. The jobs themselves, the ring and the other
// algorithms, are in collective_jobs.cpp.

#include "actor/collective_engine.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::actor {

namespace {

using Op = proto::CollectiveProto;

}  // namespace

// Read per act, so tests can vary it. The default pieces (collective_piece_limit: a quarter of
// the chunk between 64 KiB and 1 MiB) pipeline mid-sized collectives too. Measured on 2
// processes (docs/benchmarks.md): a 1 MiB all-reduce took 0.46 ms in one piece per chunk and
// 0.22 ms in pieces of 256 KiB.
int64_t configured_piece_bytes() {
  const char* env = std::getenv("OFL_COLLECTIVE_PIECE_BYTES");
  const int64_t v = env != nullptr ? std::atoll(env) : 0;
  return v > 0 ? v : 0;
}

void place_scratch(const proto::CollectiveProto& collective, int64_t member, const Tensor& block,
                   const Shape& input, const Shape& output, DataType dtype,
                   CollectiveScratch* scratch) {
  const CollectiveScratchLayout layout =
      collective_scratch(collective, member, input, output, dtype, configured_piece_bytes());
  if (!collective.scratch_in_block() || !block.defined() ||
      layout.bytes() > collective.scratch_bytes()) {
    return;  // larger pieces than planned (OFL_COLLECTIVE_PIECE_BYTES): the jobs allocate
  }
  const int64_t base = collective.scratch_offset();
  OFL_ASSERT(base + layout.bytes() <= static_cast<int64_t>(block.nbytes()));
  auto part = [&](Tensor* buffer, int64_t offset, int64_t bytes) {
    if (bytes > 0) *buffer = view_of_bytes(block, base + offset, Shape{bytes}, DataType::kInt8);
  };
  part(&scratch->packed_input, 0, layout.packed_input);
  part(&scratch->packed_whole, layout.packed_whole_offset(), layout.packed_whole);
  part(&scratch->received, layout.received_offset(), layout.received);
}

proto::CollectiveProto collective_proto(const CollectiveSpec& spec) {
  proto::CollectiveProto c;
  c.set_op(spec.op);
  for (int64_t r : spec.members) c.add_members(r);
  c.set_collective_id(spec.collective_id);
  c.set_axis(spec.axis);
  c.set_out_axis(spec.out_axis);
  c.set_algorithm(spec.algorithm);
  c.set_root(spec.root);
  auto blocks = [](const std::vector<CollectiveBlock>& list, auto* out) {
    for (const CollectiveBlock& b : list) {
      proto::CollectiveBlockProto* p = out->Add();
      p->set_member(b.member);
      add_ranges(b.region, p->mutable_region());
    }
  };
  blocks(spec.sends, c.mutable_sends());
  blocks(spec.receives, c.mutable_receives());
  return c;
}

CollectiveSpec collective_spec(const proto::CollectiveProto& c, int64_t rank, std::string name) {
  CollectiveSpec spec;
  spec.op = c.op();
  spec.members.assign(c.members().begin(), c.members().end());
  spec.member = std::find(spec.members.begin(), spec.members.end(), rank) - spec.members.begin();
  spec.collective_id = c.collective_id();
  spec.axis = c.axis();
  spec.out_axis = c.out_axis();
  spec.algorithm = c.algorithm();
  spec.root = c.root();
  if (c.op() == Op::SEND_RECV) {
    CollectiveBlocks blocks = collective_blocks(c, spec.member, Shape{}, Shape{});
    spec.sends = std::move(blocks.sends);
    spec.receives = std::move(blocks.receives);
  }
  spec.name = std::move(name);
  return spec;
}

void CollectiveWork::operator()() const {
  OFL_ASSERT(false) << "a collective act runs on a collective stream";
}

// ---------------------------------------------------------------------------------------------

class CollectiveEngine::Stream final : public ActStream {
 public:
  Stream(CollectiveEngine* engine, std::string name) : engine_(engine), name_(std::move(name)) {}
  ~Stream() override { engine_->forget(this); }
  const std::string& name() const override { return name_; }
  void launch(std::function<void()> work, Done done) override {
    std::shared_ptr<CollectiveJob> job;
    if (work) {
      const auto* collective = work.target<CollectiveWork>();
      OFL_ASSERT(collective != nullptr) << name_ << " runs collectives only";
      job = collective->job;
    }
    in_flight.fetch_add(1, std::memory_order_relaxed);
    engine_->launch(this, Item{std::move(job), std::move(done)});
  }
  // Once the engine has stopped nothing of this stream runs again: not busy, whatever was left
  // (Note [Hung streams] in runtime_threads.cpp waits only for work that may still run).
  bool busy() const override {
    return in_flight.load(std::memory_order_relaxed) > 0 &&
           !engine_->stopped_.load(std::memory_order_acquire);
  }

  std::deque<Item> queue;  // GUARDED_BY(engine_->mu_)
  std::atomic<int64_t> in_flight{0};

 private:
  CollectiveEngine* engine_;
  std::string name_;
};

CollectiveEngine::CollectiveEngine(std::string name, bool threaded) : name_(std::move(name)) {
  if (threaded) thread_ = std::thread([this] { loop(); });
}

CollectiveEngine::~CollectiveEngine() { stop(); }

void CollectiveEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // From the engine's own thread it would wait for itself (its callbacks run inside advance()).
  OFL_ASSERT(!thread_.joinable() || thread_.get_id() != std::this_thread::get_id());
  if (thread_.joinable()) thread_.join();
  // Without a thread, a pass under way on another thread ends before this returns.
  std::lock_guard<std::mutex> advancing(advance_mu_);
  stopped_.store(true, std::memory_order_release);
}

std::unique_ptr<ActStream> CollectiveEngine::make_stream(std::string name) {
  return std::make_unique<Stream>(this, std::move(name));
}

void CollectiveEngine::launch(Stream* stream, Item item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream->queue.empty()) active_.push_back(stream);
    stream->queue.push_back(std::move(item));
  }
  cv_.notify_one();
}

// Work still launched is dropped: streams end after their actors retired, or after a failure.
void CollectiveEngine::forget(Stream* stream) {
  std::lock_guard<std::mutex> advancing(advance_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), stream), active_.end());
  stream->queue.clear();
}

bool CollectiveEngine::advance() {
  std::lock_guard<std::mutex> advancing(advance_mu_);
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    streams = active_;
  }
  bool progressed = false;
  for (Stream* stream : streams) {
    for (;;) {
      Item* head = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stream->queue.empty()) break;
        head = &stream->queue.front();  // deque: stays put while others are pushed behind it
      }
      std::exception_ptr error;
      bool done = true;
      if (head->job != nullptr) {
        try {
          done = head->job->advance(&progressed);
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (!done && error == nullptr) break;
      ActStream::Done callback = std::move(head->done);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stream->queue.pop_front();
        if (stream->queue.empty()) {
          active_.erase(std::remove(active_.begin(), active_.end(), stream), active_.end());
        }
      }
      stream->in_flight.fetch_sub(1, std::memory_order_relaxed);
      progressed = true;
      callback(error);
    }
  }
  return progressed;
}

// Spins (yielding the core) while collectives are in flight and moving; once nothing has moved
// for a while, naps a little longer each time, up to 200 us; sleeps while none is in flight.
void CollectiveEngine::loop() {
  constexpr int64_t kSpinNs = 200'000;
  int64_t idle_since = now_ns();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_.empty()) cv_.wait(lock, [&] { return stop_ || !active_.empty(); });
      if (stop_) return;
    }
    if (advance()) {
      idle_since = now_ns();
      continue;
    }
    const int64_t idle = now_ns() - idle_since;
    if (idle < kSpinNs) {
      sched_yield();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::nanoseconds(std::min<int64_t>(idle / 8, 200'000)));
    }
  }
}

}  // namespace ofl::actor
