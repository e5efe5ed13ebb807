// The expert-parallel groups and the all-to-all records of a run (expert_parallel.hpp).
#include "pipescope/exec/expert_parallel.hpp"

#include <fmt/format.h>

#include <cctype>

#include "pipescope/core/errors.hpp"
#include "runtime/device_time.hpp"

namespace pipescope::exec {

ExpertParallel::ExpertParallel(int size, int experts) : size_(size), experts_(experts) {
  if (size < 1) throw UsageError(fmt::format("option --expert-parallel: {} is below the minimum 1", size));
  if (experts < 1) throw UsageError(fmt::format("option --experts: {} is below the minimum 1", experts));
  if (experts % size != 0)
    throw UsageError(fmt::format("option --expert-parallel {}: does not divide --experts {}", size, experts));
}

void ExpertParallel::connect(Transport& world, int replica, int num_replicas, int pipe_rank, int pipeline_ranks,
                             std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  if (num_replicas % size_ != 0)
    throw UsageError(fmt::format("option --expert-parallel {}: does not divide the data-parallel size {} (--dp)", size_,
                                 num_replicas));
  rank_ = replica % size_;
  if (size_ == 1) return;
  // Megatron's order: the expert-parallel group is the innermost part of the data-parallel one.
  const int first_replica = replica - rank_;
  group_world_ranks_.clear();
  for (int d = first_replica; d < first_replica + size_; ++d)
    group_world_ranks_.push_back(d * pipeline_ranks + pipe_rank);
  group_ = world.subgroup(group_world_ranks_, fmt::format("ep{}-{}", pipe_rank, first_replica / size_));
  backward_group_ =
      world.subgroup(group_world_ranks_, fmt::format("ep{}-{}-backward", pipe_rank, first_replica / size_));
  if (num_replicas / size_ > 1) {
    std::vector<int> members;
    for (int d = rank_; d < num_replicas; d += size_) members.push_back(d * pipeline_ranks + pipe_rank);
    expert_data_parallel_ = world.subgroup(members, fmt::format("edp{}-{}", pipe_rank, rank_));
  }
}

std::unique_ptr<DeviceTiming> ExpertParallel::start_device_timing() const {
  return device_ ? device_->start_timing() : nullptr;
}

void ExpertParallel::record(AllToAllRecord record, std::unique_ptr<DeviceTiming> timing, bool keeps_start) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(std::move(record));
  device_spans_.push_back({std::move(timing), keeps_start});
}

std::vector<AllToAllRecord> ExpertParallel::take_records() {
  std::vector<AllToAllRecord> out;
  std::vector<DeviceSpan> spans;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(records_);
    spans.swap(device_spans_);
  }
  // Outside the lock: reading a device span waits for the device to get there.
  for (std::size_t i = 0; i < out.size(); ++i)
    runtime::take_device_span(spans[i].timing.get(), out[i].start_us, out[i].end_us, spans[i].keeps_start);
  return out;
}

std::optional<int> expert_id_of(const std::string& name) {
  // "layer<L>.expert<ID>.<rest>": the layer's module "expert<ID>" (the shared expert is "shared_expert").
  const auto at = name.find(".expert");
  if (at == std::string::npos) return std::nullopt;
  std::size_t end = at + 7;
  int id = 0;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) id = id * 10 + (name[end++] - '0');
  if (end == at + 7 || (end < name.size() && name[end] != '.')) return std::nullopt;
  return id;
}

bool is_expert_parameter(const std::string& name) { return expert_id_of(name).has_value(); }

}  // namespace pipescope::exec
