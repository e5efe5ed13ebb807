// One rule for options that contradict a file (core/option_conflicts.hpp). Scenario: a file:
// schedule of 2 ranks, 4 stages (2 per rank) and 4 micro-batches. Expected: sizes left out or
// equal to the file's pass; --micro-batches 8, --stages 3 and --chunks 1 are refused naming the
// option, its value, the file and the file's value; a generated schedule ("1f1b") is never checked.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/option_conflicts.hpp"

using namespace pipescope;

TEST_CASE("a size that contradicts a schedule file is refused, naming both", "[option_conflicts]") {
  Schedule file;
  file.num_ranks = 2;
  file.num_stages = 4;
  file.num_micro_batches = 4;
  CHECK_NOTHROW(check_sizes_agree_with_file(file, "file:s.json", {}));
  CHECK_NOTHROW(check_sizes_agree_with_file(file, "file:s.json", {.stages = 2, .micro_batches = 4, .chunks = 2}));
  CHECK_THROWS_MATCHES(check_sizes_agree_with_file(file, "file:s.json", {.stages = {}, .micro_batches = 8, .chunks = {}}), UsageError,
                       Catch::Message("--micro-batches 8 contradicts the schedule file s.json, which has 4 micro-batches "
                                      "(leave --micro-batches out)"));
  CHECK_THROWS_WITH(check_sizes_agree_with_file(file, "file:s.json", {.stages = 3, .micro_batches = {}, .chunks = {}}),
                    Catch::Contains("--stages 3 contradicts the schedule file s.json, which has 2 ranks"));
  CHECK_THROWS_WITH(check_sizes_agree_with_file(file, "file:s.json", {.stages = {}, .micro_batches = {}, .chunks = 1}),
                    Catch::Contains("--chunks 1 contradicts the schedule file s.json, which has 4 stages on 2 ranks"));
  CHECK_NOTHROW(check_sizes_agree_with_file(file, "1f1b", {.stages = {}, .micro_batches = 8, .chunks = {}}));
  CHECK(contradiction("--nproc-per-node", "2", "the environment", "WORLD_SIZE=1") ==
        "--nproc-per-node 2 contradicts the environment, which has WORLD_SIZE=1 (leave --nproc-per-node out)");
}
