// Costs from first principles: a transformer (preset or JSON model file) on a device preset,
// split into pipeline stages and, Megatron-style, over tensor-parallel GPUs of one node; priced
// with the Zero Bubble paper's per-layer FLOPs, Korthikanti et al.'s activation bytes and
// Megatron's memory accounting (reference/ANCHORS.md, docs/MODEL.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipescope/sim/costs.hpp"
#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/pipeline_layout.hpp"
#include "pipescope/sim/topology.hpp"

namespace pipescope::sim {

// What a layer's query attends to, under the causal mask: the whole sequence before it, a sliding
// window of the keys just before it, or its own chunk of the sequence up to itself.
enum class AttentionSpan { full, window, chunk };

// What one layer is: a transformer's (attention and an MLP, or attention and experts), or one of
// a hybrid model's single blocks (docs/MODEL.md, "Hybrid models").
enum class LayerKind : std::uint8_t { dense, moe, mamba, attention, mlp, experts, linear_attention };
constexpr int kLayerKinds = 7;

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;        // 0: same as heads (no grouped-query attention)
  int ffn_hidden = 0;      // 0: 4 * hidden
  bool gated_mlp = false;  // SwiGLU: three MLP matrices instead of two
  int seq = 0;
  int vocab = 0;
  bool tied_embeddings = true;
  // The attention core as one fused kernel (FlashAttention, as Megatron's --use-flash-attn and
  // the LLaMA recipes run it): it stores no s x s matrices, only its output and the softmax's
  // log-sum-exp, and recomputes the scores in its backward.
  bool flash_attention = false;
  // Dropout and biases: absent, GPT-style (not gated) models have both and gated ones neither;
  // model files say so for models such as Nemotron-4 (squared ReLU, neither).
  std::optional<bool> dropout;
  std::optional<bool> biases;
  // Width of one attention head (Megatron's kv_channels); 0: hidden / heads. Qwen3's 64 heads of
  // 128 on a hidden of 4096 need it.
  int head_dim = 0;
  // Multi-head latent attention (DeepSeek-V2/V3; Megatron's MLATransformerConfig names): queries
  // through a low-rank q_lora_rank (0: a full query projection), keys and values through one
  // kv_lora_rank latent; each head's query/key of qk_head_dim + qk_pos_emb_head_dim (RoPE part),
  // its value of v_head_dim. 0 kv_lora_rank: ordinary attention.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_head_dim = 0;
  int qk_pos_emb_head_dim = 0;
  int v_head_dim = 0;
  // Sliding-window attention (Megatron's --window-size and --window-attn-skip-freq; Hugging
  // Face's sliding_window, one more): a windowed layer's query attends to itself and the
  // window_size keys before it (Megatron's left side; -1: no window). With window_attn_skip_freq
  // N > 0 every N-th layer, counted from 1, keeps full attention (Megatron's
  // is_layer_window_attention: GPT-OSS's N = 2 alternates windowed and full layers, the first
  // windowed); 0: every layer is windowed.
  int window_size = -1;
  int window_attn_skip_freq = 0;
  // Chunked attention (Llama 4's; attention_chunk_size in Hugging Face's and Megatron-Bridge's
  // configurations): a chunked layer's query attends to its own chunk of attention_chunk_size
  // tokens up to itself (0: no chunks); every nope_layer_interval-th layer, counted from 1, keeps
  // full attention (Llama 4's layers without RoPE, every 4th; Hugging Face's
  // no_rope_layer_interval); 0: every layer is chunked.
  int attention_chunk_size = 0;
  int nope_layer_interval = 0;
  // Each layer's span listed (Megatron's list form of window_attn_skip_freq, Hugging Face's
  // layer_types); empty: the fields above decide.
  std::vector<AttentionSpan> attention_pattern;
  // Mixture of experts (Megatron's names; docs/MODEL.md "Mixture of experts"). 0 experts: dense.
  int num_experts = 0;
  int top_k = 0;                     // experts each token is routed to (--moe-router-topk)
  int moe_ffn_hidden = 0;            // one routed expert's FFN width (0: ffn_hidden)
  int shared_experts = 0;            // experts every token goes through
  int shared_expert_ffn_hidden = 0;  // one shared expert's width (0: moe_ffn_hidden)
  int moe_layer_freq = 1;            // every moe_layer_freq-th layer (after the dense ones) is MoE
  int first_k_dense_layers = 0;      // the first layers keep a dense MLP (DeepSeek's first_k_dense_replace)
  // Each layer's MLP listed (Megatron's list form of --moe-layer-freq: 1 experts, 0 a dense MLP;
  // a Hugging Face config's mlp_only_layers or moe_layers); empty: the two fields above decide.
  std::vector<bool> moe_layer_pattern;
  double capacity_factor = 0;  // tokens an expert takes, over the mean; 0: dropless
  // Latent experts (Nemotron 3 Super's LatentMoE; Megatron's --moe-latent-size, Hugging Face's
  // moe_latent_size): the routed experts run in this narrower width, each token projected into it
  // before the dispatch and back after the combine (the router and the shared experts keep the
  // hidden width); 0: the hidden width.
  int moe_latent_size = 0;
  // Multi-token prediction (Megatron's --mtp-num-layers; DeepSeek-V3's num_nextn_predict_layers):
  // after the decoder, on the last pipeline stage, each MTP layer joins the next token's
  // embedding to the hidden state (two norms, a projection of 2h to h), runs one transformer
  // layer of the last decoder layer's kind, and the shared head and a loss again.
  int mtp_num_layers = 0;
  // A MoE layer's dense part (attention and shared experts) with no shared expert has no MLP.
  bool without_mlp = false;
  // A hybrid model (Megatron's --hybrid-override-pattern, Nemotron-H's hybrid_override_pattern):
  // one symbol a layer, each layer one block behind its own norm: 'M' a Mamba-2 mixer, '*'
  // attention alone, '-' an MLP alone, 'E' the experts alone (router, routed and shared experts),
  // 'G' a Gated DeltaNet (linear attention, Qwen3-Next's and Qwen3.5's). Empty: every layer is
  // attention and an MLP (or experts), a transformer's.
  std::string hybrid_pattern;
  // Mamba-2's mixer (Megatron's --mamba-num-heads, --mamba-head-dim, --mamba-state-dim,
  // --mamba-num-groups; Hugging Face's mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups,
  // conv_kernel, chunk_size): heads x head width channels (0 heads: 2 x hidden / head width,
  // Megatron's default expansion), B and C shared by each group of heads, a short causal
  // convolution, the state-space scan in chunks. Megatron's defaults.
  int mamba_num_heads = 0;
  int mamba_head_dim = 64;
  int mamba_state_dim = 128;
  int mamba_num_groups = 8;
  int mamba_conv_kernel = 4;
  int mamba_chunk_size = 128;
  // The Gated DeltaNet (Yang et al. 2025; Megatron's GatedDeltaNet, Hugging Face's Qwen3-Next):
  // key heads and value heads of their widths (a key head serves value heads / key heads value
  // heads), a causal convolution over q, k and v, the gated delta rule in chunks of 64. Megatron's
  // defaults (--linear-num-key-heads, ...).
  int linear_num_key_heads = 16;
  int linear_num_value_heads = 32;
  int linear_key_head_dim = 128;
  int linear_value_head_dim = 128;
  int linear_conv_kernel_dim = 4;
  // Gated attention (Megatron's attention_output_gate, Hugging Face's attn_output_gate): the query
  // projection also gives a sigmoid gate of the attention's output, as wide as the queries.
  bool attention_output_gate = false;

