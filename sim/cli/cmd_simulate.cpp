// `ppsim simulate --schedule NAME --stages P --micro-batches M [costs | model+gpu+topology |
// --profile FILE] [--json] [--trace FILE]`: predicts iteration time, bubbles and peak memory
// (SPEC.md section 6). Also registers zb-auto at start-up, so every command that builds
// schedules knows it.
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cluster_options.hpp"
#include "command.hpp"
#include "megatron_options.hpp"
#include "megatron_size_names.hpp"
#include "number_options.hpp"
#include "schedule_options.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/size_limits.hpp"
#include "pipescope/sim/calibration.hpp"
#include "pipescope/sim/model.hpp"
#include "pipescope/sim/prediction_interval.hpp"
#include "pipescope/sim/profile.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/sim/steady_state.hpp"
#include "pipescope/sim/units.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "pipescope/traces/trace_io.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

// zb-auto needs the simulator's costs, so it joins the registry here, before any command runs.
const bool zb_auto_registered = (sim::register_sim_schedules(), true);

struct CostSource {
  std::string description;
  std::optional<sim::Profile> profile;  // --profile: costs are fitted to the schedule's stages
  sim::CostModel costs;
  sim::Topology topology;
  std::int64_t memory_limit_bytes = 0;  // 0: none
  // With --model: the model's parameters, and those a token meets (MoE: top_k experts).
  std::optional<std::int64_t> parameters, active_parameters;
};

struct SimulateOptions {
  std::string schedule = "1f1b";
  ScheduleParams params;
  double f_cost = 1, b_cost = 1, w_cost = 1, c_cost = 0;
  std::string f_mem = "2", b_mem = "-1", w_mem = "-1", static_mem = "0", max_mem = "0";
  std::string model, profile, trace;
  int data_parallel = 1, micro_batch_size = 1, tensor_parallel = 1, context_parallel = 1, max_mem_micro_batches = 0;
  bool recompute = false, sequence_parallel = false, no_link_sharing = false, steady_state = false, json = false,
       quiet = false, overlap_moe_comm = false, delay_wgrad_compute = false;
  ClusterOptions cluster;
  MegatronOptions megatron;
  std::string recompute_granularity;           // empty: --recompute decides (full or none)
  std::vector<std::string> recompute_modules;  // Megatron's --recompute-modules; empty: core_attn
};

