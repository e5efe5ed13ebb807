#include "pipescope/sim/pipeline_layout.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"

namespace pipescope::sim {
namespace {

constexpr const char* kLayoutOption = "--pipeline-model-parallel-layout";
// An unrolled layout longer than this is a typo (a repeat count with too many digits), not a model.
constexpr std::size_t kMaxUnrolledLayout = 1u << 22;

// Megatron's grammar, unrolled: `(...)*N` (nested here too) and `x*N`, commas dropped. Errors
// name the character where the text stops making sense.
class LayoutUnroller {
 public:
  explicit LayoutUnroller(std::string_view text) : text_(text) {}

  std::string unroll() {
    std::string out = sequence(0);
    if (pos_ < text_.size()) fail("a ')' closes nothing");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UsageError(fmt::format("{} '{}': {} at character {}", kLayoutOption, text_, why, pos_ + 1));
  }

  std::string sequence(int depth) {
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ')') {
        if (depth == 0) fail("a ')' closes nothing");
        return out;
      }
      if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
        continue;
      }
      std::string item;
      if (c == '(') {
        ++pos_;
        item = sequence(depth + 1);
        if (pos_ >= text_.size()) fail("a '(' is never closed");
        ++pos_;  // ')'
        if (pos_ >= text_.size() || text_[pos_] != '*') fail("a group '(...)' must be followed by *N");
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++pos_;
      } else {
        fail(fmt::format(
            "'{}' is not a layer (E embedding, t transformer layer, m multi-token prediction layer, L loss, | between "
            "stages)",
            c));
      }
      if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        const std::size_t start = pos_;
        std::int64_t count = 0;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && count < 1'000'000'000)
          count = count * 10 + (text_[pos_++] - '0');
        if (pos_ == start) fail("'*' must be followed by a repeat count");
        if (count < 1) fail("a repeat count must be at least 1");
        if (static_cast<double>(item.size()) * static_cast<double>(count) + static_cast<double>(out.size()) >
            static_cast<double>(kMaxUnrolledLayout))
          fail(fmt::format("the repeats unroll to more than {} characters", kMaxUnrolledLayout));
        std::string repeated;
        repeated.reserve(item.size() * static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) repeated += item;
        item = std::move(repeated);
      }
      out += item;
    }
    if (depth > 0) fail("a '(' is never closed");
    return out;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

std::string stage_text(const LayoutStage& s) {
  std::string text = s.embedding ? "E" : "";
  text += s.layers > 0 ? (s.layers == 1 ? std::string("t") : fmt::format("t*{}", s.layers)) : std::string();
  text += s.mtp_layers > 0 ? (s.mtp_layers == 1 ? std::string("m") : fmt::format("m*{}", s.mtp_layers)) : std::string();
  if (s.loss) text += "L";
  return text.empty() ? std::string("(empty)") : text;
}