  int kv_heads_or_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int ffn_or_default() const { return without_mlp ? 0 : ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int head_dim_or_default() const { return head_dim > 0 ? head_dim : hidden / std::max(heads, 1); }
  bool multi_latent_attention() const { return kv_lora_rank > 0; }
  // Width of the K and V projections: kv_heads x the head width (hidden * kv_heads / heads).
  std::int64_t kv_width() const;
  // Width of the queries and of the attention output's input: heads x the head width (MLA: the
  // value heads' width).
  std::int64_t attention_width() const;
  // Parameters of the projections before the attention core (QKV; MLA's down and up projections
  // and their norms) and of the output projection.
  std::int64_t attention_input_parameters() const;
  std::int64_t attention_output_parameters() const;
  // The head width the attention core's two products run at (MLA: the mean of the query/key and
  // the value widths, which gives its FLOPs).
  double attention_core_head_dim() const;

  // What layer `index` (0-based) attends to, and how many layers attend so.
  AttentionSpan attention_span(int index) const;
  int layers_with(AttentionSpan span) const;
  // Keys a query meets on average under the causal mask, the causal core's work per query:
  // s/2 in a full layer; w - w^2 / (2s) in a window spanning w = window_size + 1 < s keys (the
  // query's own included), whose first w queries meet fewer; in chunks of c < s, c/2 in each whole
  // chunk and r/2 in a last one of r.
  double causal_keys_per_query(AttentionSpan span) const;
  // The attention core's work averaged over the layers, over its work with every layer full:
  // 1 without windows or chunks.
  double attention_span_share() const;
  // Some layer's queries meet fewer keys than the causal sequence's (a window or chunks shorter
  // than it): context parallelism then needs the all-to-all exchange.
  bool has_limited_attention() const {
    return attention_limited(AttentionSpan::window) || attention_limited(AttentionSpan::chunk);
  }
  bool attention_limited(AttentionSpan span) const {
    return layers_with(span) > 0 && causal_keys_per_query(span) < causal_keys_per_query(AttentionSpan::full);
  }

  bool is_moe() const { return num_experts > 0; }
  bool is_hybrid() const { return !hybrid_pattern.empty(); }
  // What layer `index` (0-based) is: the hybrid pattern's symbol, or a transformer layer.
  LayerKind layer_kind(int index) const;
  int layers_of(LayerKind kind) const;
  // A Mamba layer's widths: its heads, its inner width (heads x head width), the input
  // projection's outputs (z and x of the inner width, B and C of groups x state, one dt a head)
  // and the convolution's channels (x, B, C).
  int mamba_heads() const { return mamba_num_heads > 0 ? mamba_num_heads : 2 * hidden / std::max(mamba_head_dim, 1); }
  std::int64_t mamba_inner() const { return static_cast<std::int64_t>(mamba_heads()) * mamba_head_dim; }
  std::int64_t mamba_groups_width() const { return 2 * static_cast<std::int64_t>(mamba_num_groups) * mamba_state_dim; }
  std::int64_t mamba_in_projection_outputs() const { return 2 * mamba_inner() + mamba_groups_width() + mamba_heads(); }
  std::int64_t mamba_conv_channels() const { return mamba_inner() + mamba_groups_width(); }
  // A Mamba layer's matrices (the input and output projections) and all its parameters (with the
  // convolution's weights and biases, A, D and dt's bias a head, the gated norm and its own norm).
  std::int64_t mamba_matrix_parameters() const {
    return static_cast<std::int64_t>(hidden) * mamba_in_projection_outputs() + mamba_inner() * hidden;
  }
  // A Gated DeltaNet layer's widths: q and k (key heads x key width), v and the output gate z (value
  // heads x value width), b and a (one each a value head); the convolution's channels (q, k, v).
  std::int64_t linear_key_width() const {
    return static_cast<std::int64_t>(linear_num_key_heads) * linear_key_head_dim;
  }
  std::int64_t linear_value_width() const {
    return static_cast<std::int64_t>(linear_num_value_heads) * linear_value_head_dim;
  }
  std::int64_t linear_in_projection_outputs() const {
    return 2 * linear_key_width() + 2 * linear_value_width() + 2 * static_cast<std::int64_t>(linear_num_value_heads);
  }
  std::int64_t linear_conv_channels() const { return 2 * linear_key_width() + linear_value_width(); }
  std::int64_t linear_attention_matrix_parameters() const {
    return static_cast<std::int64_t>(hidden) * linear_in_projection_outputs() + linear_value_width() * hidden;
  }
  // With the convolution's weights (no biases), A and dt's bias a value head, the gated norm's
  // weight (a value head's width) and the layer's norm.
  std::int64_t linear_attention_parameters() const {
    return linear_attention_matrix_parameters() + linear_conv_channels() * linear_conv_kernel_dim +
           2 * static_cast<std::int64_t>(linear_num_value_heads) + linear_value_head_dim +
           2 * static_cast<std::int64_t>(hidden);
  }
  std::int64_t mamba_parameters() const {
    return mamba_matrix_parameters() + mamba_conv_channels() * (mamba_conv_kernel + 1) + 3 * mamba_heads() +
           mamba_inner() + 2 * static_cast<std::int64_t>(hidden);
  }
  // An MTP layer's transformer layer has routed experts where the decoder's last layer does.
  // (A hybrid model's MTP layer is a transformer layer: with experts where the model has them.)
  bool mtp_layer_is_moe() const { return is_hybrid() ? is_moe() : is_moe_layer(layers - 1); }
  // One MTP layer's own parameters beside its transformer layer: the 2h x h projection and its
  // three norms (the embedding's, the hidden state's, its output's); the embedding and the head
  // are the model's.
  std::int64_t mtp_projection_matrix_parameters() const { return 2 * static_cast<std::int64_t>(hidden) * hidden; }
  std::int64_t mtp_projection_parameters() const {
    return mtp_projection_matrix_parameters() + 3 * static_cast<std::int64_t>(hidden);
  }
  // Layer `index` (0-based) has routed experts: past the first dense ones, every moe_layer_freq-th.
  bool is_moe_layer(int index) const;
  int moe_layers() const;
  int moe_ffn_or_default() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn_or_default(); }
  int shared_expert_width() const {  // all shared experts together
    return shared_experts * (shared_expert_ffn_hidden > 0 ? shared_expert_ffn_hidden : moe_ffn_or_default());
  }
  // The width the routed experts take and give, the dispatch and combine carry: the latent one, or
  // the hidden one.
  int expert_width() const { return moe_latent_size > 0 ? moe_latent_size : hidden; }
  // The model as its routed experts see it: the hidden width the expert width.
  ModelSpec in_expert_width() const {
    ModelSpec m = *this;
    m.hidden = expert_width();
    m.moe_latent_size = 0;
    return m;
  }
  // The projections into the latent width and out of it (h x latent each), of every MoE layer.
  std::int64_t latent_projection_parameters() const {
    return moe_latent_size > 0 ? 2 * static_cast<std::int64_t>(hidden) * moe_latent_size : 0;
  }
  // One routed expert's matrices (2 or 3 x its width x moe_ffn), the router's (experts x h).
  std::int64_t expert_parameters() const;
  std::int64_t router_parameters() const { return static_cast<std::int64_t>(num_experts) * hidden; }
  // A MoE layer without its routed experts: attention, norms, router aside, the shared experts
  // as its MLP (none: no MLP). What tensor parallelism splits as in a dense layer.
  ModelSpec moe_layer_dense_part() const;
  // GPT-style models train with dropout; gated (LLaMA-style) ones without, as they keep no
  // biases either: their activations have no dropout masks.
  bool has_dropout() const { return dropout.value_or(!gated_mlp); }
  bool has_biases() const { return biases.value_or(!gated_mlp); }
  // Parameters of one transformer layer's matrices (biases and norms excluded).
  std::int64_t layer_matrix_parameters() const;
  std::int64_t layer_parameters() const;      // with biases and layer norms
  std::int64_t embedding_parameters() const;  // vocab * hidden
  std::int64_t total_parameters() const;
  // Parameters a token meets: the routed experts counted top_k times instead of num_experts
  // (both embeddings counted, as Mixtral's 12.9B does). total_parameters() for a dense model.
  std::int64_t active_parameters() const;
};

