// The PP: actions of a torch.profiler trace (torch.distributed.pipelining's action spans) and
// the small readers of torch's events that the torch reader builds on: the one place a torch
// name is parsed (what a span is, an action's text into its typed kind, stage and
// micro-batch, a step's number, a kernel that communicates), a transport call's bytes, the
// period of a program repeated without step marks. Private to the traces library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipescope/traces/event_kind.hpp"

namespace pipescope::traces::detail {

// What a CPU span of a torch trace is, told by its name once where the reader gathers a
// rank's spans (span_role); the reader's passes switch on it.
enum class SpanRole : std::uint8_t {
  Action,               // "PP:<action>": an action of torch.distributed.pipelining
  Step,                 // "ProfilerStep#N"
  SingleStageForward,   // "Forward i": a single-stage schedule class's pass (no PP: spans)
  SingleStageBackward,  // "Backward i"
  AutogradOperator,     // "autograd::engine::evaluate_function...": a backward running
  TransportCall,        // a gloo, NCCL or c10d call: a transfer's transport
  Operator,             // any other operator or annotation
};
SpanRole span_role(std::string_view name);
// The name of the instant events torch.profiler writes for the allocator (its memory samples).
inline constexpr const char* kMemorySampleName = "[memory]";
// The text after the role's prefix: an action's "0F1", a step's or a pass's number.
std::string_view span_role_argument(std::string_view name, SpanRole role);

// One PP: action span as torch recorded it, and what it becomes.
struct Action {
  EventKind kind = EventKind::Other;  // F, RECV_B, UNSHARD, ...
  std::string parts;                  // OVERLAP_F_B: "0F7;7B3", the two actions it runs
  int stage = -1;
  int micro_batch = -1;
  double start_us = 0;  // the CPU span
  double end_us = 0;
  double transport_end_us = -1;   // the end of its gloo/NCCL operation (receives)
  bool arrival_measured = false;  // receives: the compute needing the data waited for it
  double data_ready_us = -1;      // compute: when the last receive it waited for ended
  std::int64_t bytes = -1;
  double kernel_start_us = std::numeric_limits<double>::infinity();
  double kernel_end_us = -std::numeric_limits<double>::infinity();
  bool launched_kernels() const { return kernel_end_us >= kernel_start_us; }
};

// A stage or micro-batch number as written: digits only, within int.
std::optional<int> action_number(std::string_view digits);

// "0F1", "2RECV_B0", "0UNSHARD", "1WAIT_SEND_F3", "(0F7;7B3)OVERLAP_F_B": stage, kind and
// micro-batch; nothing for a type torch does not write or numbers that are not numbers.
std::optional<Action> parse_pp_action(std::string_view text);

// A string field of an event, or "" when it is absent or not a string (load_rank_file checked
// the fields the reader needs).
std::string_view text_field(const nlohmann::json& e, const char* key);
// An integer or string id as text ("7", "stream 7"); "0" when absent.
std::string id_text(const nlohmann::json& e, const char* key);
// N of a "ProfilerStep#N" span, or nothing (another span, or N not a number).
std::optional<int> step_number(std::string_view name);
// The micro-batch i of a single-stage schedule class's "Forward i" / "Backward i", or -1.
int single_stage_micro_batch(std::string_view name);
// A [memory] sample's device: the host's (Device Type 0, or none said) or a GPU's.
bool is_host_memory(const nlohmann::json& args);
// The bytes of a gloo/NCCL call from its recorded shapes (record_shapes=True), or -1 (also
// for shapes that are not lists of integers, or a size beyond trace_limits.hpp's bound).
std::int64_t bytes_of(const nlohmann::json& args);
bool is_gpu_activity(std::string_view cat);
// A GPU kernel of NCCL's (a transfer's or a collective's), by its name.
bool is_communication_kernel(std::string_view name);

// A torch run without a profiler schedule marks no steps, but every rank runs its program once
// per step: the smallest period P whose repetition is the whole sequence of PP: action names,
// at least twice, is one step's program. 0 when there is none (one step, or no actions).
// `action_names`: the actions' names as interned ids (equal ids, equal names).
std::size_t program_period(const std::vector<std::uint32_t>& action_names);

inline int lane_of(EventKind kind) { return static_cast<int>(event_kind_lane(kind)); }

}  // namespace pipescope::traces::detail
