#include "torch_profiler_actions.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <map>

#include "pipescope/core/instruction.hpp"
#include "pipescope/traces/trace_limits.hpp"

namespace pipescope::traces::detail {
namespace {

using nlohmann::json;

constexpr std::string_view kActionPrefix = "PP:";
constexpr std::string_view kStepPrefix = "ProfilerStep#";
constexpr std::string_view kSingleStageForwardPrefix = "Forward ";
constexpr std::string_view kSingleStageBackwardPrefix = "Backward ";
// The operators torch's autograd engine records while it runs a backward.
constexpr std::string_view kBackwardOperatorPrefix = "autograd::engine::evaluate_function";

// Every action type torch 2.15 writes in a PP: span (SPEC.md section 4).
bool is_torch_action_kind(EventKind kind) {
  using K = EventKind;
  static constexpr EventKind kKinds[] = {
      K::Forward,        K::BackwardInput,      K::BackwardWeight, K::Backward,       K::SendActivation,
      K::RecvActivation, K::SendGrad,           K::RecvGrad,       K::ReduceGrad,     K::Unshard,
      K::Reshard,        K::WaitSendActivation, K::WaitSendGrad,   K::WaitReduceGrad, K::OverlapForwardBackward};
  return std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds);
}

std::int64_t element_size(const std::string& dtype) {
  static const std::map<std::string, std::int64_t> sizes = {
      {"float", 4}, {"double", 8},    {"c10::Half", 2},   {"c10::BFloat16", 2}, {"long int", 8},
      {"int", 4},   {"short int", 2}, {"signed char", 1}, {"unsigned char", 1}, {"bool", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? -1 : it->second;
}

}  // namespace

SpanRole span_role(std::string_view name) {
  if (name.starts_with(kActionPrefix)) return SpanRole::Action;
  if (name.starts_with(kStepPrefix)) return SpanRole::Step;
  if (name.starts_with(kSingleStageForwardPrefix)) return SpanRole::SingleStageForward;
  if (name.starts_with(kSingleStageBackwardPrefix)) return SpanRole::SingleStageBackward;
  if (name.starts_with(kBackwardOperatorPrefix)) return SpanRole::AutogradOperator;
  if (name.starts_with("gloo:") || name.starts_with("nccl:") || name.starts_with("c10d::"))
    return SpanRole::TransportCall;
  return SpanRole::Operator;
}

std::string_view span_role_argument(std::string_view name, SpanRole role) {
  switch (role) {
    case SpanRole::Action: return name.substr(kActionPrefix.size());
    case SpanRole::Step: return name.substr(kStepPrefix.size());
    case SpanRole::SingleStageForward: return name.substr(kSingleStageForwardPrefix.size());
    case SpanRole::SingleStageBackward: return name.substr(kSingleStageBackwardPrefix.size());
    default: return name;
  }
}

// A stage or micro-batch number as written: digits only, within int.
std::optional<int> action_number(std::string_view digits) {
  int value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// "0F1", "2RECV_B0", "0UNSHARD", "1WAIT_SEND_F3", "(0F7;7B3)OVERLAP_F_B": stage, type and
// micro-batch; core's parse_action where it knows the type, the plain split elsewhere. Nothing
// for a type torch does not write or numbers that are not numbers.
std::optional<Action> parse_pp_action(std::string_view text) {
  Action a;
  if (!text.empty() && text.front() == '(') {
    const auto close = text.find(')');
    if (close == std::string_view::npos) return std::nullopt;
    a.kind = event_kind_from_name(text.substr(close + 1));
    a.parts = std::string(text.substr(1, close - 1));
    if (a.kind != EventKind::OverlapForwardBackward) return std::nullopt;
    return a;
  }
  try {
    const Instruction instr = parse_action(text);
    a.kind = event_kind_of(instr.op);
    a.stage = instr.stage;
    a.micro_batch = instr.micro_batch;
    return a;
  } catch (const std::exception&) {
  }
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t j = text.size();
  while (j > i && std::isdigit(static_cast<unsigned char>(text[j - 1]))) --j;
  const auto stage = action_number(text.substr(0, i));
  const EventKind kind = event_kind_from_name(text.substr(i, j - i));
  if (!stage || j == i || !is_torch_action_kind(kind)) return std::nullopt;
  a.stage = *stage;
  a.kind = kind;
  if (j < text.size()) {
    const auto micro_batch = action_number(text.substr(j));
    if (!micro_batch) return std::nullopt;
    a.micro_batch = *micro_batch;
  }
  return a;
}

// A string field of an event, or "" when it is absent or not a string (load_rank_file checked
// the fields the reader needs).
std::string_view text_field(const json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>()) : std::string_view();
}

// An integer or string id as text ("7", "stream 7"); "0" when absent.
std::string id_text(const json& e, const char* key) {
  const auto it = e.find(key);
  if (it == e.end() || it->is_null()) return "0";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// N of a "ProfilerStep#N" span, or nothing (another span, or N not a number).
std::optional<int> step_number(std::string_view name) {
  if (span_role(name) != SpanRole::Step) return std::nullopt;
  return action_number(span_role_argument(name, SpanRole::Step));
}

int single_stage_micro_batch(std::string_view name) {
  const SpanRole role = span_role(name);
  if (role != SpanRole::SingleStageForward && role != SpanRole::SingleStageBackward) return -1;
  return action_number(span_role_argument(name, role)).value_or(-1);
}

// A [memory] sample's device: the host's (Device Type 0, or none said) or a GPU's.
bool is_host_memory(const json& args) {
  const auto it = args.find("Device Type");
  return it == args.end() || !it->is_number() || it->get<double>() == 0;
}

// The bytes of a gloo/NCCL call from its recorded shapes (record_shapes=True), or -1 (also
// for shapes that are not lists of integers, or a size beyond trace_limits.hpp's bound).
std::int64_t bytes_of(const json& args) {
  const auto dims = args.find("Input Dims");
  const auto types = args.find("Input type");
  if (dims == args.end() || types == args.end() || !dims->is_array() || !types->is_array()) return -1;
  double total = 0;
  for (std::size_t i = 0; i < dims->size() && i < types->size(); ++i) {
    if (!(*types)[i].is_string() || !(*dims)[i].is_array()) continue;
    const std::int64_t size = element_size((*types)[i].get<std::string>());
    if (size < 0) return -1;
    double count = 1;
    for (const auto& d : (*dims)[i]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return -1;
      count *= static_cast<double>(d.get<std::int64_t>());
    }
    total += count * static_cast<double>(size);
  }
  return total > 0 && !bytes_problem(total) ? static_cast<std::int64_t>(total) : -1;
}

bool is_gpu_activity(std::string_view cat) { return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset"; }

bool is_communication_kernel(std::string_view name) { return name.find("nccl") != std::string_view::npos; }

std::size_t program_period(const std::vector<std::uint32_t>& action_names) {
  const std::size_t n = action_names.size();
  auto name = [&](std::size_t i) { return action_names[i]; };
  for (std::size_t period = 1; 2 * period <= n; ++period) {
    if (n % period != 0) continue;
    bool repeats = true;
    for (std::size_t i = period; i < n && repeats; ++i) repeats = name(i) == name(i - period);
    if (repeats) return period;
  }
  return 0;
}

}  // namespace pipescope::traces::detail
