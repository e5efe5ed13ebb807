#include "megatron_options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/sim/units.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {

void MegatronOptions::add_to(po::options_description& options, bool with_optimizer) {
  po::options_description group("Megatron-Core options (with --model; Megatron's names)");
  // clang-format off
  group.add_options()
      ("seq-length", po::value<int>()->notifier([this](int n) { seq_length = n; }),
       "tokens a sequence: the model trains at this length instead of its own (required with a Hugging Face "
       "config.json, which gives only the longest context the model supports)")
      ("cp-comm-type", po::value(&cp_comm_type)->default_value(cp_comm_type),
       "how context parallelism exchanges keys and values: p2p (a ring, each transfer behind one attention "
       "block), all_gather (before the attention) or a2a (all-to-alls of Q, K, V and the output: each rank "
       "attends the whole sequence with a C-th of the heads; runs sliding windows and chunks; ppsim plan's default "
       "for a model with them), or a2a+p2p (all-to-alls inside groups of A ranks, then a ring over the C / A groups; "
       "with --hierarchical-context-parallel-sizes)")
      ("hierarchical-context-parallel-sizes", po::value(&hierarchical_context_parallel_sizes)->multitoken(),
       "A B: with --cp-comm-type a2a+p2p, the all-to-all groups' size A and the ring's B, A x B = --context-parallel "
       "(ppsim plan: A for every a2a+p2p row, the ring C / A; default there: the largest A that fits the node and "
       "divides the heads)")
      ("attention-backend", po::value(&attention_backend)->default_value(attention_backend),
       "the fused attention kernel of a flash_attention model: flash (FlashAttention-2), fused (cuDNN), or auto "
       "(fused where the device has its figures)")
      ("fp8-format", po::value(&fp8_format),
       "hybrid or e4m3: the linear layers in FP8 as Transformer Engine runs them (delayed scaling; hybrid: E4M3 "
       "forward, E5M2 gradients); attention, norms and the head stay BF16 (default: BF16)")
      ("fp8-param-gather", po::bool_switch(&fp8_param_gather),
       "keep the linear layers' weights in FP8 only and all-gather them in FP8 (default off: an FP8 copy beside "
       "the BF16 weights)")
      ("overlap-param-gather", po::bool_switch(&overlap_param_gather),
       "with the distributed optimizer: all-gather the updated parameters bucket by bucket beside the next "
       "forward (default: after the optimizer step)")
      ("overlap-param-gather-with-optimizer-step", po::bool_switch(&overlap_param_gather_with_optimizer_step),
       "with --overlap-param-gather and interleaving: the first chunk's all-gather starts right after its "
       "optimizer step, beside the other chunks' steps (default off)")
      ("make-vocab-size-divisible-by", po::value<int>()->notifier([this](int n) {
         if (n < 1) throw UsageError(fmt::format("--make-vocab-size-divisible-by must be at least 1, got {}", n));
         make_vocab_size_divisible_by = n;
       }),
       "N: the embedding and the head hold the vocabulary rounded up to a multiple of N x tensor-parallel, as "
       "Megatron pads it (Megatron's default is 128; default here: the model's vocabulary as given)")
      ("ddp-bucket-size", po::value(&ddp_bucket_size)->default_value(ddp_bucket_size),
       "parameters per gradient/parameter bucket, on the first pipeline rank's first chunk (Megatron's DDP "
       "makes one bucket of every other chunk; 0: one bucket per layer everywhere)")
      ("tp-comm-overlap", po::bool_switch(&tp_comm_overlap),
       "pipeline sequence parallelism's all-gathers and reduce-scatters with the products (Transformer Engine "
       "userbuffers; needs --sequence-parallel; default off)")
      ("decoder-first-pipeline-num-layers", po::value<int>()->notifier([this](int n) { first_stage_layers = n; }),
       "layers on the first pipeline rank (its chunks share them); the other ranks split the rest evenly")
      ("decoder-last-pipeline-num-layers", po::value<int>()->notifier([this](int n) { last_stage_layers = n; }),
       "layers on the last pipeline rank")
      ("account-for-embedding-in-pipeline-split", po::bool_switch(&account_for_embedding),
       "count the embedding as a layer in the even split (the first stage holds one layer fewer)")
      ("account-for-loss-in-pipeline-split", po::bool_switch(&account_for_loss),
       "count the loss as a layer in the even split (the last stage holds one layer fewer)")
      ("pipeline-model-parallel-layout", po::value(&layout),
       "Megatron's layout string: E embedding, t a decoder layer, L loss, | between stages (virtual stages in "
       "rank order), (...)*N repeats, e.g. 'Et*3|(t*4|)*6t*3L' (default: the even split)")
      // No default_value on the two names of one size: a defaulted name would overwrite the other.
      ("expert-parallel", po::value<int>()->notifier([this](int e) { expert_parallel = e; }),
       "a MoE model's routed experts split over E GPUs of each stage, tokens dispatched and combined by "
       "all-to-all (EP x expert TP divides tensor x context x data parallel; default 1)")
      ("expert-model-parallel-size", po::value<int>()->notifier([this](int e) { expert_model_parallel_size = e; }),
       "the same as --expert-parallel")
      ("expert-tensor-parallel", po::value<int>()->notifier([this](int t) { expert_tensor_parallel = t; }),
       "each routed expert split over T GPUs of a node (default: the tensor-parallel size, as Megatron's)")
      ("expert-tensor-parallel-size", po::value<int>()->notifier([this](int t) { expert_tensor_parallel_size = t; }),
       "the same as --expert-tensor-parallel")
      ("moe-imbalance", po::value(&moe_imbalance)->default_value(moe_imbalance),
       "the busiest expert-parallel rank's routed tokens over the mean (>= 1): it gates the experts' compute and "
       "the all-to-all, and dropless memory is sized for it")
      ("moe-routing", po::value(&moe_routing),
       "a measured routing: a JSON file of the tokens each expert took, [n0, n1, ...] or {\"expert_tokens\": "
       "[...]}; the busiest EP rank's share over the mean replaces --moe-imbalance")
      ("moe-fp8-dispatch", po::bool_switch(&moe_fp8_dispatch),
       "the dispatch all-to-all in FP8 (DeepSeek-V3's; the combine stays BF16)")
      ("defer-embedding-wgrad-compute", po::bool_switch(&defer_embedding_wgrad),
       "compute the output layer's weight gradients in the pipeline's flush, after the last rank's last "
       "backward, instead of in each backward (needs --stages 2 or more; default off)")
      ("wgrad-deferral-limit", po::value(&wgrad_deferral_limit)->default_value(wgrad_deferral_limit),
       "with --defer-embedding-wgrad-compute: defer only the first N micro-batches' (0: all of them)");
  if (with_optimizer)
    group.add_options()
        ("use-distributed-optimizer", po::bool_switch(&distributed_optimizer),
         "Megatron's distributed optimizer: optimizer state sharded over data x context parallelism, gradients "
         "reduce-scattered, parameters all-gathered (default off)")
        ("zero1", po::bool_switch(&zero1), "the same as --use-distributed-optimizer");
  // clang-format on
  options.add(group);
}

