// A Schedule: per-rank programs of steps of instructions, plus the stage placement.
// This is the one value that generators produce, files hold, and the simulator and the
// executor consume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipescope/core/instruction.hpp"

namespace pipescope {

using Step = std::vector<Instruction>;     // executed in order; may be empty (an idle slot)
using Program = std::vector<Step>;         // one rank's program

// When a receive waits and when a send is waited for (see instruction.hpp and docs/TORCH.md).
enum class Communication : std::uint8_t {
  Pipescope,  // SPEC section 3: a receive waits where it stands; sends are posted, not waited
  Torch,      // torch's runtime: a receive is posted, the compute needing it waits; sends are
              // waited at their WAIT_SEND_* or at the end of the step
};

struct Schedule {
  std::string name;                 // schedule name ("1f1b", "file:x.json", ...)
  int num_ranks = 0;
  int num_stages = 0;
  int num_micro_batches = 0;
  std::vector<int> stage_to_rank;   // size num_stages
  std::vector<Program> programs;    // size num_ranks
  nlohmann::json extra_fields = nlohmann::json::object();  // unknown top-level fields, kept
  // Torch for schedules read from torch's CSVs (and JSON files that say so); pipescope's own
  // generators and JSON files keep Pipescope.
  Communication communication = Communication::Pipescope;

  // Stages held by `rank`, ascending.
  std::vector<int> stages_of_rank(int rank) const;
  // True when any program holds a backward op (training), false for inference.
  bool is_training() const;
  // Total number of instructions over all ranks.
  std::size_t instruction_count() const;

  friend bool operator==(const Schedule& a, const Schedule& b) {
    return a.name == b.name && a.num_ranks == b.num_ranks && a.num_stages == b.num_stages &&
           a.num_micro_batches == b.num_micro_batches && a.stage_to_rank == b.stage_to_rank &&
           a.programs == b.programs && a.extra_fields == b.extra_fields &&
           a.communication == b.communication;
  }
};

// Placements of SPEC.md section 2.
// loop: stage s on rank s % p (rank r holds r, r+p, ...). V: rank r holds r and 2p-1-r.
std::vector<int> loop_placement(int num_ranks, int chunks);
std::vector<int> v_placement(int num_ranks);

}  // namespace pipescope
