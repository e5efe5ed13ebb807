// `ppsim plan`'s output: the table, CSV and JSON of the rows shown, and their predicted traces.
#include "plan_output.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/units.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace pipescope::cli {
namespace {

// The table's short name of each recomputed module, in the order rows and the legend list them.
constexpr std::pair<std::uint8_t, const char*> kModuleShortNames[] = {{sim::kRecomputeCoreAttention, "attn"},
                                                                      {sim::kRecomputeMoeActivation, "act"},
                                                                      {sim::kRecomputeLayernorm, "ln"},
                                                                      {sim::kRecomputeMlaUpProjection, "mla"},
                                                                      {sim::kRecomputeSharedExperts, "shx"},
                                                                      {sim::kRecomputeMlp, "mlp"},
                                                                      {sim::kRecomputeMoe, "moe"}};

// Short forms for the table: "-", "sel" (Megatron's default, core_attn), "full"; other selective
// sets by their modules' short names, "act+ln" (the legend under the table names them).
std::string recomputation_short(const sim::ParallelConfig& parallel) {
  switch (parallel.recomputation) {
    case sim::Recomputation::none: return "-";
    case sim::Recomputation::full: return "full";
    case sim::Recomputation::selective: break;
  }
  if (parallel.recompute_modules == sim::kRecomputeCoreAttention) return "sel";
  std::string text;
  for (const auto& [module, name] : kModuleShortNames)
    if ((parallel.recompute_modules & module) != 0) text += (text.empty() ? "" : "+") + std::string(name);
  return text;
}

// The legend of those short names: "attn core_attn, act moe_act, ...".
std::string module_legend() {
  std::vector<std::string> entries;
  for (const auto& [module, name] : kModuleShortNames)
    entries.push_back(fmt::format("{} {}", name, sim::recompute_modules_text(module)));
  return fmt::format("{}", fmt::join(entries, ", "));
}

// The selective rows' modules as Megatron names them (CSV); "" for the others.
std::string recomputed_modules(const sim::ParallelConfig& parallel) {
  return parallel.recomputation == sim::Recomputation::selective
             ? sim::recompute_modules_text(parallel.recompute_modules)
             : std::string();
}

// Short forms for the table: "-" (BF16), "hyb", "e4m3".
const char* precision_short(sim::Fp8Format f) {
  switch (f) {
    case sim::Fp8Format::none: return "-";
    case sim::Fp8Format::hybrid: return "hyb";
    case sim::Fp8Format::e4m3: return "e4m3";
  }
  return "?";
}

// A layout's part of a trace file's name ("" for the even split).
std::string layout_label(const sim::LayoutOptions& layout) {
  if (layout.is_default()) return "";
  if (!layout.layout.empty()) return "_layout";
  if (layout.first_stage_layers || layout.last_stage_layers)
    return fmt::format("_first{}_last{}", layout.first_stage_layers.value_or(0), layout.last_stage_layers.value_or(0));
  return fmt::format("{}{}", layout.account_for_embedding ? "_emb" : "", layout.account_for_loss ? "_loss" : "");
}

// The context-parallel size with its exchange where it is not Megatron's default: "2", "2a2a",
// "2ag" (all_gather), "8(2a2a)" (a2a+p2p in groups of 2); "1" without context parallelism.
std::string context_parallel_cell(const sim::ParallelConfig& parallel) {
  std::string cp = std::to_string(parallel.context_parallel);
  switch (parallel.context_parallel == 1 ? sim::ContextParallelComm::p2p : parallel.context_parallel_comm) {
    case sim::ContextParallelComm::p2p: return cp;
    case sim::ContextParallelComm::all_gather: return cp + "ag";
    case sim::ContextParallelComm::a2a: return cp + "a2a";
    case sim::ContextParallelComm::a2a_p2p: return cp + "(" + std::to_string(parallel.context_parallel_a2a) + "a2a)";
  }
  return cp;
}

std::string candidate_label(const sim::PlanCandidate& c) {
  return fmt::format(
             "{}_tp{}{}{}_pp{}_dp{}_v{}_mbs{}_m{}_recompute-{}{}", c.schedule, c.parallel.tensor_parallel,
             c.parallel.sequence_parallel ? "sp" : "",
             c.parallel.context_parallel > 1 ? "_cp" + context_parallel_cell(c.parallel) : "", c.parallel.pipeline,
             c.parallel.data_parallel, c.parallel.chunks, c.parallel.micro_batch_size, c.num_micro_batches,
             c.parallel.recomputation == sim::Recomputation::selective &&
                     c.parallel.recompute_modules != sim::kRecomputeCoreAttention
                 ? fmt::format("selective-{}", recomputation_short(c.parallel))
                 : std::string(sim::recomputation_name(c.parallel.recomputation)),
             c.parallel.fp8 != sim::Fp8Format::none ? fmt::format("_fp8-{}", sim::fp8_format_name(c.parallel.fp8))
                                                    : "") +
         layout_label(c.parallel.layout);
}

// The row's layout in the table's few characters: "-" for the even split.
std::string layout_short(const sim::LayoutOptions& layout) {
  if (layout.is_default()) return "-";
  if (!layout.layout.empty()) return "string";
  if (layout.first_stage_layers || layout.last_stage_layers)
    return fmt::format("first {} last {}", layout.first_stage_layers ? fmt::to_string(*layout.first_stage_layers) : "-",
                       layout.last_stage_layers ? fmt::to_string(*layout.last_stage_layers) : "-");
  if (layout.account_for_embedding && layout.account_for_loss) return "E, L as layers";
  return layout.account_for_embedding ? "E as a layer" : "L as a layer";
}

// The row's layer layout in Megatron's options ("" for the even split).
std::string layout_text(const sim::PlanRequest& request, const sim::PlanCandidate& c) {
  if (!c.parallel.layout.is_default() || request.profile) return c.parallel.layout.describe();
  return sim::megatron_layout_of_split(request.model.layers, c.parallel.pipeline, c.parallel.chunks).describe();
}

// The table's expert-parallel cell: E, or E/T_e where the experts' tensor parallelism is not the
// row's own.
std::string expert_cell(const sim::ParallelConfig& parallel) {
  const std::string ep = std::to_string(parallel.expert_parallel);
  return parallel.expert_tp() == parallel.tensor_parallel ? ep : ep + "/" + std::to_string(parallel.expert_tp());
}

nlohmann::json row_json(std::size_t rank, const sim::PlanRow& r, const std::string& layout) {
  const sim::PlanCandidate& c = r.candidate;
  return {{"rank", rank},
          {"schedule", c.schedule},
          {"tensor_parallel", c.parallel.tensor_parallel},
          {"context_parallel", c.parallel.context_parallel},
          {"context_parallel_comm", sim::context_parallel_comm_name(c.parallel.context_parallel_comm)},
          {"hierarchical_context_parallel_sizes",
           c.parallel.context_parallel_comm == sim::ContextParallelComm::a2a_p2p && c.parallel.context_parallel_a2a > 0
               ? nlohmann::json{c.parallel.context_parallel_a2a,
                                c.parallel.context_parallel / c.parallel.context_parallel_a2a}
               : nlohmann::json(nullptr)},
          {"expert_parallel", c.parallel.expert_parallel},
          {"expert_tensor_parallel", c.parallel.expert_tp()},
          {"fp8_format", c.parallel.fp8 == sim::Fp8Format::none ? nlohmann::json(nullptr)
                                                                : nlohmann::json(sim::fp8_format_name(c.parallel.fp8))},
          {"layout", layout},
          {"equivalents", r.equivalents},
          {"sequence_parallel", c.parallel.sequence_parallel},
          {"pipeline", c.parallel.pipeline},
          {"data_parallel", c.parallel.data_parallel},
          {"chunks", c.parallel.chunks},
          {"micro_batch_size", c.parallel.micro_batch_size},
          {"num_micro_batches", c.num_micro_batches},
          // `recompute` (any recomputation) is kept for the readers written before granularities.
          {"recompute", c.parallel.recomputation != sim::Recomputation::none},
          {"recompute_granularity", sim::recomputation_name(c.parallel.recomputation)},
          {"recompute_modules", c.parallel.recomputation == sim::Recomputation::selective
                                    ? nlohmann::json(sim::recompute_module_names(c.parallel.recompute_modules))
                                    : nlohmann::json(nullptr)},
          {"zero1", c.parallel.zero1},
          {"overlap_grad_reduce", c.parallel.overlap_grad_reduce},
          {"async_tensor_parallel_backward", c.parallel.async_tensor_parallel_backward},
          {"iteration_time_s", r.iteration_time_s},
          {"throughput_samples_per_s", r.throughput_samples_per_s},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu},
          {"bubble_fraction", r.bubble_fraction},
          {"peak_memory_bytes", r.peak_memory_bytes}};
}