sim::Fp8Format MegatronOptions::fp8() const {
  if (fp8_format.empty()) return sim::Fp8Format::none;
  if (fp8_format == "hybrid") return sim::Fp8Format::hybrid;
  if (fp8_format == "e4m3") return sim::Fp8Format::e4m3;
  throw UsageError("--fp8-format: '" + fp8_format + "' is neither hybrid nor e4m3");
}

sim::LayoutOptions layout_options(const MegatronOptions& o) {
  sim::LayoutOptions layout;
  layout.first_stage_layers = o.first_stage_layers;
  layout.last_stage_layers = o.last_stage_layers;
  layout.account_for_embedding = o.account_for_embedding;
  layout.account_for_loss = o.account_for_loss;
  layout.layout = o.layout;
  return layout;
}

namespace {

// --moe-routing's file: tokens per expert, as a list or under "expert_tokens".
std::vector<double> read_expert_tokens(const std::string& path) {
  if (auto problem = input_file_problem(path, "a routing histogram (JSON)"))
    throw UsageError("--moe-routing: " + *problem);
  const std::string where = "--moe-routing " + path + ": ";
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception& e) {  // a missing or unreadable file: the option's error, not the program's
    throw UsageError(std::string("--moe-routing: ") + e.what());
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    throw UsageError(where + "not JSON: " + e.what());
  }
  if (j.is_object() && j.contains("expert_tokens")) j = j["expert_tokens"];
  if (!j.is_array() || j.empty()) throw UsageError(where + "expected a list of tokens per expert");
  std::vector<double> tokens;
  for (const nlohmann::json& n : j) {
    if (!n.is_number() || n.get<double>() < 0) throw UsageError(where + "each expert's tokens must be a number >= 0");
    tokens.push_back(n.get<double>());
  }
  if (std::all_of(tokens.begin(), tokens.end(), [](double t) { return t == 0; }))
    throw UsageError(where + "every expert's count is 0: a histogram of no tokens gives no imbalance");
  return tokens;
}

// A size given under pipescope's name, Megatron's, or both alike.
std::optional<int> one_size(std::optional<int> ours, const char* our_name, std::optional<int> megatrons,
                            const char* megatron_name) {
  if (ours && megatrons && *ours != *megatrons)
    throw UsageError(std::string(our_name) + " " + std::to_string(*ours) + " and " + megatron_name + " " +
                     std::to_string(*megatrons) + " name one size: give one");
  return ours ? ours : megatrons;
}

}  // namespace

