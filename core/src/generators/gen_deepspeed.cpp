// DeepSpeed's TrainSchedule, InferenceSchedule and DataParallelSchedule (deepspeed/runtime/
// pipe/schedule.py), instruction for instruction: the same steps (empty ones included), the
// same instructions in the same order inside a step, the same buffer ids, as the release
// asked for wrote them (the releases and what changed: tests/golden/deepspeed/README.md).
// DeepSpeed's instructions carry only a buffer id; here each per-micro-batch instruction also
// names the micro-batch that buffer holds and the rank's stage.
#include <algorithm>
#include <array>
#include <optional>

#include "generator_support.hpp"
#include "pipescope/core/generators.hpp"

namespace pipescope {
namespace {

Schedule one_stage_per_rank_schedule(const std::string& name, int p, int m) {
  Schedule schedule;
  schedule.name = name;
  schedule.num_ranks = p;
  schedule.num_stages = p;
  schedule.num_micro_batches = m;
  schedule.stage_to_rank = loop_placement(p, 1);
  schedule.programs.resize(static_cast<std::size_t>(p));
  return schedule;
}

// TrainSchedule._step_to_micro_batch: even stages forward on even steps, odd stages on odd
// steps; the ids may fall outside 0..m-1 (then the step does nothing for that direction).
struct StepWork {
  int micro_batch;
  bool is_forward;
};

StepWork train_step_work(int step, int stage, int stages) {
  const bool even_step = step % 2 == 0;
  const bool even_stage = stage % 2 == 0;
  if (even_step && even_stage) return {step / 2 - stage / 2, true};
  if (!even_step && !even_stage) return {(step - 1) / 2 - stage / 2, true};
  if (even_step && !even_stage) return {step / 2 - stages + (stage + 1) / 2, false};
  return {(step - 1) / 2 - stages + 1 + stage / 2, false};
}

}  // namespace

int deepspeed_train_buffers(DeepSpeedRelease release, int stages, int stage, int micro_batches) {
  // 0.5 kept one buffer more than the micro-batches a stage holds between its forward and
  // its backward (p - s of them); 0.8.3 keeps just those.
  const int in_flight = release == DeepSpeedRelease::v0_5 ? stages - stage + 1 : stages - stage;
  return std::max(2, std::min(in_flight, micro_batches));
}

Schedule deepspeed_train_schedule(const ScheduleParams& params, DeepSpeedRelease release, const std::string& name) {
  using namespace generator_support;
  require_one_chunk(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  Schedule schedule = one_stage_per_rank_schedule(name, p, m);
  const int total_steps = 2 * (m + p - 1);
  // In a step, stages talk in pairs (a forward step on s, a backward step on s - 1). 0.5
  // receives first on the forward side (RecvActivation, SendGrad) and sends first on the
  // backward side (SendActivation, RecvGrad); 0.8.3 swapped both. Either way the two sides
  // post their transfers in matching order, so blocking sends meet.
  const bool forward_step_receives_first = release == DeepSpeedRelease::v0_5;
  auto valid = [m](int micro_batch) { return micro_batch >= 0 && micro_batch < m; };

  for (int s = 0; s < p; ++s) {
    const int num_buffers = deepspeed_train_buffers(release, p, s, m);
    auto buffer = [num_buffers](int micro_batch) { return micro_batch % num_buffers; };
    const bool has_prev = s > 0;
    const bool has_next = s + 1 < p;
    Program& program = schedule.programs[s];
    program.resize(static_cast<std::size_t>(total_steps));
    int prev_micro_batch = -1;
    for (int t = 0; t < total_steps; ++t) {
      const auto [mb, is_forward] = train_step_work(t, s, p);
      Step& cmds = program[t];
      // The transfers of the step: this micro-batch's input comes in, the previous one's
      // output goes out (activations forward on a forward step, gradients back otherwise).
      const bool has_peer = is_forward ? has_prev : has_next;
      std::optional<Instruction> receive, send;
      if (valid(mb) && has_peer) receive = Instruction{is_forward ? Op::RecvActivation : Op::RecvGrad, s, mb, buffer(mb)};
      if (valid(prev_micro_batch) && has_peer)
        send = Instruction{is_forward ? Op::SendGrad : Op::SendActivation, s, prev_micro_batch,
                           buffer(prev_micro_batch)};
      const bool receive_before_send = is_forward == forward_step_receives_first;
      for (const auto& transfer : receive_before_send ? std::array{receive, send} : std::array{send, receive})
        if (transfer) cmds.push_back(*transfer);
      if ((s == 0 || s == p - 1) && is_forward && valid(mb))
        cmds.push_back({Op::LoadMicroBatch, s, mb, buffer(mb)});
      if (valid(mb)) cmds.push_back({is_forward ? Op::ForwardPass : Op::BackwardPass, s, mb, buffer(mb)});
      if (t == total_steps - 1) {
        cmds.push_back({Op::ReduceTiedGrads, s, kNone});
        cmds.push_back({Op::ReduceGrads, s, kNone});
        cmds.push_back({Op::OptimizerStep, s, kNone});
      }
      prev_micro_batch = mb;
    }
  }
  return schedule;
}

Schedule deepspeed_inference_schedule(const ScheduleParams& params, const std::string& name) {
  using namespace generator_support;
  require_one_chunk(name, params);
  const int p = params.num_ranks;
  const int m = params.num_micro_batches;
  Schedule schedule = one_stage_per_rank_schedule(name, p, m);
  const int total_steps = m + p - 1;
  auto valid = [m](int micro_batch) { return micro_batch >= 0 && micro_batch < m; };

  for (int s = 0; s < p; ++s) {
    const bool has_prev = s > 0;
    const bool has_next = s + 1 < p;
    Program& program = schedule.programs[s];
    program.resize(static_cast<std::size_t>(total_steps));
    for (int t = 0; t < total_steps; ++t) {
      const int mb = t - s;
      // Two buffers, alternating: a stage receives into one while it sends from the other,
      // and neighbours (even and odd stages) use them in opposite phase.
      const int recv_buffer = s % 2 == 0 ? t % 2 : (t + 1) % 2;
      const int send_buffer = s % 2 == 0 ? (t + 1) % 2 : t % 2;
      Step& cmds = program[t];
      if ((s == 0 || s == p - 1) && valid(mb)) cmds.push_back({Op::LoadMicroBatch, s, mb, recv_buffer});
      const Instruction send{Op::SendActivation, s, mb - 1, send_buffer};
      const Instruction recv{Op::RecvActivation, s, mb, recv_buffer};
      if (s % 2 == 0) {
        if (has_next && valid(mb - 1)) cmds.push_back(send);
        if (has_prev && valid(mb)) cmds.push_back(recv);
      } else {
        if (has_prev && valid(mb)) cmds.push_back(recv);
        if (has_next && valid(mb - 1)) cmds.push_back(send);
      }
      if (valid(mb)) cmds.push_back({Op::ForwardPass, s, mb, recv_buffer});
    }
  }
  return schedule;
}

Schedule data_parallel_schedule(const ScheduleParams& params) {
  using namespace generator_support;
  const std::string name = "data-parallel";
  require_one_chunk(name, params);
  if (params.num_ranks != 1)
    refuse(name, "DeepSpeed's DataParallelSchedule runs the whole model as one stage on one rank "
                 "(gradient accumulation), so --stages must be 1; got --stages " +
                     std::to_string(params.num_ranks));
  const int m = params.num_micro_batches;
  Schedule schedule = one_stage_per_rank_schedule(name, 1, m);
  Program& program = schedule.programs[0];
  for (int t = 0; t < m; ++t) {
    Step cmds{{Op::LoadMicroBatch, 0, t, 0}, {Op::ForwardPass, 0, t, 0}, {Op::BackwardPass, 0, t, 0}};
    if (t == m - 1) {
      cmds.push_back({Op::ReduceGrads, 0, kNone});
      cmds.push_back({Op::OptimizerStep, 0, kNone});
    }
    program.push_back(std::move(cmds));
  }
  return schedule;
}

}  // namespace pipescope