// What the heading says of context parallelism's exchange where it is not Megatron's default.
std::string context_parallel_heading(const sim::PlanRequest& request) {
  const bool split = std::any_of(request.context_parallel_sizes.begin(), request.context_parallel_sizes.end(),
                                 [](int cp) { return cp > 1; });
  if (!split) return "";
  if (request.context_parallel_comms.size() > 1) {
    std::vector<std::string_view> names;
    for (sim::ContextParallelComm comm : request.context_parallel_comms)
      names.push_back(sim::context_parallel_comm_name(comm));
    return fmt::format("; context parallelism's exchange searched ({})", fmt::join(names, ", "));
  }
  const sim::ContextParallelComm comm = request.context_parallel_comms.empty() ? request.options.context_parallel_comm
                                                                               : request.context_parallel_comms.front();
  if (comm == sim::ContextParallelComm::a2a) return "; context parallelism by all-to-all (--cp-comm-type a2a)";
  if (comm == sim::ContextParallelComm::all_gather)
    return "; context parallelism by all-gather (--cp-comm-type all_gather)";
  if (comm == sim::ContextParallelComm::a2a_p2p)
    return "; context parallelism by all-to-all in groups, then a ring (--cp-comm-type a2a+p2p)";
  return "";
}

// The table's first lines: what was planned, and what became of the configurations.
void print_table_heading(const PlanOutput& out) {
  const PlanOptions& o = out.options;
  const sim::PlanResult& result = out.result;
  const std::string limit = result.limit_bytes == std::numeric_limits<std::int64_t>::max()
                                ? std::string("none")
                                : sim::format_bytes(result.limit_bytes);
  if (o.use_profile())
    std::cout << fmt::format(
        "{} measured on {} process(es) (profile {}), global batch {}, memory limit {} per process\n",
        printable(o.model_name), o.gpus, printable(o.profile_path), o.global_batch, limit);
  else
    std::cout << fmt::format("{} on {} x {} ({} per node), global batch {}, memory limit {} per GPU{}{}\n",
                             printable(out.request.model.name), o.gpus, out.request.device.name,
                             o.cluster.gpus_per_node, o.global_batch, limit, context_parallel_heading(out.request),
                             o.steady_state ? "; steady state of back-to-back iterations" : "");
  std::cout << fmt::format("{} configurations: {} simulated, {} fit, {} dropped for memory, {} refused",
                           result.considered, result.simulated, result.rows.size() + result.folded,
                           result.dropped_for_memory, result.refused);
  if (o.top > 0)
    std::cout << fmt::format(", {} pruned (their lower bound cannot reach the top {})", result.pruned, o.top);
  if (result.folded > 0) std::cout << fmt::format("; {} rows folded into the same run", result.folded);
  std::cout << "\n\n";
}

}  // namespace

