// Point-to-point transfers between stages (see p2p_channel.hpp).
#include "runtime/p2p_channel.hpp"

#include <fmt/format.h>

#include "runtime/clock.hpp"
#include "error_text.hpp"

namespace pipescope::exec::runtime {
namespace {

// The gradients of the floating-point ones of `tensors`, in order, as one byte message.
struct GradLayout {
  std::vector<at::ScalarType> dtypes;
  std::vector<std::vector<std::int64_t>> sizes;
  std::int64_t bytes = 0;
};

GradLayout grad_layout(const TensorList& tensors) {
  GradLayout layout;
  for (const auto& o : tensors)
    if (carries_grad(o)) {
      layout.dtypes.push_back(o.scalar_type());
      layout.sizes.emplace_back(o.sizes().vec());
      layout.bytes += o.numel() * static_cast<std::int64_t>(o.element_size());
    }
  return layout;
}

// A posted receive finishes at a compute's turn, but is named as itself in errors and traces.
class AtInstruction {
 public:
  AtInstruction(RankContext& ctx, const Instruction& instr, int step)
      : ctx_(ctx), saved_(ctx.current), saved_step_(ctx.current_step) {
    ctx.current = &instr;
    ctx.current_step = step;
  }
  ~AtInstruction() {
    ctx_.current = saved_;
    ctx_.current_step = saved_step_;
  }
  AtInstruction(const AtInstruction&) = delete;
  AtInstruction& operator=(const AtInstruction&) = delete;