// Presets: gpt-1.3b, gpt-7b, llama-70b, llama-3-8b, llama-3-70b, llama-3-405b, gpt3-175b, and
// the mixtures of experts mixtral-8x7b, mixtral-8x22b, qwen3-235b-a22b, qwen3-30b-a3b,
// deepseek-v3, llama4-maverick, llama4-scout, grok-1, gpt-oss-120b, gpt-oss-20b, and the hybrid
// nemotron-h-56b, nemotron-3-nano-30b-a3b, nemotron-3-super-120b-a12b, qwen3.5-35b-a3b,
// qwen3.5-397b-a17b (sources in
// docs/MODEL.md).
std::vector<std::string> model_preset_names();
// A preset name, or a path to a JSON model file {"name", "layers", "hidden", "heads", "seq",
// "vocab", optional "kv_heads", "ffn_hidden", "gated_mlp", "tied_embeddings", "flash_attention", "dropout",
// "biases", "head_dim", MLA's, the sliding window's and MoE's fields in Megatron's names
// (docs/MODEL.md)}. Throws
// UsageError naming the preset list or the file and field.
// A Hugging Face config.json (one naming its model_type) is read too (docs/MODEL.md). With
// `seq_length` (--seq-length) the model trains at that many tokens a sequence instead of its own
// (a config.json gives none: it is required there).
ModelSpec resolve_model(const std::string& name_or_path, std::optional<int> seq_length = std::nullopt);
ModelSpec parse_model_json(const std::string& text, const std::string& source,
                           std::optional<int> seq_length = std::nullopt);