std::vector<int> counts_from_layout(const std::string& text, int layers, int pipeline, int chunks, int mtp_layers) {
  const std::vector<LayoutStage> stages = parse_pipeline_layout(text);
  const int num_stages = pipeline * chunks;
  if (static_cast<std::int64_t>(stages.size()) != num_stages)
    throw UsageError(
        fmt::format("{} '{}' has {} stages, but --stages {} x --chunks {} is {} (Megatron takes the "
                    "virtual stages from the layout: give --chunks {})",
                    kLayoutOption, text, stages.size(), pipeline, chunks, num_stages,
                    stages.size() % static_cast<std::size_t>(pipeline) == 0
                        ? fmt::format("{}", stages.size() / static_cast<std::size_t>(pipeline))
                        : std::string("a count that makes them equal")));
  std::vector<int> counts;
  int total = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const LayoutStage& s = stages[i];
    const bool first = i == 0;
    const bool last = i + 1 == stages.size();
    auto refuse = [&](const std::string& why) -> void {
      throw UsageError(fmt::format("{} '{}': stage {} ({}, rank {}, chunk {}) {}", kLayoutOption, text, i,
                                   stage_text(s), static_cast<int>(i) % pipeline, static_cast<int>(i) / pipeline, why));
    };
    if (s.embedding && !first) refuse("holds the embedding E: only the first stage may (the schedule feeds stage 0)");
    if (first && !s.embedding) refuse("lacks the embedding E, which opens the first stage");
    if (s.loss && !last) refuse("holds the loss L: only the last stage may");
    if (last && !s.loss) refuse("lacks the loss L, which closes the last stage");
    if (s.mtp_layers > 0 && !last)
      refuse("holds multi-token prediction layers m: pipescope runs them on the last stage, with the loss");
    // Megatron's layout names every MTP layer ("Number of mtp layers in layout must match
    // mtp_num_layers"): a layout without them describes another model.
    if (last && s.mtp_layers != mtp_layers)
      refuse(fmt::format("holds {} multi-token prediction layer(s) m, the model has {} (mtp_num_layers)", s.mtp_layers,
                         mtp_layers));
    total += s.layers;
    if (total > layers) refuse(fmt::format("brings the transformer layers to {}: the model has {}", total, layers));
    counts.push_back(s.layers);
  }
  if (total < layers)
    throw UsageError(
        fmt::format("{} '{}': its {} stages hold {} transformer layers, the model has {} (the last "
                    "stage, {}, ends {} short)",
                    kLayoutOption, text, stages.size(), total, layers, stages.size() - 1, layers - total));
  return counts;
}

// Megatron's uneven first and last stage: each of their chunks holds N / chunks layers; the
// middle ranks share the rest evenly, each of their chunks an equal part.
std::vector<int> counts_with_first_last(const LayoutOptions& o, int layers, int pipeline, int chunks) {
  const char* first_option = "--decoder-first-pipeline-num-layers";
  const char* last_option = "--decoder-last-pipeline-num-layers";
  if (pipeline < 2)
    throw UsageError(fmt::format("{}: needs --stages 2 or more (one pipeline rank is both the first and the last)",
                                 o.first_stage_layers ? first_option : last_option));
  int middle_layers = layers;
  int middle_ranks = pipeline;
  auto take = [&](const std::optional<int>& count, const char* option) {
    if (!count) return;
    if (*count < 1) throw UsageError(fmt::format("{} {}: must be at least 1", option, *count));
    if (*count % chunks != 0)
      throw UsageError(fmt::format("{} {}: must divide by --chunks {} (each of the rank's chunks holds an equal part)",
                                   option, *count, chunks));
    middle_layers -= *count;
    --middle_ranks;
  };
  take(o.first_stage_layers, first_option);
  take(o.last_stage_layers, last_option);
  const std::string given = o.describe();
  if (middle_layers < 0) throw UsageError(fmt::format("{}: more layers than the model's {}", given, layers));
  if ((middle_layers > 0) != (middle_ranks > 0))
    throw UsageError(fmt::format("{}: leaves {} layers for {} middle pipeline ranks (Megatron needs both or neither)",
                                 given, middle_layers, middle_ranks));
  if (middle_ranks > 0 && middle_layers % middle_ranks != 0)
    throw UsageError(fmt::format("{}: the other {} layers do not divide over the {} middle pipeline ranks", given,
                                 middle_layers, middle_ranks));
  const int per_middle_rank = middle_ranks > 0 ? middle_layers / middle_ranks : 0;
  if (per_middle_rank % chunks != 0)
    throw UsageError(
        fmt::format("{}: each middle rank's {} layers do not divide by --chunks {}", given, per_middle_rank, chunks));
  std::vector<int> counts(static_cast<std::size_t>(pipeline * chunks), per_middle_rank / chunks);
  const auto ranks = static_cast<std::size_t>(pipeline);
  for (std::size_t chunk = 0; chunk < static_cast<std::size_t>(chunks); ++chunk) {
    if (o.first_stage_layers) counts[chunk * ranks] = *o.first_stage_layers / chunks;
    if (o.last_stage_layers) counts[chunk * ranks + ranks - 1] = *o.last_stage_layers / chunks;
  }
  return counts;
}

