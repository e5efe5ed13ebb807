// Time the hypervisor took from a rank's cores: on a virtual machine a virtual CPU that is due
// to run can wait while the host runs something else (the "steal" column of /proc/stat). A
// step during which that happened is slower for reasons outside the run, so pprun records it
// per rank and step (metrics and traces: stolen_time_s), calibration leaves such traces out
// and comparisons say when a measurement was disturbed. On this project's shared 2-core VM,
// runs of the same configuration lost 2% to 60% of their time this way, and their mean step
// followed it (docs/ACCURACY.md).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace pipescope::exec {

// Stolen seconds so far (since boot), the mean over `cores`, from the text of /proc/stat with
// its counters in ticks of `ticks_per_second`. nullopt when a core has no line or its line no
// steal column (kernels before 2.6.11, or not a virtual machine that reports it).
std::optional<double> stolen_seconds_of(std::string_view proc_stat, const std::vector<int>& cores, long ticks_per_second);

// The same, read from this machine's /proc/stat; nullopt where it cannot be read.
std::optional<double> stolen_seconds(const std::vector<int>& cores);

// Stolen time of a stretch of work on the cores this thread may run on: start(), then
// elapsed() gives the mean seconds stolen from each of those cores since. The kernel counts in
// ticks (10 ms on most systems), so one short step reads 0 or a tick; summed over steps the
// error does not add up (each reading is a difference of one running counter).
class StolenTimeMeter {
 public:
  StolenTimeMeter();  // the cores this thread may run on now (after any core binding)
  void start();
  std::optional<double> elapsed() const;

 private:
  std::vector<int> cores_;
  std::optional<double> started_;
};

}  // namespace pipescope::exec
