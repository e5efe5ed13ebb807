#include "hybrid_presets.hpp"

#include <string>

namespace pipescope::sim::detail {

namespace {

// What NVIDIA's hybrid models share: squared-ReLU MLPs and experts (two matrices), RMSNorm layers
// without biases or dropout, untied embeddings, a fused attention kernel, Megatron's Mamba-2
// defaults (heads of 64, 8 groups, a state of 128, a convolution of 4, chunks of 128), sequences
// of 8192 (their recipes').
ModelSpec nemotron_base() {
  ModelSpec m;
  m.gated_mlp = false;
  m.tied_embeddings = false;
  m.flash_attention = true;
  m.dropout = false;
  m.biases = false;
  m.seq = 8192;
  m.vocab = 131072;
  m.head_dim = 128;
  return m;
}

// nvidia/Nemotron-H-56B-Base-8K config.json: 54 Mamba-2, 54 MLP and 10 attention blocks.
ModelSpec nemotron_h_56b() {
  ModelSpec m = nemotron_base();
  m.name = "nemotron-h-56b";
  m.hybrid_pattern =
      "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
      "M-M-M-M-M-";
  m.layers = static_cast<int>(m.hybrid_pattern.size());
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.ffn_hidden = 32768;
  m.mamba_num_heads = 256;
  m.mamba_state_dim = 256;
  return m;
}

// nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json: 23 Mamba-2, 23 expert and 6 attention
// blocks; 128 experts of 1856, 6 a token, one shared of 3712.
ModelSpec nemotron_3_nano() {
  ModelSpec m = nemotron_base();
  m.name = "nemotron-3-nano-30b-a3b";
  m.hybrid_pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  m.layers = static_cast<int>(m.hybrid_pattern.size());
  m.hidden = 2688;
  m.heads = 32;
  m.kv_heads = 2;
  m.ffn_hidden = 1856;
  m.mamba_num_heads = 64;
  m.num_experts = 128;
  m.top_k = 6;
  m.moe_ffn_hidden = 1856;
  m.shared_experts = 1;
  m.shared_expert_ffn_hidden = 3712;
  return m;
}

// nvidia/NVIDIA-Nemotron-3-Super-120B-A12B config.json: 40 Mamba-2, 40 expert and 8 attention
// blocks; 512 latent experts (LatentMoE, 1024 wide) of 2688, 22 a token, one shared of 5376; one
// MTP layer.
ModelSpec nemotron_3_super() {
  ModelSpec m = nemotron_base();
  m.name = "nemotron-3-super-120b-a12b";
  m.hybrid_pattern = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME";
  m.layers = static_cast<int>(m.hybrid_pattern.size());
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 2;
  m.ffn_hidden = 2688;
  m.mamba_num_heads = 128;
  m.num_experts = 512;
  m.top_k = 22;
  m.moe_ffn_hidden = 2688;
  m.moe_latent_size = 1024;
  m.shared_experts = 1;
  m.shared_expert_ffn_hidden = 5376;
  m.mtp_num_layers = 1;
  return m;
}

// Qwen3.5's text models: every fourth layer gated attention (heads of 256), the others Gated
// DeltaNets (16 key heads of 128), each followed by Qwen's experts (SwiGLU, one shared expert);
// one MTP layer; vocabulary 248320, untied; sequences of 4096 (as the other MoE presets).
ModelSpec qwen3_5_base(int layers) {
  ModelSpec m;
  m.gated_mlp = true;
  m.tied_embeddings = false;
  m.flash_attention = true;
  m.seq = 4096;
  m.vocab = 248320;
  m.head_dim = 256;
  m.kv_heads = 2;
  m.attention_output_gate = true;
  m.linear_num_key_heads = 16;
  m.mtp_num_layers = 1;
  for (int i = 0; i < layers; ++i) m.hybrid_pattern += std::string((i + 1) % 4 == 0 ? "*" : "G") + "E";
  m.layers = static_cast<int>(m.hybrid_pattern.size());
  return m;
}

// Qwen/Qwen3.5-35B-A3B config.json (its text_config): 40 layers of 2048, 256 experts of 512, 8 a
// token.
ModelSpec qwen3_5_35b_a3b() {
  ModelSpec m = qwen3_5_base(40);
  m.name = "qwen3.5-35b-a3b";
  m.hidden = 2048;
  m.heads = 16;
  m.linear_num_value_heads = 32;
  m.num_experts = 256;
  m.top_k = 8;
  m.moe_ffn_hidden = 512;
  m.shared_experts = 1;
  m.shared_expert_ffn_hidden = 512;
  return m;
}

// Qwen/Qwen3.5-397B-A17B config.json (its text_config): 60 layers of 4096, 512 experts of 1024, 10
// a token.
ModelSpec qwen3_5_397b_a17b() {
  ModelSpec m = qwen3_5_base(60);
  m.name = "qwen3.5-397b-a17b";
  m.hidden = 4096;
  m.heads = 32;
  m.linear_num_value_heads = 64;
  m.num_experts = 512;
  m.top_k = 10;
  m.moe_ffn_hidden = 1024;
  m.shared_experts = 1;
  m.shared_expert_ffn_hidden = 1024;
  return m;
}

}  // namespace

std::vector<ModelSpec> hybrid_presets() {
  return {nemotron_h_56b(), nemotron_3_nano(), nemotron_3_super(), qwen3_5_35b_a3b(), qwen3_5_397b_a17b()};
}

}  // namespace pipescope::sim::detail
