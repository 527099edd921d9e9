// The collective engine and the ring (Note [Collective engine], Note [Ring collectives] in the
// header).

#include "actor/collective_engine.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"

namespace ofl::actor {

namespace {

using Op = proto::CollectiveProto;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

void place_scratch(const proto::CollectiveProto& collective, const Tensor& block,
                   const Shape& input, const Shape& output, DataType dtype,
                   CollectiveScratch* scratch) {
  const CollectiveScratchLayout layout =
      collective_scratch(collective, input, output, dtype, configured_piece_bytes());
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

namespace {

// A contiguous run of elements of a flat buffer.
struct Span {
  int64_t begin = 0;  // elements
  int64_t size = 0;
};

// What every member's job holds: its part of the collective and the registers' slots.
class MemberJob : public CollectiveJob {
 protected:
  MemberJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input, Tensor output)
      : transport_(transport),
        spec_(spec),
        input_(std::move(input)),
        output_(std::move(output)),
        n_(static_cast<int64_t>(spec.members.size())),
        m_(spec.member),
        elem_(static_cast<int64_t>(dtype_size(output_.dtype()))) {
    OFL_ASSERT(n_ >= 2 && m_ >= 0 && m_ < n_);
  }

  // The whole tensor the collective chunks (collective_whole).
  Shape whole_shape() const {
    proto::CollectiveProto c;
    c.set_op(spec_.op);
    c.set_axis(spec_.axis);
    return collective_whole(c, input_.shape(), output_.shape());
  }

  // The member's scratch (Note [Collective scratch] in oneflowlike/collective.h).
  CollectiveScratchLayout scratch_layout() const {
    proto::CollectiveProto c;
    c.set_op(spec_.op);
    for (int64_t r : spec_.members) c.add_members(r);
    c.set_axis(spec_.axis);
    c.set_out_axis(spec_.out_axis);
    c.set_algorithm(spec_.algorithm);
    return collective_scratch(c, input_.shape(), output_.shape(), output_.dtype(),
                              configured_piece_bytes());
  }

  // `buffer` holds at least `bytes` (kept between acts: the plan's memory, place_scratch, or
  // the job's own).
  static void ensure(Tensor* buffer, int64_t bytes) {
    bytes = std::max<int64_t>(bytes, 1);
    if (!buffer->defined() || static_cast<int64_t>(buffer->nbytes()) < bytes) {
      *buffer = Tensor::empty(Shape{bytes}, DataType::kInt8);
    }
  }

  comm::Transport& transport_;
  CollectiveSpec spec_;
  Tensor input_;
  Tensor output_;
  int64_t n_;
  int64_t m_;
  int64_t elem_;
};

class RingJob final : public MemberJob {
 public:
  RingJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input, Tensor output,
          CollectiveScratch* scratch)
      : MemberJob(transport, spec, std::move(input), std::move(output)) {
    const Shape whole = whole_shape();
    regions_ = collective_chunks(whole, spec.axis, n_);
    const bool contiguous =
        spec.axis < 0 || std::all_of(whole.dims().begin(), whole.dims().begin() + spec.axis,
                                     [](int64_t d) { return d == 1; });
    int64_t offset = 0;
    for (const auto& region : regions_) {
      const int64_t size = region_shape(region).numel();
      chunks_.push_back(Span{offset, size});
      offset += size;
    }
    const DataType dtype = output_.dtype();
    const Shape flat{whole.numel()};
    const CollectiveScratchLayout layout = scratch_layout();
    reduces_ = spec.op != Op::ALL_GATHER;
    gathers_ = spec.op != Op::REDUCE_SCATTER;
    steps_ = (reduces_ ? n_ - 1 : 0) + (gathers_ ? n_ - 1 : 0);
    rs_steps_ = reduces_ ? n_ - 1 : 0;
    // Where the input's chunks are read (reductions), running sums written, the result kept.
    if (reduces_) {
      if (contiguous) {
        source_ = view_of_bytes(input_, 0, flat, dtype);
      } else {
        ensure(&scratch->packed_input, layout.packed_input);
        source_ = view_of_bytes(scratch->packed_input, 0, flat, dtype);
        pack_input_ = true;
      }
    }
    if (spec.op == Op::ALL_REDUCE) {
      sums_ = view_of_bytes(output_, 0, flat, dtype);  // all-reduce: flat chunks
      gathered_ = sums_;
    } else if (spec.op == Op::ALL_GATHER && contiguous) {
      gathered_ = view_of_bytes(output_, 0, flat, dtype);
    } else {
      ensure(&scratch->packed_whole, layout.packed_whole);
      Tensor packed = view_of_bytes(scratch->packed_whole, 0, flat, dtype);
      if (spec.op == Op::REDUCE_SCATTER) {
        sums_ = packed;
      } else {
        gathered_ = packed;
        unpack_output_ = true;
      }
    }
    pieces_ = layout.ring_pieces;
    piece_capacity_ = layout.piece_capacity;
    if (reduces_) {
      ensure(&scratch->received, layout.received);
      received_ = scratch->received;
    }
    left_ = spec.members[(m_ + n_ - 1) % n_];
    right_ = spec.members[(m_ + 1) % n_];
    receive_tag_ = collective_tag(spec.collective_id, m_);
    send_tag_ = collective_tag(spec.collective_id, (m_ + 1) % n_);
  }

  bool advance(bool* progressed) override {
    if (!started_) start();
    const int64_t total = steps_ * pieces_;
    // Complete receives in order; each lets its piece move on.
    while (completed_ < posted_) {
      Posted& r = receives_.front();
      if (!r.request.done && !transport_.test(r.request)) break;
      if (r.step < rs_steps_) add_received(r);
      receives_.pop_front();
      ++completed_;
      *progressed = true;
    }
    // Post receives up to two steps ahead of the last completed.
    while (posted_ < total && posted_ < completed_ + 2 * pieces_ && can_post(posted_)) {
      post(posted_);
      ++posted_;
      *progressed = true;
    }
    // Send in order, each piece once it is here.
    while (sent_ < total && (sent_ < pieces_ || sent_ - pieces_ < completed_)) {
      send(sent_);
      ++sent_;
      *progressed = true;
    }
    while (!sends_.empty() && (sends_.front().done || transport_.test(sends_.front()))) {
      sends_.pop_front();
      ++sends_done_;
      *progressed = true;
    }
    if (completed_ < total || sent_ < total || !sends_.empty()) return false;
    finish();
    return true;
  }

 private:
  struct Posted {
    comm::Transport::TaggedRequest request;
    int64_t step = 0;
    int64_t piece = 0;
  };

  int64_t mod(int64_t a) const { return ((a % n_) + n_) % n_; }
  // The chunk sent and the chunk received at `step`.
  int64_t sent_chunk(int64_t step) const {
    return step < rs_steps_ ? mod(m_ - step - 1) : mod(m_ - (step - rs_steps_));
  }
  int64_t received_chunk(int64_t step) const {
    return step < rs_steps_ ? mod(m_ - step - 2) : mod(m_ - (step - rs_steps_) - 1);
  }
  Span piece_of(int64_t chunk, int64_t piece) const {
    const Range r = balanced_range(chunks_[chunk].size, pieces_, piece);
    return Span{chunks_[chunk].begin + r.begin, r.size()};
  }
  char* at(const Tensor& t, int64_t element) const {
    return static_cast<char*>(t.raw_data()) + element * elem_;
  }
  Tensor view(const Tensor& t, int64_t element, int64_t size) const {
    return view_of_bytes(t, element * elem_, Shape{size}, output_.dtype());
  }
  // Chunk c of a packed buffer, shaped as its region.
  Tensor packed(const Tensor& t, int64_t c) const {
    return view_of_bytes(t, chunks_[c].begin * elem_, region_shape(regions_[c]), output_.dtype());
  }
  // Where the received piece (step, piece) of a reduction goes before it is added.
  int64_t received_offset(int64_t step, int64_t piece) const {
    return ((step % 2) * pieces_ + piece) * piece_capacity_;
  }

  void start() {
    started_ = true;
    if (pack_input_) {
      for (int64_t c = 0; c < n_; ++c) {
        const Tensor chunk = packed(source_, c);
        copy_region(input_, regions_[c], chunk, whole(chunk.shape()));
      }
    }
    if (!reduces_) {  // a gather starts from its own chunk
      std::memcpy(at(gathered_, chunks_[m_].begin), input_.raw_data(),
                  static_cast<size_t>(chunks_[m_].size * elem_));
    }
  }

  // A reduction's receive of step s reuses the buffer of step s - 2: posted once that was
  // added. A gather's receive of chunk c into the result waits until the all-reduce's send of
  // its running sum of c (same step of the reduce-scatter) has completed.
  bool can_post(int64_t index) const {
    const int64_t step = index / pieces_;
    if (step < rs_steps_) return index - 2 * pieces_ < completed_;
    if (spec_.op != Op::ALL_REDUCE) return true;
    const int64_t rs_send = (step - rs_steps_) * pieces_ + index % pieces_;
    return rs_send < sends_done_;
  }

  void post(int64_t index) {
    const int64_t step = index / pieces_;
    const int64_t piece = index % pieces_;
    const Span span = piece_of(received_chunk(step), piece);
    Posted p{{}, step, piece};
    void* dst =
        step < rs_steps_ ? at(received_, received_offset(step, piece)) : at(gathered_, span.begin);
    if (span.size == 0) {
      p.request.done = true;  // both sides skip empty pieces
    } else {
      p.request = transport_.receive_tagged(left_, receive_tag_, dst,
                                            static_cast<size_t>(span.size * elem_));
    }
    receives_.push_back(std::move(p));
  }

  void send(int64_t index) {
    const int64_t step = index / pieces_;
    const int64_t piece = index % pieces_;
    const int64_t chunk = sent_chunk(step);
    const Span span = piece_of(chunk, piece);
    if (span.size == 0) {  // both sides skip empty pieces; it counts as a completed send
      comm::Transport::TaggedRequest skipped;
      skipped.done = true;
      sends_.push_back(std::move(skipped));
      return;
    }
    // A reduction sends its own input first, then running sums; a gather what it holds.
    const Tensor& from = step == 0 && reduces_ ? source_ : step < rs_steps_ ? sums_ : gathered_;
    sends_.push_back(transport_.send_tagged(right_, send_tag_, at(from, span.begin),
                                            static_cast<size_t>(span.size * elem_)));
  }

  // Running sum of the received chunk: received + own input (ring_sum_order). The last step's
  // sum of a reduce-scatter is this member's result.
  void add_received(const Posted& r) {
    const int64_t chunk = received_chunk(r.step);
    const Span span = piece_of(chunk, r.piece);
    if (span.size == 0) return;
    const bool result = spec_.op == Op::REDUCE_SCATTER && r.step == rs_steps_ - 1;
    const Tensor out = result ? view(output_, span.begin - chunks_[chunk].begin, span.size)
                              : view(sums_, span.begin, span.size);
    sum_into({view(received_, received_offset(r.step, r.piece), span.size),
              view(source_, span.begin, span.size)},
             out);
  }

  void finish() {
    if (!unpack_output_) return;
    for (int64_t c = 0; c < n_; ++c) {
      const Tensor chunk = packed(gathered_, c);
      copy_region(chunk, whole(chunk.shape()), output_, regions_[c]);
    }
  }

  std::vector<std::vector<Range>> regions_;  // chunk regions of the whole tensor
  std::vector<Span> chunks_;                 // the same, packed one after another
  bool reduces_ = false;
  bool gathers_ = false;
  int64_t steps_ = 0;
  int64_t rs_steps_ = 0;
  int64_t pieces_ = 1;          // per chunk
  int64_t piece_capacity_ = 0;  // elements of the largest piece
  bool pack_input_ = false;
  bool unpack_output_ = false;
  Tensor source_;    // reductions: the input, chunk after chunk (flat)
  Tensor sums_;      // reductions: running sums (flat)
  Tensor gathered_;  // gathers: the whole result (flat)
  Tensor received_;  // reductions: two steps of received pieces
  int64_t left_ = 0;
  int64_t right_ = 0;
  uint64_t receive_tag_ = 0;
  uint64_t send_tag_ = 0;
  bool started_ = false;
  int64_t posted_ = 0;
  int64_t completed_ = 0;
  int64_t sent_ = 0;
  int64_t sends_done_ = 0;
  std::deque<Posted> receives_;
  std::deque<comm::Transport::TaggedRequest> sends_;
};

// Recursive doubling (Note [Recursive doubling] in oneflowlike/collective.h) as a list of
// exchanges run one after another: each posts its receive and its send at once, and when both
// have completed adds what came into the member's partial sum (the output).
class RecursiveDoublingJob final : public MemberJob {
 public:
  RecursiveDoublingJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input,
                       Tensor output, CollectiveScratch* scratch)
      : MemberJob(transport, spec, std::move(input), std::move(output)) {
    OFL_ASSERT(spec.op == Op::ALL_REDUCE);
    const int64_t p = recursive_doubling_core(n_);
    const int64_t count = output_.numel();
    // Note [Collective tags]: one collective id per stage.
    const int64_t last_stage = collective_ids(Op::ALL_REDUCE, n_, Op::RECURSIVE_DOUBLING) - 1;
    if (m_ >= p) {  // hands its input over, gets the sum back
      add_exchange(m_ - p, -1, false, /*stage=*/0);
      add_exchange(-1, m_ - p, false, last_stage);
    } else {
      if (m_ + p < n_) add_exchange(-1, m_ + p, true, /*stage=*/0);
      int64_t stage = 1;
      for (int64_t step = 1; step < p; step *= 2) add_exchange(m_ ^ step, m_ ^ step, true, stage++);
      if (m_ + p < n_) add_exchange(m_ + p, -1, false, last_stage);
    }
    ensure(&scratch->received, scratch_layout().received);
    received_ = view_of_bytes(scratch->received, 0, Shape{count}, output_.dtype());
    flat_input_ = view_of_bytes(input_, 0, Shape{count}, output_.dtype());
    flat_output_ = view_of_bytes(output_, 0, Shape{count}, output_.dtype());
  }

