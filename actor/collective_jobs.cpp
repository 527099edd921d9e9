// The members' parts of a collective (Note [Ring collectives] in collective_engine.h): the ring,
// recursive doubling, the block exchange of an all-to-all or grouped send/recv, and the
// broadcast's chain or tree, each a job the collective engine advances.

#include <algorithm>
#include <cstring>

#include "actor/collective_engine.h"
#include "actor/pieces.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/clock.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::actor {

namespace {

using Op = proto::CollectiveProto;

}  // namespace

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
    return collective_whole(collective_proto(spec_), input_shape(), output_.shape());
  }

  // The member's scratch (Note [Collective scratch] in oneflowlike/collective.h).
  CollectiveScratchLayout scratch_layout() const {
    return collective_scratch(collective_proto(spec_), m_, input_shape(), output_.shape(),
                              output_.dtype(), configured_piece_bytes());
  }
  // A broadcast's members other than the root have no input.
  Shape input_shape() const { return input_.defined() ? input_.shape() : Shape{}; }

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
        copy_region(input_, regions_[c], chunk, whole_region(chunk.shape()));
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
      copy_region(chunk, whole_region(chunk.shape()), output_, regions_[c]);
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
      // (In place the input is the output already: Note [All-reduces in place].)
      if (m_ < recursive_doubling_core(n_) && flat_input_.raw_data() != flat_output_.raw_data()) {
        sum_into({flat_input_}, flat_output_);
      }
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

// The exchange of an all-to-all or a grouped send/recv (Note [Grouped send/recv] in
// oneflowlike/collective.h): every block moves at once. A block contiguous in its register is
// sent from it or received into it directly; the others go through the packed scratch, one
// after another at aligned offsets (collective_scratch counts the same).
class BlockExchangeJob final : public MemberJob {
 public:
  BlockExchangeJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input,
                   Tensor output, CollectiveScratch* scratch)
      : MemberJob(transport, spec, std::move(input), std::move(output)) {
    const CollectiveBlocks blocks =
        collective_blocks(collective_proto(spec), m_, input_shape(), output_.shape());
    const CollectiveScratchLayout layout = scratch_layout();
    ensure(&scratch->packed_input, layout.packed_input);
    ensure(&scratch->packed_whole, layout.packed_whole);
    // Each side's blocks but its own, which is copied directly.
    auto take = [&](const std::vector<CollectiveBlock>& list, const Tensor& reg,
                    const Tensor& packed, std::vector<Block>* out, std::vector<Range>* own,
                    bool* has_own) {
      int64_t bytes = 0;
      for (const CollectiveBlock& b : list) {
        if (b.member == m_) {
          *own = b.region;
          *has_own = true;
        } else {
          out->push_back(block(b, reg, packed, &bytes));
        }
      }
      return bytes;
    };
    const int64_t send_bytes =
        take(blocks.sends, input_, scratch->packed_input, &sends_, &own_send_, &has_own_send_);
    const int64_t receive_bytes = take(blocks.receives, output_, scratch->packed_whole, &receives_,
                                       &own_receive_, &has_own_receive_);
    OFL_ASSERT(send_bytes == layout.packed_input && receive_bytes == layout.packed_whole);
    OFL_ASSERT(has_own_send_ == has_own_receive_);
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
      if (b.packed) copy_region(b.buffer, whole_region(b.buffer.shape()), output_, b.region);
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
    Tensor buffer;              // its elements, in the register or packed in scratch
    bool packed = false;
    comm::Transport::TaggedRequest request;
    bool finished = false;
  };

  // The block's buffer: its run of `reg` when contiguous there, else the next packed slot.
  Block block(const CollectiveBlock& b, const Tensor& reg, const Tensor& scratch,
              int64_t* packed_bytes) const {
    Block out;
    out.member = b.member;
    out.region = b.region;
    const Shape shape = region_shape(b.region);
    if (shape.numel() == 0) return out;  // neither side moves it
    if (const auto offset = contiguous_offset(reg.shape(), b.region)) {
      out.buffer = view_of_bytes(reg, *offset * elem_, shape, output_.dtype());
    } else {
      out.buffer = view_of_bytes(scratch, *packed_bytes, shape, output_.dtype());
      out.packed = true;
      *packed_bytes += align_collective_scratch(shape.numel() * elem_);
    }
    return out;
  }

  // Receives first, then sends, each towards the members after this one first, so that not
  // every member sends to member 0 at once.
  void start() {
    started_ = true;
    auto by_distance = [&](std::vector<Block>& list, int64_t sign) {
      std::vector<Block*> order;
      for (Block& b : list) order.push_back(&b);
      std::sort(order.begin(), order.end(), [&](const Block* a, const Block* b) {
        return (sign * (a->member - m_) + n_) % n_ < (sign * (b->member - m_) + n_) % n_;
      });
      return order;
    };
    for (Block* b : by_distance(receives_, -1)) {
      if (region_is_empty(b->region)) {
        b->request.done = true;
        continue;
      }
      b->request = transport_.receive_tagged(spec_.members[b->member],
                                             collective_tag(spec_.collective_id + b->member, m_),
                                             b->buffer.raw_data(), b->buffer.nbytes());
    }
    if (has_own_send_ && !region_is_empty(own_send_)) {
      copy_region(input_, own_send_, output_, own_receive_);
    }
    for (Block* b : by_distance(sends_, 1)) {
      if (region_is_empty(b->region)) {
        b->request.done = true;
        continue;
      }
      if (b->packed) copy_region(input_, b->region, b->buffer, whole_region(b->buffer.shape()));
      b->request = transport_.send_tagged(spec_.members[b->member],
                                          collective_tag(spec_.collective_id + m_, b->member),
                                          b->buffer.raw_data(), b->buffer.nbytes());
    }
  }

  std::vector<Block> sends_;
  std::vector<Block> receives_;
  std::vector<Range> own_send_, own_receive_;  // its own block, copied directly
  bool has_own_send_ = false, has_own_receive_ = false;
  bool started_ = false;
};

