// Maps schedule names (SPEC.md section 2) to generators, so that a new schedule is one
// function and one line. `file:PATH` is resolved here too, so every `--schedule` accepts it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/core/passes.hpp"
#include "pipescope/core/schedule.hpp"

namespace pipescope {

// What a generator is asked for. `num_ranks` is `--stages P`; with `chunks` V there are P*V
// stages. Generators refuse (ScheduleError with the reason) what they cannot honour.
struct ScheduleParams {
  int num_ranks = 4;
  int num_micro_batches = 8;
  int chunks = 1;
  bool chunks_given = false;  // true when the user passed --chunks (lets a generator refuse it)
  // Megatron's --microbatch-group-size-per-vp-stage G: how many micro-batches go through one
  // chunk before the next (interleaved-1f1b); 0 when not given, which means P as in Megatron.
  int microbatch_group_size = 0;
  // Megatron's --overlap-moe-expert-parallel-comm: its interleaved schedule runs one more warm-up
  // forward on every rank, so that each steady-state step pairs a forward with another
  // micro-batch's backward (get_pp_rank_microbatches). Only the schedules that take Megatron's
  // group size honour it; the others refuse it.
  bool overlap_moe_expert_parallel_comm = false;
};

// How a schedule of two or more chunks puts its stages on ranks: loop (stage s on rank s mod p,
// as interleaving does) or V (rank r holds stages r and 2p-1-r, the zero-bubble V shape).
enum class StagePlacement { loop, v };

// What a schedule is, for the tools that choose among schedules (the planner, ppsim's
// commands): they ask these instead of comparing names, so that a new schedule is one
// generator and one registry line. Every registry entry has them.
struct ScheduleTraits {
  StagePlacement placement = StagePlacement::loop;
  // The chunk counts (stages per rank) it runs: {1} for one stage per rank, {2} for the V
  // schedules; empty: any count the caller picks (interleaving: the planner tries its list).
  std::vector<int> chunks = {1};
  // Separate input (I) and weight (W) gradient instructions instead of one full backward.
  bool split_backward = false;
  // The order is searched from the costs and topology (zb-auto): built per cost model, never
  // reused across costs, and built by the simulator (sim/zb_auto.hpp), which knows costs.
  bool cost_dependent = false;
  // Honours a memory limit (--max-mem, --max-mem-micro-batches) when it is built.
  bool memory_limited = false;
  // Whether it honours ScheduleParams::microbatch_group_size; the others refuse one given.
  bool takes_microbatch_group_size = false;

  friend bool operator==(const ScheduleTraits&, const ScheduleTraits&) = default;
};

using Generator = std::function<Schedule(const ScheduleParams&)>;
using OrderGenerator = std::function<ComputeOrder(const ScheduleParams&)>;

struct GeneratorInfo {
  std::string name;
  std::string description;
  Generator make;
  // Set for the schedules that are `lower` of a compute order (make is lower(make_order)):
  // lets a consumer lower the order itself, one rank at a time (lower_streamed).
  OrderGenerator make_order = nullptr;
  ScheduleTraits traits = {};
};

class ScheduleRegistry {
 public:
  // The registry holding every built-in schedule of the core. Other layers (the simulator's
  // zb-auto) add theirs at start-up.
  static ScheduleRegistry& instance();

  void add(GeneratorInfo info);  // replaces an entry of the same name
  // Names that reproduce a release of other software, `FAMILY@VERSION` (VERSION as 0.14 or
  // 0.14.2): each entry `FAMILY@B` is a behaviour that first appeared in release B, and a
  // VERSION picks the entry with the newest B <= VERSION. Releases after `newest_checked`
  // are refused: nobody compared them with the generator.
  void add_release_family(std::string family, std::string newest_checked);
  // The entry of that exact name, or the one a `FAMILY@VERSION` name resolves to; nullptr when
  // neither (why_unknown says why).
  const GeneratorInfo* find(std::string_view name) const;
  // The traits of find(name); nullptr for an unknown name and for `file:PATH`.
  const ScheduleTraits* traits(std::string_view name) const;
  // One line saying why find(name) has no entry: an unknown name (listing the known ones), a
  // version that is not one, or a release before the oldest or after the newest checked.
  std::string why_unknown(std::string_view name) const;
  std::vector<std::string> names() const;
  const std::vector<GeneratorInfo>& entries() const { return entries_; }

 private:
  struct ReleaseFamily {
    std::string family;
    std::string newest_checked;
  };
  const ReleaseFamily* family_of(std::string_view name) const;

  std::vector<GeneratorInfo> entries_;
  std::vector<ReleaseFamily> release_families_;
};

// Builds the schedule NAME (or reads `file:PATH`), throwing ScheduleError naming the schedule
// and the reason when it is unknown or cannot honour `params`.
Schedule make_schedule(std::string_view name, const ScheduleParams& params);

// The compute order whose `lower` make_schedule(name, params) is, with the same checks and
// errors; nothing for `file:PATH` and the schedules that are not made that way (DeepSpeed's).
std::optional<ComputeOrder> make_compute_order(std::string_view name, const ScheduleParams& params);

}  // namespace pipescope
