#pragma once
// In-place boxing: SLICE and CONCAT tasks that move no bytes.
//
// Note [Slice views]
// ------------------
// Boxing cuts tensors into pieces: a ring all-reduce slices each chunk it sends and each chunk
// it adds, a gradient bucket is sliced back into the gradients it holds. When the region is one
// contiguous run of the input's memory (a range of rows, a chunk of a flat bucket) the slice can
// be the input's bytes in place. Such a SLICE is marked `view`: its actor hands the consumers a
// view of the input piece and keeps that piece until every consumer has acknowledged the view
// (as a SEND keeps its input until the RECV has read it), its register gets no memory, and
// memory planning keeps the input's register alive until the view's last consumer.
//
// A COPY within one device (a reshape's memcpy, a boxing copy; on the host or a GPU) is the same:
// its output is the input's bytes under the output's shape, made a view on the same conditions.
// On a GPU the view's readers and the input's producer are ordered as any readers are (Note
// [Event-gated acts]): the view holds the input until its consumers acknowledge, and an
// acknowledgement from work queued on a stream is sent behind that work.
//
// A slice stays a copy when sharing could change what someone reads:
//  - the input is persistent (a variable, updated in place by the optimizer) or some consumer of
//    it writes it in place: the view would see the write;
//  - the input has several slots (pipelined): holding one for the view's readers would leave
//    its producer fewer pieces in flight;
//  - a consumer of the slice writes it in place: the input's other readers would see the write;
//  - the slice and its producer or consumers act at different rates (micro-batch boundaries),
//    where one piece covers several acts.
//
// Note [Repeated views]
// ---------------------
// Under micro-batching a once-per-iteration value enters the micro-batches through REPEAT
// (Note [Micro-batches] in plan.proto), which copied it every micro-batch so that a write in
// place by one micro-batch could not reach the others. Every weight was so copied m times a
// step and held twice: the copy lives from the forward use to the backward one, the whole
// micro-batch. A REPEAT whose readers write nothing in place is a view of its input instead
// (`view`, as the slices: no memory of its own, the input piece kept until the view's readers
// are done; its actor lets the once piece go at its last act). Its input may be a variable:
// what writes a variable in place (the optimizer's update, once the micro-batches are done)
// waits for every task that reads it through a REPEAT, each REPEAT's readers and those of the
// COPY and SLICE tasks after them (RepeatedReaders; Note [In-place updates wait for readers] in
// compiler/compile.cpp adds those control inputs to writers acting after the micro-batches),
// so no reader of the last micro-batch sees the update. Conditions: the input is one slot made by a
// VARIABLE, a kernel or a copy that is not a view (a fed input, or a view of one, keeps its copy),
// every in-place writer of it waits for those readers, the REPEAT's readers act per micro-batch,
// none writes its output in place and no SEND reads it (its peer reads the bytes after the SEND has
// acted, which the writer cannot wait for). The runtime checks the same when it loads a plan.

// Note [Concats in place]
// -----------------------
// The converse: a CONCAT assembles pieces (the chunks a ring all-gather collects, the gradients
// of a bucket). When every piece is a contiguous run of the output and together they tile it,
// each input register can *be* its run of the output's memory: its producer (a RECV, an ADD, the
// kernel computing a gradient) writes straight into the output and the CONCAT, marked
// `in_place`, copies nothing. Its actor keeps all of an act's input pieces until every consumer
// has acknowledged the output, so no producer writes its next piece into memory still being
// read. The inputs' registers get no memory; memory planning gives the output a lifetime from
// the first input's producer to the last reader of the output or of an input.
//
// A piece made by a view COPY (the reshape flattening a gradient into its bucket) keeps the
// concat a copy. Looking through such views to the kernel's register, so that the backward
// writes each gradient into its bucket, was built and measured: the bucket then lives whole
// from its first gradient on, where the copied pieces add up only as the backward makes them,
// and the GPT of docs/benchmarks.md planned 1.8 MiB more on DP2 while its step was no faster
// (the copy is 12.6 MB a step). Under accumulation the pieces are the accumulators, not views.
//
// Conditions, besides the tiling: output and inputs are transient single-slot registers nobody
// writes in place, each input is read by one in-place concat at most and is not itself a view or
// an in-place concat's output, and all of them act at the concat's rate, an ACCUMULATE's
// once-per-iteration sum included: then the accumulators of a gradient bucket are its runs
// (Note [Buckets under accumulation] in passes/optimizer.cpp), and the bucket lives for the
// step in memory of its own.

// Note [All-reduces in place]
// ---------------------------
// A host all-reduce (a gradient bucket's P -> B) may sum into its input's memory, as NCCL's and
// gloo's in-place all-reduces do: its output is then a view of its input (marked `view` as the
// slices are: no memory of its own, the input kept until the output's readers are done), and a
// data-parallel step holds each bucket once instead of twice (input and sums). The engine's ring
// reads each chunk of its own input once, in the step-0 send or in the add that overwrites it,
// and a gather receives a chunk only after that chunk's send completed (Note [Ring
// collectives]); recursive doubling sends its input before it receives the sum. Conditions:
// the all-reduce is the input's only reader (the sums replace what anyone else would read), its
// output is not a piece of an in-place concat (then it is the concat's memory), the input is
// transient, single-slot and not itself a view; when it is an in-place concat's output
// (a bucket), each of the concat's pieces is read by the concat alone; and its producer hands
// out pieces at the all-reduce's rate (an ACCUMULATE's once-per-iteration sum counts:
// `outputs_per_micro_batch`). On a GPU the
// all-reduce stays out of place until that path has run on a device.

