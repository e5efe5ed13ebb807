// Estimators of a stage: its operations' times (with the split of its backward and what micro-batch
// 0's weight gradient saves) and its memory (what a micro-batch's forward allocates and its
// backward frees, the gradient buffer, the memory at the iteration's start, a transfer's size).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "estimation.hpp"
#include "pipescope/core/errors.hpp"

namespace pipescope::sim::calibration {
namespace {

std::int64_t round_bytes(double bytes) { return static_cast<std::int64_t>(std::llround(bytes)); }

}  // namespace

void estimate_stage_compute(Estimation& e, StageProfile& sp) {
  const Collected& c = e.collected;
  const int s = sp.stage;
  const std::string st = fmt::format("stage {} ", s);
  auto time = [&](Timed what) {
    return e.summary.estimate(st + action_name(what), "s", find_or_empty(c.times_s, s, what));
  };
  // A weight gradient adds itself into the stage's gradient sum, except micro-batch 0's, which
  // becomes the sum (the executor accumulates in micro-batch order): B and W are learnt from
  // the later micro-batches, and micro-batch 0's saving apart.
  auto weight_time = [&](Timed what) {
    Samples later, first;
    for (const Sample& sample : find_or_empty(c.times_s, s, what))
      (sample.micro_batch == 0 ? first : later).push_back(sample);
    if (later.empty() || first.empty()) return std::pair{time(what), 0.0};
    const std::string name = st + action_name(what);
    const double later_s = e.summary.estimate(name + " after micro-batch 0", "s", later);
    const double first_s = e.summary.estimate(name + " of micro-batch 0 (no gradient sum to add to)", "s", first);
    return std::pair{later_s, std::max(0.0, later_s - first_s)};
  };
  if (find_or_empty(c.times_s, s, Timed::F).empty())
    throw UsageError(fmt::format("calibrate: stage {} has no forward (F) in any trace", s));
  sp.f_s = time(Timed::F);
  const bool has_full = !find_or_empty(c.times_s, s, Timed::B).empty();
  const bool has_split =
      !find_or_empty(c.times_s, s, Timed::I).empty() && !find_or_empty(c.times_s, s, Timed::W).empty();
  if (!has_full && !has_split)
    throw UsageError(fmt::format("calibrate: stage {} has no backward (B, or I and W) in any trace", s));
  const auto [full_s, full_saving_s] = has_full ? weight_time(Timed::B) : std::pair{0.0, 0.0};
  sp.grad_accumulate_s = full_saving_s;
  if (has_split) {
    sp.b_s = time(Timed::I);
    const auto [w_s, w_saving_s] = weight_time(Timed::W);
    sp.w_s = w_s;
    if (!has_full) sp.grad_accumulate_s = w_saving_s;
    sp.full_backward_s = full_s;
    if (!has_full) e.full_backward_unmeasured.push_back(s);
  } else if (const auto probe = c.probe.find(s); probe != c.probe.end() && !probe->second.input.empty()) {
    const double input_share = median_of(probe->second.input);
    const double weight_share = median_of(probe->second.weight);
    sp.b_s = full_s * input_share;
    sp.w_s = full_s * weight_share;
    sp.full_backward_s = full_s;
    e.note(
        fmt::format("stage {}: backward split from the executor's probe ({} samples): input {:.1f}%, weight {:.1f}% of "
                    "a full backward",
                    s, probe->second.samples, 100 * input_share, 100 * weight_share));
  } else {
    sp.b_s = full_s;
    sp.w_s = 0;
    e.split_everywhere = false;
    e.split_unmeasured.push_back(s);
  }
  sp.load_s = time(Timed::Load);
  sp.optimizer_s = time(Timed::Optimizer);
  sp.reduce_grads_s = time(Timed::ReduceGrad);
  sp.reduce_tied_s = time(Timed::ReduceTied);
  sp.send_s = e.per_message.send_s;
  sp.recv_s = e.per_message.recv_s;
  sp.recv_contended_s = e.per_message.recv_contended_s;
}

void estimate_stage_memory(Estimation& e, StageProfile& sp) {
  const Collected& c = e.collected;
  const Profile& p = e.result.profile;
  const int s = sp.stage;
  const std::string st = fmt::format("stage {} ", s);
  const double forward_bytes = e.summary.estimate(st + "forward memory (LOAD + RECV_F + F)", "bytes",
                                                  find_or_empty(c.memory_b, s, Footprint::Forward));
  sp.f_mem_bytes = round_bytes(forward_bytes);
  const Samples& input_side = find_or_empty(c.memory_b, s, Footprint::Input);
  const bool has_split =
      !find_or_empty(c.times_s, s, Timed::I).empty() && !find_or_empty(c.times_s, s, Timed::W).empty();
  if (has_split && !input_side.empty()) {
    sp.b_mem_bytes = round_bytes(e.summary.estimate(st + "input-gradient memory (RECV_B + I)", "bytes", input_side));
  } else {
    // The executor keeps the graph from the input gradient to the weight gradient: the
    // activations go with the weight gradient.
    sp.b_mem_bytes = 0;
  }
  sp.w_mem_bytes = -(sp.f_mem_bytes + sp.b_mem_bytes);
  const Samples& backward_side = find_or_empty(c.memory_b, s, Footprint::Backward);
  if (!backward_side.empty()) {
    const double measured = e.summary.estimate(st + "backward memory (RECV_B + B or I + W)", "bytes", backward_side);
    if (std::fabs(measured + forward_bytes) > 0.05 * std::max(1.0, std::fabs(forward_bytes)))
      e.note(
          fmt::format("stage {}: a backward frees {} bytes, but its forward allocated {}: the profile frees what the "
                      "forward allocated",
                      s, -std::llround(measured), std::llround(forward_bytes)));
  }
  sp.grad_buffer_bytes =
      std::max<std::int64_t>(0, round_bytes(e.summary.estimate(st + "gradient buffer", "bytes",
                                                               find_or_empty(c.memory_b, s, Footprint::GradBuffer))));
  sp.static_bytes =
      std::max<std::int64_t>(0, round_bytes(e.summary.estimate(st + "memory at iteration start", "bytes",
                                                               find_or_empty(c.memory_b, s, Footprint::Static))));
  if (auto it = c.activation_bytes.find(s); it != c.activation_bytes.end() && !it->second.empty()) {
    std::vector<double> sizes(it->second.begin(), it->second.end());
    sp.activation_bytes = round_bytes(median_of(sizes));
  } else if (s > 0 && !p.stages.empty()) {
    sp.activation_bytes = p.stages.back().activation_bytes;  // the last stage sends only gradients of its input
  }
}

namespace {

// The stages that timed full backwards only get I and W from an estimate of their split
// (CalibrationOptions says where its numbers come from); the profile records it as such.
void estimate_split_of_full_backwards(Estimation& e) {
  const CalibrationOptions& o = *e.options;
  BackwardSplitEstimate estimate;
  estimate.input_share = o.split_input_share.value_or(0.5);
  estimate.overhead = o.split_overhead.value_or(e.torch_traces ? 0.13 : 0.0);
  estimate.input_share_uncertainty = 0.1;
  estimate.overhead_uncertainty = 0.13;
  estimate.stages = e.split_unmeasured;
  estimate.basis = fmt::format(
      "input share {}; overhead {}",
      o.split_input_share ? "given (--split-input-share)"
                          : "from equal FLOPs of the two gradients, Zero Bubble's Table 1",
      o.split_overhead ? "given (--split-overhead)"
                       : (e.torch_traces ? "torch 2.15's I + W over B on bench/torch-accuracy" : "none assumed"));
  std::string stages;
  for (const int s : estimate.stages) {
    StageProfile& sp = e.result.profile.stages[static_cast<std::size_t>(s)];
    const double full_s = sp.b_s;
    sp.full_backward_s = full_s;
    sp.b_s = full_s * estimate.input_share * (1 + estimate.overhead);
    sp.w_s = full_s * (1 - estimate.input_share) * (1 + estimate.overhead);
    stages += (stages.empty() ? "" : ", ") + std::to_string(s);
  }
  e.note(
      fmt::format("backward split estimated, not measured, on stage(s) {}: input {:.0f}% +- {:.0f} points of a full "
                  "backward, I + W {:.0f}% +- {:.0f} points over B ({}); predictions of split-backward schedules say "
                  "so and widen their interval by it. A trace of a split-backward schedule measures it "
                  "(--no-split-estimate refuses such schedules instead)",
                  stages, 100 * estimate.input_share, 100 * estimate.input_share_uncertainty, 100 * estimate.overhead,
                  100 * estimate.overhead_uncertainty, estimate.basis));
  e.result.profile.backward_split_estimate = std::move(estimate);
}

}  // namespace

// How a stage cut from the first one, behind another stage now, splits its backward: from the
// executor's probe of the first stage's later layers. A profile of several stages also has the
// measured inner stages, which take precedence (split_of_inner_stages in stage_mapping.cpp).
void estimate_backward_split(Estimation& e) {
  Profile& p = e.result.profile;
  p.backward_split_measured = e.split_everywhere;
  if (const auto inner = e.collected.inner_probe.find(0);
      inner != e.collected.inner_probe.end() && !inner->second.input.empty()) {
    const double input_share = median_of(inner->second.input);
    const double weight_share = median_of(inner->second.weight);
    p.inner_backward_split = InnerBackwardSplit{input_share, weight_share};
    e.note(
        fmt::format("stage 0's layers after its first, as an inner stage runs them ({} samples): input {:.1f}%, weight "
                    "{:.1f}% of a full backward",
                    inner->second.samples, 100 * input_share, 100 * weight_share));
  }
  if (!e.split_everywhere && e.options->split_estimate) {
    estimate_split_of_full_backwards(e);
  } else if (!e.split_everywhere) {
    e.note(
        "backward split unmeasured: the traces time only full backwards (B) and carry no split probe; schedules with "
        "BackwardInput/BackwardWeight (zb-*, dualpipev) will be refused. Add a trace of a split-backward schedule "
        "(pprun --schedule zb-h1 ...)");
  }
  if (!e.full_backward_unmeasured.empty()) {
    std::string stages;
    for (const int s : e.full_backward_unmeasured) stages += (stages.empty() ? "" : ", ") + std::to_string(s);
    e.note("full backward unmeasured on stage(s) " + stages +
           ": the traces time its two halves (I, W) only, and a full backward (B) is taken as their sum, which can be "
           "more than one pass costs (torch's split backward walks part of the graph twice); schedules with full "
           "backwards (1f1b, interleaved, DualPipeV's overlapped pairs) may come out slow. Add a trace of one");
  }
}

}  // namespace pipescope::sim::calibration
