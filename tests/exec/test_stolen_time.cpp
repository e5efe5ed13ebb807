// Stolen time (stolen_time.hpp): the hypervisor's share of a rank's cores from /proc/stat.
// Expected:
// - From a /proc/stat text: the steal column (the 8th number of a "cpuN" line) of the cores
//   asked for, in seconds at the given tick rate, the mean over those cores; "cpu1" is not
//   "cpu10"; a core without a line, a line cut before its steal column or a garbled number:
//   nullopt (unknown, never a wrong number); no cores: nullopt.
// - On this machine: the cores' counter never runs backwards, and a meter started and read at
//   once reports a difference (well under a second), not the counter since boot.
#include <catch2/catch.hpp>

#include <string>

#include "pprun/core_binding.hpp"
#include "pprun/stolen_time.hpp"

using namespace pipescope::exec;

namespace {
const std::string kProcStat =
    "cpu  8508788 331351 738281 2158195 48274 0 8721 388265 0 0\n"
    "cpu0 4254394 165675 369140 1079097 24137 0 4360 200 0 0\n"
    "cpu1 4254394 165676 369141 1079098 24137 0 4361 300 0 0\n"
    "cpu10 1 2 3 4 5 6 7 9999 0 0\n"
    "cpu11 1 2 3 4 5 6 7\n"
    "cpu12 1 2 3 4 5 6 7 x8 0 0\n"
    "intr 123 4 5\n"
    "ctxt 99\n";
}  // namespace

TEST_CASE("stolen_seconds_of reads the steal column of the cores asked for") {
  CHECK(stolen_seconds_of(kProcStat, {0}, 100) == Approx(2.0));
  CHECK(stolen_seconds_of(kProcStat, {1}, 100) == Approx(3.0));
  CHECK(stolen_seconds_of(kProcStat, {0, 1}, 100) == Approx(2.5));  // the mean over the cores
  CHECK(stolen_seconds_of(kProcStat, {1}, 1000) == Approx(0.3));
  CHECK(stolen_seconds_of(kProcStat, {10}, 100) == Approx(99.99));  // "cpu1" is not "cpu10"
}

TEST_CASE("stolen_seconds_of says unknown rather than guess") {
  CHECK_FALSE(stolen_seconds_of(kProcStat, {2}, 100));      // no line for core 2
  CHECK_FALSE(stolen_seconds_of(kProcStat, {0, 2}, 100));   // one core unknown: all unknown
  CHECK_FALSE(stolen_seconds_of(kProcStat, {11}, 100));     // no steal column
  CHECK_FALSE(stolen_seconds_of(kProcStat, {12}, 100));     // not a number
  CHECK_FALSE(stolen_seconds_of(kProcStat, {}, 100));
  CHECK_FALSE(stolen_seconds_of(kProcStat, {0}, 0));
  CHECK_FALSE(stolen_seconds_of("", {0}, 100));
}

TEST_CASE("stolen time of this machine's cores only grows") {
  const auto cores = allowed_cores();
  const auto before = stolen_seconds(cores);
  REQUIRE(before);  // Linux has had the steal column since 2.6.11; 0 outside a virtual machine
  CHECK(*before >= 0);
  const auto after = stolen_seconds(cores);
  REQUIRE(after);
  CHECK(*after >= *before);
  StolenTimeMeter meter;
  CHECK_FALSE(meter.elapsed());  // not started
  meter.start();
  const auto elapsed = meter.elapsed();
  REQUIRE(elapsed);
  CHECK(*elapsed >= 0);
  // A difference, not the counter since boot: a tick or so between two reads in a row (more
  // only if the host held this virtual CPU for long just then).
  CHECK(*elapsed < 1.0);
}
