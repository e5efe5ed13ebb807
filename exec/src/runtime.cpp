// The instruction interpreter of one rank (see runtime.hpp for the exactness rules).
#include "pipescope/exec/runtime.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/memory.hpp"

namespace pipescope::exec {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

// Adds per-micro-batch gradients in micro-batch order, whatever order they arrive in, so the
// sum does not depend on the schedule.
class OrderedGradAccumulator {
 public:
  void reset(int num_micro_batches) {
    expected_ = num_micro_batches;
    next_ = 0;
    pending_.clear();
    sum_.clear();
  }
  void add(int micro_batch, std::vector<at::Tensor> grads) {
    pending_.emplace(micro_batch, std::move(grads));
    for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(next_)) {
      if (sum_.empty()) {
        sum_ = std::move(it->second);
      } else {
        for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i].add_(it->second[i]);
      }
      pending_.erase(it);
      ++next_;
    }
  }
  bool complete() const { return next_ == expected_; }
  int missing() const { return expected_ - next_; }
  std::vector<at::Tensor>& sum() { return sum_; }

 private:
  int expected_ = 0;
  int next_ = 0;
  std::map<int, std::vector<at::Tensor>> pending_;
  std::vector<at::Tensor> sum_;
};

struct MicroBatchState {
  TensorList received_inputs;   // from a receive or a hand-over, before the forward
  TensorList inputs;            // what the forward took (leaves that require grad on inner stages)
  TensorList outputs;
  at::Tensor labels;
  at::Tensor loss;
  TensorList output_grads;      // gradient of the outputs, from the next stage
  TensorList input_grads;       // gradient of the inputs, for the previous stage
  TensorList backward_roots;    // kept between BackwardInput and BackwardWeight
  TensorList backward_seeds;
  bool loaded = false;
};

// Finishes the send lane's events when the transfers complete, off the compute thread.
class SendWatcher {
 public:
  explicit SendWatcher(std::chrono::milliseconds timeout) : timeout_(timeout), thread_([this] { loop(); }) {}
  ~SendWatcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `on_done(end_us)` runs on the watcher thread; `describe` names the send in errors.
  void watch(std::unique_ptr<PendingTransfer> pending, std::function<void(double)> on_done, std::string describe) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({std::move(pending), std::move(on_done), std::move(describe)});
    }
    cv_.notify_all();
  }
  // Waits until every watched send completed; rethrows the first failure.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (!error_.empty()) {
      std::string e = error_;
      error_.clear();
      throw TransportError(e);
    }
  }

 private:
  struct Item {
    std::unique_ptr<PendingTransfer> pending;
    std::function<void(double)> on_done;
    std::string describe;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Item item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::string failure;
      try {
        item.pending->wait(timeout_);
        item.on_done(now_us());
      } catch (const std::exception& e) {
        failure = item.describe + ": " + first_line(e.what());
      }
      lock.lock();
      busy_ = false;
      if (!failure.empty() && error_.empty()) error_ = failure;
      cv_.notify_all();
    }
  }

  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::string error_;
  std::thread thread_;
};

enum class TransferKind { Activation = 0, Grad = 1 };

}  // namespace

struct StageState {
  int stage = 0;
  bool is_first = false;
  bool is_last = false;
  std::unique_ptr<StageModule> module;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::map<int, MicroBatchState> micro_batches;
  OrderedGradAccumulator accumulator;
  bool grads_final = false;   // accumulator moved into .grad
  bool grads_reduced = false; // data-parallel all-reduce done
  bool stepped = false;
};

class PipelineRuntime::Impl {
 public:
  Impl(const ModelSpec& model, const Schedule& schedule, const Partition& partition, Transport& world,
       GridPosition position, RuntimeOptions options)
      : model_(model), schedule_(schedule), partition_(partition), world_(world), position_(position),
        options_(options), send_watcher_(options.timeout) {
    if (!options_.device) options_.device = make_cpu_device();
    const auto& stages = schedule_.stages_of_rank(position_.pipe_rank);
    for (int s : stages) {
      auto state = std::make_unique<StageState>();
      state->stage = s;
      state->is_first = s == 0;
      state->is_last = s == schedule_.num_stages - 1;
      state->module = std::make_unique<StageModule>(model_, partition_.bounds[s], partition_.bounds[s + 1]);
      if (options_.device->device() != at::kCPU) state->module->to(options_.device->device());
      auto params = state->module->parameter_tensors();
      if (!params.empty())
        state->optimizer = std::make_unique<torch::optim::AdamW>(
            params, torch::optim::AdamWOptions(options_.learning_rate).weight_decay(options_.weight_decay));
      stages_.emplace(s, std::move(state));
    }
    make_groups();
  }

