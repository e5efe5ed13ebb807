// `ppsim plan`'s options: declared with their help, read into a PlanRequest and checked.
#include "plan_options.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "number_options.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/units.hpp"

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

// `--cp-comm-types`: Megatron's --cp-comm-type names.
std::vector<sim::ContextParallelComm> context_parallel_comm_list(const std::string& text) {
  std::vector<sim::ContextParallelComm> out;
  for (const std::string& item : split_list(text)) {
    const auto comm = sim::context_parallel_comm_named(item);
    if (!comm) throw UsageError("--cp-comm-types: '" + item + "' (p2p, all_gather or a2a)");
    if (std::find(out.begin(), out.end(), *comm) == out.end()) out.push_back(*comm);
  }
  if (out.empty()) throw UsageError("--cp-comm-types: give at least one of p2p, all_gather, a2a");
  return out;
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
      ("cp-comm-types", po::value(&o.cp_comm_types),
       "comma-separated context-parallel exchanges the rows with C > 1 try (p2p, all_gather, a2a; each refused "
       "where it cannot run the model; default: --cp-comm-type alone, a2a for a model with windows or chunks)")
      ("expert-parallel-sizes", po::value(&o.expert_parallel_sizes),
       "comma-separated expert-parallel sizes of a MoE model (each dividing the experts and, with the expert TP "
       "size, tensor x context x data parallel; default: --expert-parallel, else every power of two that divides "
       "the experts, up to the GPUs)")
      ("expert-tensor-parallel-sizes", po::value(&o.expert_tensor_parallel_sizes),
       "comma-separated expert tensor-parallel sizes of a MoE model (each within a node, dividing the experts' "
       "FFN; default: --expert-tensor-parallel, else each row's tensor-parallel size)")
      ("search-layouts", po::bool_switch(&o.search_layouts),
       "also try Megatron's uneven layouts for each pipeline x chunks: the embedding and the loss counted as layers, "
       "and the first and last rank one layer per chunk lighter (default: the even split, or the layout options given)")
      ("recompute", po::value(&o.recompute)->default_value(o.recompute),
       "activation recomputation: comma-separated none, selective, full (or both = none,full; on = full; off = none)")
      ("recompute-modules", po::value(&o.recompute_modules)->composing(),
       "what the selective rows recompute, Megatron's names, comma-separated (core_attn, moe_act, layernorm, "
       "mla_up_proj, mlp, moe, shared_experts; default core_attn; needs selective in --recompute); give it again "
       "for each further set to try, or 'auto' for the model's sets, lightest first: core_attn, then moe_act, "
       "layernorm, mla_up_proj, shared_experts, mlp, moe added one by one where the model has them")
      ("no-zero1", po::bool_switch(&o.no_zero1), "keep the full optimizer state on every replica (default: ZeRO-1)");
  // clang-format on
}