 private:
  RankContext& ctx_;
  const Instruction* saved_;
  int saved_step_;
};

}  // namespace

void PointToPoint::begin_step(bool torch_semantics) {
  headers_.clear();
  torch_semantics_ = torch_semantics;
  posted_.clear();
  send_tickets_.clear();
}

int PointToPoint::tag(int from_stage, int to_stage, bool activation) const {
  return (from_stage * ctx_.active->num_stages + to_stage) * 2 + (activation ? 0 : 1);
}

std::vector<const SkipRoute*> PointToPoint::transported_skips(int from_stage, int to_stage) const {
  std::vector<const SkipRoute*> out;
  for (const auto& r : ctx_.skip_routes)
    if (r.from_stage == from_stage && r.to_stage == to_stage &&
        (r.carrier == SkipCarrier::WithActivation || r.carrier == SkipCarrier::Direct))
      out.push_back(&r);
  return out;
}

// Sends to the next stage (activations) or the previous one (gradients) carry the stage's
// tensors and, as a second message, the skip tensors riding along; sends to another stage
// (peer_stage) carry only the skip tensors of that pair.
void PointToPoint::send(const Instruction& instr) {
  const int peer_stage = resolved_peer_stage(instr);
  if (ctx_.holds(peer_stage)) return;  // same rank: handed over in memory
  MicroBatchState& state = ctx_.micro_batch(instr.stage, instr.micro_batch);
  const bool activation = instr.op == Op::SendActivation;
  if (activation ? state.outputs.empty() : !state.input_grads_ready)
    ctx_.fail_here(activation ? "nothing to send: the forward has not run"
                              : "nothing to send: the backward has not run");
  const bool main_channel = peer_stage == (activation ? instr.stage + 1 : instr.stage - 1);
  const auto skips =
      activation ? transported_skips(instr.stage, peer_stage) : transported_skips(peer_stage, instr.stage);
  if (!main_channel && skips.empty())
    ctx_.fail_here(fmt::format("nothing to send to stage {}: it is not the {} stage and no skip tensor goes {} it",
                               peer_stage, activation ? "next" : "previous", activation ? "to" : "back to"));
  const int peer = ctx_.world_rank_of_stage(peer_stage);
  const int message_tag = tag(instr.stage, peer_stage, activation);
  TensorList messages;
  std::int64_t bytes = 0;
  if (main_channel) bytes += append_main_messages(messages, instr, state, peer_stage, activation);
  if (!skips.empty()) bytes += append_skip_messages(messages, instr, state, peer_stage, activation, skips);
  if (messages.empty()) return;
  const auto index = recorder_.begin_event(traces::Lane::Send, instr, peer, bytes);
  auto group = std::make_unique<PendingGroup>();
  for (auto& m : messages) group->add(ctx_.world.send(m, peer, message_tag));
  send_tickets_[{instr.stage, instr.micro_batch, activation}] = send_watcher_.watch(
      std::move(group), [this, index](double end) { recorder_.end_event(index, end); }, ctx_.where());
}

void PointToPoint::wait_sends(int stage, int micro_batch, bool activation) {
  auto it = send_tickets_.find({stage, micro_batch, activation});
  if (it == send_tickets_.end()) return;
  try {
    send_watcher_.wait_for(it->second);
  } catch (const std::exception& e) {
    ctx_.fail_here(first_line(e.what()));
  }
}

std::int64_t PointToPoint::append_main_messages(TensorList& messages, const Instruction& instr, MicroBatchState& state,
                                                int peer_stage, bool activation) {
  const TensorList& payload = activation ? state.outputs : state.input_grads;
  if (activation && ctx_.dynamic_shapes)
    return headers_.append_messages(messages, payload, state.output_names, {instr.stage, peer_stage, 0},
                                    ctx_.stage(instr.stage), instr.micro_batch, "output tensor");
  if (!activation) {
    // Gradients: one per floating-point input; the receiver knows their shapes from its
    // outputs. A stage without floating-point inputs sends nothing (and nothing is awaited).
    if (payload.empty()) return 0;
    messages.push_back(pack_bytes(payload, {}, ctx_.device()));
    return messages.back().numel();
  }
  if (mixed_dtypes(payload)) {
    messages.push_back(pack_bytes(payload, {}, ctx_.device()));  // e.g. hidden states and a mask
    return messages.back().numel();
  }
  TensorList detached;
  for (auto& t : payload) detached.push_back(t.detach());
  messages.push_back(pack_tensors(detached));
  return static_cast<std::int64_t>(messages.back().numel() * messages.back().element_size());
}

std::int64_t PointToPoint::append_skip_messages(TensorList& messages, const Instruction& instr, MicroBatchState& state,
                                                int peer_stage, bool activation,
                                                const std::vector<const SkipRoute*>& skips) {
  if (activation) {
    // Skip tensors carry their names and shapes (headers as for dynamic shapes).
    TensorList tensors;
    std::vector<std::string> names;
    for (const SkipRoute* r : skips) {
      auto it = state.skip_outputs.find(r->name);
      if (it == state.skip_outputs.end())
        ctx_.fail_here(fmt::format("stage {} has no skip tensor '{}' for stage {} (layer '{}' stashes it)", instr.stage,
                                   r->name, peer_stage, ctx_.layer_name(r->from_layer)));
      tensors.push_back(it->second);
      names.push_back(r->name);
    }
    return headers_.append_messages(messages, tensors, names, {instr.stage, peer_stage, 1}, ctx_.stage(instr.stage),
                                    instr.micro_batch, "skip tensor");
  }
  // The gradients of the floating-point skip tensors, in route order.
  TensorList grads;
  for (const SkipRoute* r : skips)
    if (auto it = state.skip_input_grads.find(r->name); it != state.skip_input_grads.end()) grads.push_back(it->second);
  if (grads.empty()) return 0;
  messages.push_back(pack_bytes(grads, {}, ctx_.device()));
  return messages.back().numel();
}

std::int64_t PointToPoint::receive_activation(StageState& st, MicroBatchState& state, int peer_stage,
                                              const Receive& receive, int peer) {
  if (ctx_.dynamic_shapes) {
    std::int64_t bytes = 0;
    state.received_inputs =
        headers_.receive_messages({peer_stage, st.stage, 0}, receive, peer, bytes, state.received_names);
    return bytes;
  }
  PlannedMessage message = plan_activation(st, state);
  receive(message.buffer);
  message.unpack();
  return static_cast<std::int64_t>(message.buffer.numel() * message.buffer.element_size());
}

PointToPoint::PlannedMessage PointToPoint::plan_activation(StageState& st, MicroBatchState& state) {
  const at::Device device = ctx_.device();
  TensorList like;
  state.received_names.clear();
  for (const auto& spec : ctx_.model.boundary.at(static_cast<std::size_t>(st.module->first_layer()))) {
    like.push_back(
        at::empty(spec.sizes, at::TensorOptions().dtype(wire_dtype(spec.dtype, ctx_.options.dtype)).device(device)));
    if (!spec.name.empty()) state.received_names.push_back(spec.name);
  }
  if (mixed_dtypes(like)) {
    std::vector<at::ScalarType> dtypes;
    std::vector<std::vector<std::int64_t>> sizes;
    std::int64_t total_bytes = 0;
    for (const auto& t : like) {
      dtypes.push_back(t.scalar_type());
      sizes.emplace_back(t.sizes().vec());
      total_bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
    }
    at::Tensor body = at::empty({total_bytes}, at::TensorOptions().dtype(at::kByte).device(device));
    return {body, [&state, body, dtypes, sizes, device] {
              state.received_inputs = unpack_bytes(body, 0, dtypes, sizes, device);
            }};
  }
  std::int64_t total = 0;
  for (auto& t : like) total += t.numel();
  at::Tensor flat = like.size() == 1 ? like[0] : at::empty({total}, like[0].options());
  return {flat, [&state, flat, like] { state.received_inputs = unpack_tensors(flat, like); }};
}

std::optional<PointToPoint::PlannedMessage> PointToPoint::plan_grads(MicroBatchState& state) {
  const GradLayout layout = grad_layout(state.outputs);
  if (layout.bytes == 0) return std::nullopt;
  const at::Device device = ctx_.device();
  at::Tensor body = at::empty({layout.bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  return PlannedMessage{body, [&state, body, layout, device] {
                          state.output_grads = unpack_bytes(body, 0, layout.dtypes, layout.sizes, device);
                        }};
}

TensorList PointToPoint::receive_grads_for(const TensorList& tensors, const Receive& receive, std::int64_t& bytes) {
  const GradLayout layout = grad_layout(tensors);
  if (layout.bytes == 0) return {};
  const at::Device device = ctx_.device();
  at::Tensor body = at::empty({layout.bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  receive(body);
  bytes += layout.bytes;
  return unpack_bytes(body, 0, layout.dtypes, layout.sizes, device);
}

void PointToPoint::recv(const Instruction& instr) {
  const int peer_stage = resolved_peer_stage(instr);
  if (ctx_.holds(peer_stage)) return;  // same rank: handed over in memory
  if (torch_semantics_) return post_receive(instr, peer_stage);
  receive_now(instr);
}

// Only the one message of the main channel can be posted before it arrives, and only with
// declared shapes (a header says how large the message after it is); a channel that carries
// skip tensors or headers is received whole when finished. Either way the receive is finished
// in its channel's order (posted_receives.hpp).
void PointToPoint::post_receive(const Instruction& instr, int peer_stage) {
  const bool activation = instr.op == Op::RecvActivation;
  const int peer = ctx_.world_rank_of_stage(peer_stage);
  const PostedReceives::Key key{instr.stage, instr.micro_batch, activation};
  const PostedReceives::Channel channel{peer, tag(peer_stage, instr.stage, activation)};
  const int step = ctx_.current_step;
  const bool main_channel = peer_stage == (activation ? instr.stage - 1 : instr.stage + 1);
  const bool skips = activation ? !transported_skips(peer_stage, instr.stage).empty()
                                : !transported_skips(instr.stage, peer_stage).empty();
  if (!main_channel || skips || (activation && ctx_.dynamic_shapes)) {
    posted_.post(key, channel, [this, &instr, step] {
      AtInstruction at(ctx_, instr, step);
      receive_now(instr);
    });
    return;
  }
  StageState& st = ctx_.stage(instr.stage);
  MicroBatchState& state = ctx_.micro_batch(instr.stage, instr.micro_batch);
  if (!activation && state.outputs.empty())
    ctx_.fail_here("a gradient for outputs this stage has not computed (no forward before it)");
  std::optional<PlannedMessage> message = activation ? plan_activation(st, state) : plan_grads(state);
  if (!message) return;  // nothing floating-point: no gradient comes back
  const double posted_us = now_us();
  std::shared_ptr<PendingTransfer> transfer = ctx_.world.recv(message->buffer, peer, channel.second);
  posted_.post(key, channel, [this, &instr, step, peer, posted_us, transfer, message = *message] {
    AtInstruction at(ctx_, instr, step);
    try {
      transfer->wait(ctx_.options.timeout);
    } catch (const std::exception& e) {
      ctx_.fail(first_line(e.what()), "blocked in " + ctx_.where());
    }
    message.unpack();
    // The event spans the receive from its post until its bytes were known to be in.
    const auto index =
        recorder_.begin_event(traces::Lane::Recv, instr, peer,
                              static_cast<std::int64_t>(message.buffer.numel() * message.buffer.element_size()));
    recorder_.move_event_start(index, posted_us);
    recorder_.end_event(index, now_us());
  });
}

void PointToPoint::receive_now(const Instruction& instr) {
  const int peer_stage = resolved_peer_stage(instr);
  StageState& st = ctx_.stage(instr.stage);
  MicroBatchState& state = ctx_.micro_batch(instr.stage, instr.micro_batch);
  const bool activation = instr.op == Op::RecvActivation;
  const int peer = ctx_.world_rank_of_stage(peer_stage);
  const int message_tag = tag(peer_stage, instr.stage, activation);
  const bool main_channel = peer_stage == (activation ? instr.stage - 1 : instr.stage + 1);
  const auto skips =
      activation ? transported_skips(peer_stage, instr.stage) : transported_skips(instr.stage, peer_stage);
  if (!main_channel && skips.empty())
    ctx_.fail_here(
        fmt::format("nothing to receive from stage {}: it is not the {} stage and no skip tensor comes {} it",
                    peer_stage, activation ? "previous" : "next", activation ? "from" : "back from"));
  Receive receive = [&](at::Tensor buffer) {
    try {
      ctx_.world.recv(buffer, peer, message_tag)->wait(ctx_.options.timeout);
    } catch (const std::exception& e) {
      ctx_.fail(first_line(e.what()), "blocked in " + ctx_.where());
    }
  };
  if (!activation && state.outputs.empty())
    ctx_.fail_here("a gradient for outputs this stage has not computed (no forward before it)");
  const double start_us = now_us();
  std::int64_t bytes = 0;
  std::size_t messages = 0;
  if (main_channel && activation) {
    bytes += receive_activation(st, state, peer_stage, receive, peer);
    ++messages;
  } else if (main_channel) {
    const std::int64_t before = bytes;
    state.output_grads = receive_grads_for(state.outputs, receive, bytes);
    messages += bytes > before ? 1 : 0;
  }
  if (!skips.empty()) messages += receive_skips(instr, state, peer_stage, activation, skips, receive, peer, bytes);
  if (messages == 0) return;  // nothing floating-point: no gradient comes back
  const auto index = recorder_.begin_event(traces::Lane::Recv, instr, peer, bytes);
  recorder_.move_event_start(index, start_us);
  recorder_.end_event(index, now_us());
}

std::size_t PointToPoint::receive_skips(const Instruction& instr, MicroBatchState& state, int peer_stage,
                                        bool activation, const std::vector<const SkipRoute*>& skips,
                                        const Receive& receive, int peer, std::int64_t& bytes) {
  if (activation) {
    std::int64_t skip_bytes = 0;
    std::vector<std::string> names;
    TensorList tensors = headers_.receive_messages({peer_stage, instr.stage, 1}, receive, peer, skip_bytes, names);
    if (names.size() != tensors.size())
      ctx_.fail_here(fmt::format("the skip tensors from stage {} came without their names", peer_stage));
    for (std::size_t i = 0; i < tensors.size(); ++i) state.received_skips[names[i]] = tensors[i];
    bytes += skip_bytes;
    return 1;
  }
  TensorList produced;
  std::vector<std::string> names;
  for (const SkipRoute* r : skips) {
    auto it = state.skip_outputs.find(r->name);
    if (it == state.skip_outputs.end())
      ctx_.fail_here(fmt::format("a gradient for the skip tensor '{}', which this stage has not produced", r->name));
    produced.push_back(it->second);
    names.push_back(r->name);
  }
  const std::int64_t before = bytes;
  const TensorList grads = receive_grads_for(produced, receive, bytes);
  std::size_t g = 0;
  for (std::size_t i = 0; i < produced.size(); ++i)
    if (carries_grad(produced[i])) state.skip_output_grads[names[i]] = grads.at(g++);
  return bytes > before ? 1 : 0;
}

}  // namespace pipescope::exec::runtime