// DeviceSpec and the device presets: efficiency.hpp.

// Per-layer, per-micro-batch figures (b = micro-batch size), Zero Bubble paper Table 1
// generalised to any matrix shapes: F = 2 sb P + 4 s^2 b h, B = 2 sb P + 8 s^2 b h, W = 2 sb P,
// with P the layer's matrix parameters (12 h^2 for a GPT layer gives sbh(24h + 4s) ...).
struct LayerFigures {
  double f_flops = 0;
  double b_flops = 0;
  double w_flops = 0;
  std::int64_t activation_bytes = 0;    // held from F until B: sb(34h + 5as)
  std::int64_t weight_stash_bytes = 0;  // held from B until W: 32 sbh
};
LayerFigures layer_figures(const ModelSpec& model, int micro_batch_size);

// Activation recomputation, by Megatron's --recompute-granularity: `selective` recomputes only
// the attention core (softmax, its dropout and the score/value products: the activations that
// grow with s^2), `full` keeps each layer's input and runs the whole layer again before B.
enum class Recomputation : std::uint8_t { none, selective, full };
std::string_view recomputation_name(Recomputation recomputation);  // "none", "selective", "full"

// What selective recomputation runs again (Megatron's --recompute-modules), as bits: the backward
// rebuilds these modules' activations from their inputs instead of keeping them from the forward.
enum RecomputeModule : std::uint8_t {
  kRecomputeCoreAttention = 1U << 0,    // core_attn: the attention core (Megatron's default)
  kRecomputeLayernorm = 1U << 1,        // layernorm: the two norms' outputs (QKV's and the MLP's input)
  kRecomputeMlaUpProjection = 1U << 2,  // mla_up_proj: MLA's up-projected queries, keys and values
  kRecomputeMlp = 1U << 3,              // mlp: a dense layer's MLP
  kRecomputeMoeActivation = 1U << 4,    // moe_act: the routed experts' activation function
  kRecomputeMoe = 1U << 5,              // moe: the whole MoE layer, its all-to-all included
  kRecomputeSharedExperts = 1U << 6,    // shared_experts: a MoE layer's shared experts
};
// Megatron's names, separated by commas or spaces ("core_attn,moe_act"); throws UsageError naming
// --recompute-modules and the name it does not know (and the names it knows).
std::uint8_t parse_recompute_modules(const std::string& names);
// The names of the bits, in Megatron's order, comma-separated.
std::string recompute_modules_text(std::uint8_t modules);
// The same names, one each (plan's JSON rows).
std::vector<std::string> recompute_module_names(std::uint8_t modules);
// The module sets a planner tries for a model's selective rows, lightest first, each the one
// before plus the next module the model has: core_attn; moe_act; layernorm; mla_up_proj;
// shared_experts; mlp (where some layer is dense); moe. Megatron's guidance ranks the first four
// as cheap to recompute for the memory they free, the last three as costly.
std::vector<std::uint8_t> recompute_module_ladder(const ModelSpec& model);

