#pragma once
// Slice views: SLICE tasks that need not copy.
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
// A slice stays a copy when sharing could change what someone reads:
//  - the input is persistent (a variable, updated in place by the optimizer) or some consumer of
//    it writes it in place: the view would see the write;
//  - a consumer of the slice writes it in place: the input's other readers would see the write;
//  - the slice and its producer or consumers act at different rates (micro-batch boundaries),
//    where one piece covers several acts.

#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

/// Marks the SLICE tasks of `plan` that can be views (Note [Slice views]). Run before
/// plan_memory, which gives view registers no memory.
void mark_slice_views(proto::PlanProto* plan);

}  // namespace ofl::compiler::physical
