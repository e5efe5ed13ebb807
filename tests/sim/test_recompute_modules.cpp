// Selective recomputation by module (Megatron's --recompute-modules; layer_costs.cpp, model.cpp's
// MoE layer and its all-to-all, ppsim simulate's option).
// Expected:
// - the names: Megatron's, separated by commas or spaces, in any order; an unknown or empty list
//   refused naming --recompute-modules (and the names it knows);
// - a dense layer (Llama-3-8B's shape, TP 2 with sequence parallelism, FlashAttention): core_attn
//   keeps and rebuilds nothing (a fused core keeps no scores); layernorm drops the norms'
//   outputs, 4 sbh / T bytes, and runs the two norms again; mlp drops the SwiGLU activations,
//   6 sbf / T bytes, and runs its two products again (more time than the norms);
// - DeepSeek-V3's MLA: mla_up_proj drops the up-projected queries, keys and values and keeps the
//   two latents, runs the up-projections again;
// - Mixtral's MoE layer: moe drops all of the experts' activations and runs the layer again, its
//   dispatch and combine included (each backward all-to-all grows by the forward's); moe_act
//   drops only the activation's output; shared_experts on a model without one, mla_up_proj on
//   ordinary attention and moe on a dense model are refused naming the module;
// - ppsim simulate --recompute-modules: the description names them, the peak falls; with
//   --recompute it is refused in one line;
// - ppsim plan --recompute-modules: its selective rows recompute them (a lower peak than
//   core_attn's); without selective in --recompute it is refused in one line;
// - the ladder `--recompute-modules auto` tries: Llama core_attn, +layernorm, +mlp; Mixtral adds
//   moe_act after core_attn and moe last, no mlp (every layer MoE); DeepSeek-V3 adds mla_up_proj,
//   shared_experts and mlp (its first three layers are dense);
// - plan with several sets (given twice, or auto): every set's rows searched, each row naming
//   its modules (table "act+ln" with a legend, JSON recompute_modules, CSV's last column); on
//   DeepSeek-V3 at 1,024 H100s under 80 GB only the sets with mla_up_proj fit (NeMo's recipe
//   recomputes mla_up_proj); a set the model lacks refused naming it.
#include <catch2/catch.hpp>

#include <set>

#include <nlohmann/json.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/efficiency.hpp"
#include "pipescope/sim/expert_layer.hpp"
#include "pipescope/sim/layer_costs.hpp"
#include "pipescope/sim/model.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

ParallelConfig selective(std::uint8_t modules) {
  ParallelConfig p;
  p.pipeline = 2;
  p.tensor_parallel = 2;
  p.sequence_parallel = true;
  p.micro_batch_size = 1;
  p.recomputation = Recomputation::selective;
  p.recompute_modules = modules;
  return p;
}

}  // namespace

TEST_CASE("--recompute-modules takes Megatron's names") {
  CHECK(parse_recompute_modules("core_attn") == kRecomputeCoreAttention);
  CHECK(parse_recompute_modules("moe_act, layernorm,mla_up_proj") ==
        (kRecomputeMoeActivation | kRecomputeLayernorm | kRecomputeMlaUpProjection));
  CHECK(recompute_modules_text(parse_recompute_modules("shared_experts moe mlp")) == "mlp,moe,shared_experts");
  CHECK_THROWS_WITH(parse_recompute_modules("core_attn,attention"),
                    Catch::Contains("--recompute-modules: 'attention' is not a module (known: core_attn, moe_act"));
  CHECK_THROWS_WITH(parse_recompute_modules(" , "), Catch::Contains("--recompute-modules: names no module"));
}

