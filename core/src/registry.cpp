#include "pipescope/core/registry.hpp"

#include <algorithm>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/size_limits.hpp"

namespace pipescope {

ScheduleRegistry& ScheduleRegistry::instance() {
  static ScheduleRegistry registry = [] {
    ScheduleRegistry r;
    register_builtin_generators(r);
    return r;
  }();
  return registry;
}

void ScheduleRegistry::add(GeneratorInfo info) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const GeneratorInfo& e) { return e.name == info.name; });
  if (it != entries_.end())
    *it = std::move(info);
  else
    entries_.push_back(std::move(info));
}

const GeneratorInfo* ScheduleRegistry::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<std::string> ScheduleRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

Schedule make_schedule(std::string_view name, const ScheduleParams& params) {
  if (name.starts_with("file:")) return read_schedule_file(std::string(name.substr(5)));
  const GeneratorInfo* info = ScheduleRegistry::instance().find(name);
  if (!info) {
    std::string known;
    for (const auto& n : ScheduleRegistry::instance().names()) known += (known.empty() ? "" : ", ") + n;
    throw ScheduleError("unknown schedule '" + std::string(name) + "' (known: " + known + ", file:PATH)");
  }
  if (params.num_ranks < 1) throw ScheduleError(info->name + ": --stages must be at least 1");
  if (params.num_micro_batches < 1) throw ScheduleError(info->name + ": --micro-batches must be at least 1");
  if (params.chunks < 1) throw ScheduleError(info->name + ": --chunks must be at least 1");
  // Every schedule holds at least this many stages; the generators check their own placement.
  const std::int64_t stages = saturating_product(params.num_ranks, params.chunks);
  check_schedule_size(info->name + ": --stages " + std::to_string(params.num_ranks) +
                          (params.chunks != 1 ? " x --chunks " + std::to_string(params.chunks) : std::string()) +
                          " x --micro-batches " + std::to_string(params.num_micro_batches),
                      estimated_size(params.num_ranks, stages, params.num_micro_batches));
  return info->make(params);
}

}  // namespace pipescope