// Megatron's accounting of the embedding and the loss as layers: they join the even split, and
// the first chunk of the first rank (the last chunk of the last) builds one layer fewer.
std::vector<int> counts_with_accounting(const LayoutOptions& o, int layers, int pipeline, int chunks) {
  const int counted = layers + (o.account_for_embedding ? 1 : 0) + (o.account_for_loss ? 1 : 0);
  const std::string given = o.describe();
  if (counted % pipeline != 0)
    throw UsageError(
        fmt::format("{}: {} layers (the model's {} and the counted embedding/loss) do not divide by "
                    "--stages {}",
                    given, counted, layers, pipeline));
  if ((counted / pipeline) % chunks != 0)
    throw UsageError(
        fmt::format("{}: each rank's {} layers do not divide by --chunks {}", given, counted / pipeline, chunks));
  std::vector<int> counts(static_cast<std::size_t>(pipeline * chunks), counted / pipeline / chunks);
  if (o.account_for_embedding) --counts.front();
  if (o.account_for_loss) --counts.back();
  if (counts.front() < 0 || counts.back() < 0)
    throw UsageError(fmt::format("{}: the first or last stage would hold fewer than no layers", given));
  return counts;
}

}  // namespace

std::string LayoutOptions::describe() const {
  std::string text;
  auto add = [&](const std::string& part) { text += (text.empty() ? "" : " ") + part; };
  if (first_stage_layers) add(fmt::format("--decoder-first-pipeline-num-layers {}", *first_stage_layers));
  if (last_stage_layers) add(fmt::format("--decoder-last-pipeline-num-layers {}", *last_stage_layers));
  if (account_for_embedding) add("--account-for-embedding-in-pipeline-split");
  if (account_for_loss) add("--account-for-loss-in-pipeline-split");
  if (!layout.empty()) add(fmt::format("{} '{}'", kLayoutOption, layout));
  return text;
}

std::vector<LayoutStage> parse_pipeline_layout(std::string_view text) {
  const std::string unrolled = LayoutUnroller(text).unroll();
  if (unrolled.empty()) throw UsageError(fmt::format("{}: empty (give at least 'EtL')", kLayoutOption));
  std::vector<LayoutStage> stages(1);
  for (char c : unrolled) {
    LayoutStage& s = stages.back();
    switch (c) {
      case '|': stages.emplace_back(); break;
      case 't': ++s.layers; break;
      case 'm': ++s.mtp_layers; break;
      case 'E':
        if (s.embedding || s.layers > 0 || s.mtp_layers > 0 || s.loss)
          throw UsageError(
              fmt::format("{} '{}': stage {}: E must open its stage, once", kLayoutOption, text, stages.size() - 1));
        s.embedding = true;
        break;
      case 'L':
        if (s.loss) throw UsageError(fmt::format("{} '{}': stage {}: L twice", kLayoutOption, text, stages.size() - 1));
        s.loss = true;
        break;
      default: break;
    }
    if ((c == 't' || c == 'm') && stages.back().loss)
      throw UsageError(fmt::format("{} '{}': stage {}: a transformer layer after the loss L", kLayoutOption, text,
                                   stages.size() - 1));
    if (c == 't' && stages.back().mtp_layers > 0)
      throw UsageError(fmt::format("{} '{}': stage {}: a decoder layer t after a multi-token prediction layer m",
                                   kLayoutOption, text, stages.size() - 1));
  }
  const auto embeddings = std::count_if(stages.begin(), stages.end(), [](const LayoutStage& s) { return s.embedding; });
  const auto losses = std::count_if(stages.begin(), stages.end(), [](const LayoutStage& s) { return s.loss; });
  if (embeddings != 1 || losses != 1)
    throw UsageError(fmt::format("{} '{}': needs exactly one E (embedding) and one L (loss); it has {} and {}",
                                 kLayoutOption, text, embeddings, losses));
  return stages;
}

