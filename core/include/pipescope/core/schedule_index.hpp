// One numbering of a schedule's instructions, shared by the validator and the simulator's
// compile step: every instruction of every rank is a vertex 0..N-1, rank after rank in program
// order, so per-instruction facts live in plain vectors indexed by it instead of maps. The
// fields both read are copied into one compact array, so their hot loops walk memory in order.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

using Vertex = int;

// IndexedInstruction::peer of a send or receive whose default neighbour is not a valid stage.
inline constexpr int kOutOfRangePeer = -2;

struct IndexedInstruction {
  Op op;
  int stage;
  int micro_batch;
  int buffer;
  int peer;  // resolved peer stage of a send or receive; for other ops the peer_stage field as given
};

// What an index holds besides the numbering (step_of, rank_begin): the compact copy of the
// fields (`node`) that the validator's passes walk again and again, or nothing more for a reader
// that walks the programs once in order (the simulator's compile step).
enum class IndexContents { NumberingAndFields, NumberingOnly };

// Built once from a Schedule, which must outlive it (instruction() and the names read it).
// Any schedule can be indexed; ranges are the reader's to check (the validator's
// check_instructions, the simulator's compile).
struct ScheduleIndex {
  const Schedule* schedule = nullptr;
  std::vector<IndexedInstruction> node;  // by vertex; empty with IndexContents::NumberingOnly
  std::vector<int> step_of;              // by vertex
  std::vector<Vertex> rank_begin;        // rank r holds vertices [rank_begin[r], rank_begin[r+1])

  explicit ScheduleIndex(const Schedule& s, IndexContents contents = IndexContents::NumberingAndFields);

  std::size_t size() const { return step_of.size(); }
  int num_ranks() const { return static_cast<int>(rank_begin.size()) - 1; }
  int rank_of(Vertex v) const;
  int index_in_step(Vertex v) const;
  const Instruction& instruction(Vertex v) const;
  bool is_first_of_rank(Vertex v) const { return v == rank_begin[rank_of(v)]; }

  // "1SEND_F3", also for an op that is not a valid Op value (a schedule built in code can hold one).
  std::string text(Vertex v) const;
  // "rank 1 step 4 1SEND_F3": how a vertex is named inside a longer message.
  std::string short_name(Vertex v) const;
  // "rank 1, step 4, position 0, instruction 1SEND_F3": where a one-line message puts it.
  std::string place(Vertex v) const;
};

// The shape every reader of a schedule relies on before indexing into its tables: at least one
// rank and one stage, one program per rank, one stage_to_rank entry per stage, each naming an
// existing rank.
// Returns the first violation in words, or nothing.
std::optional<std::string> shape_problem(const Schedule& schedule);

}  // namespace pipescope
