// tiny-moe: token embedding, then blocks of causal self-attention and a mixture of experts
// (a linear router picking the top-k experts of each token from a softmax, each expert a
// GELU FFN, an optional shared expert every token goes through, and the Switch Transformer's
// auxiliary load-balancing loss), a final norm and the head tied to the embedding.
//
// Placement: with expert parallelism E, a rank holds experts [e x X/E, (e + 1) x X/E) of every
// block, named by expert id ("expert5.fc1.weight"), and exchanges tokens with the other E - 1
// ranks of its group by all-to-all (dropless: every token reaches its experts). Each expert is
// seeded from (seed, layer, expert id), so its weights do not depend on E or on the partition.
#include "moe/moe_model.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <utility>

#include "language_model_layers.hpp"
#include "moe/all_to_all.hpp"
#include "moe/expert_calls.hpp"
#include "pipescope/core/errors.hpp"
#include "runtime/clock.hpp"

namespace pipescope::exec {
namespace {

// An expert: fc1, GELU, fc2.
class ExpertFfn : public torch::nn::Module {
 public:
  ExpertFfn(int hidden, int ffn_hidden)
      : fc1_(register_module("fc1", torch::nn::Linear(hidden, ffn_hidden))),
        fc2_(register_module("fc2", torch::nn::Linear(ffn_hidden, hidden))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2_->forward(at::gelu(fc1_->forward(x))); }

  // torch's default Linear initialisation (uniform in +-1/sqrt(fan_in)) from `generator`.
  void reset_from(at::Generator generator) {
    at::NoGradGuard no_grad;
    for (auto* fc : {&fc1_, &fc2_}) {
      const double bound = 1.0 / std::sqrt(static_cast<double>((*fc)->weight.size(1)));
      (*fc)->weight.uniform_(-bound, bound, generator);
      (*fc)->bias.uniform_(-bound, bound, generator);
    }
  }

