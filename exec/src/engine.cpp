// PipelineModule (layer specs, partitions) and PipelineEngine (train_batch / eval_batch over a
// PipelineRuntime).
#include "pipescope/exec/engine.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>

#include "error_text.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"
#include "pipescope/exec/device.hpp"

namespace pipescope::exec {
namespace {

// Builds a layer once to count its parameters, leaving the process's random state as it was.
std::int64_t count_parameters(const LayerSpec& layer) {
  auto generator = at::detail::getDefaultCPUGenerator();
  at::Tensor saved;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    saved = generator.get_state();
  }
  std::int64_t count = 0;
  {
    auto built = layer.build ? layer.build() : nullptr;
    if (!built) throw UsageError(fmt::format("layer '{}': its factory built no layer", layer.name));
    for (const auto& p : built->parameters(true)) count += p.numel();
  }
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(saved);
  return count;
}

}  // namespace

// ---- PipelineModule ------------------------------------------------------------------------

PipelineModule::PipelineModule(std::uint64_t seed) {
  spec_.config.name = "custom";
  spec_.config.seed = seed;
}

PipelineModule::PipelineModule(ModelSpec spec) : spec_(std::move(spec)) {}

PipelineModule& PipelineModule::add(LayerSpec spec) {
  if (spec.name.empty()) throw UsageError(fmt::format("layer {}: a layer needs a name", spec_.layers.size()));
  for (const auto& l : spec_.layers)
    if (l.name == spec.name)
      throw UsageError(fmt::format("layer '{}' is added twice (layer names must be unique)", spec.name));
  if (!spec.build) throw UsageError(fmt::format("layer '{}' has no factory", spec.name));
  if (!spec.tied_key.empty() && spec.tied_parameter.empty())
    throw UsageError(
        fmt::format("layer '{}': tied key '{}' needs the name of the shared parameter", spec.name, spec.tied_key));
  spec_.layers.push_back(std::move(spec));
  return *this;
}

PipelineModule& PipelineModule::add(std::string name, LayerFactory factory, LayerOptions options) {
  LayerSpec spec;
  spec.name = std::move(name);
  spec.type = std::move(options.type);
  spec.parameters = options.parameters;
  spec.cost = options.cost;
  spec.stash = std::move(options.stash);
  spec.pop = std::move(options.pop);
  spec.build = std::move(factory);
  return add(std::move(spec));
}

PipelineModule& PipelineModule::add_tied(std::string name, std::string key, std::string parameter, LayerFactory factory,
                                         LayerOptions options) {
  LayerSpec spec;
  spec.name = std::move(name);
  spec.type = std::move(options.type);
  spec.parameters = options.parameters;
  spec.cost = options.cost;
  spec.tied_key = std::move(key);
  spec.tied_parameter = std::move(parameter);
  spec.stash = std::move(options.stash);
  spec.pop = std::move(options.pop);
  spec.build = std::move(factory);
  return add(std::move(spec));
}

PipelineModule& PipelineModule::set_loss(LossFunction loss) {
  spec_.loss = std::move(loss);
  return *this;
}

PipelineModule& PipelineModule::set_static_shapes(std::vector<std::vector<TensorSpec>> boundary) {
  spec_.boundary = std::move(boundary);
  spec_.dynamic_shapes = false;
  return *this;
}

int PipelineModule::layer_index(const std::string& name) const {
  for (std::size_t i = 0; i < spec_.layers.size(); ++i)
    if (spec_.layers[i].name == name) return static_cast<int>(i);
  std::vector<std::string> names;
  for (const auto& l : spec_.layers) names.push_back(l.name);
  throw UsageError(fmt::format("split point '{}' names no layer (layers: {})", name, fmt::join(names, ", ")));
}