std::vector<int> split_layers(int layers, int num_stages) {
  if (num_stages < 1) throw UsageError("the model needs at least one stage");
  // Megatron-LM's rule for layers that do not divide (the Zero Bubble fork's
  // --allow-padding-num-layers; Megatron-core's account_for_embedding/loss_in_pipeline_split when
  // the division leaves two): every stage gets as many layers as the rounded-up division, and the
  // stages short of the total take one fewer each, the last (which carries the head and the loss)
  // first, then the first (the embedding), then the second, third and so on.
  const int per_stage = (layers + num_stages - 1) / num_stages;
  const int short_stages = per_stage * num_stages - layers;
  // Only the first and the last stage may be left empty: they still run the embedding or the head.
  if (layers < 1 || (per_stage == 1 && short_stages > 2))
    throw UsageError("the model has " + std::to_string(layers) + " layers, too few for " + std::to_string(num_stages) +
                     " stages (--stages x --chunks): at most two more stages than layers, as only the first "
                     "and the last may hold no layer (the embedding, the head)");
  std::vector<int> per_stage_layers(static_cast<std::size_t>(num_stages), per_stage);
  for (int i = 0; i < short_stages; ++i) --per_stage_layers[static_cast<std::size_t>(i == 0 ? num_stages - 1 : i - 1)];
  return per_stage_layers;
}

void check_layout_options(const LayoutOptions& o) {
  const bool uneven = o.first_stage_layers || o.last_stage_layers;
  const bool accounting = o.account_for_embedding || o.account_for_loss;
  if (!o.layout.empty() && (uneven || accounting))
    throw UsageError(
        fmt::format("{}: a layout string cannot be combined with the other layout options (Megatron "
                    "refuses them together)",
                    o.describe()));
  if (uneven && accounting)
    throw UsageError(
        fmt::format("{}: Megatron refuses the uneven first/last stage together with counting the "
                    "embedding or the loss as a layer",
                    o.describe()));
  if (o.first_stage_layers && *o.first_stage_layers < 1)
    throw UsageError(fmt::format("--decoder-first-pipeline-num-layers {}: must be at least 1", *o.first_stage_layers));
  if (o.last_stage_layers && *o.last_stage_layers < 1)
    throw UsageError(fmt::format("--decoder-last-pipeline-num-layers {}: must be at least 1", *o.last_stage_layers));
  if (!o.layout.empty()) (void)parse_pipeline_layout(o.layout);
}

std::vector<int> stage_layer_counts(const LayoutOptions& o, int layers, int pipeline, int chunks, int mtp_layers) {
  if (pipeline < 1 || chunks < 1) throw UsageError("--stages and --chunks must be at least 1");
  check_layout_options(o);
  const bool uneven = o.first_stage_layers || o.last_stage_layers;
  const bool accounting = o.account_for_embedding || o.account_for_loss;
  if (!o.layout.empty()) return counts_from_layout(o.layout, layers, pipeline, chunks, mtp_layers);
  if (uneven) return counts_with_first_last(o, layers, pipeline, chunks);
  if (accounting) return counts_with_accounting(o, layers, pipeline, chunks);
  return split_layers(layers, pipeline * chunks);
}

std::string layout_string(const std::vector<int>& counts) {
  std::string text;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) text += "|";
    LayoutStage s;
    s.layers = counts[i];
    s.embedding = i == 0;
    s.loss = i + 1 == counts.size();
    if (s.embedding) text += "E";
    if (s.layers == 1) text += "t";
    if (s.layers > 1) text += fmt::format("t*{}", s.layers);
    if (s.loss) text += "L";
  }
  return text;
}

LayoutOptions megatron_layout_of_split(int layers, int pipeline, int chunks) {
  const std::vector<int> counts = split_layers(layers, pipeline * chunks);
  LayoutOptions options;
  const int stages = pipeline * chunks;
  const int short_stages = ((layers + stages - 1) / stages) * stages - layers;
  if (short_stages == 0) return options;
  options.account_for_loss = true;
  options.account_for_embedding = short_stages == 2;
  if (short_stages <= 2) {
    // Megatron's accounting splits by rank first: it gives the same counts only where they
    // divide by the chunks too.
    try {
      if (counts_with_accounting(options, layers, pipeline, chunks) == counts) return options;
    } catch (const UsageError&) {
    }
  }
  LayoutOptions string_layout;
  string_layout.layout = layout_string(counts);
  return string_layout;
}

}  // namespace pipescope::sim