void add_options(po::options_description& o, SimulateOptions& s) {
  po::options_description schedule("schedule");
  // clang-format off
  schedule.add_options()
      ("schedule", po::value(&s.schedule)->default_value(s.schedule), "schedule NAME or file:PATH (see ppsim schedule --help)")
      ("stages", po::value(&s.params.num_ranks)->default_value(s.params.num_ranks), "P, pipeline ranks")
      ("micro-batches", po::value(&s.params.num_micro_batches)->default_value(s.params.num_micro_batches), "M, micro-batches per iteration")
      ("chunks", po::value(&s.params.chunks)->default_value(s.params.chunks), "V, stages per rank (P*V stages)");
  // clang-format on
  add_microbatch_group_size_option(schedule, s.params);
  po::options_description costs("explicit costs (uniform stages; seconds and bytes per micro-batch per stage)");
  // clang-format off
  costs.add_options()
      ("f-cost", po::value(&s.f_cost)->default_value(s.f_cost), "forward time F")
      ("b-cost", po::value(&s.b_cost)->default_value(s.b_cost), "backward-for-input time B (a full backward is B + W)")
      ("w-cost", po::value(&s.w_cost)->default_value(s.w_cost), "backward-for-weights time W")
      ("c-cost", po::value(&s.c_cost)->default_value(s.c_cost), "one stage-to-stage transfer C (0: free)")
      ("f-mem", po::value(&s.f_mem)->default_value(s.f_mem), "bytes F allocates (f + b + w = 0; units like 2GB allowed)")
      ("b-mem", po::value(&s.b_mem)->default_value(s.b_mem), "bytes B allocates (negative: frees)")
      ("w-mem", po::value(&s.w_mem)->default_value(s.w_mem), "bytes W allocates (negative: frees)")
      ("static-mem", po::value(&s.static_mem)->default_value(s.static_mem), "bytes each stage holds throughout (weights, optimizer)")
      ("max-mem", po::value(&s.max_mem)->default_value(s.max_mem),
       "bytes per rank: zb-auto's limit (0: ZB-H2's budget, 2p-1 micro-batches of activations); "
       "other schedules are checked against it (0: the device's memory with --model, else none)")
      ("max-mem-micro-batches", po::value(&s.max_mem_micro_batches),
       "N: zb-auto's limit per rank in micro-batches: its static memory plus N times the largest activations one "
       "micro-batch leaves on a rank (the Zero Bubble paper's ZB-1p is N = P, ZB-2p N = 2P; default: none)");
  // clang-format on
  po::options_description model("costs from a model, a device and a topology (first principles)");
  // clang-format off
  model.add_options()
      ("model", po::value(&s.model),
       fmt::format("{}, a JSON model file, or a Hugging Face config.json (with --seq-length) (default: none, "
                   "explicit costs)",
                   fmt::join(sim::model_preset_names(), ", ")).c_str());
  // clang-format on
  s.cluster.add_device_to(model, ClusterHelp::simulate);
  // clang-format off
  model.add_options()
      ("tensor-parallel", po::value(&s.tensor_parallel)->default_value(s.tensor_parallel),
       "T, Megatron tensor parallelism: GPUs of one node per pipeline stage")
      ("sequence-parallel", po::bool_switch(&s.sequence_parallel), "Megatron sequence parallelism, with T > 1 (default off)")
      ("context-parallel", po::value(&s.context_parallel)->default_value(s.context_parallel),
       "C, Megatron context parallelism (--context-parallel-size): each sequence split over C GPUs with causal "
       "load balancing; its group sits inside a node before the data-parallel one (GPUs = P x T x C x DP)")
      ("recompute-granularity", po::value(&s.recompute_granularity),
       "full or selective (the attention core, or --recompute-modules) activation recomputation, with --model "
       "(default: none)")
      ("recompute-modules", po::value(&s.recompute_modules)->multitoken(),
       "what selective recomputation runs again, Megatron's names (spaces or commas): core_attn (the default), "
       "moe_act, layernorm, mla_up_proj, mlp, moe (its all-to-all too), shared_experts; implies "
       "--recompute-granularity selective")
      ("data-parallel", po::value(&s.data_parallel)->default_value(s.data_parallel),
       "data-parallel replicas (gradients reduced over data x context parallelism)")
      ("micro-batch-size", po::value(&s.micro_batch_size)->default_value(s.micro_batch_size), "samples per micro-batch")
      ("recompute", po::bool_switch(&s.recompute),
       "full activation recomputation, with --model or with the --profile of a run without it (default off; "
       "--recompute-granularity full)")
      ("overlap-moe-expert-parallel-comm", po::bool_switch(&s.overlap_moe_comm),
       "interleaved-1f1b runs each steady-state forward with the next backward as one step whose "
       "micro-batches' expert all-to-all hides behind each other's compute, as Megatron's option does "
       "(dualpipev overlaps its F&B steps without it; default off)")
      ("delay-wgrad-compute", po::bool_switch(&s.delay_wgrad_compute),
       "in an overlapped F&B step the backward's dispatch waits only for the experts' data gradients, their weight "
       "gradients computed beside it, as Megatron's option does (with --overlap-moe-expert-parallel-comm or "
       "dualpipev; default off)");
  // clang-format on
  s.cluster.add_runtime_to(model);
  s.cluster.add_links_to(model, ClusterHelp::simulate);
  // clang-format off
  model.add_options()
      ("no-link-sharing", po::bool_switch(&s.no_link_sharing), "transfers do not share link bandwidth (default: they do)");
  // clang-format on
  po::options_description measured("measured costs");
  // clang-format off
  measured.add_options()("profile", po::value(&s.profile), "costs measured by pprun (pipescope.profile/1 JSON; default: none)");
  // clang-format on
  po::options_description output("output");
  // clang-format off
  output.add_options()
      ("json", po::bool_switch(&s.json), "print the SPEC.md section 6 JSON object instead of a table")
      ("steady-state", po::bool_switch(&s.steady_state),
       "predict back-to-back iterations whose optimizer steps do not wait for one another (the Zero Bubble "
       "paper's post-validation: a warm-up beside the previous drain); default: one isolated iteration")
      ("trace", po::value(&s.trace), "write the predicted trace (Chrome trace JSON; .gz compresses) to FILE")
      ("quiet,q", po::bool_switch(&s.quiet), "no progress output")
      ("help,h", "this text");
  // clang-format on
  o.add(schedule).add(costs).add(model);
  s.megatron.add_to(o, true);
  add_megatron_size_names(o);
  add_megatron_model_names(o);
  o.add(measured).add(output);
}