  bool advance(bool* progressed) override {
    if (!started_) {
      started_ = true;
      *progressed = true;
      // Members below p start from their own input; those above send it as it is.
      if (m_ < recursive_doubling_core(n_)) sum_into({flat_input_}, flat_output_);
    }
    while (next_ < exchanges_.size()) {
      Exchange& e = exchanges_[next_];
      if (!e.posted) {
        post(e);
        *progressed = true;
      }
      if (!e.receive.done && !transport_.test(e.receive)) return false;
      if (!e.send.done && !transport_.test(e.send)) return false;
      if (e.add) sum_into({flat_output_, received_}, flat_output_);
      ++next_;
      *progressed = true;
    }
    return true;
  }

 private:
  struct Exchange {
    int64_t send_to = -1;       // a member, or -1
    int64_t receive_from = -1;  // a member, or -1
    bool add = false;           // add what came to the partial sum
    int64_t stage = 0;          // its collective id is collective_id + stage
    bool posted = false;
    comm::Transport::TaggedRequest send;
    comm::Transport::TaggedRequest receive;
  };

  void add_exchange(int64_t send_to, int64_t receive_from, bool add, int64_t stage) {
    Exchange& e = exchanges_.emplace_back();
    e.send_to = send_to;
    e.receive_from = receive_from;
    e.add = add;
    e.stage = stage;
  }

