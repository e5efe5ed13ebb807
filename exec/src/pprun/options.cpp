#include "pprun/options.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "data/default_corpus.hpp"
#include "data/text_corpus.hpp"
#include "launcher.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/option_conflicts.hpp"

namespace pipescope::exec {
namespace {

double seconds(std::chrono::milliseconds t) { return std::chrono::duration<double>(t).count(); }

template <typename T>
T parse_number(const std::string& option, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty())
    throw UsageError(fmt::format("option {}: '{}' is not a valid number", option, text));
  return value;
}

// --recompute and --recompute-layers N set one value: given together they must agree, since
// which of two different granularities was meant cannot be guessed.
void set_recompute_layers(RunOptions& o, const char* option, int layers) {
  // 0 is the default's meaning, not a value to ask for: "no recomputation" is leaving the
  // option out, and a 0 from a script is more likely a mistake.
  if (layers < 1) throw UsageError(fmt::format("option {}: {} is below the minimum 1", option, layers));
  if (o.recompute_layers > 0 && o.recompute_layers != layers)
    throw UsageError(
        fmt::format("option {}: asks for runs of {} layer(s), but runs of {} were asked for already "
                    "(--recompute is --recompute-layers 1): give one",
                    option, layers, o.recompute_layers));
  o.recompute_layers = layers;
}

struct OptionDef {
  std::string name;
  std::string value_name;  // empty for flags
  std::string help;
  std::function<void(RunOptions&, const std::string&)> apply;
};

// The option table as it is built: the kinds of option most take (a number, a string, a flag)
// with their help's "(default ...)" written from RunOptions' own defaults, and any other as it is.
class OptionTable {
 public:
  void add_int(const std::string& name, int RunOptions::*field, const std::string& help) {
    defs_.push_back({name, "N", fmt::format("{} (default {})", help, defaults_.*field),
                     [name, field](RunOptions& o, const std::string& v) { o.*field = parse_number<int>(name, v); }});
  }
  void add_string(const std::string& name, std::string RunOptions::*field, const std::string& value_name,
                  const std::string& help) {
    const std::string def = defaults_.*field;
    defs_.push_back({name, value_name, fmt::format("{} (default {})", help, def.empty() ? "none" : def),
                     [field](RunOptions& o, const std::string& v) { o.*field = v; }});
  }
  void add_flag(const std::string& name, bool RunOptions::*field, const std::string& help) {
    defs_.push_back(
        {name, "", help + " (default off)", [field](RunOptions& o, const std::string&) { o.*field = true; }});
  }
  void add(OptionDef def) { defs_.push_back(std::move(def)); }
  const RunOptions& defaults() const { return defaults_; }
  std::vector<OptionDef> take() { return std::move(defs_); }