TEST_CASE("a dense layer's recomputed modules: what each drops and runs again") {
  const ModelSpec llama = resolve_model("llama-3-8b");
  const DeviceSpec h100 = device_preset("h100");
  const LinkSpec nvlink = device_preset("h100").nvlink;
  const double s = llama.seq, h = llama.hidden, f = llama.ffn_or_default(), t = 2;
  const LayerMemory core = layer_memory(llama, selective(kRecomputeCoreAttention));
  const LayerMemory none = layer_memory(llama, ParallelConfig{});
  CHECK(core.rebuilt_bytes == 0);
  const LayerMemory norms = layer_memory(llama, selective(kRecomputeLayernorm));
  CHECK(static_cast<double>(core.held_bytes - norms.held_bytes) == Approx(4 * s * h / t).epsilon(1e-9));
  CHECK(static_cast<double>(norms.rebuilt_bytes) == Approx(4 * s * h / t).epsilon(1e-9));
  const LayerMemory mlp = layer_memory(llama, selective(kRecomputeMlp));
  CHECK(static_cast<double>(core.held_bytes - mlp.held_bytes) == Approx(6 * s * f / t).epsilon(1e-9));
  CHECK(none.held_bytes > 0);

  const LayerTimes core_times = layer_times(llama, h100, nvlink, selective(kRecomputeCoreAttention));
  const LayerTimes norm_times = layer_times(llama, h100, nvlink, selective(kRecomputeLayernorm));
  const LayerTimes mlp_times = layer_times(llama, h100, nvlink, selective(kRecomputeMlp));
  CHECK(core_times.recompute_s == 0);
  CHECK(norm_times.recompute_s > 0);
  CHECK(mlp_times.recompute_s > norm_times.recompute_s);
  CHECK(mlp_times.f_s == core_times.f_s);  // the forward is the same
}

TEST_CASE("MLA's up-projections recomputed keep the latents") {
  const ModelSpec dense_part = resolve_model("deepseek-v3");  // a dense layer of it (the first three)
  const LayerMemory core = layer_memory(dense_part, selective(kRecomputeCoreAttention));
  const LayerMemory up = layer_memory(dense_part, selective(kRecomputeMlaUpProjection));
  CHECK(up.held_bytes < core.held_bytes);
  CHECK(up.rebuilt_bytes > 0);
  const LinkSpec nvlink = device_preset("h100").nvlink;
  CHECK(layer_times(dense_part, device_preset("h100"), nvlink, selective(kRecomputeMlaUpProjection)).recompute_s > 0);
}

TEST_CASE("a MoE layer recomputed whole runs its all-to-all again; moe_act drops the activation only") {
  const ModelSpec mixtral = resolve_model("mixtral-8x7b");
  const DeviceSpec h100 = device_preset("h100");
  ParallelConfig base = selective(kRecomputeCoreAttention);
  base.tensor_parallel = 1;
  base.sequence_parallel = false;
  base.data_parallel = 8;
  base.expert_parallel = 8;
  ParallelConfig moe = base, act = base;
  moe.recompute_modules = kRecomputeMoe;
  act.recompute_modules = kRecomputeMoeActivation;
  const CostModel kept = derive_costs(mixtral, h100, Topology{}, base);
  const CostModel whole = derive_costs(mixtral, h100, Topology{}, moe);
  const CostModel activation = derive_costs(mixtral, h100, Topology{}, act);
  const StageCost& k = kept.stages[0];
  const StageCost& w = whole.stages[0];
  const double layers = k.all_to_all.moe_layers;
  REQUIRE(layers > 0);
  CHECK(static_cast<double>(k.f_mem_bytes - w.f_mem_bytes) ==
        Approx(layers * static_cast<double>(expert_activation_bytes(mixtral, base))).epsilon(1e-9));
  CHECK(w.all_to_all.dispatch_b_s == Approx(k.all_to_all.dispatch_b_s + k.all_to_all.dispatch_f_s).epsilon(1e-12));
  CHECK(w.all_to_all.combine_b_s == Approx(k.all_to_all.combine_b_s + k.all_to_all.combine_f_s).epsilon(1e-12));
  CHECK(w.b_s > k.b_s);
  CHECK(static_cast<double>(k.f_mem_bytes - activation.stages[0].f_mem_bytes) ==
        Approx(layers * expert_activation(mixtral, base).output_bytes).epsilon(1e-9));
  CHECK(activation.stages[0].all_to_all.dispatch_b_s == k.all_to_all.dispatch_b_s);

  ParallelConfig shared = base;
  shared.recompute_modules = kRecomputeSharedExperts;
  CHECK_THROWS_WITH(derive_costs(mixtral, h100, Topology{}, shared),
                    Catch::Contains("--recompute-modules shared_experts: mixtral-8x7b has no shared expert"));
  ParallelConfig up = base;
  up.recompute_modules = kRecomputeMlaUpProjection;
  CHECK_THROWS_WITH(derive_costs(mixtral, h100, Topology{}, up),
                    Catch::Contains("--recompute-modules mla_up_proj: mixtral-8x7b has no multi-latent attention"));
  ParallelConfig dense = selective(kRecomputeMoe);
  CHECK_THROWS_WITH(derive_costs(resolve_model("llama-3-8b"), h100, Topology{}, dense),
                    Catch::Contains("--recompute-modules moe: llama-3-8b has no experts"));
}