bool given(const po::variables_map& vm, const char* name) { return vm.count(name) && !vm[name].defaulted(); }

void check_numbers(const SimulateOptions& s) {
  require_finite_at_least(s.f_cost, "--f-cost", 0);
  require_finite_at_least(s.b_cost, "--b-cost", 0);
  require_finite_at_least(s.w_cost, "--w-cost", 0);
  require_finite_at_least(s.c_cost, "--c-cost", 0);
  s.cluster.check_numbers();
}

void check_zb_auto_options(const SimulateOptions& s, const po::variables_map& vm) {
  if (!given(vm, "max-mem-micro-batches")) return;
  const ScheduleTraits* traits = sim::schedule_traits(s.schedule);
  if (!traits || !traits->memory_limited)
    throw UsageError("--max-mem-micro-batches is zb-auto's limit: not with --schedule " + s.schedule);
  if (s.max_mem_micro_batches < 1)
    throw UsageError(fmt::format("--max-mem-micro-batches must be at least 1, got {}", s.max_mem_micro_batches));
}

// The options the costs came from, for a message about all of them: "--f-cost 1e+308 --b-cost 1e+308".
std::string cost_options_text(const SimulateOptions& s, const po::variables_map& vm) {
  if (!s.profile.empty()) return "--profile " + s.profile;
  if (!s.model.empty()) return "--model " + s.model;
  std::string text;
  const std::pair<const char*, double> costs[] = {
      {"f-cost", s.f_cost}, {"b-cost", s.b_cost}, {"w-cost", s.w_cost}, {"c-cost", s.c_cost}};
  for (const auto& [name, value] : costs)
    if (given(vm, name)) text += fmt::format("{}--{} {:g}", text.empty() ? "" : " ", name, value);
  return text.empty() ? std::string("the costs") : text;
}

// --recompute alone keeps meaning full recomputation; --recompute-granularity names which.
sim::Recomputation recomputation_of(const SimulateOptions& s) {
  if (!s.recompute_modules.empty()) {
    if (s.recompute || (!s.recompute_granularity.empty() && s.recompute_granularity != "selective"))
      throw UsageError(
          "--recompute-modules: selective recomputation's modules, not with --recompute or "
          "--recompute-granularity full");
    return sim::Recomputation::selective;
  }
  if (s.recompute_granularity.empty()) return s.recompute ? sim::Recomputation::full : sim::Recomputation::none;
  if (s.recompute_granularity == "full") return sim::Recomputation::full;
  if (s.recompute_granularity == "selective") {
    if (s.recompute)
      throw UsageError("--recompute means full recomputation: give --recompute-granularity selective alone");
    return sim::Recomputation::selective;
  }
  throw UsageError("--recompute-granularity: '" + s.recompute_granularity + "' is neither full nor selective");
}

// Tensor and sequence parallelism and selective recomputation reshape a model's layers, and an
// overlapped gradient reduction follows them layer by layer: only costs derived from a model
// can follow them.
void check_model_only_options(const SimulateOptions& s, const po::variables_map& vm) {
  if (!s.model.empty()) return;
  const std::string source = s.profile.empty() ? "explicit costs" : "--profile (it measured its own layout)";
  if (given(vm, "tensor-parallel")) throw UsageError("--tensor-parallel needs --model: not with " + source);
  if (given(vm, "context-parallel")) throw UsageError("--context-parallel needs --model: not with " + source);
  if (vm.count("node-pace-spread")) throw UsageError("--node-pace-spread needs --model: not with " + source);
  for (const std::string& option : s.megatron.given(vm)) {
    // A MoE profile predicts other expert-parallel sizes (profile_expert_parallel).
    if (!s.profile.empty() && (option == "--expert-parallel" || option == "--expert-model-parallel-size")) continue;
    throw UsageError(option + " needs --model: not with " + source);
  }

  if (s.sequence_parallel) throw UsageError("--sequence-parallel needs --model: not with " + source);
  if (recomputation_of(s) == sim::Recomputation::selective)
    throw UsageError(
        std::string(s.recompute_modules.empty() ? "--recompute-granularity selective" : "--recompute-modules") +
        " needs --model: not with " + source);
  if (s.cluster.overlap_grad_reduce) throw UsageError("--overlap-grad-reduce needs --model: not with " + source);
  if (s.cluster.no_async_tp)
    throw UsageError("--no-async-tensor-model-parallel-allreduce needs --model: not with " + source);
  if (s.overlap_moe_comm) throw UsageError("--overlap-moe-expert-parallel-comm needs --model: not with " + source);
  if (s.delay_wgrad_compute) throw UsageError("--delay-wgrad-compute needs --model: not with " + source);
}