 private:
  RunOptions defaults_;
  std::vector<OptionDef> defs_;
};

// The workers and the schedule they run.
void add_schedule_options(OptionTable& t) {
  t.add_int("--nproc-per-node", &RunOptions::nproc_per_node, "worker processes started on this node");
  t.add_string("--schedule", &RunOptions::schedule, "NAME", "schedule name (ppsim schedule names) or file:PATH");
  t.add_int("--micro-batches", &RunOptions::micro_batches, "micro-batches per step and replica");
  t.add({"--chunks", "V", fmt::format("stages per pipeline rank (default {})", t.defaults().chunks),
         [](RunOptions& o, const std::string& v) {
           o.chunks = parse_number<int>("--chunks", v);
           o.chunks_given = true;
         }});
  t.add({"--microbatch-group-size-per-vp-stage", "G",
         "interleaved-1f1b's micro-batches per chunk before the next, as Megatron's option (default: the "
         "pipeline ranks)",
         [](RunOptions& o, const std::string& v) {
           o.microbatch_group_size = parse_number<int>("--microbatch-group-size-per-vp-stage", v);
           if (o.microbatch_group_size < 1)
             throw UsageError(fmt::format("option --microbatch-group-size-per-vp-stage: {} is below the minimum 1", v));
         }});
}

// The built-in model and its sizes.
void add_model_options(OptionTable& t) {
  t.add_string("--model", &RunOptions::model, "tiny-gpt|tiny-moe|mlp",
               "built-in model (mlp reads vectors: synthetic data only; tiny-moe: a mixture of experts)");
  t.add_int("--layers", &RunOptions::layers, "hidden layers (mlp) or transformer blocks (tiny-gpt, tiny-moe)");
  t.add_int("--hidden", &RunOptions::hidden, "hidden size");
  t.add_int("--experts", &RunOptions::experts, "experts per MoE block (tiny-moe)");
  t.add_int("--top-k", &RunOptions::top_k, "experts each token is routed to (tiny-moe)");
  t.add_int("--moe-ffn-hidden", &RunOptions::moe_ffn_hidden, "FFN width of each expert (tiny-moe)");
  t.add_int("--shared-expert-ffn-hidden", &RunOptions::shared_expert_ffn_hidden,
            "FFN width of the shared expert every token goes through, 0 for none (tiny-moe)");
  t.add_int(
      "--expert-parallel", &RunOptions::expert_parallel,
      "ranks sharing each block's experts, inside the data-parallel group (divides --dp and --experts; tiny-moe)");
  t.add_flag("--no-overlap-moe-comm", &RunOptions::no_overlap_moe_comm,
             "run an overlapped F&B step (dualpipev's pairs) one pass after the other; by default its two "
             "passes run as one step, one micro-batch's all-to-all on the wire while the other computes (tiny-moe, "
             "--expert-parallel > 1, cpu)");
  t.add_int("--seq-len", &RunOptions::seq_len, "sequence length (tiny-gpt)");
  t.add(
      {"--vocab", "N",
       "vocabulary size (tiny-gpt) or classes (mlp) (default: the data's, 256 byte tokens for text, 128 for synthetic)",
       [](RunOptions& o, const std::string& v) { o.vocab = parse_number<int>("--vocab", v); }});
}

// The data, the steps over it and the cores they run on.
void add_run_options(OptionTable& t) {
  t.add({"--data", "PATH",
         "text to train on: a file, or a folder of files read in sorted path order, memory-mapped, one token a "
         "byte, the last 5% held out; 'synthetic' for the built-in generator (default: the project's docs "
         "installed with pprun in share/pipescope/corpus; synthetic for --model mlp)",
         [](RunOptions& o, const std::string& v) {
           if (v.empty()) throw UsageError("option --data: needs a file, a folder or 'synthetic'");
           o.data = v;
         }});
  t.add_int(
      "--eval-every", &RunOptions::eval_every,
      "held-out loss every N steps and after the last, printed and in --metrics as eval_loss (0: never; text --data "
      "only)");
  t.add_int("--micro-batch-size", &RunOptions::micro_batch_size, "samples per micro-batch");
  t.add_int("--steps", &RunOptions::steps, "total optimizer steps (a resumed run continues up to it)");
  t.add({"--seed", "K",
         fmt::format("seed of the weights, the synthetic data and the order of text samples (default {})",
                     t.defaults().seed),
         [](RunOptions& o, const std::string& v) { o.seed = parse_number<unsigned long long>("--seed", v); }});
  t.add_int("--threads-per-rank", &RunOptions::threads_per_rank, "intra-op threads of each worker");
  t.add({"--bind-cores", "",
         "bind each local worker to its own share of the cores this launcher may use (as DeepSpeed's "
         "--bind_cores_to_rank; default: on when pprun starts 2 or more workers and each gets a core of its own)",
         [](RunOptions& o, const std::string&) { o.bind_cores = true; }});
  t.add_flag("--no-bind-cores", &RunOptions::no_bind_cores,
             "let the workers share every core, even where --bind-cores would be on");
}

// What a run writes (metrics, traces, checkpoints) and how long a rank waits on its peers.
void add_output_options(OptionTable& t) {
  t.add_string("--metrics", &RunOptions::metrics_path, "FILE.jsonl", "per-step loss, time and peak memory");
  t.add_string("--trace", &RunOptions::trace_path, "FILE", "measured trace of the last step (pipescope.trace/1)");
  t.add({"--trace-steps", "K",
         fmt::format("trace the last K steps: FILE the last, FILE's name with .stepN before its extension the others "
                     "(calibration; default: every step after the first, at most {})",
                     kDefaultTracedSteps),
         [](RunOptions& o, const std::string& v) {
           o.trace_steps = parse_number<int>("--trace-steps", v);
           if (o.trace_steps < 1) throw UsageError(fmt::format("option --trace-steps: {} is below the minimum 1", v));
         }});
  t.add({"--timeout", "SECONDS",
         fmt::format("how long a rank waits on a peer before failing (default {:g})", seconds(t.defaults().timeout)),
         [](RunOptions& o, const std::string& v) {
           const double s = parse_number<double>("--timeout", v);
           // Not positive (or NaN): check_run_options names the value given.
           if (!(s > 0)) throw UsageError(fmt::format("option --timeout: {:g} must be positive", s));
           // Whole milliseconds, at least one; a year at most (no overflow).
           o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::min(s, 3.2e7) * 1000)));
         }});
  t.add_string("--checkpoint-dir", &RunOptions::checkpoint_dir, "DIR", "where checkpoints are written and read");
  t.add_int("--checkpoint-every", &RunOptions::checkpoint_every, "steps between checkpoints (0: at the end only)");
  t.add_flag("--resume", &RunOptions::resume, "continue from the last complete checkpoint in --checkpoint-dir");
}

