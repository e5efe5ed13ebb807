// The instruction interpreter of one rank (see runtime.hpp for the exactness rules).
#include "pipescope/exec/runtime.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/ranges.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "pipescope/core/errors.hpp"
#include "pipescope/exec/fused_adamw.hpp"
#include "pipescope/exec/memory.hpp"
#include "pipescope/exec/skip_connections.hpp"

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
  std::vector<std::string> received_names;  // their keys when they are a dict
  TensorList inputs;            // what the forward took (leaves that require grad on inner stages)
  std::vector<std::string> input_names;
  TensorList outputs;
  std::vector<std::string> output_names;
  at::Tensor labels;
  at::Tensor loss;
  TensorList output_grads;      // gradient of the floating-point outputs, from the next stage
  TensorList input_grads;       // gradient of the floating-point inputs, for the previous stage
  // Skip connections with other stages, by name: received before the forward, the leaves the
  // forward popped, what it stashed for later stages, and the gradients both ways.
  SkipTensors received_skips, skip_inputs, skip_outputs, skip_output_grads, skip_input_grads;
  // The forward as runs of layers: one run, or one per activation checkpoint. A checkpointed
  // run keeps only its input and random state until the backward recomputes it.
  struct Segment {
    int first_layer = 0, end_layer = 0;
    TensorList inputs, outputs;
    std::vector<std::string> input_names;
    at::Tensor rng_state;
    TensorList roots, seeds;    // kept between BackwardInput and BackwardWeight
  };
  std::vector<Segment> segments;
  bool graph_ready = false;     // segments hold their autograd graphs
  bool seeded = false;
  bool input_grads_ready = false;
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

// Gradients flow through floating-point tensors only; masks and token ids travel forward alone.
bool carries_grad(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

std::string shape_text(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

// Dynamic shapes: a transfer that carries its shapes is a fixed two-word header (descriptor
// words, payload bytes) and one byte message holding the descriptor and the tensors; a
// transfer that reuses the shapes of an earlier one is the byte message of the tensors alone.
constexpr std::int64_t kHeaderWords = 2;

// What a shape header describes: per tensor its dtype, sizes and (for dicts) its name.
struct TensorLayout {
  std::vector<at::ScalarType> dtypes;
  std::vector<std::vector<std::int64_t>> sizes;
  std::vector<std::string> names;  // empty: a tuple
  int micro_batch = -1;            // the micro-batch whose transfer carried the header

  static TensorLayout of(const TensorList& tensors, const std::vector<std::string>& names) {
    TensorLayout layout;
    for (const auto& t : tensors) {
      layout.dtypes.push_back(t.scalar_type());
      layout.sizes.push_back(t.sizes().vec());
    }
    layout.names = names;
    return layout;
  }
  std::int64_t payload_bytes() const {
    std::int64_t total = 0;
    for (std::size_t i = 0; i < dtypes.size(); ++i) {
      std::int64_t numel = 1;
      for (auto d : sizes[i]) numel *= d;
      total += numel * static_cast<std::int64_t>(c10::elementSize(dtypes[i]));
    }
    return total;
  }
  // Words: count, then per tensor dtype, rank, sizes, name length and the name's bytes in words.
  std::vector<std::int64_t> words() const {
    std::vector<std::int64_t> w{static_cast<std::int64_t>(dtypes.size())};
    for (std::size_t i = 0; i < dtypes.size(); ++i) {
      w.push_back(static_cast<std::int64_t>(dtypes[i]));
      w.push_back(static_cast<std::int64_t>(sizes[i].size()));
      w.insert(w.end(), sizes[i].begin(), sizes[i].end());
      const std::string name = names.empty() ? std::string() : names[i];
      w.push_back(static_cast<std::int64_t>(name.size()));
      // Eight characters per word, the first in the lowest byte.
      std::vector<std::int64_t> chars((name.size() + 7) / 8, 0);
      for (std::size_t k = 0; k < name.size(); ++k)
        chars[k / 8] |= static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<unsigned char>(name[k])) << (8 * (k % 8)));
      w.insert(w.end(), chars.begin(), chars.end());
    }
    return w;
  }
  // Throws std::runtime_error on malformed words.
  static TensorLayout parse(const std::int64_t* w, std::int64_t count) {
    TensorLayout layout;
    if (count < 1 || w[0] < 0) throw std::runtime_error("malformed shape header (no tensor count)");
    std::int64_t pos = 1;
    bool named = false;
    for (std::int64_t i = 0; i < w[0]; ++i) {
      if (pos + 2 > count || w[pos + 1] < 0 || pos + 3 + w[pos + 1] > count)
        throw std::runtime_error(fmt::format("malformed shape header (tensor {})", i));
      layout.dtypes.push_back(static_cast<at::ScalarType>(w[pos]));
      const std::int64_t rank = w[pos + 1];
      layout.sizes.emplace_back(w + pos + 2, w + pos + 2 + rank);
      pos += 2 + rank;
      const std::int64_t name_bytes = w[pos++];
      const std::int64_t name_words = (name_bytes + 7) / 8;
      if (name_bytes < 0 || pos + name_words > count) throw std::runtime_error(fmt::format("malformed shape header (name of tensor {})", i));
      std::string name;
      for (std::int64_t k = 0; k < name_bytes; ++k)
        name.push_back(static_cast<char>((static_cast<std::uint64_t>(w[pos + k / 8]) >> (8 * (k % 8))) & 0xFF));
      named = named || name_bytes > 0;
      layout.names.push_back(std::move(name));
      pos += name_words;
    }
    if (!named) layout.names.clear();
    return layout;
  }
};

// The tensors as one contiguous byte buffer, in order (any mix of dtypes).
at::Tensor pack_bytes(const TensorList& tensors, const std::vector<std::int64_t>& prefix_words, at::Device device) {
  TensorList parts;
  if (!prefix_words.empty())
    parts.push_back(at::tensor(prefix_words, at::TensorOptions().dtype(at::kLong)).view(at::kByte).to(device));
  for (const auto& t : tensors) parts.push_back(t.detach().contiguous().reshape({-1}).view(at::kByte));
  if (parts.empty()) return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device));
  return at::cat(parts);
}

// Copies of the tensors packed in `bytes` from `offset` (dtypes and sizes in order), on `device`.
TensorList unpack_bytes(const at::Tensor& bytes, std::int64_t offset, const std::vector<at::ScalarType>& dtypes,
                        const std::vector<std::vector<std::int64_t>>& sizes, at::Device device) {
  TensorList out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    std::int64_t numel = 1;
    for (auto d : sizes[i]) numel *= d;
    const std::int64_t nbytes = numel * static_cast<std::int64_t>(c10::elementSize(dtypes[i]));
    out.push_back(bytes.slice(0, offset, offset + nbytes).clone().view(dtypes[i]).view(sizes[i]).to(device));
    offset += nbytes;
  }
  return out;
}

bool mixed_dtypes(const TensorList& tensors) {
  for (const auto& t : tensors)
    if (t.scalar_type() != tensors.front().scalar_type()) return true;
  return false;
}

