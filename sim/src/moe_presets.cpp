#include "moe_presets.hpp"

namespace pipescope::sim::detail {

namespace {

// What the presets share: SwiGLU experts, RMSNorm-style layers without biases or dropout,
// untied embeddings, FlashAttention, pre-trained on sequences of 4096 (the length Megatron's and
// NeMo's recipes for Mixtral, Qwen3 and DeepSeek-V3 train with; Llama 4's and Grok-1's use 8192).
ModelSpec gated_moe_base() {
  ModelSpec m;
  m.gated_mlp = true;
  m.tied_embeddings = false;
  m.flash_attention = true;
  m.seq = 4096;
  return m;
}

// mistralai/Mixtral-8x7B-v0.1 config.json: 8 experts, 2 a token, every layer.
ModelSpec mixtral_8x7b() {
  ModelSpec m = gated_moe_base();
  m.name = "mixtral-8x7b";
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.vocab = 32000;
  m.num_experts = 8;
  m.top_k = 2;
  return m;
}

// mistralai/Mixtral-8x22B-v0.1 config.json.
ModelSpec mixtral_8x22b() {
  ModelSpec m = mixtral_8x7b();
  m.name = "mixtral-8x22b";
  m.layers = 56;
  m.hidden = 6144;
  m.heads = 48;
  m.ffn_hidden = 16384;
  m.vocab = 32768;
  return m;
}

// Qwen/Qwen3-235B-A22B config.json: 128 experts of 1536, 8 a token, every layer; 64 query heads
// of 128 over a hidden of 4096 (the query is twice the hidden), 4 key/value heads.
ModelSpec qwen3_235b_a22b() {
  ModelSpec m = gated_moe_base();
  m.name = "qwen3-235b-a22b";
  m.layers = 94;
  m.hidden = 4096;
  m.heads = 64;
  m.kv_heads = 4;
  m.head_dim = 128;
  m.ffn_hidden = 12288;
  m.vocab = 151936;
  m.num_experts = 128;
  m.top_k = 8;
  m.moe_ffn_hidden = 1536;
  return m;
}

// deepseek-ai/DeepSeek-V3 config.json and the DeepSeek-V3 technical report (arXiv:2412.19437):
// 256 routed experts of 2048, 8 a token, one shared expert, the first 3 of 61 layers dense
// (FFN 18432), multi-head latent attention (q_lora 1536, kv_lora 512, 128 + 64 query/key and
// 128 value per head). Its multi-token-prediction module (14B more) is not part of the 671B.
ModelSpec deepseek_v3() {
  ModelSpec m = gated_moe_base();
  m.name = "deepseek-v3";
  m.layers = 61;
  m.hidden = 7168;
  m.heads = 128;
  m.ffn_hidden = 18432;
  m.vocab = 129280;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_head_dim = 128;
  m.qk_pos_emb_head_dim = 64;
  m.v_head_dim = 128;
  m.num_experts = 256;
  m.top_k = 8;
  m.moe_ffn_hidden = 2048;
  m.shared_experts = 1;
  m.first_k_dense_layers = 3;
  return m;
}

// Qwen/Qwen3-30B-A3B config.json: 128 experts of 768, 8 a token, every layer; 32 query heads of
// 128 over a hidden of 2048, 4 key/value heads.
ModelSpec qwen3_30b_a3b() {
  ModelSpec m = gated_moe_base();
  m.name = "qwen3-30b-a3b";
  m.layers = 48;
  m.hidden = 2048;
  m.heads = 32;
  m.kv_heads = 4;
  m.head_dim = 128;
  m.ffn_hidden = 6144;
  m.vocab = 151936;
  m.num_experts = 128;
  m.top_k = 8;
  m.moe_ffn_hidden = 768;
  return m;
}

// meta-llama/Llama-4-Maverick-17B-128E config.json (its text model): 128 experts of 8192, 1 a
// token, and a shared expert of 8192, in every other layer (interleave_moe_layer_step 2: layers
// 1, 3, 5, ..., here one dense layer first, then moe_layer_freq 2); the other layers dense
// (intermediate_size_mlp 16384).
// Chunked attention (attention_chunk_size 8192) in 3 layers of 4, every 4th without RoPE and full
// (no_rope_layer_interval 4): at the preset's sequence of 8192 a chunk is the whole sequence, so it
// changes attention's core only where a model file's seq is longer. The vision encoder is left out:
// it is not in the language model's step.
ModelSpec llama4_maverick() {
  ModelSpec m = gated_moe_base();
  m.name = "llama4-maverick";
  m.layers = 48;
  m.hidden = 5120;
  m.heads = 40;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 16384;
  m.vocab = 202048;
  m.seq = 8192;
  m.num_experts = 128;
  m.top_k = 1;
  m.moe_ffn_hidden = 8192;
  m.shared_experts = 1;
  m.shared_expert_ffn_hidden = 8192;
  m.moe_layer_freq = 2;
  m.first_k_dense_layers = 1;
  m.attention_chunk_size = 8192;
  m.nope_layer_interval = 4;
  return m;
}

// meta-llama/Llama-4-Scout-17B-16E config.json: 16 experts of 8192 and a shared one in every
// layer; otherwise Maverick's shape.
ModelSpec llama4_scout() {
  ModelSpec m = llama4_maverick();
  m.name = "llama4-scout";
  m.num_experts = 16;
  m.moe_layer_freq = 1;
  m.first_k_dense_layers = 0;
  m.ffn_hidden = 8192;  // no dense layer: the experts' width
  return m;
}

// xai-org/grok-1 (its model.py's configuration): 8 experts of 32768, 2 a token, every layer; 48
// query heads of 128, 8 key/value heads, a vocabulary of 131072.
ModelSpec grok1() {
  ModelSpec m = gated_moe_base();
  m.name = "grok-1";
  m.layers = 64;
  m.hidden = 6144;
  m.heads = 48;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 32768;
  m.vocab = 131072;
  m.seq = 8192;
  m.num_experts = 8;
  m.top_k = 2;
  m.moe_ffn_hidden = 32768;
  return m;
}

// openai/gpt-oss-120b config.json and OpenAI's gpt-oss model card (2025): 128 experts of 2880, 4 a
// token, every layer; 64 query heads of 64 over a hidden of 2880, 8 key/value heads; biases on the
// attention's and the experts' matrices; layers alternately attending within a sliding window of
// 128 tokens and to the whole sequence (layer_types, the first windowed: Megatron's
// window_attn_skip_freq 2). The experts' biases (8640 a expert), the attention sinks (one logit a
// head) and the clamped SwiGLU are below 0.1 % of the parameters and FLOPs: left out.
ModelSpec gpt_oss_120b() {
  ModelSpec m = gated_moe_base();
  m.name = "gpt-oss-120b";
  m.layers = 36;
  m.hidden = 2880;
  m.heads = 64;
  m.kv_heads = 8;
  m.head_dim = 64;
  m.ffn_hidden = 2880;
  m.vocab = 201088;
  m.biases = true;
  m.window_size = 127;  // Megatron's (127, 0): Hugging Face's sliding_window of 128
  m.window_attn_skip_freq = 2;
  m.num_experts = 128;
  m.top_k = 4;
  m.moe_ffn_hidden = 2880;
  return m;
}

// openai/gpt-oss-20b config.json: 24 layers and 32 experts; otherwise gpt-oss-120b's shape.
ModelSpec gpt_oss_20b() {
  ModelSpec m = gpt_oss_120b();
  m.name = "gpt-oss-20b";
  m.layers = 24;
  m.num_experts = 32;
  return m;
}

}  // namespace

std::vector<ModelSpec> moe_presets() {
  return {mixtral_8x7b(),    mixtral_8x22b(), qwen3_235b_a22b(), qwen3_30b_a3b(), deepseek_v3(),
          llama4_maverick(), llama4_scout(),  grok1(),           gpt_oss_120b(),  gpt_oss_20b()};
}

}  // namespace pipescope::sim::detail