// How the model is trained: replicas, optimizer, split, device, precision, recomputation.
void add_training_options(OptionTable& t) {
  t.add_int("--dp", &RunOptions::data_parallel, "data-parallel replicas (world = dp x pipeline ranks)");
  t.add({"--lr", "X", fmt::format("AdamW learning rate (default {:g})", t.defaults().learning_rate),
         [](RunOptions& o, const std::string& v) { o.learning_rate = parse_number<double>("--lr", v); }});
  t.add({"--clip-grad", "C",
         "clip the gradients to a global norm of C over every stage, replica's experts included (Megatron's "
         "--clip-grad, DeepSpeed's gradient_clipping; default 0: none); the metrics rows then give grad_norm",
         [](RunOptions& o, const std::string& v) { o.clip_grad = parse_number<double>("--clip-grad", v); }});
  t.add_string("--partition", &RunOptions::partition_method, "METHOD", "layer split: uniform, parameters, type:REGEX");
  t.add_string("--device", &RunOptions::device, "cpu|cuda",
               "where workers compute: cpu with Gloo, cuda with NCCL (GPU = LOCAL_RANK)");
  t.add_string(
      "--dtype", &RunOptions::dtype, "fp32|bf16|fp16",
      "compute dtype: bf16 computes and sends activations and gradients in bf16 over fp32 master weights, AdamW "
      "state and gradient sums (checkpoints hold fp32 either way); fp16 adds dynamic loss scaling and needs "
      "--device cuda");
  t.add({"--recompute", "",
         "full activation recomputation: keep each layer's input, run the layer again in the backward "
         "(--recompute-layers 1; what ppsim simulate --recompute models) (default off)",
         [](RunOptions& o, const std::string&) { set_recompute_layers(o, "--recompute", 1); }});
  t.add({"--recompute-layers", "N",
         "recompute in runs of N layers: keep the input of every N layers of a stage (Megatron's "
         "--recompute-method uniform --recompute-num-layers N); a stage with fewer layers is one run "
         "(default 0: no recomputation)",
         [](RunOptions& o, const std::string& v) {
           set_recompute_layers(o, "--recompute-layers", parse_number<int>("--recompute-layers", v));
         }});
}

// The program's own flags.
void add_program_options(OptionTable& t) {
  t.add_flag("--quiet", &RunOptions::quiet, "no progress on the terminal");
  t.add_flag("--help", &RunOptions::show_help, "show this help");
  t.add_flag("--version", &RunOptions::show_version, "show the version");
}

// Every option in the order --help lists them.
std::vector<OptionDef> option_defs() {
  OptionTable table;
  add_schedule_options(table);
  add_model_options(table);
  add_run_options(table);
  add_output_options(table);
  add_training_options(table);
  add_program_options(table);
  return table.take();
}