TEST_CASE("ppsim simulate --recompute-modules", "[cli]") {
  const std::string run =
      "simulate --model mixtral-8x7b --stages 4 --micro-batches 8 --data-parallel 8 --expert-parallel 8 --json ";
  const auto plain = ppsim_test::run_ppsim(run);
  const auto recomputed = ppsim_test::run_ppsim(run + "--recompute-modules moe_act layernorm");
  INFO(plain.err << recomputed.err);
  REQUIRE(plain.status == 0);
  REQUIRE(recomputed.status == 0);
  auto peak = [](const std::string& text) {
    std::int64_t most = 0;
    const nlohmann::json summary = nlohmann::json::parse(text);
    for (const auto& rank : summary.at("ranks"))
      most = std::max(most, rank.at("peak_memory_bytes").get<std::int64_t>());
    return most;
  };
  CHECK(peak(recomputed.out) < peak(plain.out));
  const auto table = ppsim_test::run_ppsim(
      "simulate --model mixtral-8x7b --stages 4 --micro-batches 8 --data-parallel 8 --expert-parallel 8 "
      "--recompute-modules core_attn,moe_act");
  CHECK(table.out.find("recomputation selective (core_attn,moe_act)") != std::string::npos);
  const auto refused = ppsim_test::run_ppsim(run + "--recompute --recompute-modules moe_act");
  CHECK(refused.status != 0);
  CHECK(refused.one_error_line());
  CHECK(refused.err.find("--recompute-modules") != std::string::npos);
}

TEST_CASE("ppsim plan --recompute-modules: what its selective rows recompute", "[cli]") {
  const std::string plan =
      "plan --model mixtral-8x7b --gpus 32 --global-batch 64 --tensor-parallel-sizes 1 --context-parallel-sizes 1 "
      "--expert-parallel-sizes 8 --schedules 1f1b --micro-batch-sizes 1 --max-pipeline 4 --format json --quiet ";
  auto lowest_selective_peak = [](const std::string& text) {
    const nlohmann::json rows = nlohmann::json::parse(text);
    double lowest = 0;
    for (const auto& row : rows.at("configurations"))
      if (row.at("recompute_granularity") == "selective") {
        const double peak = row.at("peak_memory_bytes").get<double>();
        lowest = lowest == 0 ? peak : std::min(lowest, peak);
      }
    return lowest;
  };
  const auto core = ppsim_test::run_ppsim(plan + "--recompute selective");
  const auto experts = ppsim_test::run_ppsim(plan + "--recompute selective --recompute-modules moe_act,layernorm");
  INFO(core.err << experts.err);
  REQUIRE(core.status == 0);
  REQUIRE(experts.status == 0);
  CHECK(lowest_selective_peak(experts.out) > 0);
  CHECK(lowest_selective_peak(experts.out) < lowest_selective_peak(core.out));
  const auto refused = ppsim_test::run_ppsim(plan + "--recompute none,full --recompute-modules moe_act");
  CHECK(refused.status != 0);
  CHECK(refused.one_error_line());
  CHECK(refused.err.find("--recompute-modules moe_act: the selective rows' modules, but --recompute none,full "
                         "searches none") != std::string::npos);
}