// Note [Fetched pieces are handed over]
// -------------------------------------
// An OUTPUT task used to hand the caller a copy of its piece (the register's memory is the
// plan's and the next iteration writes it again). A fetched register whose producer writes a
// piece of its own (a kernel, a copy, a slice, an add, a concat, a collective; not a view, an
// in-place concat's piece, a RECV whose receive may be posted into the slot ahead, or a
// micro-batch sum) and that no reader writes in place, nor a SEND reads (its peer fetches the
// bytes after the SEND has acted, possibly after the run has returned to a caller who may then
// write them), is marked `fresh_each_piece`: its
// producer takes new memory for every piece and the OUTPUT task hands that memory over, so the
// caller's tensor is never written again and nothing is copied. Such a register has no block
// memory (memory planning counts it as allocated on its own). Eager ops on global tensors, a
// compiled graph each, fetch every result: the small GPT's eager data-parallel step went from
// 157 to 129 ms without the copies (docs/benchmarks.md). Host registers only.
//
// Note [Fed pieces are handed in]
// -------------------------------
// The converse: an INPUT task used to copy the caller's piece into the register. A host INPUT
// register that no reader writes (in place, as an in-place all-reduce's sum, or as an in-place
// concat's piece) and no SEND reads (as above: eager in-place writes and optimizer steps write
// the caller's pieces after a run) is marked `handed_in`: the caller's piece itself is the
// register's memory when it has the register's shape and dtype (a run's pieces, as eager ops on
// global tensors pass them), and new memory it is copied into otherwise (a whole fed tensor cut to
// the rank's region). It has no block memory. A fetched view of it is still copied out: the
// caller's own tensor never comes back as a result. (Unless the caller donates it: next Note.)
//
// Note [Donated pieces]
// ---------------------
// flow.distributed.all_reduce(t) ends with t holding the sum, as torch's does. Run as an eager
// op (Note [Local collectives] in python/oneflowlike/comm.py) it copied t into the INPUT
// register (the in-place all-reduce writes it, so it was not handed in), copied the sum out at
// the OUTPUT (a view of that register), and copied the result into t: three passes over the
// tensor around one all-reduce, 2.1 ms of 5.6 for 4 MiB on two processes. An INPUT task that
// `donates` (GraphBuilder::input's flag; the caller gives each run its pieces up) is handed in
// even where a reader writes it in place, a kernel's mutated input or the in-place all-reduce;
// its register and every view of it (through view tasks: slices, copies, the in-place
// all-reduce) are marked `donated`, unless a kernel writes them in place (an OUTPUT reading
// them acts before that write and must keep its snapshot), and an OUTPUT hands a donated piece
// over as it is. So the
// sum is made in t's own memory and comes back as t itself: no copy. What a donated piece may
// not be: read by a SEND (as above) or written into an in-place concat's output (its memory is
// the concat's). A piece that does not fit the register (a region cut from a whole fed
// tensor) is copied into new memory each run as before, which is still the caller's to keep.
// A run that fails part way leaves the donated pieces part written, as NCCL's and gloo's
// in-place collectives leave their buffers. A donated piece must share its memory with no other
// piece fed to the run (two in-place sums into one buffer, or readers of another input seeing
// a half-made sum): reshard_many refuses that. A micro-batched input never donates (its
// register holds every micro-batch, which UNPACK hands out).

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

/// Note [Repeated views]: the tasks of one rank that may read a register's memory through a
/// REPEAT of it.
class RepeatedReaders {
 public:
  explicit RepeatedReaders(const proto::RankPlanProto& rank_plan);
  /// Whether REPEAT task `repeat` may be a view as far as its readers go: its output is on its
  /// input's device, none of its readers writes it in place, and none of the tasks reading it
  /// (readers_of) is a SEND, whose peer reads the bytes after the SEND has acted.
  bool may_be_view(const proto::TaskProto& repeat) const;
  /// Task ids: the tasks reading register `reg` through each REPEAT of it that may be a view,
  /// its consumers and, through the COPY and SLICE tasks among them (views, or copies reading
  /// it), theirs. Empty when no such REPEAT reads it.
  std::vector<int64_t> of(int64_t reg) const;

 private:
  // The consumers of `reg` and, through COPY and SLICE tasks, theirs (task ids; a consumer not
  // on this rank is -1).
  std::vector<int64_t> readers_of(int64_t reg) const;
  const proto::TaskProto* task(int64_t id) const;
  const proto::RegisterProto* reg(int64_t id) const;

  const proto::RankPlanProto& rank_plan_;
  std::unordered_map<int64_t, int> tasks_;      // id -> position
  std::unordered_map<int64_t, int> registers_;  // id -> position
};

/// Marks the SLICE and COPY tasks of `plan` that can be views (Note [Slice views]), the host
/// all-reduces that can sum in place (Note [All-reduces in place]) and the CONCAT tasks whose
/// inputs can be written in place (Note [Concats in place]), and the fetched registers whose
/// pieces can be handed over (Note [Fetched pieces are handed over]). Run before plan_memory,
/// which gives their registers no memory of their own (no block memory, for the latter).
void mark_in_place_boxing(proto::PlanProto* plan);

}  // namespace ofl::compiler::physical
