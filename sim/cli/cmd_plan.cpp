// `ppsim plan [model+gpu+cluster] [--max-mem BYTES] [--top K] [--format table|csv|json]`:
// searches tensor/pipeline/data-parallel sizes, chunks, micro-batching, schedules, recomputation
// and sequence parallelism for a model on a cluster and ranks what fits by simulated throughput. With no arguments it
// plans gpt-7b on 64 H100 (8 per node) with a global batch of 512. With `--profile FILE` it
// plans with the costs pprun measured (ppsim calibrate) for that model and world size.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cluster_options.hpp"
#include "command.hpp"
#include "megatron_options.hpp"
#include "number_options.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/planner.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "pipescope/sim/units.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

std::vector<int> int_list(const std::string& text, const char* option) {
  std::vector<int> values;
  for (const std::string& item : split_list(text)) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      values.push_back(v);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{}: '{}' is not a positive integer", option, item));
    }
  }
  if (values.empty()) throw UsageError(fmt::format("{}: give at least one value", option));
  return values;
}

// `--recompute`: a list of granularities (none, selective, full), or the older single words
// (off = none, on = full, both = none and full).
std::vector<sim::Recomputation> recomputation_list(const std::string& text) {
  if (text == "both") return {sim::Recomputation::none, sim::Recomputation::full};
  if (text == "on") return {sim::Recomputation::full};
  if (text == "off") return {sim::Recomputation::none};
  std::vector<sim::Recomputation> out;
  for (const std::string& item : split_list(text)) {
    if (item == "none")
      out.push_back(sim::Recomputation::none);
    else if (item == "selective")
      out.push_back(sim::Recomputation::selective);
    else if (item == "full")
      out.push_back(sim::Recomputation::full);
    else
      throw UsageError("--recompute: '" + item + "' (a list of none, selective, full; or both, on, off)");
  }
  if (out.empty()) throw UsageError("--recompute: give at least one of none, selective, full");
  return out;
}

std::vector<bool> sequence_parallel_list(const std::string& text) {
  if (text == "both") return {false, true};
  if (text == "on") return {true};
  if (text == "off") return {false};
  throw UsageError("--sequence-parallel: '" + text + "' (both, on, off)");
}

