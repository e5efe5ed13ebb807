#include "megatron_size_names.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include "pipescope/core/errors.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {

namespace {

struct SizeName {
  std::string_view megatron;
  std::string_view ours;
};

constexpr std::array<SizeName, 4> kSimulateNames{{
    {"--tensor-model-parallel-size", "--tensor-parallel"},
    {"--pipeline-model-parallel-size", "--stages"},
    {"--context-parallel-size", "--context-parallel"},
    {"--virtual-pipeline-model-parallel-size", "--chunks"},
}};

constexpr std::string_view kGlobalBatch = "--global-batch-size";

constexpr std::array<SizeName, 1> kPlanNames{{{kGlobalBatch, "--global-batch"}}};

// One option on the command line: its name, its value, and where they are.
struct Given {
  std::string value;
  std::size_t first = 0;  // index of the name (and of the value when written --name=value)
  std::size_t count = 0;  // arguments it takes: 1 (--name=value) or 2 (--name value)
};

// Where `name` is given ("--name value" or "--name=value"), or nothing; a value missing at the
// end is left to the parser, which names it.
std::optional<Given> find_option(const std::vector<std::string>& args, std::string_view name) {
  std::optional<Given> found;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    Given g;
    if (a == name && i + 1 < args.size()) {
      g = {args[i + 1], i, 2};
    } else if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
      g = {a.substr(name.size() + 1), i, 1};
    } else {
      continue;
    }
    if (found) throw UsageError(fmt::format("{} is given twice: give it once", name));
    found = g;
  }
  return found;
}

int positive_size(const std::string& text, std::string_view option) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1)
    throw UsageError(fmt::format("{} '{}': must be a whole number >= 1", option, text));
  return value;
}

// The arguments without the one at `given`, and `ours value` appended when asked.
std::vector<std::string> replaced(const std::vector<std::string>& args, const Given& given,
                                  std::optional<std::pair<std::string_view, std::string>> with) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (i < given.first || i >= given.first + given.count) out.push_back(args[i]);
  if (with) {
    out.emplace_back(with->first);
    out.push_back(with->second);
  }
  return out;
}

// Each of Megatron's names read as ours: both given must agree.
template <std::size_t N>
std::vector<std::string> with_our_names(std::vector<std::string> args, const std::array<SizeName, N>& names) {
  for (const SizeName& name : names) {
    const std::optional<Given> megatron = find_option(args, name.megatron);
    if (!megatron) continue;
    const int size = positive_size(megatron->value, name.megatron);
    const std::optional<Given> ours = find_option(args, name.ours);
    if (ours && positive_size(ours->value, name.ours) != size)
      throw UsageError(fmt::format("{} {} and {} {} name one size: give one", name.ours, ours->value, name.megatron,
                                   megatron->value));
    args = replaced(args, *megatron, ours ? std::nullopt : std::optional(std::pair(name.ours, std::to_string(size))));
  }
  return args;
}

}  // namespace

std::vector<std::string> with_megatron_plan_names(const std::vector<std::string>& args) {
  return with_our_names(args, kPlanNames);
}

std::vector<std::string> with_megatron_size_names(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = with_our_names(args_in, kSimulateNames);
  const std::optional<Given> global = find_option(args, kGlobalBatch);
  if (!global) return args;
  const long long batch = positive_size(global->value, kGlobalBatch);
  const std::optional<Given> mbs = find_option(args, "--micro-batch-size");
  const std::optional<Given> dp = find_option(args, "--data-parallel");
  const int micro_batch_size = mbs ? positive_size(mbs->value, "--micro-batch-size") : 1;
  const int data_parallel = dp ? positive_size(dp->value, "--data-parallel") : 1;
  const long long per_micro_batch = static_cast<long long>(micro_batch_size) * data_parallel;
  if (batch % per_micro_batch != 0)
    throw UsageError(
        fmt::format("{} {}: not a whole number of micro-batches of {} samples (--micro-batch-size {} x "
                    "--data-parallel {})",
                    kGlobalBatch, batch, per_micro_batch, micro_batch_size, data_parallel));
  const std::string micro_batches = std::to_string(batch / per_micro_batch);
  if (const std::optional<Given> m = find_option(args, "--micro-batches")) {
    if (m->value != micro_batches)
      throw UsageError(
          fmt::format("--micro-batches {} and {} {} (= {} micro-batches of --micro-batch-size {} x "
                      "--data-parallel {}) disagree: give one",
                      m->value, kGlobalBatch, batch, micro_batches, micro_batch_size, data_parallel));
    return replaced(args, *global, std::nullopt);
  }
  return replaced(args, *global, std::pair(std::string_view("--micro-batches"), micro_batches));
}

void add_megatron_plan_names(po::options_description& options) {
  po::options_description names("Megatron's names (read as the options they name)");
  names.add_options()("global-batch-size", po::value<int>(), "the same as --global-batch");
  options.add(names);
}

void add_megatron_size_names(po::options_description& options) {
  po::options_description names("Megatron's names for the sizes (read as the options they name)");
  // clang-format off
  names.add_options()
      ("tensor-model-parallel-size", po::value<int>(), "the same as --tensor-parallel")
      ("pipeline-model-parallel-size", po::value<int>(), "the same as --stages")
      ("context-parallel-size", po::value<int>(), "the same as --context-parallel")
      ("virtual-pipeline-model-parallel-size", po::value<int>(), "the same as --chunks")
      ("global-batch-size", po::value<int>(),
       "samples per iteration: --micro-batches is it over --micro-batch-size x --data-parallel");
  // clang-format on
  options.add(names);
}

}  // namespace pipescope::cli
