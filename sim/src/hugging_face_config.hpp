// A Hugging Face config.json (the file a model's Hub page carries, and what torchtitan, vLLM and
// transformers users have of a model) read as a pipescope model file: its fields renamed to SPEC
// section 6's, and what each model_type implies but does not write (a gated MLP, tied
// embeddings, which layers carry experts, which attend within a window) filled in.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipescope::sim::detail {

// A config.json names its model_type; a pipescope model file never does.
bool is_hugging_face_config(const nlohmann::json& j);

// The model_types read (those of transformers' configuration classes for Llama, Mistral, Mixtral,
// Qwen2/3 and their MoE, DeepSeek-V2/V3 and Kimi K2, GLM-4.5, MiniMax-M2, GPT-OSS, Llama 4,
// Gemma 1-3, OLMo 2 and OLMoE, Granite, Phi-3, GPT-NeoX, GPT-2, and the hybrid Nemotron-H).
const std::vector<std::string>& hugging_face_model_types();

// The model-file object the config describes, at `seq_length` tokens a sequence: a config gives
// only the longest context the model supports (max_position_embeddings), not the length it is
// trained at, so the caller's --seq-length is required. Throws UsageError naming `source` and the
// config's field (or --seq-length).
nlohmann::json model_fields_from_hugging_face(const nlohmann::json& config, const std::string& source,
                                              std::optional<int> seq_length);

// `text` with Python's non-finite literals (Infinity, -Infinity, NaN) outside strings written as
// null: transformers saves configs with Python's json module, which writes them (Nemotron-H's
// time_step_limit), and JSON has no such values. No field pipescope reads takes one.
std::string with_nonfinite_as_null(std::string_view text);

}  // namespace pipescope::sim::detail
