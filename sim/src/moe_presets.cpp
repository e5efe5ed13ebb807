#include "moe_presets.hpp"

namespace pipescope::sim::detail {

namespace {

// What the four presets share: SwiGLU experts, RMSNorm-style layers without biases or dropout,
// untied embeddings, FlashAttention, pre-trained on sequences of 4096 (the length Megatron's and
// NeMo's recipes for these models train with).
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

}  // namespace

std::vector<ModelSpec> moe_presets() { return {mixtral_8x7b(), mixtral_8x22b(), qwen3_235b_a22b(), deepseek_v3()}; }

}  // namespace pipescope::sim::detail