// Several transfers waited on as one.
class PendingGroup : public PendingTransfer {
 public:
  void add(std::unique_ptr<PendingTransfer> pending) { parts_.push_back(std::move(pending)); }
  void wait(std::chrono::milliseconds timeout) override {
    for (auto& p : parts_) p->wait(timeout);
  }

 private:
  std::vector<std::unique_ptr<PendingTransfer>> parts_;
};

}  // namespace

struct StageState {
  int stage = 0;
  bool is_first = false;
  bool is_last = false;
  std::unique_ptr<StageModule> module;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
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
      : model_(model), schedule_(&schedule), active_(&schedule), partition_(partition), world_(world), position_(position),
        options_(options), dynamic_shapes_(model.dynamic_shapes || model.boundary.empty()), send_watcher_(options.timeout) {
    if (!options_.device) options_.device = make_cpu_device();
    if (partition_.num_stages() != schedule.num_stages)
      throw RuntimeError(fmt::format("schedule '{}' has {} stages, but the model is split into {} (bounds {})", schedule.name,
                                     schedule.num_stages, partition_.num_stages(), fmt::join(partition_.bounds, ", ")));
    if (static_cast<int>(schedule.stage_to_rank.size()) != schedule.num_stages)
      throw RuntimeError(fmt::format("schedule '{}': stage_to_rank names {} stages, not {}", schedule.name,
                                     schedule.stage_to_rank.size(), schedule.num_stages));
    skip_routes_ = skip_routes(model_, partition_, schedule.stage_to_rank);
    if (!skip_routes_.empty() && options_.activation_checkpoint_interval > 0)
      throw RuntimeError(fmt::format("activation checkpointing (every {} layers) cannot recompute layers that stash or pop skip "
                                     "tensors (skip '{}'); turn one of them off",
                                     options_.activation_checkpoint_interval, skip_routes_.front().name));
    const auto& stages = schedule.stages_of_rank(position_.pipe_rank);
    for (int s : stages) {
      auto state = std::make_unique<StageState>();
      state->stage = s;
      state->is_first = s == 0;
      state->is_last = s == schedule.num_stages - 1;
      state->module = std::make_unique<StageModule>(model_, partition_.bounds[s], partition_.bounds[s + 1]);
      if (options_.device->device() != at::kCPU) state->module->to(options_.device->device());
      auto params = state->module->parameter_tensors();
      if (!params.empty()) {
        if (options_.optimizer) {
          state->optimizer = options_.optimizer(params);
          if (!state->optimizer) throw RuntimeError(fmt::format("stage {}: the optimizer factory returned no optimizer", s));
        } else {
          state->optimizer = std::make_unique<FusedAdamW>(
              params, torch::optim::AdamWOptions(options_.learning_rate).weight_decay(options_.weight_decay));
        }
      }
      stages_.emplace(s, std::move(state));
    }
    make_groups();
  }

