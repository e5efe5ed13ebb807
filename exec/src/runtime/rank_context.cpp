// Building a rank's stages, and how errors name the place (see rank_context.hpp).
#include "runtime/rank_context.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fused_adamw.hpp"

namespace pipescope::exec::runtime {
namespace {

std::unique_ptr<StageState> build_stage(const ModelSpec& model, const Partition& partition,
                                        const RuntimeOptions& options, int s, int num_stages) {
  auto state = std::make_unique<StageState>();
  state->stage = s;
  state->is_first = s == 0;
  state->is_last = s == num_stages - 1;
  state->module = std::make_unique<StageModule>(model, partition.bounds[s], partition.bounds[s + 1]);
  if (options.device->device() != at::kCPU) state->module->to(options.device->device());
  auto params = state->module->parameter_tensors();
  if (params.empty()) return state;
  if (options.optimizer) {
    state->optimizer = options.optimizer(params);
    if (!state->optimizer) throw RuntimeError(fmt::format("stage {}: the optimizer factory returned no optimizer", s));
  } else {
    state->optimizer = std::make_unique<FusedAdamW>(
        params, torch::optim::AdamWOptions(options.learning_rate).weight_decay(options.weight_decay));
  }
  return state;
}

}  // namespace

RankContext::RankContext(const ModelSpec& model_spec, const Schedule& schedule, const Partition& stage_bounds,
                         Transport& world_transport, GridPosition grid_position, RuntimeOptions runtime_options)
    : model(model_spec),
      built_for(&schedule),
      active(&schedule),
      partition(stage_bounds),
      world(world_transport),
      position(grid_position),
      options(std::move(runtime_options)),
      dynamic_shapes(model_spec.dynamic_shapes || model_spec.boundary.empty()),
      loss_scaler(options.loss_scale) {
  if (!options.device) options.device = make_cpu_device();
  try {
    check_compute_dtype(options.dtype, options.device->device());
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("rank {}: {}", position.world_rank(), e.what()));
  }
  if (partition.num_stages() != schedule.num_stages)
    throw RuntimeError(fmt::format("schedule '{}' has {} stages, but the model is split into {} (bounds {})",
                                   schedule.name, schedule.num_stages, partition.num_stages(),
                                   fmt::join(partition.bounds, ", ")));
  if (static_cast<int>(schedule.stage_to_rank.size()) != schedule.num_stages)
    throw RuntimeError(fmt::format("schedule '{}': stage_to_rank names {} stages, not {}", schedule.name,
                                   schedule.stage_to_rank.size(), schedule.num_stages));
  skip_routes = exec::skip_routes(model, partition, schedule.stage_to_rank);
  if (!skip_routes.empty() && options.activation_checkpoint_interval > 0)
    throw RuntimeError(
        fmt::format("activation checkpointing (every {} layers) cannot recompute layers that stash or pop skip "
                    "tensors (skip '{}'); turn one of them off",
                    options.activation_checkpoint_interval, skip_routes.front().name));
  for (int s : schedule.stages_of_rank(position.pipe_rank))
    stages.emplace(s, build_stage(model, partition, options, s, schedule.num_stages));
}

StageState& RankContext::stage(int s) {
  auto it = stages.find(s);
  if (it == stages.end()) throw RuntimeError(fmt::format("rank {}: stage {} is not held here", world_rank(), s));
  return *it->second;
}

void RankContext::fail(const std::string& what, const std::string& where) const {
  throw RuntimeError(fmt::format("rank {}: step {}: {}: {}", world_rank(), step_index, where, what));
}

std::string RankContext::where() const {
  if (!current) return "end of step";
  std::string peer;
  if (is_p2p(current->op)) peer = fmt::format(", peer rank {}", world_rank_of_stage(resolved_peer_stage(*current)));
  return fmt::format("program step {}, instruction {} ({} of stage {}, micro-batch {}{})", current_step,
                     to_string(*current), op_name(current->op), current->stage, current->micro_batch, peer);
}

std::string RankContext::stage_name(const StageState& st) const {
  const int first = st.module->first_layer(), last = st.module->end_layer() - 1;
  return fmt::format("stage {} (layers {}..{}, '{}' .. '{}')", st.stage, first, last, layer_name(first),
                     layer_name(last));
}

}  // namespace pipescope::exec::runtime