// Why no file can be created in `folder`, or nothing. A probe file, created and removed at once,
// answers what permission bits cannot: a read-only file system, or root's rights.
std::optional<std::string> cannot_create_in(const std::filesystem::path& folder) {
  const std::filesystem::path probe = folder / fmt::format(".pprun-write-check-{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::string(std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return std::nullopt;
}

// Files are written after steps have run (traces after the last, checkpoints after their step):
// a path that cannot be written must stop the run before it starts, not throw its work away.
void check_output_paths(const RunOptions& o) {
  namespace fs = std::filesystem;
  std::error_code error;
  for (const auto& [option, path] : {std::pair{"--trace", o.trace_path}, std::pair{"--metrics", o.metrics_path}}) {
    if (path.empty()) continue;
    if (fs::is_directory(path, error))
      throw UsageError(fmt::format("option {} {}: is a folder, not a file", option, path));
    const fs::path folder = fs::absolute(path).parent_path();
    if (!fs::is_directory(folder, error))
      throw UsageError(fmt::format("option {} {}: folder {} does not exist", option, path, folder.string()));
    if (auto why = cannot_create_in(folder))
      throw UsageError(fmt::format("option {} {}: cannot write in folder {}: {}", option, path, folder.string(), *why));
  }
  if (o.checkpoint_dir.empty()) return;
  // The checkpoint folder is made when missing, but only as the last part of the path.
  const fs::path dir = fs::absolute(o.checkpoint_dir);
  if (fs::exists(fs::symlink_status(dir, error)) || fs::exists(dir, error)) {
    if (!fs::is_directory(dir, error))
      throw UsageError(fmt::format("option --checkpoint-dir {}: is a file, not a folder", o.checkpoint_dir));
    if (auto why = cannot_create_in(dir))
      throw UsageError(fmt::format("option --checkpoint-dir {}: cannot write in it: {}", o.checkpoint_dir, *why));
    return;
  }
  const fs::path parent = dir.parent_path();
  if (!fs::is_directory(parent, error))
    throw UsageError(
        fmt::format("option --checkpoint-dir {}: folder {} does not exist", o.checkpoint_dir, parent.string()));
  if (auto why = cannot_create_in(parent))
    throw UsageError(
        fmt::format("option --checkpoint-dir {}: cannot create it in {}: {}", o.checkpoint_dir, parent.string(), *why));
}

}  // namespace

RunOptions parse_run_options(const std::vector<std::string>& args) {
  RunOptions options;
  const auto defs = option_defs();
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_inline_value = false;
    if (auto eq = name.find('='); name.starts_with("--") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline_value = true;
    }
    const OptionDef* def = nullptr;
    for (const auto& d : defs)
      if (d.name == name) def = &d;
    if (!def) throw UsageError(fmt::format("unknown option '{}' (see --help)", args[i]));
    if (!def->value_name.empty() && !has_inline_value) {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("option {} needs a value ({})", name, def->value_name));
      value = args[++i];
    } else if (def->value_name.empty() && has_inline_value) {
      throw UsageError(fmt::format("option {} takes no value", name));
    }
    def->apply(options, value);
    options.given.insert(name);
  }
  if (options.vocab == 0) options.vocab = uses_synthetic_data(options) ? 128 : kByteVocabularySize;
  return options;
}

bool uses_synthetic_data(const RunOptions& o) {
  return o.data == kSyntheticData || (o.data.empty() && o.model == "mlp");
}

std::string text_data_path(const RunOptions& o) { return o.data.empty() ? default_corpus_path() : o.data; }