// --expert-parallel with --profile: the expert-parallel size its all-to-all is predicted at (0:
// the measured one), checked against the profile.
int profile_expert_parallel(const SimulateOptions& s, const sim::Profile& profile) {
  const auto& given = s.megatron.expert_parallel ? s.megatron.expert_parallel : s.megatron.expert_model_parallel_size;
  if (s.megatron.expert_parallel && s.megatron.expert_model_parallel_size &&
      *s.megatron.expert_parallel != *s.megatron.expert_model_parallel_size)
    throw UsageError(fmt::format("--expert-parallel {} and --expert-model-parallel-size {} disagree",
                                 *s.megatron.expert_parallel, *s.megatron.expert_model_parallel_size));
  if (!given) return 0;
  sim::check_expert_parallel(profile, *given, s.profile);
  return *given;
}

// Megatron overlaps the expert all-to-all of its interleaved schedule's steady-state pairs (it
// requires a virtual pipeline for it); a dense model has none to overlap. Plain 1F1B's pairs
// would wait a round trip down the pipeline for the backward's input before each forward.
void check_moe_overlap_option(const SimulateOptions& s, const sim::ModelSpec& model) {
  // Megatron delays the weight gradients inside its combined step; DualPipeV's pairs are the
  // other overlapped steps. Elsewhere there is no dispatch for them to run beside.
  if (s.delay_wgrad_compute && !model.is_moe())
    throw UsageError("--delay-wgrad-compute: " + model.name + " has no experts (a dense model)");
  if (s.delay_wgrad_compute && !s.overlap_moe_comm && s.schedule != "dualpipev")
    throw UsageError(
        "--delay-wgrad-compute: for the overlapped F&B steps of --overlap-moe-expert-parallel-comm or dualpipev, "
        "not --schedule " +
        s.schedule + " without them");
  if (s.megatron.defer_embedding_wgrad && model.is_moe() && (s.overlap_moe_comm || s.schedule == "dualpipev"))
    throw UsageError(
        "--defer-embedding-wgrad-compute is not modelled with a mixture of experts' overlapped F&B steps "
        "(--overlap-moe-expert-parallel-comm, dualpipev)");
  if (!s.overlap_moe_comm) return;
  if (!model.is_moe())
    throw UsageError("--overlap-moe-expert-parallel-comm: " + model.name + " has no experts (a dense model)");
  if (s.schedule != "interleaved-1f1b")
    throw UsageError(
        "--overlap-moe-expert-parallel-comm: for interleaved-1f1b (Megatron requires a virtual pipeline for "
        "it), not --schedule " +
        s.schedule + " (dualpipev overlaps its F&B steps without it)");
}

// Megatron splits the optimizer per chunk for it only under its interleaved schedule, where the
// rank's chunks are stages r, r + P, ...; the V-shaped schedules place their second chunk otherwise.
// "2", or with an exchange other than the ring "2 (a2a)", "16 (a2a+p2p, 8 x 2)".
std::string context_parallel_text(const sim::ParallelConfig& parallel) {
  std::string cp = std::to_string(parallel.context_parallel);
  const sim::ContextParallelComm comm = parallel.context_parallel_comm;
  if (comm == sim::ContextParallelComm::p2p) return cp;
  if (comm == sim::ContextParallelComm::a2a_p2p)
    return fmt::format("{} (a2a+p2p, {} x {})", cp, parallel.context_parallel_all_to_all(),
                       parallel.context_parallel_ring());
  return fmt::format("{} ({})", cp, sim::context_parallel_comm_name(comm));
}