void print_plan_json(const PlanOutput& out) {
  const PlanOptions& o = out.options;
  const sim::PlanResult& result = out.result;
  const nlohmann::json limit_json = result.limit_bytes == std::numeric_limits<std::int64_t>::max()
                                        ? nlohmann::json(nullptr)
                                        : nlohmann::json(result.limit_bytes);
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < out.shown; ++i) {
    rows.push_back(row_json(i + 1, result.rows[i], layout_text(out.request, result.rows[i].candidate)));
    if (const auto& interval = out.intervals[i]) {
      rows.back()["iteration_time_interval_s"] = {interval->low_s, interval->high_s};
      if (!interval->estimated.empty()) rows.back()["estimated"] = interval->estimated;
    }
  }
  const bool use_profile = o.use_profile();
  nlohmann::json j = {{"model", use_profile ? o.model_name : out.request.model.name},
                      {"gpu", use_profile ? nlohmann::json(nullptr) : nlohmann::json(out.request.device.name)},
                      {"profile", use_profile ? nlohmann::json(o.profile_path) : nlohmann::json(nullptr)},
                      {"gpus", o.gpus},
                      {"gpus_per_node", o.cluster.gpus_per_node},
                      {"global_batch", o.global_batch},
                      {"max_mem_bytes", limit_json},
                      {"steady_state", o.steady_state},
                      {"considered", result.considered},
                      {"simulated", result.simulated},
                      {"fitting", result.rows.size()},
                      {"dropped_for_memory", result.dropped_for_memory},
                      {"refused", result.refused},
                      {"pruned", result.pruned},
                      {"folded", result.folded},
                      {"refusals", result.refusals},
                      {"configurations", std::move(rows)}};
  std::cout << printable_json(j.dump(2)) << "\n";
}