// FP8 linear layers as Transformer Engine runs them (its delayed-scaling recipe): `hybrid` keeps
// E4M3 for the forward and E5M2 for the gradients, `e4m3` E4M3 for both; both run at the
// device's FP8 rate.
enum class Fp8Format : std::uint8_t { none, hybrid, e4m3 };
std::string_view fp8_format_name(Fp8Format format);  // "none", "hybrid", "e4m3"

// How attention's keys and values travel around the context-parallel group (Megatron's
// --cp-comm-type): a ring of point-to-point transfers, each behind one attention block (the
// default), one all-gather before the attention (and a reduce-scatter of their gradients after
// its backward), or all-to-alls that give each rank the whole sequence of a C-th of its heads
// (a2a, DeepSpeed-Ulysses' exchange: the one that runs sliding windows and chunks, since every
// query then meets its keys on its own rank), or both in two levels (a2a+p2p: all-to-alls inside
// groups of A ranks, then a ring over the C / A groups; Megatron's
// --hierarchical-context-parallel-sizes A C/A).
enum class ContextParallelComm : std::uint8_t { p2p, all_gather, a2a, a2a_p2p };
// "p2p", "all_gather", "a2a", "a2a+p2p"
std::string_view context_parallel_comm_name(ContextParallelComm comm);
// The exchange Megatron's --cp-comm-type names, or nothing for another name.
std::optional<ContextParallelComm> context_parallel_comm_named(std::string_view name);

