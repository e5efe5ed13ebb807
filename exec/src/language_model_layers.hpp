// The layers that the built-in language models share (tiny-gpt, tiny-moe): the token and
// position embedding, causal self-attention, the final norm and the head tied to the embedding.
#pragma once

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>

#include "pipescope/exec/model.hpp"

namespace pipescope::exec::language_model {

// Causal multi-head self-attention of x [batch, seq, hidden] with the fused q/k/v projection
// `qkv` and the output projection `proj` (x's residual is the caller's).
inline at::Tensor causal_self_attention(const at::Tensor& x, torch::nn::Linear& qkv_projection, torch::nn::Linear& proj,
                                        std::int64_t heads) {
  const auto batch = x.size(0), seq = x.size(1), hidden = x.size(2), head_dim = hidden / heads;
  auto qkv = qkv_projection->forward(x).chunk(3, -1);
  auto split_heads = [&](const at::Tensor& t) { return t.reshape({batch, seq, heads, head_dim}).transpose(1, 2); };
  auto q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]);
  auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  auto causal = at::ones({seq, seq}, at::TensorOptions().dtype(at::kBool).device(x.device())).tril();
  scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
  auto attended = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({batch, seq, hidden});
  return proj->forward(attended);
}

class TokenEmbedding : public Layer {
 public:
  TokenEmbedding(int vocab, int hidden, int seq_len)
      : weight_(register_parameter("weight", at::empty({vocab, hidden}))),
        position_(register_module("position", torch::nn::Embedding(seq_len, hidden))) {}
  TensorList forward_layers(const TensorList& in) override {
    const at::Tensor& tokens = in[0];
    auto positions = at::arange(tokens.size(1), at::TensorOptions().dtype(at::kLong).device(tokens.device()));
    return {at::embedding(weight_, tokens) + position_->forward(positions)};
  }

 private:
  at::Tensor weight_;
  torch::nn::Embedding position_;
};

class FinalNorm : public Layer {
 public:
  explicit FinalNorm(int hidden) : ln_(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))) {}
  TensorList forward_layers(const TensorList& in) override { return {ln_->forward(in[0])}; }

 private:
  torch::nn::LayerNorm ln_;
};

// The language-model head: logits against the (tied) token embedding.
class TiedHead : public Layer {
 public:
  TiedHead(int vocab, int hidden) : weight_(register_parameter("weight", at::empty({vocab, hidden}))) {}
  TensorList forward_layers(const TensorList& in) override { return {at::matmul(in[0], weight_.t())}; }

 private:
  at::Tensor weight_;
};

inline int attention_heads(int hidden) {
  for (int heads : {4, 2})
    if (hidden % heads == 0 && hidden / heads >= 8) return heads;
  return 1;
}

}  // namespace pipescope::exec::language_model