  StepResult run_step(int step_index, const StepRequest& request) {
    const Schedule* schedule = request.schedule ? request.schedule : schedule_;
    if (schedule->num_stages != schedule_->num_stages || schedule->stage_to_rank != schedule_->stage_to_rank)
      throw RuntimeError(fmt::format("rank {}: step {}: schedule '{}' places stages on ranks [{}], but the stages were built "
                                     "for schedule '{}' with [{}]",
                                     world_rank(), step_index, schedule->name, fmt::join(schedule->stage_to_rank, ", "),
                                     schedule_->name, fmt::join(schedule_->stage_to_rank, ", ")));
    active_ = schedule;
    step_index_ = step_index;
    first_sample_ = request.first_sample;
    source_ = request.data;
    pulled_.clear();
    keep_outputs_ = request.keep_outputs;
    result_ = StepResult{};
    tied_done_ = false;
    clipped_ = false;
    sent_layouts_.clear();
    received_layouts_.clear();
    const int m = active_->num_micro_batches;
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

    if (keep_outputs_) result_.outputs.assign(static_cast<std::size_t>(m), TensorList{});
    const Program& program = active_->programs.at(static_cast<std::size_t>(position_.pipe_rank));
    for (std::size_t step = 0; step < program.size(); ++step)
      for (const Instruction& instr : program[step]) {
        current_ = &instr;
        current_step_ = static_cast<int>(step);
        execute(instr);
        sample_memory();
      }
    current_ = nullptr;
    if (active_->is_training()) finish_training_step();
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
  // optimizer state and data of the run are untouched. The weight gradients are then added
  // into a scratch sum, as a step adds every micro-batch's into its gradient sum: that sum
  // reads and writes every parameter once more, part of what the weight half costs in a run.
  // The first stage never computes an input gradient (its inputs are data); it also times its
  // layers after the first as an inner stage would run them, which tells a calibration from a
  // single stage (one GPU) how a stage cut from it behind another one splits its backward.
  std::vector<PipelineRuntime::BackwardSplitTiming> probe_backward_split(int repetitions) {
    std::vector<PipelineRuntime::BackwardSplitTiming> timings;
    if (!active_->is_training()) return timings;
    for (auto& [s, st] : stages_) {
      // Models without declared shapes have no synthetic input for an inner stage.
      if (!st->is_first && dynamic_shapes_) continue;
      PipelineRuntime::BackwardSplitTiming timing;
      timing.stage = s;
      timing.own = time_backward_split(*st, st->module->first_layer(), repetitions);
      const int second_layer = st->module->first_layer() + 1;
      if (st->is_first && !dynamic_shapes_ && skip_routes_.empty() && second_layer < st->module->end_layer()) {
        try {
          timing.inner = time_backward_split(*st, second_layer, repetitions);
        } catch (const std::exception&) {
          // A layer that takes named inputs cannot start from positional synthetic ones: the
          // calibration then has no inner split from this stage, which only a single-stage
          // calibration misses. The run's own work is done; its trace must not be lost.
          timing.inner = {};
        }
      }
      timings.push_back(std::move(timing));
    }
    return timings;
  }

  // The backward split of the stage's layers [from_layer, end): a synthetic input at that
  // layer (the data itself for the first stage's first layer), the loss where the stage ends
  // the model.
  PipelineRuntime::BackwardSplitSamples time_backward_split(StageState& st, int from_layer, int repetitions) {
    PipelineRuntime::BackwardSplitSamples samples;
    const bool from_data = st.is_first && from_layer == st.module->first_layer();
    const MicroBatch batch = make_micro_batch(model_.config, 0);
    TensorList base;
    if (from_data) {
      for (const auto& t : batch.inputs) base.push_back(to_device(t));
    } else {
      const auto on_device = at::TensorOptions().device(options_.device->device());
      for (const auto& spec : model_.boundary.at(static_cast<std::size_t>(from_layer)))
        base.push_back(at::isFloatingType(spec.dtype) ? at::full(spec.sizes, 0.01, on_device.dtype(spec.dtype))
                                                      : at::zeros(spec.sizes, on_device.dtype(spec.dtype)));
    }
    const at::Tensor labels = batch.labels.defined() ? to_device(batch.labels) : batch.labels;
    TensorList params;
    for (const auto& p : st.module->parameters())
      if (p.layer >= from_layer) params.push_back(p.tensor);
    TensorList grad_sums;
    for (const auto& p : params) grad_sums.push_back(at::zeros_like(p));
    auto accumulate = [&](const TensorList& grads, std::size_t first_param) {
      for (std::size_t i = 0; i < params.size(); ++i)
        if (grads.at(first_param + i).defined()) grad_sums[i].add_(grads[first_param + i]);
    };
    for (int rep = 0; rep < repetitions; ++rep)
      for (const bool split : {false, true}) {
        TensorList inputs;
        for (const auto& t : base) {
          at::Tensor leaf = t.detach().clone();
          if (!from_data && at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
          inputs.push_back(leaf);
        }
        const TensorList outputs = st.module->forward_range(inputs, from_layer, st.module->end_layer());
        TensorList roots, seeds, grad_inputs;
        if (st.is_last) {
          roots = {model_.loss(outputs, labels)};
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
        if (!split) {
          TensorList targets = grad_inputs;
          targets.insert(targets.end(), params.begin(), params.end());
          samples.full_us.push_back(device_time_us([&] {
            if (!targets.empty()) accumulate(torch::autograd::grad(roots, targets, seeds, false, false, true), grad_inputs.size());
          }));
        } else {
          samples.input_us.push_back(device_time_us([&] {
            if (!grad_inputs.empty()) torch::autograd::grad(roots, grad_inputs, seeds, true, false, true);
          }));
          samples.weight_us.push_back(device_time_us([&] {
            if (!params.empty()) accumulate(torch::autograd::grad(roots, params, seeds, false, false, true), 0);
          }));
        }
      }
    return samples;
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
    return position_.replica * position_.pipeline_ranks + active_->stage_to_rank.at(static_cast<std::size_t>(s));
  }
  bool holds(int s) const { return stages_.count(s) > 0; }
  int micro_batch_count() const { return active_->num_micro_batches; }

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
    if (options_.max_grad_norm > 0 && p > 1) {
      std::vector<int> members;
      for (int r = 0; r < p; ++r) members.push_back(position_.replica * p + r);
      pipe_group_ = world_.subgroup(members, fmt::format("pipe{}", position_.replica));
    }
    // Tied weights: per key, the layers using it, and the pipeline ranks holding them.
    for (std::size_t l = 0; l < model_.layers.size(); ++l) {
      const auto& key = model_.layers[l].tied_key;
      if (!key.empty()) tied_layers_[key].push_back(static_cast<int>(l));
    }
    for (const auto& [key, layers] : tied_layers_) {
      std::set<int> holder_pipe_ranks;
      for (int l : layers) holder_pipe_ranks.insert(schedule_->stage_to_rank.at(static_cast<std::size_t>(stage_of_layer(l))));
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

  // "stage 1 (layers 2..3, 'blocks.2' .. 'blocks.3')": how errors name a stage.
  std::string stage_name(const StageState& st) const {
    const int first = st.module->first_layer(), last = st.module->end_layer() - 1;
    return fmt::format("stage {} (layers {}..{}, '{}' .. '{}')", st.stage, first, last,
                       model_.layers.at(static_cast<std::size_t>(first)).name, model_.layers.at(static_cast<std::size_t>(last)).name);
  }

  // The micro-batch of this step: from the source, pulled in micro-batch order and once, or
  // the built-in synthetic data (its labels only where a last stage needs them).
  MicroBatch micro_batch_data(int micro_batch, bool with_labels) {
    if (!source_) return make_micro_batch(model_.config, first_sample_ + micro_batch, with_labels);
    while (static_cast<int>(pulled_.size()) <= micro_batch) {
      MicroBatch next = (*source_)();
      if (next.inputs.empty())
        fail(fmt::format("the data source gave micro-batch {} no input tensors", pulled_.size()), where());
      pulled_.push_back(std::move(next));
    }
    return pulled_[static_cast<std::size_t>(micro_batch)];
  }

  void load(int s, int micro_batch) {
    StageState& st = stage(s);
    if (!st.is_first && !st.is_last) return;  // inner stages get their data from the pipeline
    MicroBatchState& state = mb(s, micro_batch);
    MicroBatch batch = micro_batch_data(micro_batch, st.is_last);
    if (options_.device->device() != at::kCPU) {
      for (auto& t : batch.inputs) t = t.to(options_.device->device());
      if (batch.labels.defined()) batch.labels = batch.labels.to(options_.device->device());
    }
    if (st.is_first) state.received_inputs = std::move(batch.inputs);
    if (st.is_last) state.labels = std::move(batch.labels);
    state.loaded = true;
  }

  // A stage's outputs must be defined tensors and, with declared shapes, match them.
  void check_outputs(const StageState& st, const TensorList& outputs, const std::vector<std::string>& names) const {
    if (outputs.empty()) fail(fmt::format("{} returned no output tensors", stage_name(st)), where());
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (!outputs[i].defined())
        fail(fmt::format("{}: output {} of layer '{}' is not a tensor (undefined)", stage_name(st), i,
                         model_.layers.at(static_cast<std::size_t>(st.module->end_layer() - 1)).name),
             where());
    if (dynamic_shapes_) return;
    const auto& declared = model_.boundary.at(static_cast<std::size_t>(st.module->end_layer()));
    const std::string next = st.is_last ? std::string("the model output")
                                        : fmt::format("the input of layer '{}'", model_.layers.at(static_cast<std::size_t>(st.module->end_layer())).name);
    if (declared.size() != outputs.size())
      fail(fmt::format("{} gives {} output tensor(s), but {} is declared with {}", stage_name(st), outputs.size(), next,
                       declared.size()),
           where());
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const auto& spec = declared[i];
      const std::string given_name = i < names.size() ? names[i] : std::string();
      if (!spec.name.empty() && given_name != spec.name)
        fail(fmt::format("{}: output tensor {} is named '{}', but {} is declared with '{}' there", stage_name(st), i, given_name, next,
                         spec.name),
             where());
      if (outputs[i].sizes() != at::IntArrayRef(spec.sizes) || outputs[i].scalar_type() != spec.dtype)
        fail(fmt::format("{}: output tensor {} has shape {} {}, but {} is declared as {} {} (shape mismatch between stages)",
                         stage_name(st), i, shape_text(outputs[i].sizes()), c10::toString(outputs[i].scalar_type()), next,
                         shape_text(spec.sizes), c10::toString(spec.dtype)),
             where());
    }
  }

  // The skip tensors the stage's layers stashed for later stages; every other one was popped.
  void take_skip_outputs(const StageState& st, SkipTensors& left, MicroBatchState& state) const {
    state.skip_outputs.clear();
    for (const auto& r : skip_routes_) {
      if (r.from_stage != st.stage || r.to_stage == st.stage) continue;
      auto it = left.find(r.name);
      if (it == left.end())
        fail(fmt::format("{}: layer '{}' did not stash the skip tensor '{}'", stage_name(st),
                         model_.layers.at(static_cast<std::size_t>(r.from_layer)).name, r.name),
             where());
      state.skip_outputs[r.name] = it->second;
      left.erase(it);
    }
    if (!left.empty())
      fail(fmt::format("{}: the skip tensor '{}' is left over after the stage's layers (received but not popped)", stage_name(st),
                       left.begin()->first),
           where());
  }

  // A dict arriving at a stage whose first layer takes other keys fails here, naming both.
  void check_input_keys(const StageState& st, const std::vector<std::string>& names, std::size_t count) const {
    // The skip tensors the layer pops come after what the stage receives.
    const auto& pops = model_.layers.at(static_cast<std::size_t>(st.module->first_layer())).pop;
    std::vector<std::string> keys;
    for (const auto& key : st.module->input_keys())
      if (std::find(pops.begin(), pops.end(), key) == pops.end()) keys.push_back(key);
    if (keys.empty()) return;
    if (auto wrong = key_mismatch(keys, names, count); !wrong.empty()) {
      const std::string from = st.is_first ? std::string("from the data loader") : fmt::format("from stage {}", st.stage - 1);
      fail(fmt::format("{} receives the keys [{}] {}, but its layer '{}' takes [{}]: {}", stage_name(st), fmt::join(names, ", "), from,
                       st.module->first_layer_name(), fmt::join(keys, ", "), wrong),
           where());
    }
  }

  at::Tensor compute_loss(const StageState& st, const TensorList& outputs, const at::Tensor& labels) const {
    if (!model_.loss) fail(fmt::format("{} is the last stage but the model has no loss function", stage_name(st)), where());
    at::Tensor loss = model_.loss(outputs, labels);
    if (!loss.defined() || loss.numel() != 1)
      fail(fmt::format("{}: the loss function must return one number, not a tensor of shape {}", stage_name(st),
                       loss.defined() ? shape_text(loss.sizes()) : std::string("(undefined)")),
           where());
    return loss.reshape({});
  }

  // Runs layers [first, end) as activation-checkpointed runs or as one run.
  int segment_length(const StageState& st) const {
    const int layers = st.module->end_layer() - st.module->first_layer();
    return options_.activation_checkpoint_interval > 0 ? std::min(options_.activation_checkpoint_interval, layers) : layers;
  }

  void forward(const Instruction& instr) {
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    if ((st.is_first || st.is_last) && !state.loaded) load(instr.stage, instr.micro_batch);
    if (state.received_inputs.empty()) fail("the forward has no input (no receive or hand-over before it)", where());
    const bool training = active_->is_training();
    state.inputs.clear();
    for (auto& t : state.received_inputs) {
      at::Tensor leaf = t.detach();
      if (training && !st.is_first && carries_grad(leaf)) leaf.requires_grad_(true);
      state.inputs.push_back(leaf);
    }
    state.input_names = std::move(state.received_names);
    state.received_inputs.clear();
    state.received_names.clear();
    check_input_keys(st, state.input_names, state.inputs.size());
    // The skip tensors this stage's layers pop: leaves, like the stage inputs.
    state.skip_inputs.clear();
    for (const auto& r : skip_routes_) {
      if (r.to_stage != instr.stage || r.from_stage == instr.stage) continue;
      auto it = state.received_skips.find(r.name);
      if (it == state.received_skips.end())
        fail(fmt::format("{} needs the skip tensor '{}' of stage {} (stashed by layer '{}'), but it has not arrived (no "
                         "RecvActivation from stage {} before this forward)",
                         stage_name(st), r.name, r.from_stage, model_.layers.at(static_cast<std::size_t>(r.from_layer)).name,
                         r.from_stage),
             where());
      at::Tensor leaf = it->second.detach();
      if (training && carries_grad(leaf)) leaf.requires_grad_(true);
      state.skip_inputs[r.name] = leaf;
    }
    state.received_skips.clear();
    SkipTensors skips = state.skip_inputs;
    state.segments.clear();
    const bool checkpointed = training && options_.activation_checkpoint_interval > 0;
    {
      std::optional<at::NoGradGuard> no_grad;
      if (!training || checkpointed) no_grad.emplace();
      if (checkpointed) {
        // Keep each run's input and random state; the runs' graphs are rebuilt in the backward.
        NamedTensors x{state.inputs, state.input_names};
        const int step = segment_length(st);
        for (int first = st.module->first_layer(); first < st.module->end_layer(); first += step) {
          MicroBatchState::Segment seg;
          seg.first_layer = first;
          seg.end_layer = std::min(first + step, st.module->end_layer());
          seg.inputs = x.tensors;
          seg.input_names = x.names;
          {
            auto generator = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> lock(generator.mutex());
            seg.rng_state = generator.get_state();
          }
          x = st.module->forward_range_named(x, seg.first_layer, seg.end_layer, &skips);
          state.segments.push_back(std::move(seg));
        }
        state.outputs = std::move(x.tensors);
        state.output_names = std::move(x.names);
        state.graph_ready = false;
      } else {
        NamedTensors out = st.module->forward_named({state.inputs, state.input_names}, &skips);
        state.outputs = std::move(out.tensors);
        state.output_names = std::move(out.names);
        state.graph_ready = true;
      }
      check_outputs(st, state.outputs, state.output_names);
      take_skip_outputs(st, skips, state);
      // Inference computes the loss only when the data has labels.
      if (st.is_last && (training || (state.labels.defined() && model_.loss))) {
        state.loss = compute_loss(st, state.outputs, state.labels);
        result_.loss_sum += state.loss.item<double>();
        ++result_.loss_count;
      }
    }
    if (!checkpointed) {
      MicroBatchState::Segment whole;
      whole.first_layer = st.module->first_layer();
      whole.end_layer = st.module->end_layer();
      whole.inputs = state.inputs;
      for (const auto& [name, leaf] : state.skip_inputs) whole.inputs.push_back(leaf);  // after the stage inputs
      whole.outputs = state.outputs;
      state.segments.push_back(std::move(whole));
    }
    state.seeded = false;
    state.input_grads_ready = false;
    if (st.is_last && keep_outputs_) {
      TensorList kept;
      for (auto& t : state.outputs) kept.push_back(t.detach());
      result_.outputs.at(static_cast<std::size_t>(instr.micro_batch)) = std::move(kept);
    }
    if (!st.is_last && holds(instr.stage + 1)) {  // hand-over to the next stage on this rank
      TensorList handed;
      for (auto& t : state.outputs) handed.push_back(t.detach());
      MicroBatchState& next = mb(instr.stage + 1, instr.micro_batch);
      next.received_inputs = std::move(handed);
      next.received_names = state.output_names;
    }
    for (const auto& r : skip_routes_)  // skip tensors for later stages on this rank
      if (r.carrier == SkipCarrier::Memory && r.from_stage == instr.stage)
        mb(r.to_stage, instr.micro_batch).received_skips[r.name] = state.skip_outputs.at(r.name).detach();
    if (!training) {
      state.inputs.clear();
      state.segments.clear();
    }
  }

  // Activation checkpointing: reruns every run from its kept input with the forward's random
  // state, now recording the graph; each run's input is a leaf, so the backward goes run by run.
  void recompute(StageState& st, MicroBatchState& state) {
    if (state.graph_ready) return;
    auto generator = at::detail::getDefaultCPUGenerator();
    at::Tensor rng_after;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_after = generator.get_state();
    }
    for (std::size_t k = 0; k < state.segments.size(); ++k) {
      auto& seg = state.segments[k];
      if (k > 0) {
        TensorList leaves;
        for (auto& t : seg.inputs) {
          at::Tensor leaf = t.detach();
          if (carries_grad(leaf)) leaf.requires_grad_(true);
          leaves.push_back(leaf);
        }
        seg.inputs = std::move(leaves);
      }
      {
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(seg.rng_state);
      }
      seg.outputs = st.module->forward_range_named({seg.inputs, seg.input_names}, seg.first_layer, seg.end_layer).tensors;
    }
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_after);
    }
    state.outputs = state.segments.back().outputs;
    if (st.is_last) state.loss = compute_loss(st, state.outputs, state.labels);
    state.graph_ready = true;
  }

