// Golden compute grids: for p=4, m=8 (and v=2 for the looping and V schedules) the
// unit-time grid of every lowered generator, written as torch's compute-only CSV (one row
// per rank, one cell per slot, an empty cell for an idle slot), the format torch's
// `_load_csv` reads. The files in tests/golden/schedules/ were checked by hand against the
// orders spelled out in test_generators_basic/looping/zero_bubble.cpp (1F1B: rank 3 starts
// in column 3 and rank 0 waits columns 4..6 for 0B0; 22 columns; ZB-H1: 27 columns, ...).
// A deliberate change of a generator regenerates them with
//   PIPESCOPE_UPDATE_GOLDEN=1 build/tests/test_core "[golden]"
// after which the diff is to be reviewed like code.
#include <cstdlib>
#include <filesystem>

#include "test_generators_support.hpp"

#include "pipescope/core/atomic_file.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

std::string compute_csv(const ComputeOrder& order) {
  const Schedule grid = unit_grid(order);
  std::string csv;
  for (const Program& program : grid.programs) {
    for (std::size_t t = 0; t < program.size(); ++t) {
      if (t > 0) csv += ',';
      if (!program[t].empty()) csv += to_string(program[t].front());
    }
    csv += '\n';
  }
  return csv;
}

}  // namespace

TEST_CASE("generators reproduce their golden compute grids", "[generators][golden]") {
  const std::vector<std::pair<std::string, ComputeOrder>> cases = {
      {"gpipe_p4_m8", gpipe_order(params(4, 8))},
      {"1f1b_p4_m8", one_f_one_b_order(params(4, 8))},
      {"zb-h1_p4_m8", zb_h1_order(params(4, 8))},
      {"zb-h2_p4_m8", zb_h2_order(params(4, 8))},
      {"interleaved-1f1b_p4_m8_v2", interleaved_1f1b_order(params(4, 8, 2, true))},
      {"looped-bfs_p4_m8_v2", looped_bfs_order(params(4, 8, 2, true))},
      {"zbv_p4_m8_v2", zbv_order(params(4, 8, 2, true))},
      {"dualpipev_p4_m8_v2", dualpipev_order(params(4, 8, 2, true))},
  };
  const std::filesystem::path dir = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/schedules";
  const bool update = std::getenv("PIPESCOPE_UPDATE_GOLDEN") != nullptr;
  for (const auto& [name, order] : cases) {
    INFO(name);
    const std::string path = (dir / (name + ".csv")).string();
    const std::string ours = compute_csv(order);
    if (update) {
      std::filesystem::create_directories(dir);
      write_file_atomic(path, ours);
      WARN("rewrote " << path);
    }
    CHECK(ours == read_file(path));
  }
}