  void post(Exchange& e) {
    e.posted = true;
    const size_t bytes = flat_output_.nbytes();
    e.receive.done = e.receive_from < 0 || bytes == 0;
    e.send.done = e.send_to < 0 || bytes == 0;
    if (!e.receive.done) {
      // The sum comes back into the output; partial sums into the scratch buffer.
      void* into = e.add ? received_.raw_data() : flat_output_.raw_data();
      e.receive =
          transport_.receive_tagged(spec_.members[e.receive_from],
                                    collective_tag(spec_.collective_id + e.stage, m_), into, bytes);
    }
    if (!e.send.done) {
      const bool own_input = m_ >= recursive_doubling_core(n_);
      const void* from = own_input ? flat_input_.raw_data() : flat_output_.raw_data();
      e.send = transport_.send_tagged(spec_.members[e.send_to],
                                      collective_tag(spec_.collective_id + e.stage, e.send_to),
                                      from, bytes);
    }
  }

  std::vector<Exchange> exchanges_;
  size_t next_ = 0;
  bool started_ = false;
  Tensor flat_input_;
  Tensor flat_output_;
  Tensor received_;
};

// Note [All-to-all]: member m sends member q the part of its chunk (along axis) that lies in
// q's chunk along out_axis, and receives from q the part of q's chunk in its own; the part it
// keeps is copied. Every block is packed into one contiguous buffer before it is sent and
// unpacked from one when it has come; all sends and receives start at once.
class AllToAllJob final : public MemberJob {
 public:
  AllToAllJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input, Tensor output,
              CollectiveScratch* scratch)
      : MemberJob(transport, spec, std::move(input), std::move(output)) {
    const Shape whole = whole_shape();
    const auto in_chunks = collective_chunks(whole, spec.axis, n_);
    const auto out_chunks = collective_chunks(whole, spec.out_axis, n_);
    int64_t send_elements = 0, receive_elements = 0;
    for (int64_t q = 0; q < n_; ++q) {
      Block send, receive;
      send.member = receive.member = q;
      send.region =  // in the input
          region_relative_to(region_intersection(in_chunks[m_], out_chunks[q]), in_chunks[m_]);
      receive.region =  // in the output
          region_relative_to(region_intersection(in_chunks[q], out_chunks[m_]), out_chunks[m_]);
      send.offset = send_elements;
      receive.offset = receive_elements;
      send_elements += region_shape(send.region).numel();
      receive_elements += region_shape(receive.region).numel();
      sends_.push_back(std::move(send));
      receives_.push_back(std::move(receive));
    }
    const CollectiveScratchLayout layout = scratch_layout();
    OFL_ASSERT(layout.packed_input == send_elements * elem_ &&
               layout.packed_whole == receive_elements * elem_);
    ensure(&scratch->packed_input, layout.packed_input);
    ensure(&scratch->packed_whole, layout.packed_whole);
    send_buffer_ = scratch->packed_input;
    receive_buffer_ = scratch->packed_whole;
  }