 private:
  torch::nn::Linear fc1_, fc2_;
};

std::int64_t linear_parameter_count(std::int64_t in, std::int64_t out) { return in * out + out; }

struct MoeBlockSizes {
  int hidden = 0;
  int heads = 1;
  int experts = 1;
  int top_k = 1;
  int ffn_hidden = 1;
  int shared_ffn_hidden = 0;
  double aux_loss_coefficient = 0;
};

class MoeTransformerBlock : public MoeBlock {
 public:
  MoeTransformerBlock(const MoeBlockSizes& sizes, std::shared_ptr<ExpertParallel> expert_parallel,
                      std::uint64_t expert_seed, std::string name)
      : sizes_(sizes),
        expert_parallel_(std::move(expert_parallel)),
        name_(std::move(name)),
        ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({sizes.hidden})))),
        qkv_(register_module("qkv", torch::nn::Linear(sizes.hidden, 3 * sizes.hidden))),
        proj_(register_module("proj", torch::nn::Linear(sizes.hidden, sizes.hidden))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({sizes.hidden})))),
        router_(register_module("router",
                                torch::nn::Linear(torch::nn::LinearOptions(sizes.hidden, sizes.experts).bias(false)))) {
    if (sizes.shared_ffn_hidden > 0)
      shared_expert_ =
          register_module("shared_expert", std::make_shared<ExpertFfn>(sizes.hidden, sizes.shared_ffn_hidden));
    // The dense parts above drew from the layer's seed; the experts draw from their own, so a
    // rank's experts are the same whichever others it holds.
    const int first = expert_parallel_->first_expert();
    for (int e = first; e < first + expert_parallel_->experts_per_rank(); ++e) {
      auto expert =
          register_module(fmt::format("expert{}", e), std::make_shared<ExpertFfn>(sizes.hidden, sizes.ffn_hidden));
      expert->reset_from(at::make_generator<at::CPUGeneratorImpl>(expert_seed ^ (0x9E3779B97F4A7C15ull * (e + 1))));
      experts_.push_back(std::move(expert));
    }
  }

  TensorList forward_layers(const TensorList& in) override {
    const at::Tensor& x = in[0];
    auto h = x + language_model::causal_self_attention(ln1_->forward(x), qkv_, proj_, sizes_.heads);
    auto tokens = ln2_->forward(h).reshape({-1, sizes_.hidden});
    return {h + mixture(tokens).view(h.sizes())};
  }

  at::Tensor run_local_expert(int local, const at::Tensor& rows) override {
    return experts_.at(static_cast<std::size_t>(local))->forward(rows);
  }
  TensorList local_expert_parameters(int local) const override {
    return experts_.at(static_cast<std::size_t>(local))->parameters();
  }

 private:
  at::Tensor mixture(const at::Tensor& tokens) {
    const std::int64_t n = tokens.size(0), k = sizes_.top_k, experts = sizes_.experts;
    if (expert_parallel_->size() > 1 && !expert_parallel_->distributed())
      throw UsageError(
          fmt::format("MoE layer '{}': expert parallelism {} is not connected to the ranks (ExpertParallel::connect "
                      "before the runtime)",
                      name_, expert_parallel_->size()));
    // Routing in fp32, as Megatron's router does in 16-bit runs.
    auto probs = at::softmax(router_->forward(tokens).to(at::kFloat), -1);
    auto [top_probs, top_experts] = probs.topk(k, -1);
    auto weights = k > 1 ? top_probs / top_probs.sum(-1, true) : top_probs;
    auto assigned_expert = top_experts.reshape({-1});  // n x k assignments, token-major
    auto counts = at::bincount(assigned_expert, {}, experts);
    // Switch's auxiliary loss: X * sum_e (fraction of assignments to e) x (mean probability of e).
    auto fraction = counts.to(at::kFloat) / static_cast<double>(n * k);
    auto aux_loss = (fraction * probs.mean(0)).sum() * (sizes_.aux_loss_coefficient * static_cast<double>(experts));

    // Assignments sorted by expert (stable: token order within an expert), so each expert's and
    // each rank's rows are contiguous.
    auto order = at::argsort(assigned_expert, /*stable=*/true, 0);
    auto routed = tokens.index_select(0, at::div(order, k, "trunc"));
    const at::Tensor counts_here = counts.cpu();
    std::vector<std::int64_t> histogram(counts_here.data_ptr<std::int64_t>(),
                                        counts_here.data_ptr<std::int64_t>() + experts);

    at::Tensor expert_outputs = expert_parallel_->distributed() ? run_experts_across_ranks(routed, counts, histogram)
                                                                : run_local_experts(routed, histogram, 0);
    auto per_slot = expert_outputs.index_select(0, at::argsort(order, /*stable=*/true, 0)).view({n, k, sizes_.hidden});
    auto out = (per_slot * weights.to(per_slot.scalar_type()).unsqueeze(-1)).sum(1);
    if (shared_expert_) out = out + shared_expert_->forward(tokens);
    return moe::attach_aux_loss(out, aux_loss, expert_parallel_->aux_gradient_scale());
  }

  // Rows sorted by expert, `counts[first + l]` of them for local expert l: each through its expert.
  at::Tensor run_local_experts(const at::Tensor& rows, const std::vector<std::int64_t>& counts, int first) {
    TensorList outputs;
    std::int64_t offset = 0;
    for (std::size_t l = 0; l < experts_.size(); ++l) {
      const std::int64_t c = counts.at(static_cast<std::size_t>(first) + l);
      // Timed for the measured trace: calibration learns a call's cost and a row's from these.
      const std::shared_ptr<ExpertFfn>& expert = experts_[l];
      outputs.push_back(moe::timed_expert_call([&expert](const at::Tensor& x) { return expert->forward(x); },
                                               rows.narrow(0, offset, c), moe::expert_call_log(*expert_parallel_),
                                               name_, first + static_cast<int>(l)));
      offset += c;
    }
    return at::cat(outputs, 0);
  }

  at::Tensor run_experts_across_ranks(const at::Tensor& routed, const at::Tensor& counts,
                                      const std::vector<std::int64_t>& histogram) {
    ExpertParallel& ep = *expert_parallel_;
    const int ranks = ep.size(), local = ep.experts_per_rank();
    std::vector<std::int64_t> send_rows(static_cast<std::size_t>(ranks), 0),
        receive_rows(static_cast<std::size_t>(ranks), 0);
    for (int e = 0; e < sizes_.experts; ++e)
      send_rows[static_cast<std::size_t>(e / local)] += histogram[static_cast<std::size_t>(e)];
    // received[i x local + l]: the rows rank i sends to local expert l. The dispatch's event
    // starts here: the count exchange is the first half of the dispatch.
    const double dispatch_started_us = runtime::now_us();
    const at::Tensor received_counts = moe::exchange_counts(counts, ep).cpu();
    const auto* rc = received_counts.data_ptr<std::int64_t>();
    for (int i = 0; i < ranks; ++i)
      for (int l = 0; l < local; ++l) receive_rows[static_cast<std::size_t>(i)] += rc[i * local + l];
    const moe::AllToAllKinds dispatch{traces::EventKind::AllToAllDispatchForward,
                                      traces::EventKind::AllToAllDispatchBackward};
    const moe::AllToAllKinds combine{traces::EventKind::AllToAllCombineForward,
                                     traces::EventKind::AllToAllCombineBackward};
    // Arrived rows are by source rank, then expert: the dispatch regroups them by expert, source
    // rank order within, and the combine puts them back into arrival order.
    std::vector<std::int64_t> by_expert;
    std::vector<std::int64_t> rows_per_expert(static_cast<std::size_t>(local), 0);
    for (int l = 0; l < local; ++l) {
      std::int64_t source_offset = 0;
      for (int i = 0; i < ranks; ++i) {
        std::int64_t start = source_offset;
        for (int m = 0; m < l; ++m) start += rc[i * local + m];
        for (std::int64_t r = 0; r < rc[i * local + l]; ++r) by_expert.push_back(start + r);
        rows_per_expert[static_cast<std::size_t>(l)] += rc[i * local + l];
        source_offset += receive_rows[static_cast<std::size_t>(i)];
      }
    }
    auto index = at::tensor(by_expert, at::TensorOptions().dtype(at::kLong)).to(routed.device());
    at::Tensor by_expert_rows = moe::all_to_all(routed, receive_rows, send_rows, ep, dispatch, histogram, name_,
                                                dispatch_started_us, moe::RowOrder{index, {}});
    std::vector<std::int64_t> local_counts(static_cast<std::size_t>(sizes_.experts), 0);
    for (int l = 0; l < local; ++l)
      local_counts[static_cast<std::size_t>(ep.first_expert()) + static_cast<std::size_t>(l)] =
          rows_per_expert[static_cast<std::size_t>(l)];
    at::Tensor processed = run_local_experts(by_expert_rows, local_counts, ep.first_expert());
    // Back into arrival order, then home.
    return moe::all_to_all(processed, send_rows, receive_rows, ep, combine, histogram, name_, -1,
                           moe::RowOrder{{}, at::argsort(index, /*stable=*/true, 0)});
  }

  MoeBlockSizes sizes_;
  std::shared_ptr<ExpertParallel> expert_parallel_;
  std::string name_;
  torch::nn::LayerNorm ln1_;
  torch::nn::Linear qkv_, proj_;
  torch::nn::LayerNorm ln2_;
  torch::nn::Linear router_;
  std::shared_ptr<ExpertFfn> shared_expert_;
  std::vector<std::shared_ptr<ExpertFfn>> experts_;
};

}  // namespace