void print_plan_csv(const PlanOutput& out) {
  // The columns before tensor_parallel keep their places for the readers written before it.
  std::cout << "rank,schedule,pipeline,data_parallel,chunks,micro_batch_size,num_micro_batches,recompute,zero1,"
               "iteration_time_s,throughput_samples_per_s,tokens_per_s,mfu,bubble_fraction,peak_memory_bytes,"
               "tensor_parallel,sequence_parallel,recompute_granularity,context_parallel,fp8_format,layout,equivalents,"
               "expert_parallel,expert_tensor_parallel,recompute_modules,context_parallel_comm\n";
  for (std::size_t i = 0; i < out.shown; ++i) {
    const auto& r = out.result.rows[i];
    const auto& c = r.candidate;
    std::cout << fmt::format(
        "{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.6g},{:.6g},{},{},{},{},{},{},\"{}\",\"{}\",{},{},\"{}\",{}"
        "\n",
        i + 1, c.schedule, c.parallel.pipeline, c.parallel.data_parallel, c.parallel.chunks,
        c.parallel.micro_batch_size, c.num_micro_batches, c.parallel.recomputation != sim::Recomputation::none ? 1 : 0,
        c.parallel.zero1 ? 1 : 0, r.iteration_time_s, r.throughput_samples_per_s, r.tokens_per_s, r.mfu,
        r.bubble_fraction, r.peak_memory_bytes, c.parallel.tensor_parallel, c.parallel.sequence_parallel ? 1 : 0,
        sim::recomputation_name(c.parallel.recomputation), c.parallel.context_parallel,
        c.parallel.fp8 == sim::Fp8Format::none ? "" : sim::fp8_format_name(c.parallel.fp8), layout_text(out.request, c),
        fmt::join(r.equivalents, "; "), c.parallel.expert_parallel, c.parallel.expert_tp(),
        recomputed_modules(c.parallel), sim::context_parallel_comm_name(c.parallel.context_parallel_comm));
  }
}