void check_gather_with_step_option(const SimulateOptions& s) {
  if (s.megatron.overlap_param_gather_with_optimizer_step && s.schedule.rfind("interleaved-1f1b", 0) != 0)
    throw UsageError(
        "--overlap-param-gather-with-optimizer-step: for interleaved-1f1b (Megatron supports it only with a "
        "virtual pipeline), not --schedule " +
        s.schedule);
}

// `chunks`: the stages per rank the costs are derived for (the schedule's, which a generator
// may choose itself when --chunks is not given).
CostSource cost_source(const SimulateOptions& s, const po::variables_map& vm, int chunks) {
  static const char* const explicit_options[] = {"f-cost", "b-cost", "w-cost", "c-cost",
                                                 "f-mem",  "b-mem",  "w-mem",  "static-mem"};
  const bool use_model = !s.model.empty();
  const bool use_profile = !s.profile.empty();
  if (use_model && use_profile) throw UsageError("--model and --profile are two cost sources: give one");
  if (use_model || use_profile)
    for (const char* name : explicit_options)
      if (given(vm, name))
        throw UsageError(std::string("--") + name + " cannot be combined with " +
                         (use_model ? "--model" : "--profile"));
  const std::int64_t max_mem = sim::parse_bytes(s.max_mem, "--max-mem");
  CostSource source;
  if (use_profile) {
    const sim::Profile profile = sim::read_profile(s.profile);
    const int expert_parallel = profile_expert_parallel(s, profile);
    source.description = "profile " + s.profile;
    if (profile.all_to_all)
      source.description +=
          fmt::format(", ep {}", expert_parallel > 0 ? expert_parallel : profile.all_to_all->expert_parallel);
    source.costs = sim::cost_model_from_profile(profile, expert_parallel);
    source.topology = sim::topology_from_profile(profile);
    source.profile = profile;
    source.memory_limit_bytes = max_mem;
    return source;
  }
  if (use_model) {
    const sim::ModelSpec model = sim::resolve_model(s.model, s.megatron.seq_length);
    check_moe_overlap_option(s, model);
    check_gather_with_step_option(s);
    const sim::DeviceSpec device = s.cluster.device();
    const sim::Topology topology = s.cluster.topology(device);
    sim::ParallelConfig parallel;
    parallel.pipeline = s.params.num_ranks;
    parallel.chunks = chunks;
    parallel.data_parallel = s.data_parallel;
    parallel.micro_batch_size = s.micro_batch_size;
    parallel.tensor_parallel = s.tensor_parallel;
    parallel.context_parallel = s.context_parallel;
    parallel.sequence_parallel = s.sequence_parallel;
    parallel.recomputation = recomputation_of(s);
    if (!s.recompute_modules.empty()) {
      std::string names;
      for (const std::string& name : s.recompute_modules) names += name + ",";
      parallel.recompute_modules = sim::parse_recompute_modules(names);
    }
    parallel.overlap_grad_reduce = s.cluster.overlap_grad_reduce;
    parallel.async_tensor_parallel_backward = !s.cluster.no_async_tp;
    s.megatron.apply(parallel);
    source.description = fmt::format(
        "{} on {} x {} ({} per node; tp {}{}{}{}, recomputation {}{})", model.name, parallel.gpus(), device.name,
        s.cluster.gpus_per_node, s.tensor_parallel, s.sequence_parallel ? " with sp" : "",
        s.context_parallel > 1 ? ", cp " + context_parallel_text(parallel) : "",
        model.is_moe() ? fmt::format(", ep {} etp {}", parallel.expert_parallel, parallel.expert_tp()) : "",
        parallel.recomputation == sim::Recomputation::selective &&
                parallel.recompute_modules != sim::kRecomputeCoreAttention
            ? fmt::format("selective ({})", sim::recompute_modules_text(parallel.recompute_modules))
            : std::string(sim::recomputation_name(parallel.recomputation)),
        parallel.fp8 != sim::Fp8Format::none ? fmt::format(", fp8 {}", sim::fp8_format_name(parallel.fp8)) : "");
    source.costs = sim::derive_costs(model, device, topology, parallel);
    source.costs.overlap_moe_all_to_all = s.overlap_moe_comm;
    source.costs.delay_wgrad_compute = s.delay_wgrad_compute;
    source.topology = sim::with_parallel_layout(topology, parallel);
    source.memory_limit_bytes = max_mem > 0 ? max_mem : device.memory_bytes;
    source.parameters = model.total_parameters();
    source.active_parameters = model.active_parameters();
    return source;
  }
  const std::int64_t f_mem = sim::parse_bytes(s.f_mem, "--f-mem", true);
  const std::int64_t b_mem = sim::parse_bytes(s.b_mem, "--b-mem", true);
  const std::int64_t w_mem = sim::parse_bytes(s.w_mem, "--w-mem", true);
  // Memory a forward keeps can only be 0 or more, and what W frees (what B kept for it) 0 or
  // less: other signs make a rank hold less than nothing, shown as peaks of 0 B.
  if (f_mem < 0)
    throw UsageError(fmt::format("--f-mem {}: F keeps its activations (allocates): give 0 or more", s.f_mem));
  if (w_mem > 0) throw UsageError(fmt::format("--w-mem {}: W frees what B kept for it: give 0 or less", s.w_mem));
  if (f_mem + b_mem + w_mem != 0)
    throw UsageError(fmt::format("--f-mem + --b-mem + --w-mem must be 0 (got {} + {} + {})", f_mem, b_mem, w_mem));
  source.description = "explicit";
  source.costs = sim::CostModel::uniform(s.f_cost, s.b_cost, s.w_cost, s.c_cost, f_mem, b_mem, w_mem);
  source.costs.stages[0].static_bytes = sim::parse_bytes(s.static_mem, "--static-mem");
  source.costs.check(1);
  source.memory_limit_bytes = max_mem;
  return source;
}