Partition PipelineModule::partition(int num_stages, const std::string& method) {
  if (method == "parameters")
    for (auto& l : spec_.layers)
      if (l.parameters < 0) l.parameters = count_parameters(l);
  std::vector<LayerInfo> infos = spec_.layer_infos();
  for (auto& info : infos) info.parameters = std::max<std::int64_t>(info.parameters, 0);
  try {
    return partition_layers(infos, num_stages, method);
  } catch (const std::exception& e) {
    throw UsageError(
        fmt::format("partition '{}' of {} layers into {} stages: {}", method, infos.size(), num_stages, e.what()));
  }
}

Partition PipelineModule::split_at(const std::vector<std::string>& split_points) const {
  std::set<int> seen;
  for (const auto& name : split_points) {
    const int index = layer_index(name);
    if (index == 0)
      throw UsageError(fmt::format("split point '{}' is the first layer: the first stage would be empty", name));
    if (!seen.insert(index).second) throw UsageError(fmt::format("split point '{}' is given twice", name));
  }
  std::vector<std::string> ordered;
  ordered.reserve(seen.size());
  for (int index : seen) ordered.push_back(spec_.layers[static_cast<std::size_t>(index)].name);
  try {
    return partition_at(spec_.layer_infos(), ordered);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("split points [{}]: {}", fmt::join(split_points, ", "), e.what()));
  }
}

std::vector<double> measure_layer_costs(PipelineModule& module, const MicroBatch& sample, int repetitions,
                                        Transport* world) {
  if (repetitions < 1)
    throw UsageError(fmt::format("measure_layer_costs: repetitions {} must be at least 1", repetitions));
  auto& layers = module.spec().layers;
  std::vector<double> costs(layers.size(), 0.0);
  auto generator = at::detail::getDefaultCPUGenerator();
  at::Tensor saved;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    saved = generator.get_state();
  }
  TensorList x = sample.inputs;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    auto layer = layers[i].build ? layers[i].build() : nullptr;
    if (!layer) throw UsageError(fmt::format("layer '{}': its factory built no layer", layers[i].name));
    TensorList next;
    double total_us = 0;
    for (int rep = 0; rep < repetitions; ++rep) {
      TensorList inputs;
      for (const auto& t : x) {
        at::Tensor leaf = t.detach();
        if (at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
        inputs.push_back(leaf);
      }
      const auto start = std::chrono::steady_clock::now();
      TensorList outputs = layer->forward_layers(inputs);
      at::Tensor total;
      for (const auto& o : outputs)
        if (o.defined() && o.requires_grad()) total = total.defined() ? total + o.sum() : o.sum();
      if (total.defined()) total.backward();
      total_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      next = outputs;
    }
    costs[i] = total_us / repetitions;
    x.clear();
    for (const auto& t : next) x.push_back(t.detach());
  }
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved);
  }
  if (world && world->size() > 1) {
    // Every rank splits by rank 0's figures: a partition must be the same everywhere.
    auto mine = at::tensor(costs, at::TensorOptions().dtype(at::kDouble));
    auto all = at::empty({mine.numel() * world->size()}, mine.options());
    world->all_gather(mine, all)->wait(std::chrono::milliseconds(60000));
    for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = all[static_cast<std::int64_t>(i)].item<double>();
  }
  for (std::size_t i = 0; i < costs.size(); ++i) layers[i].cost = std::max(costs[i], 1e-3);
  return costs;
}

// ---- schedules -----------------------------------------------------------------------------

Schedule forward_only(const Schedule& training) {
  Schedule s = training;
  s.name = training.name + "/forward-only";
  for (auto& program : s.programs)
    for (auto& step : program)
      step.erase(std::remove_if(step.begin(), step.end(),
                                [](const Instruction& i) {
                                  return !(i.op == Op::LoadMicroBatch || i.op == Op::ForwardPass ||
                                           i.op == Op::SendActivation || i.op == Op::RecvActivation);
                                }),
                 step.end());
  return s;
}

// ---- PipelineEngine ------------------------------------------------------------------------

