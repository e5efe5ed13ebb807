// A profile of S measured stages as the costs of a schedule of another stage count
// (profile_for_stages), layer by layer when the profile knows the model's layers, else by
// cutting or merging whole stages; and whether a profile fits a schedule.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/partitioner.hpp"
#include "pipescope/sim/calibration.hpp"

namespace pipescope::sim {
namespace {

// The input-gradient and weight-gradient shares of a full backward on the measured stages
// after the first, pooled; nullopt when the split is unmeasured or there is no such stage. The
// first stage has no input gradient to compute (its input is data), so its own split says
// nothing about its layers once they sit behind another stage: they take these shares.
std::optional<std::pair<double, double>> split_of_inner_stages(const Profile& profile) {
  if (!profile.backward_split_measured) return std::nullopt;
  double input = 0, weight = 0, full = 0;
  for (std::size_t s = 1; s < profile.stages.size(); ++s) {
    input += profile.stages[s].b_s;
    weight += profile.stages[s].w_s;
    full += profile.stages[s].full_backward_s;
  }
  if (full > 0) return std::make_pair(input / full, weight / full);
  // One measured stage: the probe of its later layers, if the executor made it.
  if (const auto& split = profile.inner_backward_split) return std::make_pair(split->input, split->weight);
  return std::nullopt;
}

// Whether the named layer ran the experts' all-to-all in the measured run (a MoE layer).
bool runs_all_to_all(const Profile& profile, const std::string& layer) {
  if (!profile.all_to_all) return false;
  const std::vector<std::string>& moe = profile.all_to_all->layers;
  return std::find(moe.begin(), moe.end(), layer) != moe.end();
}

// The layer-wise form of profile_for_stages, when the profile knows the model's layers (name,
// type, parameters), how the measured run split them and with which method: the target
// stages are split by the same method, and each layer takes from its measured stage a share
// of the time, the static memory and the gradient buffer in proportion to its parameters, and
// an equal share of the activation memory. Empty when the profile lacks the layers or they
// cannot be split into `num_stages` stages.
std::optional<Profile> profile_for_stages_by_layers(const Profile& profile, int num_stages) {
  if (!profile.layers || !profile.stage_bounds || !profile.partition_method) return std::nullopt;
  std::vector<LayerInfo> layers;
  for (const ProfileLayer& l : *profile.layers) layers.push_back({l.name, l.type, l.parameters, 1.0});
  const std::vector<int>& bounds = *profile.stage_bounds;
  const std::string& method = *profile.partition_method;
  const int measured = static_cast<int>(profile.stages.size());
  if (static_cast<int>(bounds.size()) != measured + 1 || bounds.front() != 0 ||
      bounds.back() != static_cast<int>(layers.size()))
    return std::nullopt;
  Partition target;
  try {
    target = partition_layers(layers, num_stages, method);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<int> measured_stage_of(layers.size());
  std::vector<std::int64_t> stage_parameters(static_cast<std::size_t>(measured), 0);
  std::vector<int> stage_layers(static_cast<std::size_t>(measured), 0);
  for (int s = 0; s < measured; ++s)
    for (int l = bounds[s]; l < bounds[s + 1]; ++l) {
      measured_stage_of[static_cast<std::size_t>(l)] = s;
      stage_parameters[static_cast<std::size_t>(s)] += layers[static_cast<std::size_t>(l)].parameters;
      ++stage_layers[static_cast<std::size_t>(s)];
    }
  const auto inner_split = split_of_inner_stages(profile);
  Profile out = profile;
  out.stages.clear();
  for (int v = 0; v < num_stages; ++v) {
    StageProfile t;
    t.stage = v;
    double f_mem = 0, b_mem = 0, static_bytes = 0, grad_buffer = 0;
    for (int l = target.bounds[v]; l < target.bounds[v + 1]; ++l) {
      const int s = measured_stage_of[static_cast<std::size_t>(l)];
      const StageProfile& m = profile.stages[static_cast<std::size_t>(s)];
      const auto params = stage_parameters[static_cast<std::size_t>(s)];
      const double by_parameters =
          params > 0 ? static_cast<double>(layers[static_cast<std::size_t>(l)].parameters) / static_cast<double>(params)
                     : 1.0 / stage_layers[static_cast<std::size_t>(s)];
      const double by_layers = 1.0 / stage_layers[static_cast<std::size_t>(s)];
      t.f_s += m.f_s * by_parameters;
      if (v > 0 && s == 0 && inner_split) {
        t.b_s += m.full_backward_s * by_parameters * inner_split->first;
        t.w_s += m.full_backward_s * by_parameters * inner_split->second;
      } else {
        t.b_s += m.b_s * by_parameters;
        t.w_s += m.w_s * by_parameters;
      }
      t.full_backward_s += m.full_backward_s * by_parameters;
      t.grad_accumulate_s += m.grad_accumulate_s * by_parameters;
      t.optimizer_s += m.optimizer_s * by_parameters;
      t.reduce_grads_s += m.reduce_grads_s * by_parameters;
      t.reduce_tied_s += m.reduce_tied_s * by_parameters;
      static_bytes += static_cast<double>(m.static_bytes) * by_parameters;
      grad_buffer += static_cast<double>(m.grad_buffer_bytes) * by_parameters;
      f_mem += static_cast<double>(m.f_mem_bytes) * by_layers;
      b_mem += static_cast<double>(m.b_mem_bytes) * by_layers;
      if (runs_all_to_all(profile, layers[static_cast<std::size_t>(l)].name)) ++t.moe_layers;
    }
    // What crosses the stage's end, and the per-transfer costs, are those of the measured
    // stage that holds its last layer.
    const StageProfile& last =
        profile.stages[static_cast<std::size_t>(measured_stage_of[static_cast<std::size_t>(target.bounds[v + 1] - 1)])];
    t.activation_bytes = last.activation_bytes;
    t.send_s = last.send_s;
    t.recv_s = last.recv_s;
    t.recv_contended_s = last.recv_contended_s;
    t.load_s = v == 0 ? profile.stages.front().load_s : v == num_stages - 1 ? profile.stages.back().load_s : 0.0;
    t.f_mem_bytes = std::llround(f_mem);
    t.b_mem_bytes = std::llround(b_mem);
    t.w_mem_bytes = -(t.f_mem_bytes + t.b_mem_bytes);
    t.static_bytes = std::llround(static_bytes);
    t.grad_buffer_bytes = std::llround(grad_buffer);
    out.stages.push_back(t);
  }
  return out;
}

}  // namespace

Profile profile_for_stages(const Profile& profile, int num_stages, const std::string& source) {
  const int measured = static_cast<int>(profile.stages.size());
  if (num_stages == measured) return profile;
  if (num_stages <= 0 || measured <= 0 || (num_stages % measured != 0 && measured % num_stages != 0))
    throw UsageError(
        fmt::format("{}: the profile has {} stages; a schedule of {} stages needs a multiple or a divisor "
                    "of that",
                    source, measured, num_stages));
  Profile out = profile;
  out.stages.clear();
  if (auto by_layers = profile_for_stages_by_layers(profile, num_stages)) return *by_layers;
  if (num_stages > measured) {
    const int parts = num_stages / measured;
    const auto inner_split = split_of_inner_stages(profile);
    for (int v = 0; v < num_stages; ++v) {
      const StageProfile& m = profile.stages[static_cast<std::size_t>(v / parts)];
      const bool first_part = v % parts == 0;
      StageProfile s = m;
      s.stage = v;
      const double share = 1.0 / parts;
      s.f_s = m.f_s * share;
      if (v > 0 && v < parts && inner_split) {  // cut from the first stage, behind another one now
        s.b_s = m.full_backward_s * share * inner_split->first;
        s.w_s = m.full_backward_s * share * inner_split->second;
      } else {
        s.b_s = m.b_s * share;
        s.w_s = m.w_s * share;
      }
      s.full_backward_s = m.full_backward_s * share;
      s.grad_accumulate_s = m.grad_accumulate_s * share;
      s.optimizer_s = m.optimizer_s * share;
      s.reduce_grads_s = m.reduce_grads_s * share;
      s.reduce_tied_s = m.reduce_tied_s * share;
      // Only the first and the last stage load micro-batches (inputs, labels).
      s.load_s = (v == 0 || v == num_stages - 1) ? m.load_s : 0.0;
      s.f_mem_bytes = m.f_mem_bytes / parts;
      s.b_mem_bytes = m.b_mem_bytes / parts;
      s.w_mem_bytes = -(s.f_mem_bytes + s.b_mem_bytes);
      s.static_bytes = m.static_bytes / parts + (first_part ? m.static_bytes % parts : 0);
      s.grad_buffer_bytes = m.grad_buffer_bytes / parts + (first_part ? m.grad_buffer_bytes % parts : 0);
      // The MoE layers go to the parts in turn, the first parts taking what does not divide.
      s.moe_layers = m.moe_layers / parts + (v % parts < m.moe_layers % parts ? 1 : 0);
      out.stages.push_back(s);
    }
  } else {
    const int group = measured / num_stages;
    for (int v = 0; v < num_stages; ++v) {
      const std::size_t first = static_cast<std::size_t>(v) * static_cast<std::size_t>(group);
      StageProfile s = profile.stages[first];
      s.stage = v;
      for (int k = 1; k < group; ++k) {
        const StageProfile& m = profile.stages[first + static_cast<std::size_t>(k)];
        s.f_s += m.f_s;
        s.b_s += m.b_s;
        s.w_s += m.w_s;
        s.full_backward_s += m.full_backward_s;
        s.grad_accumulate_s += m.grad_accumulate_s;
        s.optimizer_s += m.optimizer_s;
        s.reduce_grads_s += m.reduce_grads_s;
        s.reduce_tied_s += m.reduce_tied_s;
        s.load_s = std::max(s.load_s, m.load_s);
        s.f_mem_bytes += m.f_mem_bytes;
        s.b_mem_bytes += m.b_mem_bytes;
        s.w_mem_bytes += m.w_mem_bytes;
        s.static_bytes += m.static_bytes;
        s.grad_buffer_bytes += m.grad_buffer_bytes;
        s.moe_layers += m.moe_layers;
        s.activation_bytes = m.activation_bytes;  // what leaves the merged stage is what left its last part
      }
      out.stages.push_back(s);
    }
  }
  return out;
}

void check_profile_fits(const Profile& profile, const CompiledSchedule& schedule, const std::string& source) {
  if (profile.backward_split_measured || profile.backward_split_estimate) return;
  for (std::size_t i = 0; i < schedule.instructions.size(); ++i) {
    const CompiledInstruction& ci = schedule.instructions[i];
    if (ci.op == Op::BackwardInput || ci.op == Op::BackwardWeight)
      throw UsageError(fmt::format(
          "{}: schedule {} splits the backward (rank {} runs {}), but this profile was calibrated from full "
          "backwards only and does not know the split; calibrate with a trace of a split-backward schedule "
          "(e.g. pprun --schedule zb-h1 --trace t.json) among the inputs",
          source, schedule.name, schedule.rank_of_instruction(static_cast<std::int32_t>(i)),
          to_string(Instruction{ci.op, ci.stage, ci.micro_batch})));
  }
}

}  // namespace pipescope::sim
