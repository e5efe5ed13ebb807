#include "pipescope/core/registry.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/generators.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/size_limits.hpp"

namespace pipescope {
namespace {

// A release version, 0.14 or 0.14.2 (a missing part is 0), compared part by part.
using ReleaseVersion = std::array<int, 3>;

std::optional<ReleaseVersion> parse_release(std::string_view text) {
  ReleaseVersion version{0, 0, 0};
  for (int& part : version) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), part);
    if (error != std::errc() || end == text.data() || part < 0) return std::nullopt;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    if (text.empty()) return version;
    if (text.front() != '.') return std::nullopt;
    text.remove_prefix(1);
  }
  return std::nullopt;  // a fourth part
}

struct Boundary {
  ReleaseVersion first_release;
  const GeneratorInfo* entry;
};

// The entries `FAMILY@B` of a family, oldest B first.
std::vector<Boundary> boundaries_of(const std::vector<GeneratorInfo>& entries, const std::string& family) {
  std::vector<Boundary> out;
  const std::string prefix = family + "@";
  for (const auto& e : entries)
    if (e.name.starts_with(prefix))
      if (const auto first = parse_release(std::string_view(e.name).substr(prefix.size()))) out.push_back({*first, &e});
  std::sort(out.begin(), out.end(),
            [](const Boundary& a, const Boundary& b) { return a.first_release < b.first_release; });
  return out;
}

}  // namespace

ScheduleRegistry& ScheduleRegistry::instance() {
  static ScheduleRegistry registry = [] {
    ScheduleRegistry r;
    register_builtin_generators(r);
    return r;
  }();
  return registry;
}

void ScheduleRegistry::add(GeneratorInfo info) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const GeneratorInfo& e) { return e.name == info.name; });
  if (it != entries_.end())
    *it = std::move(info);
  else
    entries_.push_back(std::move(info));
}

void ScheduleRegistry::add_release_family(std::string family, std::string newest_checked) {
  release_families_.push_back({std::move(family), std::move(newest_checked)});
}

const ScheduleRegistry::ReleaseFamily* ScheduleRegistry::family_of(std::string_view name) const {
  const std::size_t at = name.find('@');
  if (at == std::string_view::npos) return nullptr;
  for (const auto& f : release_families_)
    if (f.family == name.substr(0, at)) return &f;
  return nullptr;
}

const GeneratorInfo* ScheduleRegistry::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  const ReleaseFamily* family = family_of(name);
  if (!family) return nullptr;
  const auto wanted = parse_release(name.substr(family->family.size() + 1));
  if (!wanted || *wanted > parse_release(family->newest_checked).value_or(ReleaseVersion{})) return nullptr;
  const GeneratorInfo* found = nullptr;
  for (const Boundary& b : boundaries_of(entries_, family->family))
    if (b.first_release <= *wanted) found = b.entry;
  return found;
}

const ScheduleTraits* ScheduleRegistry::traits(std::string_view name) const {
  const GeneratorInfo* info = find(name);
  return info ? &info->traits : nullptr;
}

std::string ScheduleRegistry::why_unknown(std::string_view name) const {
  const ReleaseFamily* family = family_of(name);
  if (!family) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    return "unknown schedule '" + std::string(name) + "' (known: " + known + ", file:PATH)";
  }
  const std::string version(name.substr(family->family.size() + 1));
  const std::string prefix = std::string(name) + ": ";
  const auto wanted = parse_release(version);
  if (!wanted) return prefix + "'" + version + "' is not a release version (write it as 0.14 or 0.14.2)";
  if (*wanted > parse_release(family->newest_checked).value_or(ReleaseVersion{}))
    return prefix + "release " + version + " is newer than the newest one checked, " + family->newest_checked +
           " (plain '" + family->family + "' means that one)";
  const std::vector<Boundary> known = boundaries_of(entries_, family->family);
  return prefix + "release " + version + " is older than the oldest one reproduced" +
         (known.empty() ? std::string() : ", " + known.front().entry->name);
}

std::vector<std::string> ScheduleRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

namespace {

// The generator NAME names, after the checks every generator shares.
const GeneratorInfo& checked_generator(std::string_view name, const ScheduleParams& params) {
  const GeneratorInfo* info = ScheduleRegistry::instance().find(name);
  if (!info) throw ScheduleError(ScheduleRegistry::instance().why_unknown(name));
  if (params.num_ranks < 1) throw ScheduleError(info->name + ": --stages must be at least 1");
  if (params.num_micro_batches < 1) throw ScheduleError(info->name + ": --micro-batches must be at least 1");
  if (params.chunks < 1) throw ScheduleError(info->name + ": --chunks must be at least 1");
  if (params.microbatch_group_size < 0)
    throw ScheduleError(info->name + ": --microbatch-group-size-per-vp-stage must be at least 1");
  if (params.microbatch_group_size != 0 && !info->traits.takes_microbatch_group_size)
    throw ScheduleError(info->name + ": --microbatch-group-size-per-vp-stage " +
                        std::to_string(params.microbatch_group_size) +
                        " cannot be honoured: only Megatron's interleaved schedule (interleaved-1f1b) groups "
                        "micro-batches per chunk (leave it out)");
  // Megatron's interleaved schedules, the ones that take its group size, alone run the overlap's
  // extra warm-up forward.
  if (params.overlap_moe_expert_parallel_comm && !info->traits.takes_microbatch_group_size)
    throw ScheduleError(info->name +
                        ": --overlap-moe-expert-parallel-comm cannot be honoured: only Megatron's interleaved schedule "
                        "(interleaved-1f1b) runs its extra warm-up forward");
  // Every schedule holds at least this many stages; the generators check their own placement.
  const std::int64_t stages = saturating_product(params.num_ranks, params.chunks);
  check_schedule_size(info->name + ": --stages " + std::to_string(params.num_ranks) +
                          (params.chunks != 1 ? " x --chunks " + std::to_string(params.chunks) : std::string()) +
                          " x --micro-batches " + std::to_string(params.num_micro_batches),
                      estimated_size(params.num_ranks, stages, params.num_micro_batches));
  return *info;
}

}  // namespace

Schedule make_schedule(std::string_view name, const ScheduleParams& params) {
  if (name.starts_with("file:")) return read_schedule_file(std::string(name.substr(5)));
  return checked_generator(name, params).make(params);
}

std::optional<ComputeOrder> make_compute_order(std::string_view name, const ScheduleParams& params) {
  if (name.starts_with("file:")) return std::nullopt;
  const GeneratorInfo& info = checked_generator(name, params);
  if (!info.make_order) return std::nullopt;
  return info.make_order(params);
}

}  // namespace pipescope
