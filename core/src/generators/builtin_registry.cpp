// The built-in schedules of SPEC.md section 2, by name (zb-auto is added by the simulator).
#include "pipescope/core/generators.hpp"

#include <string>

namespace pipescope {
namespace {

// Traits of the schedules that differ from one stage per rank with a full backward.
ScheduleTraits split_backward() {
  ScheduleTraits traits;
  traits.split_backward = true;
  return traits;
}

ScheduleTraits interleaving() {
  ScheduleTraits traits;
  traits.chunks = {};  // any count: --chunks V
  return traits;
}

ScheduleTraits v_shape(bool split) {
  ScheduleTraits traits;
  traits.placement = StagePlacement::v;
  traits.chunks = {2};
  traits.split_backward = split;
  return traits;
}

GeneratorInfo lowered(std::string name, std::string description, ComputeOrder (*make_order)(const ScheduleParams&),
                      ScheduleTraits traits = {}) {
  return {std::move(name), std::move(description),
          [make_order](const ScheduleParams& params) { return lower(make_order(params)); }, make_order,
          std::move(traits)};
}

}  // namespace

void register_builtin_generators(ScheduleRegistry& registry) {
  registry.add(lowered("gpipe", "all forwards, then all backwards (1 stage per rank)", gpipe_order));
  registry.add(lowered("1f1b",
                       "PipeDream-flush one-forward-one-backward as Megatron-Core runs it: warm-up min(p-r-1, m), "
                       "so m < p runs too (1 stage per rank)",
                       one_f_one_b_order));
  // DeepSpeed's schedules as its releases wrote them; the plain names are the current
  // release's, which is what DeepSpeed users run today (tests/golden/deepspeed/README.md).
  const auto train = [](DeepSpeedRelease release, std::string name) -> Generator {
    return [release, name](const ScheduleParams& params) { return deepspeed_train_schedule(params, release, name); };
  };
  const auto inference = [](std::string name) -> Generator {
    return [name](const ScheduleParams& params) { return deepspeed_inference_schedule(params, name); };
  };
  registry.add({"deepspeed-train",
                "DeepSpeed TrainSchedule as released today (0.8.3 .. 0.19.8), instruction for instruction: "
                "2(m+p-1) lock-step steps, DeepSpeed's buffer ids (1 stage per rank)",
                train(kCurrentDeepSpeedRelease, "deepspeed-train")});
  registry.add({"deepspeed-train@0.5",
                "DeepSpeed 0.5.0 .. 0.8.2 TrainSchedule (deepspeed-train@VERSION picks by release): "
                "SendActivation before RecvGrad, RecvActivation before SendGrad, max(2, min(p-s+1, m)) buffers",
                train(DeepSpeedRelease::v0_5, "deepspeed-train@0.5")});
  registry.add({"deepspeed-train@0.8.3",
                "DeepSpeed 0.8.3 .. 0.19.8 TrainSchedule: RecvGrad before SendActivation, SendGrad before "
                "RecvActivation, max(2, min(p-s, m)) buffers",
                train(DeepSpeedRelease::v0_8_3, "deepspeed-train@0.8.3")});
  registry.add({"deepspeed-inference",
                "DeepSpeed InferenceSchedule, instruction for instruction: m+p-1 steps, two "
                "alternating buffers (1 stage per rank)",
                inference("deepspeed-inference")});
  registry.add({"deepspeed-inference@0.5",
                "DeepSpeed 0.5.0 .. 0.19.8 InferenceSchedule (its streams never changed; "
                "deepspeed-inference@VERSION picks by release)",
                inference("deepspeed-inference@0.5")});
  registry.add_release_family("deepspeed-train", "0.19.8");
  registry.add_release_family("deepspeed-inference", "0.19.8");
  registry.add({"data-parallel", "DeepSpeed DataParallelSchedule: gradient accumulation on one stage; --stages 1 only",
                data_parallel_schedule});
  // Megatron-Core's interleaved 1F1B as its releases run it; the plain name is the current
  // release's (tests/golden/megatron/README.md).
  const auto interleaved = [](MegatronRelease release, std::string name) -> OrderGenerator {
    return [release, name](const ScheduleParams& params) { return megatron_interleaved_order(params, release, name); };
  };
  const auto megatron = [](std::string name, std::string description, OrderGenerator make_order) {
    GeneratorInfo info{std::move(name), std::move(description),
                       [make_order](const ScheduleParams& params) { return lower(make_order(params)); }, make_order,
                       interleaving()};
    info.traits.takes_microbatch_group_size = true;
    return info;
  };
  registry.add(
      megatron("interleaved-1f1b",
               "Megatron-Core interleaved 1F1B as released today (0.10.0 .. 0.19.2), --chunks V (default 2), "
               "--microbatch-group-size-per-vp-stage G in [p, m] (default p), m % G 0 or >= p (loop placement)",
               interleaved(kCurrentMegatronRelease, "interleaved-1f1b")));
  registry.add(megatron("interleaved-1f1b@0.1",
                        "megatron-core 0.1.0 .. 0.9.x interleaved 1F1B (and the Megatron-LM of 2021): groups of p, "
                        "m % p == 0, every forward first when m == p (interleaved-1f1b@VERSION picks by release)",
                        interleaved(MegatronRelease::v0_1, "interleaved-1f1b@0.1")));
  registry.add(megatron("interleaved-1f1b@0.10",
                        "megatron-core 0.10.0 .. 0.19.2 interleaved 1F1B (= interleaved-1f1b): "
                        "microbatch_group_size_per_vp_stage, no all-forwards rule at m == p",
                        interleaved(MegatronRelease::v0_10, "interleaved-1f1b@0.10")));
  registry.add_release_family("interleaved-1f1b", "0.19.2");
  registry.add(lowered("looped-bfs",
                       "breadth-first looping, torch ScheduleLoopedBFS, --chunks V (default 2) (loop placement)",
                       looped_bfs_order, interleaving()));
  registry.add(lowered("zb-h1",
                       "Zero Bubble H1: split backward, 1F1B's peak memory (rank r: p - r micro-batches of "
                       "activations, p from F to W) (1 stage per rank)",
                       zb_h1_order, split_backward()));
  registry.add(lowered("zb-h2",
                       "Zero Bubble H2: split backward, about 2x activations, no bubble in the steady state "
                       "(1 stage per rank)",
                       zb_h2_order, split_backward()));
  registry.add(lowered("zbv", "Zero Bubble V: 2 chunks, split backward (V placement)", zbv_order, v_shape(true)));
  registry.add(lowered("dualpipev", "DeepSeek DualPipeV; needs m >= 2p (V placement)", dualpipev_order, v_shape(true)));
}

}  // namespace pipescope