namespace {

int pipeline_ranks_of(const Transport& world, int data_parallel) {
  if (data_parallel < 1) throw UsageError(fmt::format("data_parallel {}: must be at least 1", data_parallel));
  if (world.size() % data_parallel != 0)
    throw UsageError(fmt::format("data_parallel {} does not divide the world size {}", data_parallel, world.size()));
  return world.size() / data_parallel;
}

Schedule schedule_by_name(const std::string& name, int pipeline_ranks, int micro_batches, int chunks) {
  ScheduleParams params;
  params.num_ranks = pipeline_ranks;
  params.num_micro_batches = micro_batches;
  params.chunks = chunks;
  params.chunks_given = chunks != 1;
  return make_schedule(name, params);
}

}  // namespace

PipelineEngine::PipelineEngine(PipelineModule module, const std::string& schedule, Transport& world,
                               EngineOptions options)
    : PipelineEngine(std::move(module),
                     schedule_by_name(schedule, pipeline_ranks_of(world, options.data_parallel), options.micro_batches,
                                      options.chunks),
                     world, options) {
  schedule_by_name_ = true;
  schedule_name_ = schedule;
}

PipelineEngine::PipelineEngine(PipelineModule module, Schedule schedule, Transport& world, EngineOptions options)
    : module_(std::move(module)), schedule_(std::move(schedule)), world_(world), options_(std::move(options)) {
  start(std::nullopt);
}

PipelineEngine::PipelineEngine(PipelineModule module, Schedule schedule, Partition partition, Transport& world,
                               EngineOptions options)
    : module_(std::move(module)), schedule_(std::move(schedule)), world_(world), options_(std::move(options)) {
  start(std::move(partition));
}

// The one path every constructor takes: the schedule checked against the world, the model split
// (unless the caller split it), skip routes, the grid position, then the runtime with the
// runtime's part of the options as they are.
void PipelineEngine::start(std::optional<Partition> given_partition) {
  if (options_.retain_freed_cpu_memory) retain_freed_cpu_memory();
  const int pipeline_ranks = pipeline_ranks_of(world_, options_.data_parallel);
  if (schedule_.num_ranks != pipeline_ranks)
    throw UsageError(
        fmt::format("schedule '{}' is for {} pipeline ranks, but the world has {} rank(s) and data_parallel {}, so {}",
                    schedule_.name, schedule_.num_ranks, world_.size(), options_.data_parallel, pipeline_ranks));
  validate(schedule_);
  if (module_.num_layers() == 0) throw UsageError("the model has no layers");
  if (options_.loss) module_.spec().loss = options_.loss;
  if (!module_.spec().loss)
    throw UsageError("the model has no loss function (PipelineModule::set_loss or EngineOptions::loss)");

  split_into_stages(std::move(given_partition));
  skip_routes_ = exec::skip_routes(module_.spec(), partition_, schedule_.stage_to_rank);
  if (!skip_routes_.empty() && options_.activation_checkpoint_interval > 0)
    throw UsageError(
        fmt::format("activation checkpointing (every {} layers) cannot recompute layers that stash or pop skip tensors "
                    "(skip '{}'); turn one of them off",
                    options_.activation_checkpoint_interval, skip_routes_.front().name));
  schedule_ = with_skip_transfers(schedule_, skip_routes_);

  position_.pipeline_ranks = pipeline_ranks;
  position_.num_replicas = options_.data_parallel;
  position_.replica = world_.rank() / pipeline_ranks;
  position_.pipe_rank = world_.rank() % pipeline_ranks;
  check_compute_dtype(options_.dtype, options_.device ? options_.device->device() : at::Device(at::kCPU));
  // fp16 needs loss scaling (GradScaler's); other dtypes take it when asked.
  options_.loss_scaling = options_.loss_scaling || options_.dtype == at::kHalf;
  check_same_dtype_everywhere();
  runtime_ = std::make_unique<PipelineRuntime>(module_.spec(), schedule_, partition_, world_, position_,
                                               static_cast<const RuntimeOptions&>(options_));
  rebuild_eval_schedule();
}