TEST_CASE("the module sets a plan tries with --recompute-modules auto, lightest first") {
  CHECK(recompute_module_ladder(resolve_model("llama-3-8b")) ==
        std::vector<std::uint8_t>{kRecomputeCoreAttention, kRecomputeCoreAttention | kRecomputeLayernorm,
                                  kRecomputeCoreAttention | kRecomputeLayernorm | kRecomputeMlp});
  const std::uint8_t mixtral_act = kRecomputeCoreAttention | kRecomputeMoeActivation;
  CHECK(recompute_module_ladder(resolve_model("mixtral-8x7b")) ==
        std::vector<std::uint8_t>{kRecomputeCoreAttention, mixtral_act, mixtral_act | kRecomputeLayernorm,
                                  mixtral_act | kRecomputeLayernorm | kRecomputeMoe});
  const std::vector<std::uint8_t> deepseek = recompute_module_ladder(resolve_model("deepseek-v3"));
  REQUIRE(deepseek.size() == 7);
  CHECK(deepseek[3] == (mixtral_act | kRecomputeLayernorm | kRecomputeMlaUpProjection));
  CHECK(deepseek.back() == 0x7f);  // every module
  for (std::uint8_t modules : deepseek) {
    ParallelConfig p = selective(modules);
    CHECK_FALSE(recompute_modules_problem(resolve_model("deepseek-v3"), p));
  }
}

TEST_CASE("ppsim plan tries several module sets, each row naming its own", "[cli]") {
  const std::string plan =
      "plan --model deepseek-v3 --gpus 1024 --global-batch 8192 --tensor-parallel-sizes 1 "
      "--context-parallel-sizes 2 --expert-parallel-sizes 64 --schedules dualpipev --micro-batch-sizes 1 "
      "--recompute none,selective --quiet ";
  const auto json_run = ppsim_test::run_ppsim(plan + "--recompute-modules auto --format json --top 0");
  INFO(json_run.err);
  REQUIRE(json_run.status == 0);
  const nlohmann::json planned = nlohmann::json::parse(json_run.out);
  std::set<std::string> sets;
  for (const auto& row : planned.at("configurations")) {
    if (row.at("recompute_granularity") != "selective") {
      CHECK(row.at("recompute_modules").is_null());
      continue;
    }
    std::string names;
    for (const auto& name : row.at("recompute_modules")) names += name.get<std::string>() + ",";
    sets.insert(names);
    // Under 80 GB DeepSeek-V3 needs its MLA up-projections recomputed.
    CHECK(names.find("mla_up_proj") != std::string::npos);
  }
  CHECK(sets.size() >= 2);
  CHECK(sets.count("core_attn,moe_act,layernorm,mla_up_proj,") == 1);

  const auto table = ppsim_test::run_ppsim(plan +
                                           "--recompute-modules core_attn,moe_act,layernorm,mla_up_proj "
                                           "--recompute-modules core_attn,mla_up_proj --top 5");
  INFO(table.err);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("attn+act+ln+mla") != std::string::npos);
  CHECK(table.out.find("recomp: selective recomputation of attn core_attn") != std::string::npos);
  const auto csv = ppsim_test::run_ppsim(plan + "--recompute-modules mla_up_proj --format csv --top 1");
  REQUIRE(csv.status == 0);
  CHECK(csv.out.find(",expert_parallel,expert_tensor_parallel,recompute_modules,") != std::string::npos);
  CHECK(csv.out.find(",\"mla_up_proj\",") != std::string::npos);

  const auto lacks = ppsim_test::run_ppsim(
      "plan --model mixtral-8x7b --gpus 64 --recompute selective --recompute-modules moe_act "
      "--recompute-modules mla_up_proj --quiet");
  CHECK(lacks.status == 2);
  CHECK(lacks.one_error_line());
  CHECK(lacks.err.find("--recompute-modules mla_up_proj: mixtral-8x7b has no multi-latent attention") !=
        std::string::npos);
}