  bool advance(bool* progressed) override {
    if (!started_) {
      start();
      *progressed = true;
    }
    bool done = true;
    for (Block& b : receives_) {
      if (b.finished) continue;
      if (!b.request.done && !transport_.test(b.request)) {
        done = false;
        continue;
      }
      const Tensor block = packed(receive_buffer_, b);
      copy_region(block, whole(block.shape()), output_, b.region);
      b.finished = true;
      *progressed = true;
    }
    for (Block& b : sends_) {
      if (b.finished) continue;
      if (!b.request.done && !transport_.test(b.request)) {
        done = false;
        continue;
      }
      b.finished = true;
      *progressed = true;
    }
    return done;
  }

 private:
  struct Block {
    int64_t member = 0;
    std::vector<Range> region;  // sends: in the input; receives: in the output
    int64_t offset = 0;         // elements into the packed buffer
    comm::Transport::TaggedRequest request;
    bool finished = false;
  };

  Tensor packed(const Tensor& buffer, const Block& b) const {
    return view_of_bytes(buffer, b.offset * elem_, region_shape(b.region), output_.dtype());
  }

  // Receives first, then sends, each towards the members after this one first, so that not
  // every member sends to member 0 at once.
  void start() {
    started_ = true;
    for (int64_t k = 0; k < n_; ++k) {
      Block& b = receives_[(m_ + n_ - k) % n_];
      if (b.member == m_ || region_is_empty(b.region)) {
        b.request.done = true;
        continue;
      }
      const Tensor block = packed(receive_buffer_, b);
      b.request = transport_.receive_tagged(spec_.members[b.member],
                                            collective_tag(spec_.collective_id + b.member, m_),
                                            block.raw_data(), block.nbytes());
    }
    for (int64_t k = 0; k < n_; ++k) {
      Block& b = sends_[(m_ + k) % n_];
      if (region_is_empty(b.region)) {
        b.request.done = true;
        continue;
      }
      if (b.member == m_) {  // its own part: straight from input to output
        copy_region(input_, b.region, output_, receives_[m_].region);
        b.request.done = true;
        receives_[m_].finished = true;
        continue;
      }
      const Tensor block = packed(send_buffer_, b);
      copy_region(input_, b.region, block, whole(block.shape()));
      b.request = transport_.send_tagged(spec_.members[b.member],
                                         collective_tag(spec_.collective_id + m_, b.member),
                                         block.raw_data(), block.nbytes());
    }
  }