// How the GPUs of a run split the work, in Megatron-Core's names and order (TP innermost, then
// CP, then DP, then PP: "tp-cp-dp-pp"). GPUs = tensor x context x data x pipeline. A further
// dimension (expert parallelism) takes its place in that order beside the others.
struct ParallelConfig {
  int pipeline = 4;  // pipeline ranks
  int chunks = 1;    // stages per rank: pipeline * chunks stages in all
  int data_parallel = 1;
  int tensor_parallel = 1;         // Megatron tensor parallelism: GPUs of one node per stage
  bool sequence_parallel = false;  // Megatron sequence parallelism (with tensor_parallel > 1)
  // Context parallelism (--context-parallel-size): each sequence split over this many GPUs, with
  // causal load balancing (each holds two of 2C chunks), keys and values exchanged in attention.
  int context_parallel = 1;
  ContextParallelComm context_parallel_comm = ContextParallelComm::p2p;
  // With a2a+p2p: the ranks of each all-to-all group, A (the first of Megatron's
  // --hierarchical-context-parallel-sizes; the ring has C / A).
  int context_parallel_a2a = 0;
  int micro_batch_size = 1;
  Recomputation recomputation = Recomputation::none;
  // With selective recomputation: which modules (RecomputeModule bits).
  std::uint8_t recompute_modules = kRecomputeCoreAttention;
  // The bits of `module` that recomputation runs again (none unless selective).
  bool recomputes(RecomputeModule module) const {
    return recomputation == Recomputation::selective && (recompute_modules & module) != 0;
  }
  // The distributed optimizer (Megatron's --use-distributed-optimizer; ZeRO-1): optimizer state
  // sharded over the data-parallel x context-parallel group, gradients reduce-scattered and the
  // updated parameters all-gathered.
  bool zero1 = false;
  // Reduce gradients in buckets during the last backward (Megatron's --overlap-grad-reduce,
  // torch DDP), each bucket once it is final; off: after the backward.
  bool overlap_grad_reduce = false;
  // With the distributed optimizer: the parameters' all-gather runs beside the next iteration's
  // forward, bucket by bucket (--overlap-param-gather); off: after the optimizer step.
  bool overlap_param_gather = false;
  // With it and interleaving: the first chunk's all-gather leaves right after that chunk's
  // optimizer step, beside the other chunks' steps (--overlap-param-gather-with-optimizer-step).
  bool overlap_param_gather_with_optimizer_step = false;
  // Parameters per gradient (and parameter) bucket (--ddp-bucket-size), on the first pipeline
  // rank's first chunk (Megatron's DDP: one bucket elsewhere); 0: one bucket per layer everywhere.
  std::int64_t bucket_parameters = 0;
  // A fused backward hides its tensor-parallel input-gradient collectives behind the weight
  // gradients (Megatron's default since 2022; --no-async-tensor-model-parallel-allreduce).
  bool async_tensor_parallel_backward = true;
  // Transformer Engine's userbuffers (--tp-comm-overlap): sequence parallelism's all-gathers and
  // reduce-scatters split into chunks and pipelined with the products that need them.
  bool tp_comm_overlap = false;
  Fp8Format fp8 = Fp8Format::none;
  AttentionBackend attention_backend = AttentionBackend::auto_select;  // with a "flash_attention" model
  // Parameters kept in FP8 and all-gathered in FP8 (--fp8-param-gather): no BF16 copy of the
  // linear layers' weights.
  bool fp8_param_gather = false;
  LayoutOptions layout;  // which layers each stage holds (pipeline_layout.hpp)
  // Expert parallelism (--expert-model-parallel-size): a MoE layer's routed experts split over
  // this many GPUs, tokens dispatched to them and combined back by all-to-all. Megatron's expert
  // layout "tp-ep-dp-pp": expert tensor parallelism innermost, then EP, then the expert
  // data-parallel group; EP x ETP divides T x C x d (the dense layers' GPUs of a stage).
  int expert_parallel = 1;
  int expert_tensor_parallel = 0;  // --expert-tensor-parallel-size; 0: the tensor-parallel size
  // The busiest expert-parallel rank's routed tokens over the mean (--moe-imbalance): it gates the
  // layer's expert compute and its all-to-all, and dropless memory is sized for it.
  double moe_imbalance = 1;
  // A measured routing (--moe-routing): the tokens each expert took, in expert order. Given, the
  // load factor is the busiest EP rank's sum (each holding consecutive experts) over the mean,
  // for whatever EP the run uses; empty: moe_imbalance.
  std::vector<double> expert_tokens;
  bool fp8_dispatch = false;  // the dispatch all-to-all in FP8 (DeepSeek-V3's; combine stays BF16)
  // Megatron's --defer-embedding-wgrad-compute: the last stage's output-layer weight gradients of
  // the first `wgrad_deferral_limit` micro-batches (0: all) computed in the pipeline's flush, after
  // the rank's last backward (StageCost::deferred_weight_s). Megatron requires pipeline > 1.
  bool defer_embedding_wgrad = false;
  int wgrad_deferral_limit = 0;
  // Megatron's --make-vocab-size-divisible-by N: the embedding and the head hold the vocabulary
  // rounded up to a multiple of N x T (Megatron's padded_vocab_size); 0: the model's vocabulary.
  int make_vocab_size_divisible_by = 0;