namespace {

// The mixture-of-experts sizes: only tiny-moe has experts, and E must divide both the
// data-parallel size (the expert-parallel group is part of it, as Megatron places it) and the
// experts.
// Sizes whose products (a layer's parameter count) could pass 64 bits are typing slips; the
// machine's memory bounds the rest (model_memory.hpp).
void at_most_power_of_two(const char* name, long long value, int log2_limit) {
  if (value > (1LL << log2_limit))
    throw UsageError(
        fmt::format("option {}: {} is above the limit {} (2^{})", name, value, 1LL << log2_limit, log2_limit));
}

void check_moe_options(const RunOptions& o) {
  static const std::vector<std::string> moe_options = {"--experts", "--top-k", "--moe-ffn-hidden",
                                                       "--shared-expert-ffn-hidden", "--expert-parallel"};
  if (o.model != "tiny-moe") {
    for (const auto& option : moe_options)
      if (o.was_given(option))
        throw UsageError(
            fmt::format("option {}: only --model tiny-moe has experts (this run has --model {})", option, o.model));
    return;
  }
  auto at_least = [](const char* name, long long value, long long minimum) {
    if (value < minimum) throw UsageError(fmt::format("option {}: {} is below the minimum {}", name, value, minimum));
  };
  at_least("--experts", o.experts, 1);
  at_least("--top-k", o.top_k, 1);
  at_least("--moe-ffn-hidden", o.moe_ffn_hidden, 1);
  at_least("--shared-expert-ffn-hidden", o.shared_expert_ffn_hidden, 0);
  at_least("--expert-parallel", o.expert_parallel, 1);
  at_most_power_of_two("--experts", o.experts, 16);
  at_most_power_of_two("--moe-ffn-hidden", o.moe_ffn_hidden, 20);
  at_most_power_of_two("--shared-expert-ffn-hidden", o.shared_expert_ffn_hidden, 20);
  if (o.top_k > o.experts)
    throw UsageError(fmt::format("option --top-k {}: more than the {} expert(s) of --experts", o.top_k, o.experts));
  if (o.experts % o.expert_parallel != 0)
    throw UsageError(
        fmt::format("option --expert-parallel {}: does not divide --experts {}", o.expert_parallel, o.experts));
  if (o.data_parallel % o.expert_parallel != 0)
    throw UsageError(
        fmt::format("option --expert-parallel {}: does not divide the data-parallel size --dp {} (the expert-parallel "
                    "group is part of the data-parallel one)",
                    o.expert_parallel, o.data_parallel));
}

}  // namespace