  std::vector<Block> sends_;     // by member
  std::vector<Block> receives_;  // by member
  Tensor send_buffer_;
  Tensor receive_buffer_;
  bool started_ = false;
};

}  // namespace

std::shared_ptr<CollectiveJob> make_collective_job(comm::Transport& transport,
                                                   const CollectiveSpec& spec, Tensor input,
                                                   Tensor output, CollectiveScratch* scratch) {
  if (spec.op == Op::ALL_TO_ALL) {
    return std::make_shared<AllToAllJob>(transport, spec, std::move(input), std::move(output),
                                         scratch);
  }
  if (spec.algorithm == proto::CollectiveProto::RECURSIVE_DOUBLING) {
    return std::make_shared<RecursiveDoublingJob>(transport, spec, std::move(input),
                                                  std::move(output), scratch);
  }
  return std::make_shared<RingJob>(transport, spec, std::move(input), std::move(output), scratch);
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
  bool busy() const override { return in_flight.load(std::memory_order_relaxed) > 0; }

  std::deque<Item> queue;  // GUARDED_BY(engine_->mu_)
  std::atomic<int64_t> in_flight{0};

 private:
  CollectiveEngine* engine_;
  std::string name_;
};

CollectiveEngine::CollectiveEngine(std::string name, bool threaded) : name_(std::move(name)) {
  if (threaded) thread_ = std::thread([this] { loop(); });
}

CollectiveEngine::~CollectiveEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
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