// The caller's partition, or one by split points or by the partition method; either way one
// non-empty range of layers per stage of the schedule, and the loss on the last.
void PipelineEngine::split_into_stages(std::optional<Partition> given_partition) {
  const int num_stages = schedule_.num_stages;
  if (given_partition) {
    partition_ = std::move(*given_partition);
    const bool fits = partition_.num_stages() == num_stages && partition_.bounds.front() == 0 &&
                      partition_.bounds.back() == module_.num_layers();
    if (!fits)
      throw UsageError(fmt::format(
          "the partition with bounds [{}] does not split the model's {} layers into schedule '{}''s {} stages",
          fmt::join(partition_.bounds, ", "), module_.num_layers(), schedule_.name, num_stages));
  } else if (!options_.split_points.empty()) {
    partition_ = module_.split_at(options_.split_points);
    if (partition_.num_stages() != num_stages)
      throw UsageError(fmt::format("split points [{}] make {} stages, but schedule '{}' has {} stages",
                                   fmt::join(options_.split_points, ", "), partition_.num_stages(), schedule_.name,
                                   num_stages));
  } else {
    partition_ = module_.partition(num_stages, options_.partition);
  }
  for (int s = 0; s < partition_.num_stages(); ++s)
    if (partition_.bounds[s] >= partition_.bounds[s + 1])
      throw UsageError(fmt::format("the model's {} layers cannot be split into {} non-empty stages (stage {} is empty)",
                                   module_.num_layers(), num_stages, s));
  if (options_.loss_stage >= 0 && options_.loss_stage != num_stages - 1) {
    const auto& layers = module_.spec().layers;
    const auto bound = [this](int index) {
      return static_cast<std::size_t>(partition_.bounds.at(static_cast<std::size_t>(index)));
    };
    throw UsageError(fmt::format(
        "the loss function is given for stage {} (layers '{}' .. '{}'), but only the last stage, {}, can compute it: "
        "the output of stage {} still goes through layers '{}' .. '{}'",
        options_.loss_stage, layers.at(bound(options_.loss_stage)).name,
        layers.at(bound(options_.loss_stage + 1) - 1).name, num_stages - 1, options_.loss_stage,
        layers.at(bound(options_.loss_stage + 1)).name, layers.back().name));
  }
}

void PipelineEngine::check_same_dtype_everywhere() {
  const std::vector<double> dtypes = gather_doubles({static_cast<double>(options_.dtype)}, "dtype check");
  for (int r = 0; r < world_.size(); ++r) {
    const auto theirs = static_cast<at::ScalarType>(static_cast<int>(dtypes[static_cast<std::size_t>(r)]));
    if (theirs != options_.dtype)
      throw UsageError(
          fmt::format("dtype: rank {} computes in {}, rank {} in {}: every rank must be given the same dtype",
                      world_.rank(), compute_dtype_name(options_.dtype), r, compute_dtype_name(theirs)));
  }
}

PipelineEngine::~PipelineEngine() = default;