  // The gradient seeds of a stage's backward: the scaled loss on the last stage, the received
  // output gradients elsewhere (one per floating-point output, in order).
  void seed_backward(StageState& st, MicroBatchState& state) {
    if (state.seeded) return;
    auto& last = state.segments.back();
    last.roots.clear();
    last.seeds.clear();
    if (st.is_last) {
      if (!state.loss.defined()) fail("backward before the forward of this micro-batch", where());
      // Every micro-batch loss is scaled by 1 / (M * D): the step's gradient is the mean.
      const double scale = 1.0 / (static_cast<double>(micro_batch_count()) * position_.num_replicas);
      last.roots = {state.loss};
      last.seeds = {at::full({}, scale, state.loss.options())};
    } else {
      std::size_t float_outputs = 0;
      for (const auto& o : state.outputs) float_outputs += carries_grad(o) ? 1 : 0;
      if (state.output_grads.size() != float_outputs)
        fail("backward without the gradient of the stage outputs (no receive or hand-over before it)", where());
      std::size_t g = 0;
      for (const auto& o : state.outputs) {
        if (!carries_grad(o)) continue;
        const at::Tensor& grad = state.output_grads[g++];
        if (!o.requires_grad()) continue;  // e.g. a data tensor passed through: nothing to differentiate
        last.roots.push_back(o);
        last.seeds.push_back(grad);
      }
      for (const auto& [name, out] : state.skip_outputs) {
        if (!carries_grad(out)) continue;
        auto it = state.skip_output_grads.find(name);
        if (it == state.skip_output_grads.end())
          fail(fmt::format("backward without the gradient of the skip tensor '{}' (no RecvGrad from the stage that pops it)", name),
               where());
        if (!out.requires_grad()) continue;
        last.roots.push_back(out);
        last.seeds.push_back(it->second);
      }
    }
    state.seeded = true;
  }

