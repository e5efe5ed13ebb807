// pprun's options (SPEC.md section 7) as one aggregate with the documented defaults, and the
// parser that turns a command line into it. No LibTorch here: the launcher validates options
// before any worker (and any LibTorch state) exists.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace pipescope::exec {

struct RunOptions {
  int nproc_per_node = 1;
  std::string schedule = "1f1b";
  int micro_batches = 4;
  int chunks = 1;
  bool chunks_given = false;
  int microbatch_group_size = 0;  // --microbatch-group-size-per-vp-stage; 0: not given (ScheduleParams's)
  std::string model = "tiny-gpt";
  int layers = 4;
  int hidden = 64;
  int seq_len = 16;
  int vocab = 0;  // 0 until parsed: then the data's (256 byte tokens for text, 128 for synthetic)
  // --data: a text file or folder, "synthetic" (the built-in generator), or empty: the default
  // corpus (default_corpus_path) for tiny-gpt, synthetic for mlp, which reads vectors.
  std::string data;
  int eval_every = 0;  // > 0: held-out loss every N steps and after the last (text data only)
  int micro_batch_size = 8;
  int steps = 4;
  unsigned long long seed = 1234;
  int threads_per_rank = 1;
  // Each local rank on its own share of the cores (core_binding.hpp): asked for (--bind-cores),
  // refused (--no-bind-cores), or neither: on when pprun starts the workers itself and each gets
  // a core of its own (binds_cores), the way docs/ACCURACY.md measures.
  bool bind_cores = false;
  bool no_bind_cores = false;
  std::string metrics_path;
  std::string trace_path;
  // The last K steps are traced: trace_path holds the last (traced_step_path). 0: every step after
  // the first, at most kDefaultTracedSteps (traced_step_count), what calibration learns well from.
  int trace_steps = 0;
  std::chrono::milliseconds timeout{60000};  // --timeout SECONDS
  std::string checkpoint_dir;
  int checkpoint_every = 0;  // 0: only at the end of the run (when --checkpoint-dir is given)
  bool resume = false;
  int data_parallel = 1;
  // tiny-moe (ModelConfig's): experts per block, experts per token, FFN widths (the shared
  // expert's 0: none), and --expert-parallel E, the replicas sharing a block's experts.
  int experts = 4;
  int top_k = 2;
  int moe_ffn_hidden = 128;
  int shared_expert_ffn_hidden = 0;
  int expert_parallel = 1;
  // --no-overlap-moe-comm: an overlapped F&B step (dualpipev's pairs) runs one pass after the
  // other instead of one pass's all-to-all beside the other's compute
  // (EngineOptions::overlap_paired_passes).
  bool no_overlap_moe_comm = false;
  double learning_rate = 1e-3;
  double clip_grad = 0;  // the global gradient norm clipped to (EngineOptions::gradient_clipping); 0: none
  std::string partition_method = "parameters";
  std::string device = "cpu";  // cpu (Gloo) | cuda (NCCL; GPU LOCAL_RANK of the node)
  std::string dtype = "fp32";  // fp32 | bf16 | fp16 (cuda only): EngineOptions::dtype
  // Activation recomputation: 0 keeps every activation from the forward to the backward; N > 0
  // keeps only the input of every run of N layers of a stage and recomputes the run in the
  // backward (--recompute is 1; EngineOptions::activation_checkpoint_interval).
  int recompute_layers = 0;
  bool quiet = false;
  bool show_help = false;
  bool show_version = false;
  // The options the command line gave (their names, "--micro-batches"): a value that only
  // restates a default is still the user's, and must agree with a schedule file or the
  // environment (pipescope/core/option_conflicts.hpp).
  std::set<std::string> given;
  bool was_given(const std::string& option) const { return given.count(option) > 0; }
};

// Parses argv[1..]; throws UsageError naming the option for unknown options and bad values.
// Fills in the defaults that depend on other options (the vocabulary from the data).
RunOptions parse_run_options(const std::vector<std::string>& args);

inline constexpr const char* kSyntheticData = "synthetic";
// Whether the run trains on the built-in synthetic generator rather than text.
bool uses_synthetic_data(const RunOptions& options);
// The text file or folder the run trains on (the default corpus when --data is not given).
std::string text_data_path(const RunOptions& options);

// The --help text: every option with its default.
std::string run_options_help();

// Steps traced by default (--trace without --trace-steps): the first step of a run is left out
// (its allocations and first-touch costs are not those of the steps that follow) and a few steps
// give calibration means over step-to-step variation rather than one sample of it.
inline constexpr int kDefaultTracedSteps = 8;
// How many of the run's last steps are traced: 0 without --trace, --trace-steps when given,
// else min(steps - 1, kDefaultTracedSteps) and at least 1.
int traced_step_count(const RunOptions& options);

// Where the trace of `step` goes when the last `trace_steps` steps are traced: the last step to
// `trace_path` itself, an earlier one to its name with ".step<N>" before the extension
// (t.json -> t.step7.json), so that the last step keeps the path a single trace has.
std::string traced_step_path(const std::string& trace_path, int step, int last_step);

struct WorkerEnvironment;
// Under torchrun-style variables (RANK set) pprun is one worker of a job the environment sizes:
// a given --nproc-per-node that differs from its LOCAL_WORLD_SIZE (or, without one, from
// WORLD_SIZE) is refused, naming both (pipescope/core/option_conflicts.hpp); the environment is
// never silently preferred.
void check_options_agree_with_environment(const RunOptions& options, const WorkerEnvironment& env);

// Checks that do not need the model or the schedule (ranges, combinations, and that every output
// path can be written: a file path not a folder, in a folder that exists and takes new files);
// throws UsageError.
void check_run_options(const RunOptions& options);

}  // namespace pipescope::exec