void print_plan_table(const PlanOutput& out) {
  const PlanOptions& o = out.options;
  const sim::PlanResult& result = out.result;
  print_table_heading(out);
  // A layout column where the search tries layouts (a given layout is every row's, in the CSV
  // and JSON).
  const auto layout_cell = [&](const sim::LayoutOptions& layout) {
    return o.search_layouts ? fmt::format("{:<16}  ", layout_short(layout)) : std::string();
  };
  // An expert-parallel column for a MoE model (dense models' tables keep their columns).
  const bool moe = !o.use_profile() && out.request.model.is_moe();
  const auto ep_cell = [&](const std::string& text) { return moe ? fmt::format(" {:>3}", text) : std::string(); };
  // The recomputation column widens for the module sets a search tries ("act+ln+mla").
  std::size_t recomp_width = 6;
  for (std::size_t i = 0; i < out.shown; ++i)
    recomp_width = std::max(recomp_width, recomputation_short(result.rows[i].candidate.parallel).size());
  const auto recomp_cell = [&](const std::string& text) { return fmt::format("{:>{}}", text, recomp_width); };
  // The context-parallel column widens for an exchange named beside the size ("4a2a").
  std::size_t cp_width = 2;
  for (std::size_t i = 0; i < out.shown; ++i)
    cp_width = std::max(cp_width, context_parallel_cell(result.rows[i].candidate.parallel).size());
  const auto cp_cell = [&](const std::string& text) { return fmt::format("{:>{}}", text, cp_width); };
  std::cout << fmt::format(
      "{:>4}  {:<17} {:>2} {:>2} {}{} {:>3} {:>4} {:>2} {:>4} {:>5} {} {:>4}  {:>11} {:>10} {:>6} {:>7} {:>11}  "
      "{}{}\n",
      "#", "schedule", "tp", "sp", cp_cell("cp"), ep_cell("ep"), "pp", "dp", "v", "mbs", "m", recomp_cell("recomp"),
      "fp8", "iteration", "samples/s", "MFU", "bubble", "peak mem",
      o.search_layouts ? fmt::format("{:<16}  ", "layout") : std::string(), "same run as");
  for (std::size_t i = 0; i < out.shown; ++i) {
    const auto& r = result.rows[i];
    const auto& c = r.candidate;
    std::string line = fmt::format(
        "{:>4}  {:<17} {:>2} {:>2} {}{} {:>3} {:>4} {:>2} {:>4} {:>5} {} {:>4}  {:>11} {:>10.2f} {:>5.1f}% "
        "{:>6.2f}% {:>11}  {}{}",
        i + 1, c.schedule, c.parallel.tensor_parallel, c.parallel.sequence_parallel ? "sp" : "-",
        cp_cell(context_parallel_cell(c.parallel)), ep_cell(expert_cell(c.parallel)), c.parallel.pipeline,
        c.parallel.data_parallel, c.parallel.chunks, c.parallel.micro_batch_size, c.num_micro_batches,
        recomp_cell(recomputation_short(c.parallel)), precision_short(c.parallel.fp8),
        sim::format_seconds(r.iteration_time_s), r.throughput_samples_per_s, 100 * r.mfu, 100 * r.bubble_fraction,
        sim::format_bytes(r.peak_memory_bytes), layout_cell(c.parallel.layout), fmt::join(r.equivalents, ", "));
    line.erase(line.find_last_not_of(' ') + 1);
    std::cout << line << "\n";
    if (const auto& interval = out.intervals[i])
      std::cout << fmt::format("      interval {} .. {}{}\n", sim::format_seconds(interval->low_s),
                               sim::format_seconds(interval->high_s),
                               interval->estimated.empty() ? "" : " (backward split estimated)");
  }
  if (result.rows.empty()) std::cout << "nothing fits: raise --max-mem, add GPUs, or allow recomputation\n";
  if (recomp_width > 6 || out.request.recompute_module_sets.size() > 1)
    std::cout << "recomp: selective recomputation of " << module_legend() << " (sel: core_attn alone)\n";
  if (o.verbose) {
    for (const std::string& why : result.refusals) std::cout << "refused: " << why << "\n";
  } else if (result.refused > 0) {
    std::cout << sim::refusal_summary(result) << " (--verbose lists why)\n";
  }
}

void write_plan_traces(const PlanOutput& out) {
  const PlanOptions& o = out.options;
  std::filesystem::create_directories(o.trace_dir);
  const std::size_t traces = o.top == 0 ? out.result.rows.size() : out.shown;
  for (std::size_t i = 0; i < traces; ++i) {
    const sim::PlanCandidate& c = out.result.rows[i].candidate;
    const sim::SimResult simulated = sim::simulate_candidate(out.request, c, true);
    const auto path = std::filesystem::path(o.trace_dir) / fmt::format("{:02}_{}.json", i + 1, candidate_label(c));
    traces::write_trace(simulated.trace, path.string());
  }
  if (!o.quiet) std::cerr << fmt::format("wrote {} predicted traces to {}\n", traces, o.trace_dir);
}

}  // namespace pipescope::cli
