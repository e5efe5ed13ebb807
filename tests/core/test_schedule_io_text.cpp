// The step x rank text grid: header row of ranks, one row per step, compute first in a cell,
// idle slots as '.', a finished rank blank, columns aligned, no trailing spaces. For inference
// on 2 ranks x 2 micro-batches the grid is exactly the 4 lines below.
#include <catch2/catch.hpp>

#include "pipescope/core/schedule_io.hpp"
#include "test_validator_support.hpp"

using namespace pipescope;

TEST_CASE("text grid of a small schedule") {
  const Schedule schedule = testing::make_schedule_from_text(
      2, {0, 1}, {{"0F0 0SEND_F0", "0F1 0SEND_F1"}, {"", "1RECV_F0 1F0", "1RECV_F1 1F1"}});
  CHECK(to_text_grid(schedule) ==
        "step  rank 0        rank 1\n"
        "   0  0F0 0SEND_F0  .\n"
        "   1  0F1 0SEND_F1  1F0 1RECV_F0\n"
        "   2                1F1 1RECV_F1\n");
}

TEST_CASE("text grid columns stay aligned with wide cells and many steps") {
  Schedule schedule = testing::make_schedule_from_text(1, {0}, {{"0LOAD0 0F0 0B0 0REDUCE_GRAD 0OPTIMIZER"}});
  for (int i = 0; i < 11; ++i) schedule.programs[0].push_back({});
  const std::string grid = to_text_grid(schedule);
  CHECK(grid.substr(0, grid.find('\n')) == "step  rank 0");
  CHECK(grid.find("\n   0  0F0 0B0 0LOAD0 0REDUCE_GRAD 0OPTIMIZER\n") != std::string::npos);
  CHECK(grid.find("\n  11  .\n") != std::string::npos);
}