  // The parameters of layers [first, end) of a stage: a contiguous range of its list.
  std::pair<std::size_t, std::size_t> parameter_range(const StageState& st, int first_layer, int end_layer) const {
    const auto& params = st.module->parameters();
    std::size_t begin = 0;
    while (begin < params.size() && params[begin].layer < first_layer) ++begin;
    std::size_t end = begin;
    while (end < params.size() && params[end].layer < end_layer) ++end;
    return {begin, end};
  }

  void backward(const Instruction& instr, bool input_part, bool weight_part) {
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    if (state.segments.empty()) fail("backward before the forward of this micro-batch", where());
    if (input_part) {
      recompute(st, state);
      seed_backward(st, state);
    } else if (!state.seeded) {
      fail("BackwardWeight before the BackwardInput of this micro-batch", where());
    }
    const TensorList all_params = st.module->parameter_tensors();
    std::vector<at::Tensor> param_grads(weight_part ? all_params.size() : 0);
    // Last run first: a run's input gradients seed the run before it.
    for (std::size_t k = state.segments.size(); k-- > 0;) {
      auto& seg = state.segments[k];
      TensorList grad_inputs;
      if (input_part)
        for (auto& t : seg.inputs)
          if (t.requires_grad()) grad_inputs.push_back(t);
      const auto [param_begin, param_end] = weight_part ? parameter_range(st, seg.first_layer, seg.end_layer)
                                                        : std::pair<std::size_t, std::size_t>{0, 0};
      TensorList targets = grad_inputs;
      targets.insert(targets.end(), all_params.begin() + static_cast<std::ptrdiff_t>(param_begin),
                     all_params.begin() + static_cast<std::ptrdiff_t>(param_end));
      const bool keep_graph = input_part && !weight_part;
      TensorList grads;
      if (!targets.empty() && !seg.roots.empty())
        grads = torch::autograd::grad(seg.roots, targets, seg.seeds, keep_graph, /*create_graph=*/false, /*allow_unused=*/true);
      if (input_part) {
        std::vector<at::Tensor> input_grads;
        for (std::size_t i = 0; i < grad_inputs.size(); ++i)
          input_grads.push_back(grads.empty() || !grads[i].defined() ? at::zeros_like(grad_inputs[i]) : grads[i]);
        if (k > 0) {
          // Seeds of the previous run: its outputs are this run's inputs, one for one.
          auto& prev = state.segments[k - 1];
          prev.roots.clear();
          prev.seeds.clear();
          std::size_t g = 0;
          for (std::size_t i = 0; i < seg.inputs.size(); ++i) {
            if (!seg.inputs[i].requires_grad()) continue;
            const at::Tensor& grad = input_grads[g++];
            if (prev.outputs.at(i).requires_grad()) {
              prev.roots.push_back(prev.outputs[i]);
              prev.seeds.push_back(grad);
            }
          }
        } else {
          // One gradient per floating-point stage input, for the previous stage.
          state.input_grads.clear();
          std::size_t g = 0;
          for (auto& t : state.inputs)
            if (carries_grad(t)) state.input_grads.push_back(t.requires_grad() ? input_grads.at(g++) : at::zeros_like(t));
          state.skip_input_grads.clear();
          for (const auto& [name, leaf] : state.skip_inputs)
            if (carries_grad(leaf)) state.skip_input_grads[name] = leaf.requires_grad() ? input_grads.at(g++) : at::zeros_like(leaf);
          for (const auto& r : skip_routes_)  // back to an earlier stage on this rank
            if (r.carrier == SkipCarrier::Memory && r.to_stage == instr.stage)
              if (auto it = state.skip_input_grads.find(r.name); it != state.skip_input_grads.end())
                mb(r.from_stage, instr.micro_batch).skip_output_grads[r.name] = it->second;
          state.input_grads_ready = true;
          if (!st.is_first && holds(instr.stage - 1))  // hand-over to the previous stage on this rank
            mb(instr.stage - 1, instr.micro_batch).output_grads = state.input_grads;
        }
      }
      if (weight_part) {
        const std::size_t offset = input_part ? grad_inputs.size() : 0;
        for (std::size_t i = param_begin; i < param_end; ++i) {
          at::Tensor g = grads.empty() ? at::Tensor() : grads[offset + (i - param_begin)];
          param_grads[i] = g.defined() ? g : at::zeros_like(all_params[i]);
        }
        if (input_part) seg.roots.clear();  // this run's graph is freed: release what it held
      }
    }
    if (weight_part) {
      for (std::size_t i = 0; i < param_grads.size(); ++i)
        if (!param_grads[i].defined()) param_grads[i] = at::zeros_like(all_params[i]);
      st.accumulator.add(instr.micro_batch, std::move(param_grads));
      // The graph and the activations of this micro-batch are no longer needed.
      state.segments.clear();
      state.outputs.clear();
      state.inputs.clear();
      state.loss = at::Tensor();
      state.output_grads.clear();
      state.skip_inputs.clear();
      state.skip_outputs.clear();
      state.skip_output_grads.clear();
      state.seeded = false;
    }
  }