  StepResult run_step(int step_index, std::int64_t first_sample) {
    step_index_ = step_index;
    first_sample_ = first_sample;
    result_ = StepResult{};
    tied_done_ = false;
    const int m = schedule_.num_micro_batches;
    for (auto& [s, st] : stages_) {
      st->micro_batches.clear();
      st->accumulator.reset(m);
      st->grads_final = st->grads_reduced = st->stepped = false;
    }
    options_.device->reset_peak_memory();
    options_.device->begin_step();
    result_.origin_us = now_us();
    last_memory_bytes_ = -1;
    sample_memory();

    const Program& program = schedule_.programs.at(static_cast<std::size_t>(position_.pipe_rank));
    for (std::size_t step = 0; step < program.size(); ++step)
      for (const Instruction& instr : program[step]) {
        current_ = &instr;
        current_step_ = static_cast<int>(step);
        execute(instr);
        sample_memory();
      }
    current_ = nullptr;
    if (schedule_.is_training()) finish_training_step();
    try {
      send_watcher_.drain();
    } catch (const std::exception& e) {
      fail(first_line(e.what()), "the sends of this step");
    }
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      result_.time_s = (now_us() - result_.origin_us) / 1e6;
    }
    resolve_device_timings();
    result_.peak_memory_bytes = options_.device->memory().peak_bytes;
    StepResult out;
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      out = std::move(result_);
      result_ = StepResult{};
    }
    return out;
  }

  // Times a full backward and, apart, its input-gradient and weight-gradient halves on a
  // synthetic micro-batch of each stage held here. Runs outside any step on fresh tensors:
  // grad() returns the gradients instead of accumulating them, so weights, gradients,
  // optimizer state and data of the run are untouched.
  std::vector<PipelineRuntime::BackwardSplitTiming> probe_backward_split(int repetitions) {
    std::vector<PipelineRuntime::BackwardSplitTiming> timings;
    if (!schedule_.is_training()) return timings;
    for (auto& [s, st] : stages_) {
      PipelineRuntime::BackwardSplitTiming timing;
      timing.stage = s;
      const MicroBatch batch = make_micro_batch(model_.config, 0);
      TensorList base;
      if (st->is_first) {
        base = batch.inputs;
      } else {
        for (const auto& spec : model_.boundary.at(static_cast<std::size_t>(st->module->first_layer())))
          base.push_back(at::isFloatingType(spec.dtype) ? at::full(spec.sizes, 0.01, at::TensorOptions().dtype(spec.dtype))
                                                        : at::zeros(spec.sizes, at::TensorOptions().dtype(spec.dtype)));
      }
      const TensorList params = st->module->parameter_tensors();
      for (int rep = 0; rep < repetitions; ++rep)
        for (const bool split : {false, true}) {
          TensorList inputs;
          for (const auto& t : base) {
            at::Tensor leaf = t.detach().clone();
            if (!st->is_first && at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
            inputs.push_back(leaf);
          }
          const TensorList outputs = st->module->forward(inputs);
          TensorList roots, seeds, grad_inputs;
          if (st->is_last) {
            roots = {model_.loss(outputs, batch.labels)};
            seeds = {at::ones({}, roots[0].options())};
          } else {
            for (const auto& o : outputs)
              if (o.requires_grad()) {
                roots.push_back(o);
                seeds.push_back(at::full_like(o, 0.01));
              }
          }
          for (const auto& t : inputs)
            if (t.requires_grad()) grad_inputs.push_back(t);
          if (roots.empty()) continue;
          const double start = now_us();
          if (!split) {
            TensorList targets = grad_inputs;
            targets.insert(targets.end(), params.begin(), params.end());
            if (!targets.empty()) torch::autograd::grad(roots, targets, seeds, false, false, true);
            timing.full_us.push_back(now_us() - start);
          } else {
            if (!grad_inputs.empty()) torch::autograd::grad(roots, grad_inputs, seeds, true, false, true);
            const double middle = now_us();
            if (!params.empty()) torch::autograd::grad(roots, params, seeds, false, false, true);
            timing.input_us.push_back(middle - start);
            timing.weight_us.push_back(now_us() - middle);
          }
        }
      timings.push_back(std::move(timing));
    }
    return timings;
  }

  std::vector<int> stage_ids() const {
    std::vector<int> ids;
    for (const auto& [s, st] : stages_) ids.push_back(s);
    return ids;
  }
  StageState& stage(int s) {
    auto it = stages_.find(s);
    if (it == stages_.end()) throw RuntimeError(fmt::format("rank {}: stage {} is not held here", world_rank(), s));
    return *it->second;
  }

 private:
  int world_rank() const { return position_.world_rank(); }
  int world_rank_of_stage(int s) const {
    return position_.replica * position_.pipeline_ranks + schedule_.stage_to_rank.at(static_cast<std::size_t>(s));
  }
  bool holds(int s) const { return stages_.count(s) > 0; }
  int micro_batch_count() const { return schedule_.num_micro_batches; }

  [[noreturn]] void fail(const std::string& what, const std::string& where) const {
    throw RuntimeError(fmt::format("rank {}: step {}: {}: {}", world_rank(), step_index_, where, what));
  }
  std::string where() const {
    if (!current_) return "end of step";
    std::string peer;
    if (is_p2p(current_->op)) peer = fmt::format(", peer rank {}", world_rank_of_stage(resolved_peer_stage(*current_)));
    return fmt::format("program step {}, instruction {} ({} of stage {}, micro-batch {}{})", current_step_,
                       to_string(*current_), op_name(current_->op), current_->stage, current_->micro_batch, peer);
  }

  // ---- groups ------------------------------------------------------------------------------
  void make_groups() {
    const int p = position_.pipeline_ranks;
    if (position_.num_replicas > 1) {
      std::vector<int> members;
      for (int d = 0; d < position_.num_replicas; ++d) members.push_back(d * p + position_.pipe_rank);
      dp_group_ = world_.subgroup(members, fmt::format("dp{}", position_.pipe_rank));
    }
    // Tied weights: per key, the layers using it, and the pipeline ranks holding them.
    for (std::size_t l = 0; l < model_.layers.size(); ++l) {
      const auto& key = model_.layers[l].tied_key;
      if (!key.empty()) tied_layers_[key].push_back(static_cast<int>(l));
    }
    for (const auto& [key, layers] : tied_layers_) {
      std::set<int> holder_pipe_ranks;
      for (int l : layers) holder_pipe_ranks.insert(schedule_.stage_to_rank.at(static_cast<std::size_t>(stage_of_layer(l))));
      if (!holder_pipe_ranks.count(position_.pipe_rank) || holder_pipe_ranks.size() < 2) continue;
      std::vector<int> members;
      for (int r : holder_pipe_ranks) members.push_back(position_.replica * p + r);
      tied_groups_[key] = world_.subgroup(members, fmt::format("tied-{}-r{}", key, position_.replica));
    }
  }
  int stage_of_layer(int layer) const {
    for (int s = 0; s < partition_.num_stages(); ++s)
      if (layer >= partition_.bounds[s] && layer < partition_.bounds[s + 1]) return s;
    throw RuntimeError(fmt::format("layer {} is in no stage", layer));
  }

  // ---- events ------------------------------------------------------------------------------
  std::size_t begin_event(traces::Lane lane, const Instruction& instr, int peer_rank = -1, std::int64_t bytes = -1) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    traces::TraceEvent e;
    e.rank = world_rank();
    e.lane = static_cast<int>(lane);
    e.name = std::string(op_action_type(instr.op));
    e.category = lane == traces::Lane::Compute ? "compute" : lane == traces::Lane::Collective ? "collective" : "p2p";
    e.ts_us = now_us() - result_.origin_us;
    e.stage = instr.stage;
    e.micro_batch = needs_micro_batch(instr.op) ? instr.micro_batch : -1;
    e.peer_rank = peer_rank;
    e.bytes = bytes;
    result_.events.push_back(e);
    return result_.events.size() - 1;
  }
  void end_event(std::size_t index, double end_abs_us) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    auto& e = result_.events[index];
    e.dur_us = std::max(0.0, end_abs_us - result_.origin_us - e.ts_us);
  }
  void sample_memory() {
    const auto bytes = options_.device->memory().current_bytes;
    if (bytes == last_memory_bytes_) return;
    last_memory_bytes_ = bytes;
    std::lock_guard<std::mutex> lock(events_mutex_);
    result_.memory.push_back({world_rank(), now_us() - result_.origin_us, bytes});
  }

  // ---- instructions ------------------------------------------------------------------------
  void execute(const Instruction& instr) {
    if (!holds(instr.stage)) fail("the stage is not held by this rank", where());
    if (needs_micro_batch(instr.op) && (instr.micro_batch < 0 || instr.micro_batch >= micro_batch_count()))
      fail("micro-batch out of range", where());
    try {
      switch (instr.op) {
        case Op::LoadMicroBatch: return timed(traces::Lane::Compute, instr, [&] { load(instr.stage, instr.micro_batch); });
        case Op::ForwardPass: return timed(traces::Lane::Compute, instr, [&] { forward(instr); });
        case Op::BackwardPass: return timed(traces::Lane::Compute, instr, [&] { backward(instr, true, true); });
        case Op::BackwardInput: return timed(traces::Lane::Compute, instr, [&] { backward(instr, true, false); });
        case Op::BackwardWeight: return timed(traces::Lane::Compute, instr, [&] { backward(instr, false, true); });
        case Op::SendActivation:
        case Op::SendGrad: return send(instr);
        case Op::RecvActivation:
        case Op::RecvGrad: return recv(instr);
        case Op::ReduceTiedGrads: return timed(traces::Lane::Collective, instr, [&] { reduce_tied(); });
        case Op::ReduceGrads: return timed(traces::Lane::Collective, instr, [&] { reduce_grads(stage(instr.stage)); });
        case Op::OptimizerStep: return timed(traces::Lane::Collective, instr, [&] { optimizer_step(stage(instr.stage)); });
      }
    } catch (const RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      fail(first_line(e.what()), where());
    }
  }

  template <typename Fn>
  void timed(traces::Lane lane, const Instruction& instr, Fn fn) {
    const auto index = begin_event(lane, instr);
    auto device_timing = options_.device->start_timing();
    fn();
    end_event(index, now_us());
    if (device_timing) {
      device_timing->stop();
      device_timings_.emplace_back(index, std::move(device_timing));
    }
  }
  // On a GPU the host returns from an instruction before its kernels ran: the device's own
  // timings replace the host's spans at the end of the step.
  void resolve_device_timings() {
    for (auto& [index, timing] : device_timings_) {
      const auto [start_us, end_us] = timing->span_us();
      std::lock_guard<std::mutex> lock(events_mutex_);
      auto& e = result_.events[index];
      e.ts_us = start_us - result_.origin_us;
      e.dur_us = std::max(0.0, end_us - start_us);
    }
    device_timings_.clear();
  }

  MicroBatchState& mb(int s, int micro_batch) { return stage(s).micro_batches[micro_batch]; }

  void load(int s, int micro_batch) {
    StageState& st = stage(s);
    if (!st.is_first && !st.is_last) return;  // inner stages get their data from the pipeline
    MicroBatchState& state = mb(s, micro_batch);
    MicroBatch batch = make_micro_batch(model_.config, first_sample_ + micro_batch);
    if (options_.device->device() != at::kCPU) {
      for (auto& t : batch.inputs) t = t.to(options_.device->device());
      if (batch.labels.defined()) batch.labels = batch.labels.to(options_.device->device());
    }
    if (st.is_first) state.received_inputs = std::move(batch.inputs);
    if (st.is_last) state.labels = std::move(batch.labels);
    state.loaded = true;
  }

  void forward(const Instruction& instr) {
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    if ((st.is_first || st.is_last) && !state.loaded) load(instr.stage, instr.micro_batch);
    if (state.received_inputs.empty()) fail("the forward has no input (no receive or hand-over before it)", where());
    const bool training = schedule_.is_training();
    state.inputs.clear();
    for (auto& t : state.received_inputs) {
      at::Tensor leaf = t.detach();
      if (training && !st.is_first && at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
      state.inputs.push_back(leaf);
    }
    state.received_inputs.clear();
    {
      std::optional<at::NoGradGuard> no_grad;
      if (!training) no_grad.emplace();
      state.outputs = st.module->forward(state.inputs);
      if (st.is_last) {
        state.loss = model_.loss(state.outputs, state.labels);
        result_.loss_sum += state.loss.item<double>();
        ++result_.loss_count;
      }
    }
    if (!st.is_last && holds(instr.stage + 1)) {  // hand-over to the next stage on this rank
      TensorList handed;
      for (auto& t : state.outputs) handed.push_back(t.detach());
      mb(instr.stage + 1, instr.micro_batch).received_inputs = std::move(handed);
    }
    if (!training) state.inputs.clear();
  }

  // The gradient seeds of a stage's backward: the scaled loss on the last stage, the received
  // output gradients elsewhere.
  void backward_seeds(StageState& st, MicroBatchState& state) {
    if (!state.backward_roots.empty()) return;
    if (st.is_last) {
      if (!state.loss.defined()) fail("backward before the forward of this micro-batch", where());
      // Every micro-batch loss is scaled by 1 / (M * D): the step's gradient is the mean.
      const double scale = 1.0 / (static_cast<double>(micro_batch_count()) * position_.num_replicas);
      state.backward_roots = {state.loss};
      state.backward_seeds = {at::full({}, scale, state.loss.options())};
    } else {
      if (state.outputs.empty()) fail("backward before the forward of this micro-batch", where());
      if (state.output_grads.size() != state.outputs.size())
        fail("backward without the gradient of the stage outputs (no receive or hand-over before it)", where());
      for (std::size_t i = 0; i < state.outputs.size(); ++i)
        if (state.outputs[i].requires_grad()) {
          state.backward_roots.push_back(state.outputs[i]);
          state.backward_seeds.push_back(state.output_grads[i]);
        }
    }
  }

  void backward(const Instruction& instr, bool input_part, bool weight_part) {
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    backward_seeds(st, state);
    TensorList grad_inputs;
    for (auto& t : state.inputs)
      if (t.requires_grad()) grad_inputs.push_back(t);
    const TensorList params = weight_part ? st.module->parameter_tensors() : TensorList{};

    TensorList targets;
    if (input_part) targets.insert(targets.end(), grad_inputs.begin(), grad_inputs.end());
    targets.insert(targets.end(), params.begin(), params.end());
    const bool keep_graph = input_part && !weight_part;
    TensorList grads;
    if (!targets.empty() && !state.backward_roots.empty())
      grads = torch::autograd::grad(state.backward_roots, targets, state.backward_seeds, keep_graph,
                                    /*create_graph=*/false, /*allow_unused=*/true);

    if (input_part) {
      state.input_grads.clear();
      for (std::size_t i = 0; i < grad_inputs.size(); ++i)
        state.input_grads.push_back(grads.empty() || !grads[i].defined() ? at::zeros_like(grad_inputs[i]) : grads[i]);
      if (!st.is_first && holds(instr.stage - 1))  // hand-over to the previous stage on this rank
        mb(instr.stage - 1, instr.micro_batch).output_grads = state.input_grads;
    }
    if (weight_part) {
      const std::size_t offset = input_part ? grad_inputs.size() : 0;
      std::vector<at::Tensor> param_grads;
      for (std::size_t i = 0; i < params.size(); ++i) {
        at::Tensor g = grads.empty() ? at::Tensor() : grads[offset + i];
        param_grads.push_back(g.defined() ? g : at::zeros_like(params[i]));
      }
      st.accumulator.add(instr.micro_batch, std::move(param_grads));
      // The graph and the activations of this micro-batch are no longer needed.
      state.backward_roots.clear();
      state.backward_seeds.clear();
      state.outputs.clear();
      state.inputs.clear();
      state.loss = at::Tensor();
      state.output_grads.clear();
    }
  }

  int tag(int from_stage, int to_stage, TransferKind kind) const {
    return (from_stage * schedule_.num_stages + to_stage) * 2 + static_cast<int>(kind);
  }

  void send(const Instruction& instr) {
    const int peer_stage = resolved_peer_stage(instr);
    if (holds(peer_stage)) return;  // same rank: handed over in memory
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    const bool activation = instr.op == Op::SendActivation;
    const TensorList& payload = activation ? state.outputs : state.input_grads;
    if (payload.empty())
      fail(activation ? "nothing to send: the forward has not run" : "nothing to send: the backward has not run", where());
    TensorList detached;
    for (auto& t : payload) detached.push_back(t.detach());
    at::Tensor flat = pack_tensors(detached);
    const int peer = world_rank_of_stage(peer_stage);
    const auto bytes = static_cast<std::int64_t>(flat.numel() * flat.element_size());
    const auto index = begin_event(traces::Lane::Send, instr, peer, bytes);
    auto pending = world_.send(flat, peer, tag(instr.stage, peer_stage, activation ? TransferKind::Activation : TransferKind::Grad));
    send_watcher_.watch(std::move(pending), [this, index](double end) { end_event(index, end); }, where());
  }

  void recv(const Instruction& instr) {
    const int peer_stage = resolved_peer_stage(instr);
    if (holds(peer_stage)) return;  // same rank: handed over in memory
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    const bool activation = instr.op == Op::RecvActivation;
    const int boundary = activation ? st.module->first_layer() : st.module->end_layer();
    TensorList like;
    for (const auto& spec : model_.boundary.at(static_cast<std::size_t>(boundary)))
      like.push_back(at::empty(spec.sizes, at::TensorOptions().dtype(spec.dtype).device(options_.device->device())));
    std::int64_t total = 0;
    for (auto& t : like) total += t.numel();
    at::Tensor flat = like.size() == 1 ? like[0] : at::empty({total}, like[0].options());
    const int peer = world_rank_of_stage(peer_stage);
    const auto index = begin_event(traces::Lane::Recv, instr, peer, static_cast<std::int64_t>(flat.numel() * flat.element_size()));
    try {
      world_.recv(flat, peer, tag(peer_stage, instr.stage, activation ? TransferKind::Activation : TransferKind::Grad))
          ->wait(options_.timeout);
    } catch (const std::exception& e) {
      fail(first_line(e.what()), "blocked in " + where());
    }
    end_event(index, now_us());
    auto tensors = unpack_tensors(flat, like);
    if (activation)
      state.received_inputs = std::move(tensors);
    else
      state.output_grads = std::move(tensors);
  }

  // ---- end of batch ------------------------------------------------------------------------
  // Moves the ordered sums into .grad once every micro-batch's weight gradient is in.
  void finalize_grads(StageState& st) {
    if (st.grads_final) return;
    if (!st.accumulator.complete())
      fail(fmt::format("stage {} still misses the weight gradients of {} micro-batch(es)", st.stage, st.accumulator.missing()),
           where());
    auto params = st.module->parameter_tensors();
    auto& sums = st.accumulator.sum();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = sums.empty() ? at::zeros_like(params[i]) : sums[i];
    st.grads_final = true;
  }

  // Tied weights: the total gradient is the sum over the layers using the weight, in layer
  // order. Each holder puts its layers' gradients in their rows of a [layers, numel] tensor
  // (zeros elsewhere); an all-reduce of rows with one non-zero contributor each is exact.
  void reduce_tied() {
    if (tied_done_) return;
    for (auto& [s, st] : stages_) finalize_grads(*st);
    for (const auto& [key, layers] : tied_layers_) {
      std::vector<at::Tensor*> local_grads;
      std::vector<int> local_rows;
      at::Tensor like;
      for (auto& [s, st] : stages_)
        for (const auto& p : st->module->parameters())
          if (p.tied_key == key) {
            const auto row = std::find(layers.begin(), layers.end(), p.layer) - layers.begin();
            local_rows.push_back(static_cast<int>(row));
            local_grads.push_back(&const_cast<at::Tensor&>(p.tensor).mutable_grad());
            like = p.tensor;
          }
      if (local_grads.empty()) continue;
      at::Tensor rows = at::zeros({static_cast<std::int64_t>(layers.size()), like.numel()}, like.options());
      for (std::size_t i = 0; i < local_grads.size(); ++i) rows[local_rows[i]].copy_(local_grads[i]->reshape({-1}));
      if (auto it = tied_groups_.find(key); it != tied_groups_.end()) it->second->all_reduce_sum(rows)->wait(options_.timeout);
      at::Tensor total = rows[0].clone();
      for (std::int64_t r = 1; r < rows.size(0); ++r) total.add_(rows[r]);
      total = total.view(like.sizes());
      for (auto* g : local_grads) *g = total.clone();
    }
    tied_done_ = true;
  }

  void reduce_grads(StageState& st) {
    if (st.grads_reduced) return;
    reduce_tied();
    if (dp_group_) {
      auto params = st.module->parameter_tensors();
      if (!params.empty()) {
        TensorList grads;
        for (auto& p : params) grads.push_back(p.grad().reshape({-1}));
        at::Tensor flat = at::cat(grads);
        dp_group_->all_reduce_sum(flat)->wait(options_.timeout);
        std::int64_t offset = 0;
        for (auto& p : params) {
          p.mutable_grad() = flat.slice(0, offset, offset + p.numel()).view(p.sizes()).clone();
          offset += p.numel();
        }
      }
    }
    st.grads_reduced = true;
  }

  void optimizer_step(StageState& st) {
    if (st.stepped) return;
    reduce_grads(st);
    if (st.optimizer) st.optimizer->step();
    for (auto& p : st.module->parameter_tensors()) p.mutable_grad() = at::Tensor();
    st.stepped = true;
  }

  // Programs without the end-of-batch instructions (compute-only files) still train: what is
  // missing runs after the program, in DeepSpeed's order.
  void finish_training_step() {
    try {
      for (auto& [s, st] : stages_) optimizer_step(*st);
    } catch (const RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      fail(first_line(e.what()), "end-of-step reductions");
    }
  }

  const ModelSpec& model_;
  const Schedule& schedule_;
  const Partition& partition_;
  Transport& world_;
  GridPosition position_;
  RuntimeOptions options_;
  std::map<int, std::unique_ptr<StageState>> stages_;
  std::unique_ptr<Transport> dp_group_;
  std::map<std::string, std::vector<int>> tied_layers_;
  std::map<std::string, std::unique_ptr<Transport>> tied_groups_;
  bool tied_done_ = false;

  int step_index_ = 0;
  std::int64_t first_sample_ = 0;
  const Instruction* current_ = nullptr;
  int current_step_ = 0;
  std::mutex events_mutex_;
  StepResult result_;
  std::vector<std::pair<std::size_t, std::unique_ptr<DeviceTiming>>> device_timings_;  // event index, its GPU span
  std::int64_t last_memory_bytes_ = -1;
  SendWatcher send_watcher_;  // last: its thread stops before the state it writes into goes
};

PipelineRuntime::PipelineRuntime(const ModelSpec& model, const Schedule& schedule, const Partition& partition,
                                 Transport& world, GridPosition position, RuntimeOptions options)
    : partition_(partition) {
  impl_ = std::make_unique<Impl>(model, schedule, partition_, world, position, options);
}

PipelineRuntime::~PipelineRuntime() = default;

StepResult PipelineRuntime::run_step(int step_index, std::int64_t first_sample) {
  return impl_->run_step(step_index, first_sample);
}

std::vector<PipelineRuntime::BackwardSplitTiming> PipelineRuntime::probe_backward_split(int repetitions) {
  return impl_->probe_backward_split(repetitions);
}

std::vector<int> PipelineRuntime::stages() const { return impl_->stage_ids(); }
StageModule& PipelineRuntime::stage_module(int s) { return *impl_->stage(s).module; }
torch::optim::AdamW& PipelineRuntime::stage_optimizer(int s) {
  auto& st = impl_->stage(s);
  if (!st.optimizer) throw RuntimeError(fmt::format("stage {} has no parameters to optimise", s));
  return *st.optimizer;
}

}  // namespace pipescope::exec