void print_table(const sim::Summary& summary, const sim::AllToAllTotals& all_to_all, const CostSource& source,
                 const std::optional<sim::PredictionInterval>& interval) {
  // The schedule's and the model's names come from files: shown escaped (terminal_text.hpp).
  std::cout << fmt::format("schedule {}: {} ranks, {} stages, {} micro-batches (costs: {})\n",
                           printable(summary.schedule), summary.num_ranks, summary.num_stages,
                           summary.num_micro_batches, printable(source.description));
  std::cout << fmt::format("  iteration time   {}{}\n", sim::format_seconds(summary.iteration_time_s),
                           summary.steady_state_iterations > 0 ? " (steady state of back-to-back iterations)" : "");
  if (interval) {
    std::cout << fmt::format(
        "  interval         {} .. {} (95 %, from the calibration's step and run-to-run spreads{})\n",
        sim::format_seconds(interval->low_s), sim::format_seconds(interval->high_s),
        interval->estimated.empty() ? "" : " and what was estimated");
    for (const std::string& line : interval->estimated) std::cout << "  estimated        " << line << "\n";
  }
  std::cout << fmt::format("  bubble fraction  {:.2f} %\n", 100 * summary.bubble_fraction);
  std::cout << fmt::format("  throughput       {:.6g} samples/s\n", summary.throughput_samples_per_s);
  // The experts' all-to-all, per rank on average: how much of it overlapped F&B steps hid.
  if (all_to_all.total_s > 0 && summary.num_ranks > 0)
    std::cout << fmt::format(
        "  all-to-all       {} a rank, {} of it hidden behind compute ({:.1f} %, {} overlapped F&B steps)\n",
        sim::format_seconds(all_to_all.total_s / summary.num_ranks),
        sim::format_seconds(all_to_all.hidden_s / summary.num_ranks), 100 * all_to_all.hidden_s / all_to_all.total_s,
        all_to_all.overlapped_pairs);
  if (source.memory_limit_bytes > 0)
    std::cout << fmt::format("  memory limit     {} per rank: {}\n", sim::format_bytes(source.memory_limit_bytes),
                             summary.max_peak_memory_bytes() <= source.memory_limit_bytes ? "fits" : "EXCEEDED");
  std::cout << fmt::format("\n  {:>5}  {:>12}  {:>8}  {:>14}\n", "rank", "busy", "bubble", "peak memory");
  for (const auto& r : summary.ranks)
    std::cout << fmt::format("  {:>5}  {:>12}  {:>6.2f} %  {:>14}\n", r.rank, sim::format_seconds(r.busy_s),
                             100 * r.bubble_fraction, sim::format_bytes(r.peak_memory_bytes));
}