  int tag(int from_stage, int to_stage, TransferKind kind) const {
    return (from_stage * active_->num_stages + to_stage) * 2 + static_cast<int>(kind);
  }

  // ---- shape headers -------------------------------------------------------------------------
  // (from stage, to stage, part): part 0 the stage's tensors, 1 its skip tensors. The first
  // transfer of a step on a channel carries the shape header; later ones reuse it (DeepSpeed),
  // unless shapes_per_micro_batch sends it every time. Both ends agree: transfers of a channel
  // are matched in order.
  using ShapeChannel = std::tuple<int, int, int>;

  std::string layout_entry(const TensorLayout& layout, std::size_t i) const {
    return fmt::format("{} {}", shape_text(layout.sizes[i]), c10::toString(layout.dtypes[i]));
  }

  // A later micro-batch must match the header its batch sent first on the channel.
  void check_against_header(const StageState& st, int micro_batch, const TensorLayout& now, const TensorLayout& header,
                            int to_stage, const char* what) const {
    const std::string advice =
        "shapes may change between batches but not between the micro-batches of one batch; turn on per-micro-batch shape "
        "headers (EngineOptions::shapes_per_micro_batch, DeepSpeed's dynamic_shape) for data whose shapes vary inside a batch";
    if (now.dtypes.size() != header.dtypes.size())
      fail(fmt::format("{}: micro-batch {} sends {} {}(s) to stage {}, but the shape header sent with micro-batch {} of this "
                       "batch describes {}; {}",
                       stage_name(st), micro_batch, now.dtypes.size(), what, to_stage, header.micro_batch, header.dtypes.size(),
                       advice),
           where());
    for (std::size_t i = 0; i < now.dtypes.size(); ++i) {
      const std::string name = now.names.empty() ? std::string() : fmt::format(" '{}'", now.names[i]);
      const std::string header_name = header.names.empty() ? std::string() : fmt::format(" '{}'", header.names[i]);
      if (now.sizes[i] != header.sizes[i] || now.dtypes[i] != header.dtypes[i] || name != header_name)
        fail(fmt::format("{}: micro-batch {}: {} {}{} is {}, but the shape header sent to stage {} with micro-batch {} of this "
                         "batch says {}{}; {}",
                         stage_name(st), micro_batch, what, i, name, layout_entry(now, i), to_stage, header.micro_batch,
                         layout_entry(header, i), header_name, advice),
             where());
    }
  }

  // Appends the messages of `payload` on `channel`; returns the bytes of the data message.
  std::int64_t shaped_messages(TensorList& messages, const TensorList& payload, const std::vector<std::string>& names,
                               const ShapeChannel& channel, const StageState& st, int micro_batch, const char* what) {
    const at::Device device = options_.device->device();
    TensorLayout layout = TensorLayout::of(payload, names);
    layout.micro_batch = micro_batch;
    if (auto known = sent_layouts_.find(channel); known != sent_layouts_.end() && !options_.shapes_per_micro_batch) {
      check_against_header(st, micro_batch, layout, known->second, std::get<1>(channel), what);
      messages.push_back(pack_bytes(payload, {}, device));
      return messages.back().numel();
    }
    const auto words = layout.words();
    at::Tensor body = pack_bytes(payload, words, device);
    const std::int64_t descriptor_bytes = static_cast<std::int64_t>(words.size()) * 8;
    messages.push_back(at::tensor(std::vector<std::int64_t>{static_cast<std::int64_t>(words.size()), body.numel() - descriptor_bytes},
                                  at::TensorOptions().dtype(at::kLong))
                           .to(device));
    messages.push_back(body);
    sent_layouts_[channel] = std::move(layout);
    return body.numel();
  }

  // The tensors of a transfer on `channel` (and their names), with or without a header as
  // shaped_messages sent them; `bytes` is the size of the data message.
  TensorList receive_shaped(const ShapeChannel& channel, const std::function<void(at::Tensor)>& receive, int peer,
                            std::int64_t& bytes, std::vector<std::string>& names) {
    const at::Device device = options_.device->device();
    if (auto known = received_layouts_.find(channel); known != received_layouts_.end() && !options_.shapes_per_micro_batch) {
      at::Tensor body = at::empty({known->second.payload_bytes()}, at::TensorOptions().dtype(at::kByte).device(device));
      receive(body);
      bytes = body.numel();
      names = known->second.names;
      return unpack_bytes(body, 0, known->second.dtypes, known->second.sizes, device);
    }
    at::Tensor header = at::empty({kHeaderWords}, at::TensorOptions().dtype(at::kLong).device(device));
    receive(header);
    header = header.cpu();
    const std::int64_t words = header[0].item<std::int64_t>(), payload_bytes = header[1].item<std::int64_t>();
    if (words < 1 || payload_bytes < 0)
      fail(fmt::format("malformed shape header from rank {} ({} words, {} bytes)", peer, words, payload_bytes), where());
    at::Tensor body = at::empty({words * 8 + payload_bytes}, at::TensorOptions().dtype(at::kByte).device(device));
    receive(body);
    const at::Tensor descriptor = body.slice(0, 0, words * 8).cpu().clone().view(at::kLong);
    TensorLayout layout;
    try {
      layout = TensorLayout::parse(descriptor.data_ptr<std::int64_t>(), words);
    } catch (const std::runtime_error& e) {
      fail(fmt::format("{} from rank {}", e.what(), peer), where());
    }
    if (layout.payload_bytes() != payload_bytes)
      fail(fmt::format("malformed shape header from rank {} ({} bytes announced, {} described)", peer, payload_bytes,
                       layout.payload_bytes()),
           where());
    bytes = body.numel();
    names = layout.names;
    TensorList out = unpack_bytes(body, words * 8, layout.dtypes, layout.sizes, device);
    received_layouts_[channel] = std::move(layout);
    return out;
  }