void PipelineEngine::rebuild_eval_schedule() {
  const int p = position_.pipeline_ranks;
  if (!options_.eval_schedule.empty()) {
    eval_schedule_ = schedule_by_name(options_.eval_schedule, p, schedule_.num_micro_batches, options_.chunks);
    if (!eval_schedule_.is_training() && eval_schedule_.stage_to_rank == schedule_.stage_to_rank)
      eval_schedule_ = with_skip_transfers(eval_schedule_, skip_routes_);
    if (eval_schedule_.is_training())
      throw UsageError(
          fmt::format("eval schedule '{}' has backwards: eval_batch runs forwards only", options_.eval_schedule));
    if (eval_schedule_.stage_to_rank != schedule_.stage_to_rank)
      throw UsageError(fmt::format("eval schedule '{}' places stages on ranks [{}], the training schedule '{}' on [{}]",
                                   options_.eval_schedule, fmt::join(eval_schedule_.stage_to_rank, ", "),
                                   schedule_.name, fmt::join(schedule_.stage_to_rank, ", ")));
    validate(eval_schedule_);
    return;
  }
  // DeepSpeed's InferenceSchedule where its placement (one stage per rank) is the training one.
  bool one_stage_per_rank = schedule_.num_stages == p;
  for (int s = 0; one_stage_per_rank && s < schedule_.num_stages; ++s)
    one_stage_per_rank = schedule_.stage_to_rank[s] == s;
  if (one_stage_per_rank && p > 1) {
    try {
      eval_schedule_ = schedule_by_name("deepspeed-inference", p, schedule_.num_micro_batches, 1);
      if (!eval_schedule_.is_training() && eval_schedule_.stage_to_rank == schedule_.stage_to_rank) {
        eval_schedule_ = with_skip_transfers(eval_schedule_, skip_routes_);
        return;
      }
    } catch (const ScheduleError&) {
      // Not for these ranks and micro-batches: the forwards of the training schedule serve.
    }
  }
  eval_schedule_ = forward_only(schedule_);
}

double PipelineEngine::train_batch(const MicroBatchSource& data) {
  if (!data) throw UsageError("train_batch: no data source (pass one or call set_data_loader)");
  if (!schedule_.is_training())
    throw UsageError(
        fmt::format("schedule '{}' has no backward: train with a training schedule (eval_batch runs the forwards)",
                    schedule_.name));
  StepRequest request;
  request.schedule = &schedule_;
  request.data = &data;
  last_step_ = runtime_->run_step(global_steps_, request);
  ++global_steps_;
  // The loss is known on the last stage's rank(s); every rank returns the mean.
  auto sums = at::tensor(std::vector<double>{last_step_.loss_sum, static_cast<double>(last_step_.loss_count)},
                         at::TensorOptions().dtype(at::kDouble));
  try {
    world_.all_reduce_sum(sums)->wait(options_.timeout);
  } catch (const std::exception& e) {
    throw RuntimeError(
        fmt::format("rank {}: step {}: loss exchange: {}", world_.rank(), global_steps_ - 1, first_line(e.what())));
  }
  const double count = sums[1].item<double>();
  return count > 0 ? sums[0].item<double>() / count : 0.0;
}

double PipelineEngine::train_batch() { return train_batch(data_loader_); }

void PipelineEngine::set_data_loader(MicroBatchSource data) { data_loader_ = std::move(data); }

EvalResult PipelineEngine::eval_batch(const MicroBatchSource& data, bool return_outputs) {
  if (!data) throw UsageError("eval_batch: no data source");
  StepRequest request;
  request.schedule = &eval_schedule_;
  request.data = &data;
  request.keep_outputs = return_outputs;
  StepResult result = runtime_->run_step(global_steps_, request);
  ++eval_steps_;
  auto sums = at::tensor(std::vector<double>{result.loss_sum, static_cast<double>(result.loss_count)},
                         at::TensorOptions().dtype(at::kDouble));
  try {
    world_.all_reduce_sum(sums)->wait(options_.timeout);
  } catch (const std::exception& e) {
    throw RuntimeError(
        fmt::format("rank {}: evaluation {}: loss exchange: {}", world_.rank(), eval_steps_ - 1, first_line(e.what())));
  }
  EvalResult out;
  if (sums[1].item<double>() > 0) out.loss = sums[0].item<double>() / sums[1].item<double>();
  if (return_outputs && is_last_stage()) out.outputs = std::move(result.outputs);
  return out;
}

void PipelineEngine::set_micro_batches(int micro_batches) {
  if (!schedule_by_name_)
    throw UsageError(
        fmt::format("set_micro_batches: schedule '{}' was given as a value; build the engine from a schedule name "
                    "to change its micro-batches",
                    schedule_.name));
  Schedule next = schedule_by_name(schedule_name_, position_.pipeline_ranks, micro_batches, options_.chunks);
  if (next.stage_to_rank != schedule_.stage_to_rank)
    throw UsageError(fmt::format("set_micro_batches {}: schedule '{}' would place the stages differently",
                                 micro_batches, schedule_name_));
  next = with_skip_transfers(next, skip_routes_);
  validate(next);
  schedule_ = std::move(next);
  rebuild_eval_schedule();
}