// --recompute with --profile: each measured stage as it would run with every layer recomputed
// (sim::recompute_measured_stage), its layer count from the run's partition in the profile.
void recompute_profile_stages(const sim::Profile& profile, sim::CostModel& costs, const std::string& source) {
  const std::vector<int> bounds = profile.stage_bounds.value_or(std::vector<int>{});
  if (bounds.size() != costs.stages.size() + 1)
    throw UsageError(
        fmt::format("--recompute: the profile {} does not give the layers of each of the schedule's {} stages "
                    "(its stage_bounds: {} stages); simulate its own stage count",
                    source, costs.stages.size(), bounds.empty() ? 0 : bounds.size() - 1));
  for (std::size_t st = 0; st < costs.stages.size(); ++st)
    costs.stages[st] = sim::recompute_measured_stage(costs.stages[st], bounds[st + 1] - bounds[st], 1);
}

// The schedule in the simulator's form. A built-in schedule made from a compute order is
// compiled straight from it, never built as a Schedule: on 1.5 M instructions that is half the
// memory the process touches and a third of its time (docs/BENCHMARKS.md).
sim::CompiledSchedule compiled_schedule(const SimulateOptions& s, const po::variables_map& vm) {
  if (std::optional<ComputeOrder> order = make_compute_order(s.schedule, s.params))
    return sim::compile(std::move(*order));
  Schedule schedule = make_schedule(s.schedule, s.params);
  check_flags_agree_with_file(schedule, s.schedule, s.params, vm);
  return sim::compile(schedule);
}

// --steady-state and --trace: what they would hold must fit this machine (and not both).
void check_output_sizes(const SimulateOptions& s, const sim::CompiledSchedule& compiled) {
  if (s.steady_state && !s.trace.empty())
    throw UsageError("--steady-state with --trace " + s.trace +
                     ": a trace holds one isolated iteration; leave one out");
  if (s.steady_state)
    check_schedule_size("--steady-state: " + std::to_string(sim::kSteadyStateIterations) + " iterations of " +
                            std::to_string(compiled.instructions.size()) + " instructions",
                        ScheduleSize{saturating_product(static_cast<std::int64_t>(compiled.instructions.size()),
                                                        sim::kSteadyStateIterations),
                                     0, 0});
  if (!s.trace.empty())
    check_schedule_size("--trace " + s.trace + ": the predicted trace of " +
                            std::to_string(compiled.instructions.size()) + " instructions",
                        ScheduleSize{static_cast<std::int64_t>(compiled.instructions.size()), 0, 0},
                        kTraceBytesPerInstruction);
}

// With --profile: the same prediction from the profile moved to the ends of what it estimated.
std::optional<sim::PredictionInterval> profile_interval(const SimulateOptions& s, const CostSource& source,
                                                        const sim::CompiledSchedule& compiled,
                                                        const sim::SimOptions& sim_options, double iteration_time_s) {
  sim::SimOptions quick = sim_options;
  quick.build_trace = false;
  const auto simulate_profile = [&](const sim::Profile& moved) {
    sim::CostModel costs = sim::cost_model_from_profile(sim::profile_for_stages(moved, compiled.num_stages, s.profile),
                                                        profile_expert_parallel(s, moved));
    if (recomputation_of(s) == sim::Recomputation::full) recompute_profile_stages(moved, costs, s.profile);
    return s.steady_state ? sim::simulate_steady_state(compiled, costs, source.topology, quick).iteration_time_s
                          : sim::simulate(compiled, costs, source.topology, quick).summary.iteration_time_s;
  };
  return sim::prediction_interval(*source.profile, sim::splits_backward(compiled), iteration_time_s, simulate_profile);
}

