// Megatron's names for the sizes `ppsim simulate` takes under its own, so that a Megatron
// command line's sizes can be pasted as they are: --tensor-model-parallel-size is
// --tensor-parallel, --pipeline-model-parallel-size --stages, --context-parallel-size
// --context-parallel, --virtual-pipeline-model-parallel-size --chunks, and --global-batch-size
// gives --micro-batches as global batch / (micro-batch size x data parallel); for `ppsim plan`,
// --global-batch-size is --global-batch.
#pragma once

#include <boost/program_options.hpp>

#include <string>
#include <vector>

namespace pipescope::cli {

// The arguments with Megatron's size names read as ours, before parsing: every later check and
// message then sees one option per size. A size given under both names is refused unless both
// say the same; a global batch that the micro-batch size times the data parallelism does not
// divide is refused. UsageError, naming the options.
std::vector<std::string> with_megatron_size_names(const std::vector<std::string>& args);

// The names in --help (the rewriting above reads them before the parser could).
void add_megatron_size_names(boost::program_options::options_description& options);

// Megatron's model-shape arguments (--num-layers, --hidden-size, --num-attention-heads,
// --vocab-size with --seq-length; --swiglu, --num-experts, ...) read as an inline --model, with
// Megatron's defaults for what they leave out. Refused in one line: beside --model, a required one
// missing, --num-query-groups without --group-query-attention, MLA's sizes without
// --multi-latent-attention.
std::vector<std::string> with_megatron_model(const std::vector<std::string>& args);
void add_megatron_model_names(boost::program_options::options_description& options);

// `ppsim plan`'s: --global-batch-size is --global-batch.
std::vector<std::string> with_megatron_plan_names(const std::vector<std::string>& args);
void add_megatron_plan_names(boost::program_options::options_description& options);

}  // namespace pipescope::cli