  // The group gradients are reduced over: data parallelism with the context-parallel ranks.
  int gradient_group() const { return data_parallel * context_parallel; }
  // The ranks that exchange heads by all-to-all (C for a2a, A for a2a+p2p, else 1) and those the
  // keys and values go around in a ring (C / that, for p2p and a2a+p2p; 1 for a2a).
  int context_parallel_all_to_all() const {
    if (context_parallel_comm == ContextParallelComm::a2a) return context_parallel;
    if (context_parallel_comm == ContextParallelComm::a2a_p2p) return std::max(1, context_parallel_a2a);
    return 1;
  }
  int context_parallel_ring() const { return std::max(1, context_parallel / context_parallel_all_to_all()); }
  int expert_tp() const { return expert_tensor_parallel > 0 ? expert_tensor_parallel : tensor_parallel; }
  // The group the routed experts' gradients are reduced (and their optimizer state sharded) over.
  int expert_data_parallel() const {
    return std::max(1, tensor_parallel * context_parallel * data_parallel / std::max(1, expert_parallel * expert_tp()));
  }
  // The rows of the embedding and the head: `vocab` padded as Megatron pads it.
  std::int64_t padded_vocab(std::int64_t vocab) const {
    if (make_vocab_size_divisible_by < 1) return vocab;
    const std::int64_t multiple = static_cast<std::int64_t>(make_vocab_size_divisible_by) * tensor_parallel;
    return (vocab + multiple - 1) / multiple * multiple;
  }
  std::int64_t gpus() const {
    return static_cast<std::int64_t>(pipeline) * tensor_parallel * context_parallel * data_parallel;
  }
};