void MegatronOptions::apply(sim::ParallelConfig& parallel) const {
  if (const auto comm = sim::context_parallel_comm_named(cp_comm_type))
    parallel.context_parallel_comm = *comm;
  else
    throw UsageError("--cp-comm-type: '" + cp_comm_type + "' (p2p, all_gather, a2a or a2a+p2p)");
  if (!hierarchical_context_parallel_sizes.empty()) {
    const std::vector<int>& sizes = hierarchical_context_parallel_sizes;
    const std::string option = fmt::format("--hierarchical-context-parallel-sizes {}", fmt::join(sizes, " "));
    if (parallel.context_parallel_comm != sim::ContextParallelComm::a2a_p2p)
      throw UsageError(option + ": only --cp-comm-type a2a+p2p takes it");
    if (sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1)
      throw UsageError(option +
                       ": give two sizes, the all-to-all groups' A and the ring's B (A x B = --context-parallel)");
    if (parallel.context_parallel > 1 && sizes[0] * sizes[1] != parallel.context_parallel)
      throw UsageError(fmt::format("{}: {} x {} is not --context-parallel {}", option, sizes[0], sizes[1],
                                   parallel.context_parallel));
    parallel.context_parallel_a2a = sizes[0];
  }
  if (attention_backend == "auto")
    parallel.attention_backend = sim::AttentionBackend::auto_select;
  else if (attention_backend == "flash")
    parallel.attention_backend = sim::AttentionBackend::flash;
  else if (attention_backend == "fused")
    parallel.attention_backend = sim::AttentionBackend::fused;
  else
    throw UsageError("--attention-backend: '" + attention_backend + "' (auto, flash or fused)");
  parallel.fp8 = fp8();
  parallel.fp8_param_gather = fp8_param_gather;
  parallel.zero1 = parallel.zero1 || distributed_optimizer || zero1;
  parallel.overlap_param_gather = overlap_param_gather;
  parallel.overlap_param_gather_with_optimizer_step = overlap_param_gather_with_optimizer_step;
  parallel.tp_comm_overlap = tp_comm_overlap;
  parallel.bucket_parameters = sim::parse_bytes(ddp_bucket_size, "--ddp-bucket-size");
  parallel.make_vocab_size_divisible_by = make_vocab_size_divisible_by;
  parallel.layout = layout_options(*this);
  parallel.expert_parallel =
      one_size(expert_parallel, "--expert-parallel", expert_model_parallel_size, "--expert-model-parallel-size")
          .value_or(1);
  const std::optional<int> expert_tp = one_size(expert_tensor_parallel, "--expert-tensor-parallel",
                                                expert_tensor_parallel_size, "--expert-tensor-parallel-size");
  // 0 inside means "the tensor-parallel size"; a size given is a size.
  if (expert_tp && *expert_tp < 1)
    throw UsageError(
        fmt::format("--expert-tensor-parallel {}: must be at least 1 (leave it out for the "
                    "tensor-parallel size)",
                    *expert_tp));
  parallel.expert_tensor_parallel = expert_tp.value_or(0);
  parallel.moe_imbalance = moe_imbalance;
  if (!moe_routing.empty()) {
    if (moe_imbalance != 1) throw UsageError("--moe-routing and --moe-imbalance both give the imbalance: give one");
    parallel.expert_tokens = read_expert_tokens(moe_routing);
  }
  parallel.fp8_dispatch = moe_fp8_dispatch;
  parallel.defer_embedding_wgrad = defer_embedding_wgrad;
  parallel.wgrad_deferral_limit = wgrad_deferral_limit;
}

std::vector<std::string> MegatronOptions::given(const po::variables_map& vm) const {
  std::vector<std::string> names;
  // clang-format off
  for (const char* name :
       {"seq-length", "cp-comm-type", "hierarchical-context-parallel-sizes", "attention-backend", "fp8-format", "fp8-param-gather", "overlap-param-gather",
        "overlap-param-gather-with-optimizer-step",
        "ddp-bucket-size", "tp-comm-overlap", "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
        "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split",
        "pipeline-model-parallel-layout", "expert-parallel", "expert-model-parallel-size", "expert-tensor-parallel",
        "expert-tensor-parallel-size", "moe-imbalance", "moe-routing", "moe-fp8-dispatch",
        "defer-embedding-wgrad-compute", "wgrad-deferral-limit", "make-vocab-size-divisible-by"}) {
    // clang-format on
    if (!vm.count(name) || vm[name].defaulted()) continue;
    // A bool_switch not given is "defaulted"; one given false cannot be.
    names.push_back(std::string("--") + name);
  }
  return names;
}

}  // namespace pipescope::cli