const StepResult& PipelineEngine::train_synthetic_batch() {
  StepRequest request;
  request.first_sample = data_position_ + static_cast<std::int64_t>(position_.replica) * schedule_.num_micro_batches;
  return run_training_step(request);
}

const StepResult& PipelineEngine::train_replica_batch(const MicroBatchSource& data) {
  if (!data) throw UsageError("train_replica_batch: no data source");
  StepRequest request;
  request.data = &data;
  return run_training_step(request);
}

const StepResult& PipelineEngine::run_training_step(const StepRequest& request) {
  last_step_ = runtime_->run_step(global_steps_, request);
  ++global_steps_;
  data_position_ += static_cast<std::int64_t>(schedule_.num_micro_batches) * options_.data_parallel;
  return last_step_;
}

CheckpointLayout PipelineEngine::checkpoint_layout() {
  CheckpointLayout layout;
  layout.model = module_.spec().config.name;
  layout.layers = module_.num_layers();
  layout.world_size = world_.size();
  layout.data_parallel = options_.data_parallel;
  layout.schedule = schedule_.name;
  layout.partition = partition_.bounds;
  layout.stage_to_rank = schedule_.stage_to_rank;
  // Every rank builds its optimizers from the same factory: rank 0's answer is everyone's, but
  // a rank without parameters has none to ask, so the ranks agree on it.
  const std::vector<double> by_layer =
      gather_doubles({optimizer_state_by_layer(*runtime_) ? 1.0 : 0.0}, "checkpoint layout");
  layout.optimizer_state_by_layer = std::all_of(by_layer.begin(), by_layer.end(), [](double v) { return v != 0; });
  return layout;
}

void PipelineEngine::save_checkpoint(const std::string& dir, const nlohmann::json& identity) {
  CheckpointRecord saved;
  saved.position = {global_steps_, data_position_};
  saved.layout = checkpoint_layout();
  const RankFileRecord mine = save_rank_checkpoint(dir, saved.position, world_.rank(), *runtime_);
  // Every rank's file is on disk, and rank 0 has what the manifest records of each, before the
  // manifest names the checkpoint.
  const std::vector<double> records =
      gather_doubles({static_cast<double>(mine.bytes), static_cast<double>(mine.crc32)}, "checkpoint files");
  saved.rank_files.emplace();
  for (int r = 0; r < world_.size(); ++r)
    saved.rank_files->push_back(
        {static_cast<std::int64_t>(records[2 * r]), static_cast<std::uint32_t>(records[2 * r + 1])});
  // No rank goes on before the manifest names the checkpoint (a caller may read it next), and a
  // failed commit on rank 0 fails the call everywhere rather than leaving the others waiting.
  std::string commit_error;
  if (world_.rank() == 0) {
    try {
      commit_checkpoint(dir, saved, world_.size(), identity);
    } catch (const std::exception& e) {
      commit_error = first_line(e.what());
    }
  }
  const std::vector<double> failed = gather_doubles({commit_error.empty() ? 0.0 : 1.0}, "checkpoint commit");
  if (!commit_error.empty())
    throw RuntimeError(fmt::format("rank 0: checkpoint {}: {}", checkpoint_subdir(saved.position.step), commit_error));
  if (failed[0] != 0)
    throw RuntimeError(fmt::format("rank {}: checkpoint {}: rank 0 could not write the manifest", world_.rank(),
                                   checkpoint_subdir(saved.position.step)));
}