// --json: the summary with the interval, the memory limit, the all-to-all and the parameters.
void print_simulate_json(const sim::SimResult& result, const CostSource& source,
                         const std::optional<sim::PredictionInterval>& interval) {
  nlohmann::json j = sim::to_json(result.summary);
  if (interval) {
    j["iteration_time_interval_s"] = {interval->low_s, interval->high_s};
    if (!interval->estimated.empty()) j["estimated"] = interval->estimated;
  }
  if (source.memory_limit_bytes > 0) {
    j["max_mem_bytes"] = source.memory_limit_bytes;
    j["fits_memory"] = result.summary.max_peak_memory_bytes() <= source.memory_limit_bytes;
  }
  if (result.all_to_all.total_s > 0 && result.summary.num_ranks > 0) {  // per rank, as the table's line
    j["all_to_all_per_rank_s"] = result.all_to_all.total_s / result.summary.num_ranks;
    j["all_to_all_hidden_per_rank_s"] = result.all_to_all.hidden_s / result.summary.num_ranks;
  }
  if (source.parameters) j["parameters"] = *source.parameters;
  if (source.active_parameters) j["active_parameters"] = *source.active_parameters;
  std::cout << printable_json(j.dump()) << "\n";
}

int run_simulate(const std::vector<std::string>& args) {
  SimulateOptions s;
  po::options_description options("ppsim simulate [options]");
  add_options(options, s);
  po::variables_map vm;
  po::store(po::command_line_parser(with_megatron_model(with_megatron_size_names(args))).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << options;
    return 0;
  }
  po::notify(vm);
  check_numbers(s);
  s.params.chunks_given = given(vm, "chunks");
  // Megatron's overlap adds a warm-up forward to its interleaved order (checked with the model).
  s.params.overlap_moe_expert_parallel_comm = s.overlap_moe_comm;
  check_microbatch_group_size_option(vm, s.params);
  check_model_only_options(s, vm);
  check_zb_auto_options(s, vm);
  CostSource source = cost_source(s, vm, s.params.chunks);
  // A schedule searched from the costs is searched from these.
  if (const ScheduleTraits* traits = sim::schedule_traits(s.schedule); traits && traits->cost_dependent)
    sim::register_with_costs(s.schedule, source.costs, source.topology, sim::parse_bytes(s.max_mem, "--max-mem"),
                             s.max_mem_micro_batches);
  const sim::CompiledSchedule compiled = compiled_schedule(s, vm);
  // interleaved-1f1b without --chunks runs 2 stages per rank: derive the model's costs for them.
  if (!s.model.empty() && compiled.num_ranks > 0 && compiled.num_stages != s.params.num_ranks * s.params.chunks)
    source = cost_source(s, vm, compiled.num_stages / compiled.num_ranks);
  check_output_sizes(s, compiled);
  if (source.profile) {
    // A profile measured on S stages predicts schedules of V*S stages (or S/k) of the same model.
    sim::check_profile_fits(*source.profile, compiled, s.profile);
    source.costs =
        sim::cost_model_from_profile(sim::profile_for_stages(*source.profile, compiled.num_stages, s.profile),
                                     profile_expert_parallel(s, *source.profile));
    if (recomputation_of(s) == sim::Recomputation::full)
      recompute_profile_stages(*source.profile, source.costs, s.profile);
  }
  sim::SimOptions sim_options;
  sim_options.build_trace = !s.trace.empty();
  sim_options.share_links = !s.no_link_sharing;
  if (s.steady_state && sim::synchronises_every_step(source.costs.runtime))
    throw UsageError(
        "--steady-state with --profile " + s.profile +
        ": its measured runtime synchronises the ranks at every optimizer step, so its iterations cannot overlap");
  const sim::SimResult result = [&] {
    try {
      if (s.steady_state) {
        sim::SimResult steady;
        steady.summary = sim::simulate_steady_state(compiled, source.costs, source.topology, sim_options);
        return steady;
      }
      return sim::simulate(compiled, source.costs, source.topology, sim_options);
    } catch (const sim::CostOverflowError& e) {
      throw UsageError(cost_options_text(s, vm) + ": " + e.what());
    }
  }();
  if (!s.trace.empty()) traces::write_trace(result.trace, s.trace);
  const std::optional<sim::PredictionInterval> interval =
      source.profile ? profile_interval(s, source, compiled, sim_options, result.summary.iteration_time_s)
                     : std::nullopt;
  if (s.json) {
    print_simulate_json(result, source, interval);
  } else {
    print_table(result.summary, result.all_to_all, source, interval);
  }
  return 0;
}

const CommandRegistrar simulate_registrar{
    {"simulate", "predict iteration time, bubbles and peak memory of a schedule (--json, --trace FILE)", run_simulate}};

}  // namespace
}  // namespace pipescope::cli
