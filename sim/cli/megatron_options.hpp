// The options, in Megatron-Core's names, that shape a model's run beyond its tensor and pipeline
// sizes (SPEC.md section 6): context parallelism, FP8, the distributed optimizer and its
// overlaps, tensor-parallel communication overlap and the layer layout. `ppsim simulate` and
// `ppsim plan` parse them here, once, into sim::ParallelConfig.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipescope/sim/model.hpp"

namespace pipescope::cli {

struct MegatronOptions {
  std::optional<int> seq_length;  // --seq-length: the model's sequence instead of its own
  std::string cp_comm_type = "p2p";
  std::vector<int> hierarchical_context_parallel_sizes;  // a2a+p2p's A and B (empty: not given)
  std::string attention_backend = "auto";
  std::string fp8_format;  // empty: BF16
  bool fp8_param_gather = false;
  bool distributed_optimizer = false;  // --use-distributed-optimizer, or --zero1
  bool zero1 = false;
  bool overlap_param_gather = false;
  bool overlap_param_gather_with_optimizer_step = false;
  bool tp_comm_overlap = false;
  std::string ddp_bucket_size = "0";
  std::optional<int> first_stage_layers, last_stage_layers;
  bool account_for_embedding = false, account_for_loss = false;
  std::string layout;
  // Mixture of experts (with a MoE model): expert parallelism and its routing.
  // Each size under pipescope's name and Megatron's: both given must agree.
  std::optional<int> expert_parallel, expert_model_parallel_size;          // absent: 1
  std::optional<int> expert_tensor_parallel, expert_tensor_parallel_size;  // absent: the tensor-parallel size
  double moe_imbalance = 1;
  std::string moe_routing;  // a JSON file of tokens per expert (empty: --moe-imbalance)
  bool moe_fp8_dispatch = false;
  bool defer_embedding_wgrad = false;
  int wgrad_deferral_limit = 0;
  int make_vocab_size_divisible_by = 0;  // 0: not given (the model's vocabulary)

  // `with_optimizer`: also --use-distributed-optimizer / --zero1 (ppsim plan has its own default).
  void add_to(boost::program_options::options_description& options, bool with_optimizer);
  // What the options say, into `parallel` (all but its sizes; --hierarchical-context-parallel-sizes
  // is checked against parallel.context_parallel where that is above 1). Throws UsageError naming
  // an option whose value is not one of its words.
  void apply(sim::ParallelConfig& parallel) const;
  // The FP8 format named by --fp8-format (none when absent).
  sim::Fp8Format fp8() const;
  // The options given that only a model's costs can follow ("--fp8-format hybrid", ...).
  std::vector<std::string> given(const boost::program_options::variables_map& vm) const;
};

// The layout options alone, for messages and the planner's rows.
sim::LayoutOptions layout_options(const MegatronOptions& options);

}  // namespace pipescope::cli