std::int64_t moe_block_expert_parameters(const ModelConfig& c) {
  const std::int64_t h = c.hidden;
  return c.experts * (linear_parameter_count(h, c.moe_ffn_hidden) + linear_parameter_count(c.moe_ffn_hidden, h));
}

ModelSpec tiny_moe_spec(const ModelConfig& c) {
  if (c.top_k < 1) throw UsageError(fmt::format("option --top-k: {} is below the minimum 1", c.top_k));
  if (c.top_k > c.experts)
    throw UsageError(fmt::format("option --top-k {}: more than the {} expert(s) (--experts)", c.top_k, c.experts));
  if (c.moe_ffn_hidden < 1)
    throw UsageError(fmt::format("option --moe-ffn-hidden: {} is below the minimum 1", c.moe_ffn_hidden));
  if (c.shared_expert_ffn_hidden < 0)
    throw UsageError(
        fmt::format("option --shared-expert-ffn-hidden: {} is below the minimum 0", c.shared_expert_ffn_hidden));
  ModelSpec spec;
  spec.expert_parallel = std::make_shared<ExpertParallel>(c.expert_parallel, c.experts);
  const std::int64_t h = c.hidden, v = c.vocab, s = c.seq_len;
  MoeBlockSizes sizes;
  sizes.hidden = c.hidden;
  sizes.heads = language_model::attention_heads(c.hidden);
  sizes.experts = c.experts;
  sizes.top_k = c.top_k;
  sizes.ffn_hidden = c.moe_ffn_hidden;
  sizes.shared_ffn_hidden = c.shared_expert_ffn_hidden;
  sizes.aux_loss_coefficient = c.aux_loss_coefficient;
  spec.layers.push_back({"embed", "TokenEmbedding", v * h + s * h, "embed", "weight",
                         [=] { return std::make_shared<language_model::TokenEmbedding>(v, h, s); }});
  // Every expert counts, wherever it is placed: the partition does not depend on E.
  const std::int64_t shared_parameters = c.shared_expert_ffn_hidden > 0
                                             ? linear_parameter_count(h, c.shared_expert_ffn_hidden) +
                                                   linear_parameter_count(c.shared_expert_ffn_hidden, h)
                                             : 0;
  const std::int64_t block_parameters = 2 * (2 * h) + linear_parameter_count(h, 3 * h) + linear_parameter_count(h, h) +
                                        h * c.experts + moe_block_expert_parameters(c) + shared_parameters;
  for (int i = 0; i < c.layers; ++i) {
    const int layer_index = i + 1;  // after the embedding
    const std::uint64_t expert_seed =
        layer_seed(c.seed ^ 0xE4E4'0000'0000'0000ull, static_cast<std::uint64_t>(layer_index));
    const std::string name = fmt::format("blocks.{}", i);
    auto ep = spec.expert_parallel;
    spec.layers.push_back({name, kMoeBlockType, block_parameters, "", "",
                           [=] { return std::make_shared<MoeTransformerBlock>(sizes, ep, expert_seed, name); }});
  }
  spec.layers.push_back(
      {"norm", "FinalNorm", 2 * h, "", "", [=] { return std::make_shared<language_model::FinalNorm>(h); }});
  spec.layers.push_back(
      {"head", "TiedHead", v * h, "embed", "weight", [=] { return std::make_shared<language_model::TiedHead>(v, h); }});
  spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s}, at::kLong}});
  for (std::size_t i = 1; i < spec.layers.size(); ++i)
    spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s, h}, at::kFloat}});
  spec.boundary.push_back({TensorSpec{{c.micro_batch_size, s, v}, at::kFloat}});
  spec.loss = [v](const TensorList& out, const at::Tensor& labels) {
    return at::cross_entropy_loss(out[0].reshape({-1, v}), labels.reshape({-1}));
  };
  return spec;
}

}  // namespace pipescope::exec
