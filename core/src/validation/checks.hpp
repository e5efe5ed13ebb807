// The validator's passes, each a separate function over the flat schedule. Each returns the
// first problem it finds; later passes may assume that earlier ones found none (ranges are
// checked, every (stage, micro-batch) index is in bounds, sends and receives are paired).
#pragma once

#include <optional>
#include <vector>

#include "flat_schedule.hpp"

namespace pipescope::validation {

using Problem = std::optional<ValidationProblem>;

// num_ranks, programs, stage_to_rank, num_stages, num_micro_batches agree; every rank holds a stage.
Problem check_header(const Schedule& schedule);

// Each instruction on its own: ranges, stage ownership, micro-batch presence, peers (in range,
// the right direction, on another rank), ops that an inference schedule cannot hold.
Problem check_instructions(const FlatSchedule& flat, bool training);

// Refuses schedules with fewer instructions than the stages x micro-batches forwards they need,
// naming a missing forward, so that later passes can size tables by stages x micro-batches.
Problem check_size(const FlatSchedule& flat);

// Program order on each rank: inputs (receives, loads, same-rank predecessors) before the
// compute that consumes them, compute before the send of its result, F before B/I before W,
// each at most once, end-of-batch collectives after all backward work of their stage; then
// that every (stage, micro-batch) has its forward, and in training its backward work.
Problem check_program_order(const FlatSchedule& flat, bool training);

// Pairs the k-th send with the k-th receive of every channel (from stage, to stage, kind);
// on success `partner` maps each send to its receive and each receive to its send.
Problem check_channels(const FlatSchedule& flat, std::vector<Vertex>& partner);

// Torch's semantics only: between two ranks, receives are posted in the order of the sends
// (torch's runtime matches them in that order, whatever their stages).
Problem check_rank_pair_order(const FlatSchedule& flat, const std::vector<Vertex>& partner);

// A buffer id of a stage holds one micro-batch from its first use to its last use.
Problem check_buffers(const FlatSchedule& flat);

// The dependency graph of all ranks (Boost.Graph) must be acyclic; a cycle is reported.
Problem check_deadlock(const FlatSchedule& flat, const std::vector<Vertex>& partner, bool blocking_sends);

}  // namespace pipescope::validation