// Why `parallel`'s tensor parallelism cannot run `model` on nodes of `gpus_per_node` GPUs (T
// larger than a node, not dividing the heads, the kv heads or the FFN width; sequence
// parallelism without T > 1), naming the option; nothing when it can.
std::optional<std::string> tensor_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel,
                                                   int gpus_per_node);

// Why context parallelism `C` cannot split `model`'s sequences (C below 1, 2C not dividing the
// sequence: each rank holds two of 2C equal chunks), naming the option; nothing when it can.
std::optional<std::string> context_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel);
// Whether an all-to-all group of `group` ranks can split a tensor-parallel rank's query and
// key/value heads (each member attends with a group-th of them), as a2a and a2a+p2p need.
bool all_to_all_splits_heads(const ModelSpec& model, int tensor_parallel, int group);

// Why `parallel`'s expert parallelism cannot run `model` (naming the option, as Megatron refuses
// it): MoE options on a dense model, EP not dividing the experts, EP x ETP not dividing the
// stage's T x C x d GPUs, ETP above a node or not dividing the experts' FFN, tensor parallelism
// without sequence parallelism on a MoE model, an imbalance below 1; nothing when it can.
std::optional<std::string> expert_parallel_problem(const ModelSpec& model, const ParallelConfig& parallel,
                                                   int gpus_per_node);

// Why `parallel`'s selective recomputation names a module `model` lacks (MLA's up-projections on
// ordinary attention, an expert module on a dense model, shared experts where there are none).
std::optional<std::string> recompute_modules_problem(const ModelSpec& model, const ParallelConfig& parallel);

// Why `device` cannot run `parallel`'s precision (FP8 on a device without FP8 tensor cores).
std::optional<std::string> precision_problem(const DeviceSpec& device, const ParallelConfig& parallel);

// Layers of each stage (pipeline_layout.hpp): Megatron's layout options where given, else
// pipescope's split (docs/MODEL.md, "Layers per stage"). Stages are virtual stages with
// interleaving (stage i on rank i mod pipeline).
std::vector<int> stage_layers(const ModelSpec& model, const ParallelConfig& parallel);

// Per-stage costs of one tensor-parallel rank of `model` on `device` under `parallel` and
// `topology` (its data_parallel and pipeline_rank_stride are taken from `parallel`). Transfers
// use the Links model. The tensor-parallel collectives are part of f_s and b_s (Megatron waits
// for them on the compute stream) and also given apart (StageCost::tensor_parallel_*_s) for the
// trace. Throws UsageError with tensor_parallel_problem's reason.
CostModel derive_costs(const ModelSpec& model, const DeviceSpec& device, const Topology& topology,
                       const ParallelConfig& parallel);

// Activation recomputation applied to a stage measured without it (a profile of pprun), by the
// rule derive_costs follows for a transformer: the forward keeps only the input of each run of
// `run_layers` layers (and the stage's output, which pprun keeps for its send and its loss),
// the backward first runs the forward again, and one run is rebuilt at a time. A run's input is
// taken to be the size of a stage-to-stage transfer (`activation_bytes`: every layer of pprun's
// built-in models takes and gives the hidden state) and a run's activations the stage's share
// per layer of the measured ones. Throws UsageError when the stage has no transfer size (a
// profile of one stage) or a count is below 1.
StageCost recompute_measured_stage(StageCost measured, int stage_layers, int run_layers);

// The topology a cost derivation assumes, Megatron's order: TP innermost, then CP, then DP, then
// PP, so pipeline neighbours sit T x C x d devices apart and the gradients' ring (DP x CP) has its
// members T apart.
Topology with_parallel_layout(Topology topology, const ParallelConfig& parallel);

}  // namespace pipescope::sim
