#include "pprun/stolen_time.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

#include "pprun/core_binding.hpp"

namespace pipescope::exec {
namespace {

// The steal column of /proc/stat's "cpuN" line: user nice system idle iowait irq softirq steal.
constexpr int kStealColumn = 8;

std::optional<long long> steal_ticks_of_core(std::string_view proc_stat, int core) {
  const std::string label = "cpu" + std::to_string(core) + " ";
  std::size_t at = 0;
  while (at < proc_stat.size()) {
    std::size_t end = proc_stat.find('\n', at);
    if (end == std::string_view::npos) end = proc_stat.size();
    std::string_view line = proc_stat.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(label)) continue;
    long long value = 0;
    for (int column = 0; column < kStealColumn; ++column) {
      const std::size_t field = line.find_first_not_of(' ', column == 0 ? label.size() : 0);
      if (field == std::string_view::npos) return std::nullopt;
      line.remove_prefix(field);
      const auto [next, error] = std::from_chars(line.data(), line.data() + line.size(), value);
      if (error != std::errc{}) return std::nullopt;
      line.remove_prefix(static_cast<std::size_t>(next - line.data()));
    }
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> stolen_seconds_of(std::string_view proc_stat, const std::vector<int>& cores, long ticks_per_second) {
  if (cores.empty() || ticks_per_second <= 0) return std::nullopt;
  long long ticks = 0;
  for (int core : cores) {
    const auto steal = steal_ticks_of_core(proc_stat, core);
    if (!steal) return std::nullopt;
    ticks += *steal;
  }
  return static_cast<double>(ticks) / static_cast<double>(ticks_per_second) / static_cast<double>(cores.size());
}

std::optional<double> stolen_seconds(const std::vector<int>& cores) {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return stolen_seconds_of(text.str(), cores, sysconf(_SC_CLK_TCK));
}

StolenTimeMeter::StolenTimeMeter() : cores_(thread_cores(0)) {}

void StolenTimeMeter::start() { started_ = stolen_seconds(cores_); }

std::optional<double> StolenTimeMeter::elapsed() const {
  if (!started_) return std::nullopt;
  const auto now = stolen_seconds(cores_);
  if (!now) return std::nullopt;
  return *now - *started_;
}

}  // namespace pipescope::exec
