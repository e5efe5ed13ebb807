// The options of `ppsim plan`, as given, and the PlanRequest they describe (checked, with the
// option named in each refusal).
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "cluster_options.hpp"
#include "megatron_options.hpp"
#include "pipescope/sim/planner.hpp"

namespace pipescope::cli {

// Every option of `ppsim plan`, as given (lists as their text); plan_request reads them.
struct PlanOptions {
  std::string model_name = "gpt-7b", max_mem = "0", format = "table", trace_dir, profile_path;
  std::string schedules = "gpipe,1f1b,interleaved-1f1b,zb-h1,zb-h2,zbv", micro_batch_sizes = "1,2,4,8";
  std::string chunk_options = "2,4", recompute = "none,selective,full";
  std::string tensor_parallel_sizes = "1,2,4,8", sequence_parallel = "both", context_parallel_sizes = "1,2,4,8";
  std::string cp_comm_types;                 // empty: --cp-comm-type alone
  std::string expert_parallel_sizes;         // empty: --expert-parallel alone
  std::string expert_tensor_parallel_sizes;  // empty: --expert-tensor-parallel alone
  // The module sets `selective` tries, one per --recompute-modules, or "auto" (the model's ladder);
  // none given: core_attn.
  std::vector<std::string> recompute_modules;
  ClusterOptions cluster;
  MegatronOptions megatron;
  bool verbose = false;
  int gpus = 64, global_batch = 512, top = 10, max_pipeline = 0, microbatch_group_size = 0;
  bool no_zero1 = false, steady_state = false, quiet = false, search_layouts = false;

  bool use_profile() const { return !profile_path.empty(); }
};

// The options in the order `ppsim plan --help` lists them.
void add_plan_options(boost::program_options::options_description& options, PlanOptions& o);

// The request the options describe (with --profile, `o` takes the measured run's defaults).
sim::PlanRequest plan_request(PlanOptions& o, const boost::program_options::variables_map& vm);

}  // namespace pipescope::cli