void check_run_options(const RunOptions& o) {
  auto at_least = [](const char* name, long long value, long long minimum) {
    if (value < minimum) throw UsageError(fmt::format("option {}: {} is below the minimum {}", name, value, minimum));
  };
  check_local_worker_count(o.nproc_per_node);  // before anything is built or forked
  at_least("--micro-batches", o.micro_batches, 1);
  at_least("--chunks", o.chunks, 1);
  at_least("--layers", o.layers, 1);
  at_least("--hidden", o.hidden, 1);
  at_least("--seq-len", o.seq_len, 1);
  at_least("--vocab", o.vocab, 2);
  at_least("--micro-batch-size", o.micro_batch_size, 1);
  at_least("--steps", o.steps, 0);
  at_least("--threads-per-rank", o.threads_per_rank, 1);
  at_least("--checkpoint-every", o.checkpoint_every, 0);
  at_least("--dp", o.data_parallel, 1);
  at_least("--recompute-layers", o.recompute_layers, 0);
  at_most_power_of_two("--layers", o.layers, 20);
  at_most_power_of_two("--hidden", o.hidden, 20);
  at_most_power_of_two("--seq-len", o.seq_len, 24);
  at_most_power_of_two("--vocab", o.vocab, 24);
  if (o.timeout.count() <= 0)
    throw UsageError(fmt::format("option --timeout: {:g} must be positive", seconds(o.timeout)));
  if (!(o.learning_rate > 0)) throw UsageError(fmt::format("option --lr: {:g} must be positive", o.learning_rate));
  if (!(o.clip_grad >= 0) || !std::isfinite(o.clip_grad))
    throw UsageError(fmt::format("option --clip-grad: {:g} must be a finite norm >= 0 (0: no clipping)", o.clip_grad));
  if (o.model != "mlp" && o.model != "tiny-gpt" && o.model != "tiny-moe")
    throw UsageError(fmt::format("option --model: unknown model '{}' (known: mlp, tiny-gpt, tiny-moe)", o.model));
  check_moe_options(o);
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError(fmt::format("option --device: unknown device '{}' (known: cpu, cuda)", o.device));
  if (o.dtype != "fp32" && o.dtype != "bf16" && o.dtype != "fp16")
    throw UsageError(fmt::format("option --dtype: unknown dtype '{}' (known: fp32, bf16, fp16)", o.dtype));
  if (o.dtype == "fp16" && o.device != "cuda")
    throw UsageError(
        "option --dtype fp16 needs --device cuda (fp16 with loss scaling is a GPU recipe): use bf16 on the CPU");
  at_least("--eval-every", o.eval_every, 0);
  if (!uses_synthetic_data(o)) {
    if (o.model == "mlp")
      throw UsageError(
          fmt::format("option --data {}: --model mlp reads vectors, not tokens; train it on --data synthetic, "
                      "or text on --model tiny-gpt",
                      o.data));
    if (o.vocab != kByteVocabularySize)
      throw UsageError(
          fmt::format("option --vocab {}: text is read as bytes, {} token values; leave --vocab out or give {}",
                      o.vocab, kByteVocabularySize, kByteVocabularySize));
  } else if (o.eval_every > 0) {
    throw UsageError("option --eval-every: synthetic data has no held-out part; give text with --data");
  }
  if (o.resume && o.checkpoint_dir.empty()) throw UsageError("option --resume needs --checkpoint-dir");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    throw UsageError("option --checkpoint-every needs --checkpoint-dir");
  at_least("--trace-steps", o.trace_steps, 0);
  if (o.bind_cores && o.no_bind_cores)
    throw UsageError("options --bind-cores and --no-bind-cores contradict each other");
  if (o.trace_steps > 1 && o.trace_path.empty()) throw UsageError("option --trace-steps needs --trace");
  if (o.trace_steps > std::max(o.steps, 1))
    throw UsageError(fmt::format("option --trace-steps: {} is more than the {} step(s) of the run (--steps)",
                                 o.trace_steps, o.steps));
  check_output_paths(o);
}

void check_options_agree_with_environment(const RunOptions& o, const WorkerEnvironment& env) {
  if (!o.was_given("--nproc-per-node")) return;
  const bool local = env.local_world_size > 0;
  const int workers = local ? env.local_world_size : env.world_size;
  if (o.nproc_per_node == workers) return;
  throw UsageError(contradiction(
      "--nproc-per-node", std::to_string(o.nproc_per_node), "the environment",
      fmt::format("{}={}: with RANK set, pprun is one worker of a torchrun-style job; unset RANK to start {} workers",
                  local ? "LOCAL_WORLD_SIZE" : "WORLD_SIZE", workers, o.nproc_per_node)));
}

int traced_step_count(const RunOptions& options) {
  if (options.trace_path.empty()) return 0;
  if (options.trace_steps > 0) return options.trace_steps;
  return std::clamp(options.steps - 1, 1, kDefaultTracedSteps);
}

std::string traced_step_path(const std::string& trace_path, int step, int last_step) {
  if (step == last_step) return trace_path;
  const std::filesystem::path path(trace_path);
  std::string extension = path.extension().string();
  std::filesystem::path stem = path.parent_path() / path.stem();
  if (extension == ".gz" && path.stem().has_extension()) {  // t.json.gz -> t.step7.json.gz
    extension = path.stem().extension().string() + extension;
    stem = path.parent_path() / path.stem().stem();
  }
  return fmt::format("{}.step{}{}", stem.string(), step, extension);
}

std::string run_options_help() {
  std::string text =
      "usage: pprun [--nproc-per-node N] [options]\n"
      "Runs a pipeline schedule for real with LibTorch: starts N local workers, or runs as one worker\n"
      "when RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are set (torchrun style).\n\n"
      "options:\n";
  for (const auto& d : option_defs()) {
    std::string left = d.name + (d.value_name.empty() ? "" : " " + d.value_name);
    text += fmt::format("  {:<30} {}\n", left, d.help);
  }
  return text;
}

}  // namespace pipescope::exec