  // The skip tensors that travel on the transfers from `from_stage` to `to_stage` (not in memory).
  std::vector<const SkipRoute*> transported_skips(int from_stage, int to_stage) const {
    std::vector<const SkipRoute*> out;
    for (const auto& r : skip_routes_)
      if (r.from_stage == from_stage && r.to_stage == to_stage &&
          (r.carrier == SkipCarrier::WithActivation || r.carrier == SkipCarrier::Direct))
        out.push_back(&r);
    return out;
  }

  // Sends to the next stage (activations) or the previous one (gradients) carry the stage's
  // tensors and, as a second message, the skip tensors riding along; sends to another stage
  // (peer_stage) carry only the skip tensors of that pair.
  void send(const Instruction& instr) {
    const int peer_stage = resolved_peer_stage(instr);
    if (holds(peer_stage)) return;  // same rank: handed over in memory
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    const bool activation = instr.op == Op::SendActivation;
    if (activation ? state.outputs.empty() : !state.input_grads_ready)
      fail(activation ? "nothing to send: the forward has not run" : "nothing to send: the backward has not run", where());
    const bool main_channel = peer_stage == (activation ? instr.stage + 1 : instr.stage - 1);
    const auto skips = activation ? transported_skips(instr.stage, peer_stage) : transported_skips(peer_stage, instr.stage);
    if (!main_channel && skips.empty())
      fail(fmt::format("nothing to send to stage {}: it is not the {} stage and no skip tensor goes {} it", peer_stage,
                       activation ? "next" : "previous", activation ? "to" : "back to"),
           where());
    const int peer = world_rank_of_stage(peer_stage);
    const int message_tag = tag(instr.stage, peer_stage, activation ? TransferKind::Activation : TransferKind::Grad);
    const at::Device device = options_.device->device();
    TensorList messages;
    std::int64_t bytes = 0;
    if (main_channel) {
      const TensorList& payload = activation ? state.outputs : state.input_grads;
      if (activation && dynamic_shapes_) {
        bytes += shaped_messages(messages, payload, state.output_names, {instr.stage, peer_stage, 0}, stage(instr.stage),
                                 instr.micro_batch, "output tensor");
      } else if (!activation) {
        // Gradients: one per floating-point input; the receiver knows their shapes from its
        // outputs. A stage without floating-point inputs sends nothing (and nothing is awaited).
        if (!payload.empty()) {
          messages.push_back(pack_bytes(payload, {}, device));
          bytes += messages.back().numel();
        }
      } else if (mixed_dtypes(payload)) {
        messages.push_back(pack_bytes(payload, {}, device));  // e.g. hidden states and a mask
        bytes += messages.back().numel();
      } else {
        TensorList detached;
        for (auto& t : payload) detached.push_back(t.detach());
        messages.push_back(pack_tensors(detached));
        bytes += static_cast<std::int64_t>(messages.back().numel() * messages.back().element_size());
      }
    }
    if (!skips.empty() && activation) {
      // Skip tensors carry their names and shapes (headers as for dynamic shapes).
      TensorList tensors;
      std::vector<std::string> names;
      for (const SkipRoute* r : skips) {
        auto it = state.skip_outputs.find(r->name);
        if (it == state.skip_outputs.end())
          fail(fmt::format("stage {} has no skip tensor '{}' for stage {} (layer '{}' stashes it)", instr.stage, r->name, peer_stage,
                           model_.layers.at(static_cast<std::size_t>(r->from_layer)).name),
               where());
        tensors.push_back(it->second);
        names.push_back(r->name);
      }
      bytes += shaped_messages(messages, tensors, names, {instr.stage, peer_stage, 1}, stage(instr.stage), instr.micro_batch,
                               "skip tensor");
    } else if (!skips.empty()) {
      // The gradients of the floating-point skip tensors, in route order.
      TensorList grads;
      for (const SkipRoute* r : skips)
        if (auto it = state.skip_input_grads.find(r->name); it != state.skip_input_grads.end()) grads.push_back(it->second);
      if (!grads.empty()) {
        messages.push_back(pack_bytes(grads, {}, device));
        bytes += messages.back().numel();
      }
    }
    if (messages.empty()) return;
    const auto index = begin_event(traces::Lane::Send, instr, peer, bytes);
    auto group = std::make_unique<PendingGroup>();
    for (auto& m : messages) group->add(world_.send(m, peer, message_tag));
    send_watcher_.watch(std::move(group), [this, index](double end) { end_event(index, end); }, where());
  }

  // How long `work` keeps the device busy: its CUDA events where the device times with them (a
  // launch returns before its kernels have run), the steady clock around the call otherwise.
  template <typename Work>
  double device_time_us(Work&& work) {
    auto timing = options_.device->start_timing();
    const double start = now_us();
    work();
    if (!timing) return now_us() - start;
    timing->stop();
    const auto [from_us, to_us] = timing->span_us();
    return to_us - from_us;
  }

  at::Tensor to_device(const at::Tensor& t) const {
    return options_.device->device() == at::kCPU ? t : t.to(options_.device->device());
  }

  using Receive = std::function<void(at::Tensor)>;

  // The stage's inputs from the previous stage; returns the bytes received.
  std::int64_t receive_activation(StageState& st, MicroBatchState& state, int peer_stage, const Receive& receive, int peer) {
    const at::Device device = options_.device->device();
    if (dynamic_shapes_) {
      std::int64_t bytes = 0;
      state.received_inputs = receive_shaped({peer_stage, st.stage, 0}, receive, peer, bytes, state.received_names);
      return bytes;
    }
    TensorList like;
    state.received_names.clear();
    for (const auto& spec : model_.boundary.at(static_cast<std::size_t>(st.module->first_layer()))) {
      like.push_back(at::empty(spec.sizes, at::TensorOptions().dtype(spec.dtype).device(device)));
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
      receive(body);
      state.received_inputs = unpack_bytes(body, 0, dtypes, sizes, device);
      return total_bytes;
    }
    std::int64_t total = 0;
    for (auto& t : like) total += t.numel();
    at::Tensor flat = like.size() == 1 ? like[0] : at::empty({total}, like[0].options());
    receive(flat);
    state.received_inputs = unpack_tensors(flat, like);
    return static_cast<std::int64_t>(flat.numel() * flat.element_size());
  }

  // Gradients for `tensors` (the floating-point ones, in order) as one byte message; an empty
  // list when none is floating-point (nothing is sent then). `bytes` adds what was received.
  TensorList receive_grads_for(const TensorList& tensors, const Receive& receive, std::int64_t& bytes) {
    const at::Device device = options_.device->device();
    std::vector<at::ScalarType> dtypes;
    std::vector<std::vector<std::int64_t>> sizes;
    std::int64_t total = 0;
    for (const auto& o : tensors)
      if (carries_grad(o)) {
        dtypes.push_back(o.scalar_type());
        sizes.emplace_back(o.sizes().vec());
        total += o.numel() * static_cast<std::int64_t>(o.element_size());
      }
    if (total == 0) return {};
    at::Tensor body = at::empty({total}, at::TensorOptions().dtype(at::kByte).device(device));
    receive(body);
    bytes += total;
    return unpack_bytes(body, 0, dtypes, sizes, device);
  }