CheckpointChoice PipelineEngine::load_checkpoint(const std::string& dir, const Manifest& manifest) {
  // Every rank checks the files it would read of every listed checkpoint (its own, or on another
  // layout those that hold its layers); all then take the newest that no rank found damaged, so
  // they load the same one.
  const CheckpointLayout here = checkpoint_layout();
  const std::vector<CheckpointRecord>& listed = manifest.checkpoints;
  auto problem_of = [&](const CheckpointRecord& checkpoint, int rank) -> std::optional<std::string> {
    for (int source : checkpoint_source_ranks(checkpoint, here, rank))
      if (auto problem = rank_file_problem(dir, checkpoint, source, true)) return problem;
    return std::nullopt;
  };
  std::vector<double> mine(listed.size(), 0.0);
  for (std::size_t i = 0; i < listed.size(); ++i)
    mine[i] = !layout_refusal(dir, listed[i], here) && problem_of(listed[i], world_.rank()) ? 1.0 : 0.0;
  const std::vector<double> damaged = gather_doubles(mine, "checkpoint check");
  CheckpointChoice choice;
  for (std::size_t i = listed.size(); i-- > 0;) {
    // A checkpoint this run cannot take (another model) is refused, not passed over.
    if (const auto refusal = layout_refusal(dir, listed[i], here)) throw UsageError(*refusal);
    int first_bad = -1;
    for (int r = 0; r < world_.size() && first_bad < 0; ++r)
      if (damaged[static_cast<std::size_t>(r) * listed.size() + i] != 0) first_bad = r;
    if (first_bad < 0) {
      const CheckpointPosition at = load_rank_checkpoint(dir, listed[i], here, world_.rank(), *runtime_);
      global_steps_ = at.step;
      data_position_ = at.data_position;
      choice.loaded = at;
      return choice;
    }
    // The folder is shared: the reason can be told here even when another rank found it.
    const auto reason = problem_of(listed[i], first_bad);
    choice.damaged.push_back(
        {listed[i].position.step, reason ? *reason : fmt::format("rank {} found its file damaged", first_bad)});
  }
  std::vector<std::string> reasons;
  for (const auto& d : choice.damaged) reasons.push_back(fmt::format("{}: {}", checkpoint_subdir(d.step), d.reason));
  throw UsageError(fmt::format("{}: no complete checkpoint to resume from ({})", dir, fmt::join(reasons, "; ")));
}

std::vector<double> PipelineEngine::gather_doubles(const std::vector<double>& mine, const char* what) {
  if (world_.size() == 1) return mine;
  auto input = at::tensor(mine, at::TensorOptions().dtype(at::kDouble));
  auto output = at::empty({input.numel() * world_.size()}, input.options());
  try {
    world_.all_gather(input, output)->wait(options_.timeout);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("rank {}: {}: {}", world_.rank(), what, first_line(e.what())));
  }
  return std::vector<double>(output.data_ptr<double>(), output.data_ptr<double>() + output.numel());
}

int PipelineEngine::train_batch_size() const {
  return options_.micro_batch_size * schedule_.num_micro_batches * options_.data_parallel;
}

void PipelineEngine::set_train_batch_size(int samples) {
  if (options_.micro_batch_size <= 0)
    throw UsageError("set_train_batch_size: EngineOptions::micro_batch_size is not set");
  const int per_step = options_.micro_batch_size * options_.data_parallel;
  if (samples <= 0 || samples % per_step != 0)
    throw UsageError(fmt::format("set_train_batch_size {}: not a multiple of micro_batch_size {} x data_parallel {}",
                                 samples, options_.micro_batch_size, options_.data_parallel));
  set_micro_batches(samples / per_step);
}

std::vector<int> PipelineEngine::stages() const { return runtime_->stages(); }

bool PipelineEngine::is_first_stage() const {
  const auto held = stages();
  return std::find(held.begin(), held.end(), 0) != held.end();
}

bool PipelineEngine::is_last_stage() const {
  const auto held = stages();
  return std::find(held.begin(), held.end(), schedule_.num_stages - 1) != held.end();
}

}  // namespace pipescope::exec