// Short forms for the table: "-", "sel", "full".
const char* recomputation_short(sim::Recomputation r) {
  switch (r) {
    case sim::Recomputation::none: return "-";
    case sim::Recomputation::selective: return "sel";
    case sim::Recomputation::full: return "full";
  }
  return "?";
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

std::string candidate_label(const sim::PlanCandidate& c) {
  return fmt::format("{}_tp{}{}{}_pp{}_dp{}_v{}_mbs{}_m{}_recompute-{}{}", c.schedule, c.parallel.tensor_parallel,
                     c.parallel.sequence_parallel ? "sp" : "",
                     c.parallel.context_parallel > 1 ? fmt::format("_cp{}", c.parallel.context_parallel) : "",
                     c.parallel.pipeline, c.parallel.data_parallel, c.parallel.chunks, c.parallel.micro_batch_size,
                     c.num_micro_batches, sim::recomputation_name(c.parallel.recomputation),
                     c.parallel.fp8 != sim::Fp8Format::none
                         ? fmt::format("_fp8-{}", sim::fp8_format_name(c.parallel.fp8))
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

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void operator()(std::size_t done, std::size_t total) {
    if (!enabled_ || total == 0) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / total);
    std::cerr << fmt::format("\r[{}{}] {}/{} configurations", std::string(filled, '#'),
                             std::string(width - filled, '.'), done, total)
              << std::flush;
    if (done == total) std::cerr << "\n";
  }

 private:
  bool enabled_;
};

// With --profile: each shown row's interval (prediction_interval.hpp). Whether a row splits its
// backwards needs no schedule built: a schedule of full backwards takes each B whole
// (full_backward_s), so a larger overhead of the estimated split leaves its time as it is. (The
// interval itself cannot tell: the steps' spread widens it whether the split moved it or not.)
std::vector<std::optional<sim::PredictionInterval>> row_intervals(const sim::PlanRequest& request,
                                                                  const sim::PlanResult& result, std::size_t shown) {
  std::vector<std::optional<sim::PredictionInterval>> intervals(shown);
  if (!request.profile) return intervals;
  for (std::size_t i = 0; i < shown; ++i) {
    const sim::PlanRow& row = result.rows[i];
    auto simulate_profile = [&](const sim::Profile& moved) {
      sim::PlanRequest other = request;
      other.profile = moved;
      return sim::simulate_candidate(other, row.candidate, false).summary.iteration_time_s;
    };
    bool uses_split = false;
    if (const auto& e = request.profile->backward_split_estimate) {
      const double more_overhead =
          simulate_profile(sim::with_backward_split(*request.profile, e->input_share, e->overhead + 0.1));
      uses_split = std::fabs(more_overhead - row.iteration_time_s) > 1e-12 * row.iteration_time_s;
    }
    intervals[i] = sim::prediction_interval(*request.profile, uses_split, row.iteration_time_s, simulate_profile);
  }
  return intervals;
}

// Every option of `ppsim plan`, as given (lists as their text); plan_request reads them.
struct PlanOptions {
  std::string model_name = "gpt-7b", max_mem = "0", format = "table", trace_dir, profile_path;
  std::string schedules = "gpipe,1f1b,interleaved-1f1b,zb-h1,zb-h2,zbv", micro_batch_sizes = "1,2,4,8";
  std::string chunk_options = "2,4", recompute = "none,selective,full";
  std::string tensor_parallel_sizes = "1,2,4,8", sequence_parallel = "both", context_parallel_sizes = "1,2,4,8";
  std::string expert_parallel_sizes;         // empty: --expert-parallel alone
  std::string expert_tensor_parallel_sizes;  // empty: --expert-tensor-parallel alone
  ClusterOptions cluster;
  MegatronOptions megatron;
  bool verbose = false;
  int gpus = 64, global_batch = 512, top = 10, max_pipeline = 0, microbatch_group_size = 0;
  bool no_zero1 = false, steady_state = false, quiet = false, search_layouts = false;

  bool use_profile() const { return !profile_path.empty(); }
};

void add_search_options(po::options_description& options, PlanOptions& o) {
  // clang-format off
  options.add_options()
      ("global-batch", po::value(&o.global_batch)->default_value(o.global_batch), "samples per iteration over all replicas (with --profile: the measured run's)")
      ("max-mem", po::value(&o.max_mem)->default_value(o.max_mem), "bytes per GPU (0: the device's memory; with --profile: no limit)")
      ("schedules", po::value(&o.schedules)->default_value(o.schedules), "comma-separated schedules to consider")
      ("micro-batch-sizes", po::value(&o.micro_batch_sizes)->default_value(o.micro_batch_sizes), "comma-separated micro-batch sizes")
      ("chunks", po::value(&o.chunk_options)->default_value(o.chunk_options), "chunk counts for interleaved-1f1b and looped-bfs")
      ("microbatch-group-size-per-vp-stage", po::value(&o.microbatch_group_size),
       "G, interleaved-1f1b's micro-batches per chunk before the next (Megatron's option; a pipeline size P it "
       "does not fit, G outside [P, M] or M % G in 1..P-1, is refused; default: P)")
      ("max-pipeline", po::value(&o.max_pipeline)->default_value(o.max_pipeline), "largest pipeline size (0: the number of layers)")
      ("tensor-parallel-sizes", po::value(&o.tensor_parallel_sizes)->default_value(o.tensor_parallel_sizes),
       "comma-separated tensor-parallel sizes (each within a node, dividing the heads, kv heads and FFN; with --profile: 1)")
      ("sequence-parallel", po::value(&o.sequence_parallel)->default_value(o.sequence_parallel),
       "sequence parallelism where tensor-parallel > 1: both, on, off")
      ("context-parallel-sizes", po::value(&o.context_parallel_sizes)->default_value(o.context_parallel_sizes),
       "comma-separated context-parallel sizes (each splitting the sequence in 2C chunks; with --profile: 1)")
      ("expert-parallel-sizes", po::value(&o.expert_parallel_sizes),
       "comma-separated expert-parallel sizes of a MoE model (each dividing the experts and, with the expert TP "
       "size, tensor x context x data parallel; default: --expert-parallel)")
      ("expert-tensor-parallel-sizes", po::value(&o.expert_tensor_parallel_sizes),
       "comma-separated expert tensor-parallel sizes of a MoE model (each within a node, dividing the experts' "
       "FFN; default: --expert-tensor-parallel, else each row's tensor-parallel size)")
      ("search-layouts", po::bool_switch(&o.search_layouts),
       "also try Megatron's uneven layouts for each pipeline x chunks: the embedding and the loss counted as layers, "
       "and the first and last rank one layer per chunk lighter (default: the even split, or the layout options given)")
      ("recompute", po::value(&o.recompute)->default_value(o.recompute),
       "activation recomputation: comma-separated none, selective, full (or both = none,full; on = full; off = none)")
      ("no-zero1", po::bool_switch(&o.no_zero1), "keep the full optimizer state on every replica (default: ZeRO-1)");
  // clang-format on
}

// The options in the order `ppsim plan --help` lists them.
void add_plan_options(po::options_description& options, PlanOptions& o) {
  // clang-format off
  options.add_options()
      ("model", po::value(&o.model_name)->default_value(o.model_name), fmt::format("{}, or a JSON model file", fmt::join(sim::model_preset_names(), ", ")).c_str())
      ("profile", po::value(&o.profile_path), "plan with costs measured by pprun (pipescope.profile/1, ppsim calibrate) "
                                              "for its model and world size instead of --model/--gpu (default: none)");
  // clang-format on
  o.cluster.add_device_to(options, ClusterHelp::plan);
  // clang-format off
  options.add_options()
      ("gpus", po::value(&o.gpus)->default_value(o.gpus), "GPUs in the cluster (tensor x pipeline x data-parallel; with --profile: the measured run's)");
  // clang-format on
  o.cluster.add_links_to(options, ClusterHelp::plan);
  add_search_options(options, o);
  o.cluster.add_runtime_to(options);
  // clang-format off
  options.add_options()
      ("steady-state", po::bool_switch(&o.steady_state),
       "rank by back-to-back iterations whose optimizer steps do not wait for one another (the Zero Bubble "
       "paper's post-validation; default: one isolated iteration)")
      ("verbose,v", po::bool_switch(&o.verbose), "list every refusal's reason (default: one summary line)")
      ("top", po::value(&o.top)->default_value(o.top), "rows to print and traces to write (0: all rows)")
      ("format", po::value(&o.format)->default_value(o.format), "table, csv or json")
      ("trace-dir", po::value(&o.trace_dir), "write the predicted traces of the top K configurations to DIR (default: none)")
      ("quiet,q", po::bool_switch(&o.quiet), "no progress bar")
      ("help,h", "this text");
  // clang-format on
  o.megatron.add_to(options, false);
}

// --profile: the measured run replaces the model, the device and the cluster, and sets the
// defaults of the sizes it measured.
void take_profile(PlanOptions& o, const po::variables_map& vm, sim::PlanRequest& request) {
  // The profile is one model on one machine: what describes another cannot come with it.
  std::vector<const char*> others = ClusterOptions::names();
  others.insert(others.begin(), "model");
  for (const char* name : {"no-zero1", "search-layouts"}) others.push_back(name);
  for (const char* name : others)
    if (vm.count(name) && !vm[name].defaulted())
      throw UsageError(std::string("--") + name +
                       " cannot be combined with --profile (the profile holds the measured "
                       "costs of one model on one machine)");
  for (const std::string& option : o.megatron.given(vm))
    throw UsageError(option +
                     " cannot be combined with --profile (the profile holds the measured costs of one model "
                     "on one machine)");
  if (vm["context-parallel-sizes"].defaulted()) o.context_parallel_sizes = "1";
  request.profile = sim::read_profile(o.profile_path);
  request.profile_source = o.profile_path;
  const sim::Profile& profile = *request.profile;
  const int world = sim::plan_profile_world_size(profile);
  if (vm["gpus"].defaulted()) o.gpus = world;
  if (vm["micro-batch-sizes"].defaulted()) o.micro_batch_sizes = std::to_string(profile.micro_batch_size);
  if (vm["recompute"].defaulted()) o.recompute = "off";
  if (vm["tensor-parallel-sizes"].defaulted()) o.tensor_parallel_sizes = "1";
  if (vm["global-batch"].defaulted()) {
    const int measured_m = sim::profile_measured_micro_batches(profile);
    if (measured_m < 1)
      throw UsageError("--global-batch: the profile " + o.profile_path +
                       " does not say how many micro-batches it measured: give --global-batch");
    o.global_batch = measured_m * profile.data_parallel * profile.micro_batch_size;
  }
  o.model_name = sim::profile_model_name(profile);
}

// The lists of the search: schedules, sizes, recomputation, sequence and context parallelism.
void take_search_lists(const PlanOptions& o, const po::variables_map& vm, sim::PlanRequest& request) {
  request.schedules = split_list(o.schedules);
  if (request.schedules.empty()) throw UsageError("--schedules: give at least one schedule");
  for (const auto& name : request.schedules)
    if (!ScheduleRegistry::instance().find(name))
      throw UsageError("--schedules: " + ScheduleRegistry::instance().why_unknown(name));
  request.micro_batch_sizes = int_list(o.micro_batch_sizes, "--micro-batch-sizes");
  request.interleave_chunks = int_list(o.chunk_options, "--chunks");
  if (vm.count("microbatch-group-size-per-vp-stage") && o.microbatch_group_size < 1)
    throw UsageError(
        fmt::format("--microbatch-group-size-per-vp-stage must be at least 1, got {}", o.microbatch_group_size));
  request.microbatch_group_size = o.microbatch_group_size;
  request.tensor_parallel_sizes = int_list(o.tensor_parallel_sizes, "--tensor-parallel-sizes");
  request.recomputations = recomputation_list(o.recompute);
  request.sequence_parallel_options = sequence_parallel_list(o.sequence_parallel);
  request.context_parallel_sizes = int_list(o.context_parallel_sizes, "--context-parallel-sizes");
  if (o.use_profile())
    for (int cp : request.context_parallel_sizes)
      if (cp != 1)
        throw UsageError(
            fmt::format("--context-parallel-sizes {}: the profile {} measured stages without context "
                        "parallelism",
                        cp, o.profile_path));
}

// Megatron's options, the layouts and the runtime choices every configuration shares, with the
// combinations no configuration could honour refused here (an error, not a refusal of every row).
void take_shared_choices(const PlanOptions& o, sim::PlanRequest& request) {
  o.megatron.apply(request.options);
  if (!o.expert_parallel_sizes.empty())
    request.expert_parallel_sizes = int_list(o.expert_parallel_sizes, "--expert-parallel-sizes");
  if (!o.expert_tensor_parallel_sizes.empty())
    request.expert_tensor_parallel_sizes = int_list(o.expert_tensor_parallel_sizes, "--expert-tensor-parallel-sizes");
  sim::check_layout_options(request.options.layout);
  if (o.search_layouts && !request.options.layout.is_default())
    throw UsageError("--search-layouts with " + request.options.layout.describe() +
                     ": the layout is given; leave one out");
  request.search_layouts = o.search_layouts;
  if (request.options.overlap_param_gather && o.no_zero1)
    throw UsageError("--overlap-param-gather needs the distributed optimizer (drop --no-zero1)");
  if (request.options.tp_comm_overlap && o.sequence_parallel == "off")
    throw UsageError("--tp-comm-overlap needs sequence parallelism (--sequence-parallel on or both)");
  // --fp8-format adds FP8 to the search beside BF16.
  if (request.options.fp8 != sim::Fp8Format::none) request.precisions = {sim::Fp8Format::none, request.options.fp8};
  if (auto problem = sim::precision_problem(request.device, request.options); problem && !o.use_profile())
    throw UsageError(*problem);
  request.zero1 = !o.no_zero1;
  request.overlap_grad_reduce = o.cluster.overlap_grad_reduce;
  request.async_tensor_parallel_backward = !o.cluster.no_async_tp;
  request.steady_state = o.steady_state;
  if (o.steady_state && o.use_profile())
    throw UsageError("--steady-state with --profile " + o.profile_path +
                     ": a measured runtime synchronises the ranks at its optimizer steps; plan isolated iterations");
  if (o.steady_state && !o.trace_dir.empty())
    throw UsageError("--steady-state with --trace-dir " + o.trace_dir +
                     ": a trace holds one isolated iteration; leave one out");
}

// The request the options describe (with --profile, `o` takes the measured run's defaults).
sim::PlanRequest plan_request(PlanOptions& o, const po::variables_map& vm) {
  if (o.format != "table" && o.format != "csv" && o.format != "json")
    throw UsageError("--format: unknown format '" + o.format + "' (table, csv, json)");
  if (o.top < 0) throw UsageError("--top must be >= 0");
  o.cluster.check_gpus_per_node();
  o.cluster.check_numbers();
  sim::PlanRequest request;
  if (o.use_profile())
    take_profile(o, vm, request);
  else
    request.model = sim::resolve_model(o.model_name);
  request.device = o.cluster.device();
  request.topology = o.cluster.topology(request.device);
  request.num_gpus = o.gpus;
  request.global_batch = o.global_batch;
  request.max_mem_bytes = sim::parse_bytes(o.max_mem, "--max-mem");
  take_search_lists(o, vm, request);
  take_shared_choices(o, request);
  request.max_pipeline = o.max_pipeline;
  request.keep_best = static_cast<std::size_t>(o.top);  // the rows beyond the top K are never shown
  return request;
}

// What a plan found, for one of the three formats.
struct PlanOutput {
  const PlanOptions& options;
  const sim::PlanRequest& request;
  const sim::PlanResult& result;
  std::size_t shown;
  std::vector<std::optional<sim::PredictionInterval>> intervals;
};

void print_json(const PlanOutput& out) {
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

void print_csv(const PlanOutput& out) {
  // The columns before tensor_parallel keep their places for the readers written before it.
  std::cout << "rank,schedule,pipeline,data_parallel,chunks,micro_batch_size,num_micro_batches,recompute,zero1,"
               "iteration_time_s,throughput_samples_per_s,tokens_per_s,mfu,bubble_fraction,peak_memory_bytes,"
               "tensor_parallel,sequence_parallel,recompute_granularity,context_parallel,fp8_format,layout,equivalents,"
               "expert_parallel,expert_tensor_parallel\n";
  for (std::size_t i = 0; i < out.shown; ++i) {
    const auto& r = out.result.rows[i];
    const auto& c = r.candidate;
    std::cout << fmt::format(
        "{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.6g},{:.6g},{},{},{},{},{},{},\"{}\",\"{}\",{},{}\n", i + 1,
        c.schedule, c.parallel.pipeline, c.parallel.data_parallel, c.parallel.chunks, c.parallel.micro_batch_size,
        c.num_micro_batches, c.parallel.recomputation != sim::Recomputation::none ? 1 : 0, c.parallel.zero1 ? 1 : 0,
        r.iteration_time_s, r.throughput_samples_per_s, r.tokens_per_s, r.mfu, r.bubble_fraction, r.peak_memory_bytes,
        c.parallel.tensor_parallel, c.parallel.sequence_parallel ? 1 : 0,
        sim::recomputation_name(c.parallel.recomputation), c.parallel.context_parallel,
        c.parallel.fp8 == sim::Fp8Format::none ? "" : sim::fp8_format_name(c.parallel.fp8), layout_text(out.request, c),
        fmt::join(r.equivalents, "; "), c.parallel.expert_parallel, c.parallel.expert_tp());
  }
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
    std::cout << fmt::format("{} on {} x {} ({} per node), global batch {}, memory limit {} per GPU{}\n",
                             printable(out.request.model.name), o.gpus, out.request.device.name,
                             o.cluster.gpus_per_node, o.global_batch, limit,
                             o.steady_state ? "; steady state of back-to-back iterations" : "");
  std::cout << fmt::format("{} configurations: {} simulated, {} fit, {} dropped for memory, {} refused",
                           result.considered, result.simulated, result.rows.size() + result.folded,
                           result.dropped_for_memory, result.refused);
  if (o.top > 0)
    std::cout << fmt::format(", {} pruned (their lower bound cannot reach the top {})", result.pruned, o.top);
  if (result.folded > 0) std::cout << fmt::format("; {} rows folded into the same run", result.folded);
  std::cout << "\n\n";
}

void print_table(const PlanOutput& out) {
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
  std::cout << fmt::format(
      "{:>4}  {:<17} {:>2} {:>2} {:>2}{} {:>3} {:>4} {:>2} {:>4} {:>5} {:>6} {:>4}  {:>11} {:>10} {:>6} {:>7} {:>11}  "
      "{}{}\n",
      "#", "schedule", "tp", "sp", "cp", ep_cell("ep"), "pp", "dp", "v", "mbs", "m", "recomp", "fp8", "iteration",
      "samples/s", "MFU", "bubble", "peak mem", o.search_layouts ? fmt::format("{:<16}  ", "layout") : std::string(),
      "same run as");
  for (std::size_t i = 0; i < out.shown; ++i) {
    const auto& r = result.rows[i];
    const auto& c = r.candidate;
    std::string line = fmt::format(
        "{:>4}  {:<17} {:>2} {:>2} {:>2}{} {:>3} {:>4} {:>2} {:>4} {:>5} {:>6} {:>4}  {:>11} {:>10.2f} {:>5.1f}% "
        "{:>6.2f}% {:>11}  {}{}",
        i + 1, c.schedule, c.parallel.tensor_parallel, c.parallel.sequence_parallel ? "sp" : "-",
        c.parallel.context_parallel, ep_cell(expert_cell(c.parallel)), c.parallel.pipeline, c.parallel.data_parallel,
        c.parallel.chunks, c.parallel.micro_batch_size, c.num_micro_batches,
        recomputation_short(c.parallel.recomputation), precision_short(c.parallel.fp8),
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
  if (o.verbose) {
    for (const std::string& why : result.refusals) std::cout << "refused: " << why << "\n";
  } else if (result.refused > 0) {
    std::cout << sim::refusal_summary(result) << " (--verbose lists why)\n";
  }
}

// --trace-dir: the predicted trace of each row shown (of every row with --top 0).
void write_traces(const PlanOutput& out) {
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

int run_plan(const std::vector<std::string>& args) {
  PlanOptions o;
  po::options_description options("ppsim plan [options]");
  add_plan_options(options, o);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << options;
    return 0;
  }
  po::notify(vm);
  const sim::PlanRequest request = plan_request(o, vm);

  ProgressBar bar(progress_enabled(o.quiet));
  const sim::PlanResult result = sim::plan(request, std::ref(bar));
  const std::size_t shown = o.top == 0 ? result.rows.size() : std::min<std::size_t>(o.top, result.rows.size());
  const PlanOutput out{o, request, result, shown, row_intervals(request, result, shown)};
  if (o.format == "json")
    print_json(out);
  else if (o.format == "csv")
    print_csv(out);
  else
    print_table(out);
  if (!o.trace_dir.empty()) write_traces(out);
  return 0;
}

const CommandRegistrar plan_registrar{
    {"plan", "rank tensor/pipeline/data-parallel layouts, schedules and micro-batching of a model on a cluster",
     run_plan}};

}  // namespace
}  // namespace pipescope::cli