  void recv(const Instruction& instr) {
    const int peer_stage = resolved_peer_stage(instr);
    if (holds(peer_stage)) return;  // same rank: handed over in memory
    StageState& st = stage(instr.stage);
    MicroBatchState& state = mb(instr.stage, instr.micro_batch);
    const bool activation = instr.op == Op::RecvActivation;
    const int peer = world_rank_of_stage(peer_stage);
    const int message_tag = tag(peer_stage, instr.stage, activation ? TransferKind::Activation : TransferKind::Grad);
    const bool main_channel = peer_stage == (activation ? instr.stage - 1 : instr.stage + 1);
    const auto skips = activation ? transported_skips(peer_stage, instr.stage) : transported_skips(instr.stage, peer_stage);
    if (!main_channel && skips.empty())
      fail(fmt::format("nothing to receive from stage {}: it is not the {} stage and no skip tensor comes {} it", peer_stage,
                       activation ? "previous" : "next", activation ? "from" : "back from"),
           where());
    Receive receive = [&](at::Tensor buffer) {
      try {
        world_.recv(buffer, peer, message_tag)->wait(options_.timeout);
      } catch (const std::exception& e) {
        fail(first_line(e.what()), "blocked in " + where());
      }
    };
    if (!activation && state.outputs.empty())
      fail("a gradient for outputs this stage has not computed (no forward before it)", where());
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
    if (!skips.empty() && activation) {
      std::int64_t skip_bytes = 0;
      std::vector<std::string> names;
      TensorList tensors = receive_shaped({peer_stage, instr.stage, 1}, receive, peer, skip_bytes, names);
      if (names.size() != tensors.size())
        fail(fmt::format("the skip tensors from stage {} came without their names", peer_stage), where());
      for (std::size_t i = 0; i < tensors.size(); ++i) state.received_skips[names[i]] = tensors[i];
      bytes += skip_bytes;
      ++messages;
    } else if (!skips.empty()) {
      TensorList produced;
      std::vector<std::string> names;
      for (const SkipRoute* r : skips)
        if (auto it = state.skip_outputs.find(r->name); it != state.skip_outputs.end()) {
          produced.push_back(it->second);
          names.push_back(r->name);
        } else {
          fail(fmt::format("a gradient for the skip tensor '{}', which this stage has not produced", r->name), where());
        }
      const std::int64_t before = bytes;
      const TensorList grads = receive_grads_for(produced, receive, bytes);
      std::size_t g = 0;
      for (std::size_t i = 0; i < produced.size(); ++i)
        if (carries_grad(produced[i])) state.skip_output_grads[names[i]] = grads.at(g++);
      messages += bytes > before ? 1 : 0;
    }
    if (messages == 0) return;  // nothing floating-point: no gradient comes back
    const auto index = begin_event(traces::Lane::Recv, instr, peer, bytes);
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      result_.events[index].ts_us = start_us - result_.origin_us;
    }
    end_event(index, now_us());
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

  // Clipping by the global norm: the gradients of every stage on every pipeline rank of this
  // replica (after the data-parallel reduction, so replicas agree), each tied weight counted
  // once (by the holder of its first layer). Runs once per step, at the first optimizer step.
  // Each layer's sum of squares has its own slot and the slots are added in layer order, so the
  // norm does not depend on how the layers are split (one contributor per slot: exact).
  void clip_gradients() {
    if (clipped_ || options_.max_grad_norm <= 0) return;
    for (auto& [s, st] : stages_) reduce_grads(*st);
    at::Tensor per_layer = at::zeros({static_cast<std::int64_t>(model_.layers.size())}, at::TensorOptions().dtype(at::kDouble));
    for (auto& [s, st] : stages_)
      for (const auto& p : st->module->parameters()) {
        if (!p.tied_key.empty() && p.layer != tied_layers_.at(p.tied_key).front()) continue;
        if (p.tensor.grad().defined()) per_layer[p.layer] += p.tensor.grad().to(at::kDouble).pow(2).sum().cpu();
      }
    if (pipe_group_) {
      at::Tensor reduced = to_device(per_layer);
      pipe_group_->all_reduce_sum(reduced)->wait(options_.timeout);
      per_layer = reduced.cpu();
    }
    double square_sum = 0;
    for (std::int64_t l = 0; l < per_layer.numel(); ++l) square_sum += per_layer[l].item<double>();
    const double norm = std::sqrt(square_sum);
    result_.grad_norm = norm;
    const double coefficient = options_.max_grad_norm / (norm + 1e-6);
    if (coefficient < 1.0)
      for (auto& [s, st] : stages_)
        for (auto& p : st->module->parameter_tensors())
          if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
    clipped_ = true;
  }

  void optimizer_step(StageState& st) {
    if (st.stepped) return;
    reduce_grads(st);
    clip_gradients();
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
  const Schedule* schedule_;   // the one the stages were built for
  const Schedule* active_;     // the one this step runs
  const Partition& partition_;
  Transport& world_;
  GridPosition position_;
  RuntimeOptions options_;
  std::map<int, std::unique_ptr<StageState>> stages_;
  std::unique_ptr<Transport> dp_group_;
  std::map<std::string, std::vector<int>> tied_layers_;
  std::map<std::string, std::unique_ptr<Transport>> tied_groups_;
  std::unique_ptr<Transport> pipe_group_;  // this replica's pipeline ranks (gradient clipping)
  bool tied_done_ = false;
  bool clipped_ = false;
  bool dynamic_shapes_ = false;
  std::vector<SkipRoute> skip_routes_;
  std::map<ShapeChannel, TensorLayout> sent_layouts_, received_layouts_;  // this step's shape headers
  const MicroBatchSource* source_ = nullptr;
  std::vector<MicroBatch> pulled_;
  bool keep_outputs_ = false;

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
  StepRequest request;
  request.first_sample = first_sample;
  return impl_->run_step(step_index, request);
}

StepResult PipelineRuntime::run_step(int step_index, const StepRequest& request) { return impl_->run_step(step_index, request); }

std::vector<PipelineRuntime::BackwardSplitTiming> PipelineRuntime::probe_backward_split(int repetitions) {
  return impl_->probe_backward_split(repetitions);
}

std::vector<int> PipelineRuntime::stages() const { return impl_->stage_ids(); }
StageModule& PipelineRuntime::stage_module(int s) { return *impl_->stage(s).module; }
torch::optim::Optimizer& PipelineRuntime::optimizer(int s) {
  auto& st = impl_->stage(s);
  if (!st.optimizer) throw RuntimeError(fmt::format("stage {} has no parameters to optimise", s));
  return *st.optimizer;
}

torch::optim::AdamW& PipelineRuntime::stage_optimizer(int s) {
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer(s));
  if (!adamw) throw RuntimeError(fmt::format("stage {}: its optimizer is not AdamW", s));
  return *adamw;
}

}  // namespace pipescope::exec