// --profile: the measured run replaces the model, the device and the cluster, and sets the
// defaults of the sizes it measured.
void take_profile(PlanOptions& o, const po::variables_map& vm, sim::PlanRequest& request) {
  // The profile is one model on one machine: what describes another cannot come with it.
  std::vector<const char*> others = ClusterOptions::names();
  others.insert(others.begin(), "model");
  for (const char* name : {"no-zero1", "search-layouts", "cp-comm-types"}) others.push_back(name);
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

// --recompute-modules, once per set to try (or "auto": the model's ladder), each refused here if
// the model lacks a module it names (an error, not a refusal of every selective row).
void take_recompute_modules(const PlanOptions& o, sim::PlanRequest& request) {
  const std::string given = fmt::format("{}", fmt::join(o.recompute_modules, " "));
  if (std::find(request.recomputations.begin(), request.recomputations.end(), sim::Recomputation::selective) ==
      request.recomputations.end())
    throw UsageError("--recompute-modules " + given + ": the selective rows' modules, but --recompute " + o.recompute +
                     " searches none");
  std::vector<std::uint8_t> sets;
  for (const std::string& text : o.recompute_modules) {
    if (text == "auto") {
      if (o.use_profile())
        throw UsageError("--recompute-modules auto: the profile " + o.profile_path +
                         " has no model to list modules of");
      for (std::uint8_t modules : sim::recompute_module_ladder(request.model)) sets.push_back(modules);
      continue;
    }
    sets.push_back(sim::parse_recompute_modules(text));
    sim::ParallelConfig selective;
    selective.recomputation = sim::Recomputation::selective;
    selective.recompute_modules = sets.back();
    if (!o.use_profile())
      if (auto problem = sim::recompute_modules_problem(request.model, selective)) throw UsageError(*problem);
  }
  std::vector<std::uint8_t> distinct;
  for (std::uint8_t modules : sets)
    if (std::find(distinct.begin(), distinct.end(), modules) == distinct.end()) distinct.push_back(modules);
  request.options.recompute_modules = distinct.front();
  if (distinct.size() > 1) request.recompute_module_sets = std::move(distinct);
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
  if (!o.recompute_modules.empty()) take_recompute_modules(o, request);
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

// A MoE model planned without an expert-parallel size: the sizes Megatron's recipes use, powers of
// two dividing the experts (Mixtral's 8: 1 to 8; DeepSeek-V3's 256: up to the GPUs). Where EP does
// not also divide a row's T x C x d, that row is refused with its reason, as for sizes given.
std::vector<int> default_expert_parallel_sizes(const sim::PlanRequest& request) {
  if (request.profile || !request.model.is_moe()) return {};
  std::vector<int> sizes;
  for (int ep = 1; ep <= request.num_gpus && request.model.num_experts % ep == 0; ep *= 2) sizes.push_back(ep);
  return sizes;
}

// Megatron's options, the layouts and the runtime choices every configuration shares, with the
// combinations no configuration could honour refused here (an error, not a refusal of every row).
void take_shared_choices(const PlanOptions& o, sim::PlanRequest& request) {
  o.megatron.apply(request.options);
  if (!o.expert_parallel_sizes.empty())
    request.expert_parallel_sizes = int_list(o.expert_parallel_sizes, "--expert-parallel-sizes");
  else if (!o.megatron.expert_parallel && !o.megatron.expert_model_parallel_size)
    request.expert_parallel_sizes = default_expert_parallel_sizes(request);
  if (!o.expert_tensor_parallel_sizes.empty())
    request.expert_tensor_parallel_sizes = int_list(o.expert_tensor_parallel_sizes, "--expert-tensor-parallel-sizes");
  sim::check_layout_options(request.options.layout);
  if (o.search_layouts && !request.options.layout.is_default())
    throw UsageError("--search-layouts with " + request.options.layout.describe() +
                     ": the layout is given; leave one out");
  request.search_layouts = o.search_layouts;
  if (request.options.overlap_param_gather && o.no_zero1)
    throw UsageError("--overlap-param-gather needs the distributed optimizer (drop --no-zero1)");
  if (request.options.overlap_param_gather_with_optimizer_step && !request.options.overlap_param_gather)
    throw UsageError("--overlap-param-gather-with-optimizer-step needs --overlap-param-gather, as in Megatron");
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

}  // namespace

void add_plan_options(po::options_description& options, PlanOptions& o) {
  // clang-format off
  options.add_options()
      ("model", po::value(&o.model_name)->default_value(o.model_name), fmt::format("{}, a JSON model file, or a Hugging Face config.json (with --seq-length)", fmt::join(sim::model_preset_names(), ", ")).c_str())
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
    request.model = sim::resolve_model(o.model_name, o.megatron.seq_length);
  request.device = o.cluster.device();
  request.topology = o.cluster.topology(request.device);
  request.num_gpus = o.gpus;
  request.global_batch = o.global_batch;
  request.max_mem_bytes = sim::parse_bytes(o.max_mem, "--max-mem");
  take_search_lists(o, vm, request);
  take_shared_choices(o, request);
  // A model whose layers attend within windows or chunks runs context parallelism only with the
  // all-to-all exchange, as Transformer Engine does: its rows take it unless --cp-comm-type(s) say.
  if (!o.cp_comm_types.empty()) {
    if (!vm["cp-comm-type"].defaulted())
      throw UsageError("--cp-comm-types with --cp-comm-type " + o.megatron.cp_comm_type + ": give one");
    request.context_parallel_comms = context_parallel_comm_list(o.cp_comm_types);
  } else if (!o.use_profile() && vm["cp-comm-type"].defaulted() && request.model.has_limited_attention()) {
    request.options.context_parallel_comm = sim::ContextParallelComm::a2a;
  }
  request.max_pipeline = o.max_pipeline;
  request.keep_best = static_cast<std::size_t>(o.top);  // the rows beyond the top K are never shown
  return request;
}

}  // namespace pipescope::cli