// Note [Broadcast] in oneflowlike/collective.h: the chain in pieces or the binomial tree.
class BroadcastJob final : public MemberJob {
 public:
  BroadcastJob(comm::Transport& transport, const CollectiveSpec& spec, Tensor input, Tensor output)
      : MemberJob(transport, spec, std::move(input), std::move(output)) {
    v_ = (m_ - spec.root + n_) % n_;
    OFL_ASSERT((v_ == 0) == input_.defined()) << spec.name << ": only the root reads an input";
    const int64_t bytes = static_cast<int64_t>(output_.nbytes());
    if (spec.algorithm == Op::TREE) {
      pieces_ = 1;
      if (v_ > 0) parent_ = v_ - highest_bit(v_);
      for (int64_t step = 1; v_ + step < n_; step *= 2) {
        if (step > v_) children_.push_back(v_ + step);
      }
    } else {
      const int64_t limit =
          collective_piece_limit(bytes, configured_piece_bytes(), kBroadcastPieceMaxBytes);
      pieces_ = std::max<int64_t>(1, (bytes + limit - 1) / limit);
      if (v_ > 0) parent_ = v_ - 1;
      if (v_ + 1 < n_) children_.push_back(v_ + 1);
    }
  }

  bool advance(bool* progressed) override {
    const int64_t numel = output_.numel();
    if (!started_) {
      started_ = true;
      *progressed = true;
      if (v_ == 0) {
        if (numel > 0) std::memcpy(output_.raw_data(), input_.raw_data(), output_.nbytes());
        for (int64_t p = 0; p < pieces_; ++p) send_piece(p, input_);
      } else {
        for (int64_t p = 0; p < pieces_; ++p) {
          const Span span = piece(p);
          comm::Transport::TaggedRequest r;
          r.done = span.size == 0;
          if (!r.done) {
            r = transport_.receive_tagged(
                member_of(parent_), collective_tag(spec_.collective_id, m_),
                at(output_, span.begin), static_cast<size_t>(span.size * elem_));
          }
          receives_.push_back(std::move(r));
        }
      }
    }
    // Each piece goes on as soon as it is here (receives complete in order: one tag, one peer).
    while (received_ < static_cast<int64_t>(receives_.size())) {
      comm::Transport::TaggedRequest& r = receives_[received_];
      if (!r.done && !transport_.test(r)) break;
      send_piece(received_, output_);
      ++received_;
      *progressed = true;
    }
    while (!sends_.empty() && (sends_.front().done || transport_.test(sends_.front()))) {
      sends_.pop_front();
      *progressed = true;
    }
    return received_ == static_cast<int64_t>(receives_.size()) && sends_.empty();
  }

 private:
  static int64_t highest_bit(int64_t v) {
    int64_t b = 1;
    while (b * 2 <= v) b *= 2;
    return b;
  }
  int64_t member_of(int64_t v) const { return spec_.members[(v + spec_.root) % n_]; }
  Span piece(int64_t p) const {
    const Range r = balanced_range(output_.numel(), pieces_, p);
    return Span{r.begin, r.size()};
  }
  char* at(const Tensor& t, int64_t element) const {
    return static_cast<char*>(t.raw_data()) + element * elem_;
  }
  void send_piece(int64_t p, const Tensor& from) {
    const Span span = piece(p);
    if (span.size == 0) return;
    for (int64_t child : children_) {
      const int64_t member = (child + spec_.root) % n_;
      sends_.push_back(
          transport_.send_tagged(spec_.members[member], collective_tag(spec_.collective_id, member),
                                 at(from, span.begin), static_cast<size_t>(span.size * elem_)));
    }
  }

  int64_t v_ = 0;  // this member counted from the root
  int64_t parent_ = -1;
  std::vector<int64_t> children_;
  int64_t pieces_ = 1;
  bool started_ = false;
  int64_t received_ = 0;
  std::deque<comm::Transport::TaggedRequest> receives_;
  std::deque<comm::Transport::TaggedRequest> sends_;
};

}  // namespace

std::shared_ptr<CollectiveJob> make_collective_job(comm::Transport& transport,
                                                   const CollectiveSpec& spec, Tensor input,
                                                   Tensor output, CollectiveScratch* scratch) {
  if (spec.op == Op::ALL_TO_ALL || spec.op == Op::SEND_RECV) {
    return std::make_shared<BlockExchangeJob>(transport, spec, std::move(input), std::move(output),
                                              scratch);
  }
  if (spec.op == Op::BROADCAST) {
    return std::make_shared<BroadcastJob>(transport, spec, std::move(input), std::move(output));
  }
  if (spec.algorithm == proto::CollectiveProto::RECURSIVE_DOUBLING) {
    return std::make_shared<RecursiveDoublingJob>(transport, spec, std::move(input),
                                                  std::move(output), scratch);
  }
  return std::make_shared<RingJob>(transport, spec, std::move(input), std::move(output), scratch);
}

}  // namespace ofl::actor
