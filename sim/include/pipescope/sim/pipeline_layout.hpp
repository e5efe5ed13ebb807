// Which transformer layers each pipeline stage holds, by Megatron-Core's rules: its uneven first
// and last stage (--decoder-first/last-pipeline-num-layers), the embedding and the loss counted
// as layers (--account-for-embedding/loss-in-pipeline-split), or a layout string in its grammar
// (--pipeline-model-parallel-layout); with none of them, pipescope's own split, which also takes
// layer counts Megatron refuses (docs/MODEL.md, "Layers per stage"). The embedding is always on
// the first stage and the loss (the head) on the last: the schedules feed stage 0 and take the
// loss from the last stage.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipescope::sim {

struct LayoutOptions {
  std::optional<int> first_stage_layers;  // --decoder-first-pipeline-num-layers
  std::optional<int> last_stage_layers;   // --decoder-last-pipeline-num-layers
  bool account_for_embedding = false;     // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;          // --account-for-loss-in-pipeline-split
  std::string layout;                     // --pipeline-model-parallel-layout; empty: none

  // No option given: pipescope's split.
  bool is_default() const {
    return !first_stage_layers && !last_stage_layers && !account_for_embedding && !account_for_loss && layout.empty();
  }
  // The options, as a Megatron command line would give them ("" when none).
  std::string describe() const;
  friend bool operator==(const LayoutOptions&, const LayoutOptions&) = default;
};

// Decoder layers of each of the pipeline x chunks stages (stage i on rank i mod pipeline,
// Megatron's virtual stages in rank order). Throws UsageError naming the option (and, for a
// layout string, the stage) when the options do not describe `layers` layers on that many
// stages, or when they contradict each other as Megatron says they do. The model's
// `mtp_layers` multi-token prediction layers run on the last stage: a layout string may name
// them there (`m`, before `L`; all of them), or leave them out.
std::vector<int> stage_layer_counts(const LayoutOptions& options, int layers, int pipeline, int chunks,
                                    int mtp_layers = 0);

// What can be checked without the model or the sizes: the combinations Megatron refuses, a
// first/last stage count below 1, the layout string's grammar. Throws UsageError naming the option
// (stage_layer_counts checks this first; `ppsim plan` before its search).
void check_layout_options(const LayoutOptions& options);

// pipescope's split where nothing is given: the rounded-up share on every stage, the stages short
// of the total one fewer each, the last first, then the first, the second... Throws UsageError
// when a stage other than the first and the last would hold no layer.
std::vector<int> split_layers(int layers, int num_stages);

// One stage of a parsed layout string: its transformer layers, its multi-token prediction layers
// (m) and whether it holds the embedding (E) or the loss (L).
struct LayoutStage {
  int layers = 0;
  bool embedding = false;
  bool loss = false;
  int mtp_layers = 0;
  friend bool operator==(const LayoutStage&, const LayoutStage&) = default;
};

// Megatron's layout grammar: `E` embedding, `t` a transformer layer, `m` a multi-token prediction
// layer, `L` loss, `|` between stages,
// `(...)*N` and `x*N` repeats, commas ignored. Throws UsageError naming the option and the place
// where the text does not parse. Checks the grammar only (stage_layer_counts checks the model).
std::vector<LayoutStage> parse_pipeline_layout(std::string_view text);

// The Megatron options that give pipescope's split of `layers` over pipeline x chunks stages:
// none where they divide; the loss (and the embedding) counted as a layer where the split leaves
// one (two) stages a layer short, as the Llama 3 paper's 126 layers sit on 16 stages; else a
// layout string. The planner names a row's layout with it.
LayoutOptions megatron_layout_of_split(int layers, int pipeline, int chunks);

// A layout string of the given per-stage layer counts ("Et*2|t*2|t*2|tL").
std::string layout_string(const std::vector<int>& counts);

}  // namespace pipescope::sim
