// zb-auto against the Zero Bubble authors' own automatic schedulers
// (tests/golden/zero_bubble/README.md). Their greedy search, one stage per rank, on 252
// settings: p 2, 3, 4, 6, 8, 12, 16; m = p, 2p, 4p; (f, b, w) = (1, 1, 1), (1, 1.5, 0.5),
// (1, 2, 1); c = 0, 0.1; a limit of N = p or 2p micro-batches of activations per rank (F +2,
// B -1, W -1 bytes per micro-batch).
// - The authors' orders (tests/golden/zero_bubble/authors-zb.txt, written by their zb.py) are
//   replayed in the simulator with the same costs: each stays within its limit, and zb-auto's
//   schedule is never slower than it (p 6, m 12, f = b = w = 1, c = 0.1, N = 6: 43 both, where
//   zb-auto alone found 46.4) and never above the limit.
// - zb-auto's port of that scheduler gives the authors' order exactly, in the setting they kept.
// - V placement (zb-auto --chunks 2) against the authors' ZB-V, V-Half and V-Min
//   (tests/golden/zero_bubble/authors-v.txt), 180 settings: p 2, 3, 4, 6, 8; m = 2p, 4p; the same
//   costs per chunk; zb-auto's limit is the peak the authors' schedule reaches when replayed
//   ("at the same memory"): zb-auto is never slower and never above it, and its ports of ZB-V,
//   V-Half and V-Min give the authors' orders exactly (ZB-V with its default memory, 2p chunk
//   activations; the patterns timed with the setting's costs).
// - The summary tables (tests/golden/zero_bubble/comparison*.txt, quoted in docs/BENCHMARKS.md)
//   are what these runs give; `PIPESCOPE_UPDATE_GOLDEN=1 test_sim "[zb-authors]"` rewrites them.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/passes.hpp"
#include "pipescope/sim/simulator.hpp"
#include "pipescope/sim/zb_auto.hpp"
#include "ppsim_run.hpp"

using namespace pipescope;
using namespace pipescope::sim;

namespace {

struct AuthorsSetting {
  int p = 0, m = 0, limit = 0;
  double f = 0, b = 0, w = 0, c = 0;
  ZbAuthorsGreedyFlags flags;
  double authors_time = 0;  // their own clock: the longest stage's span
  ComputeOrder order;
};

std::vector<AuthorsSetting> read_settings(const std::filesystem::path& file) {
  const std::regex header(R"(## p=(\d+) m=(\d+) f=([\d.]+) b=([\d.]+) w=([\d.]+) c=([\d.]+) limit=(\d+))");
  std::vector<AuthorsSetting> settings;
  std::ifstream in(file);
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, header)) {
      AuthorsSetting s;
      s.p = std::stoi(match[1]);
      s.m = std::stoi(match[2]);
      s.f = std::stod(match[3]);
      s.b = std::stod(match[4]);
      s.w = std::stod(match[5]);
      s.c = std::stod(match[6]);
      s.limit = std::stoi(match[7]);
      s.order.name = "authors";
      s.order.num_ranks = s.order.num_stages = s.p;
      s.order.num_micro_batches = s.m;
      s.order.stage_to_rank = loop_placement(s.p, 1);
      s.order.per_rank.resize(s.p);
      settings.push_back(std::move(s));
    } else if (line.starts_with("flags: ")) {
      std::istringstream flags(line.substr(7));
      int allow = 0, prioritize = 0, greedy = 0;
      flags >> allow >> prioritize >> greedy;
      settings.back().flags = {allow != 0, prioritize != 0, greedy != 0};
    } else if (line.starts_with("authors_time: ")) {
      settings.back().authors_time = std::stod(line.substr(14));
    } else if (line.starts_with("r")) {
      AuthorsSetting& s = settings.back();
      const int rank = std::stoi(line.substr(1, line.find(':') - 1));
      std::istringstream ops(line.substr(line.find(':') + 1));
      for (std::string op; ops >> op;) {
        const Op kind = op[0] == 'F' ? Op::ForwardPass : op[0] == 'B' ? Op::BackwardInput : Op::BackwardWeight;
        s.order.per_rank[rank].push_back({kind, rank, std::stoi(op.substr(1))});
      }
    }
  }
  return settings;
}

ZbAutoRequest request_for(const AuthorsSetting& s) {
  ZbAutoRequest r;
  r.params.num_ranks = s.p;
  r.params.num_micro_batches = s.m;
  r.costs = CostModel::uniform(s.f, s.b, s.w, s.c, 2, -1, -1);
  r.max_mem_micro_batches = s.limit;
  return r;
}

Summary simulated(const Schedule& schedule, const CostModel& costs) {
  SimOptions options;
  options.build_trace = false;
  return simulate(schedule, costs, Topology{}, options).summary;
}

const std::filesystem::path kGoldenDir = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/zero_bubble";

using ppsim_test::read_text;

// zb-auto's time against the authors', in percent (negative: faster), without a "-0.0".
double percent_faster(double gain) { return std::abs(gain) < 1e-9 ? 0.0 : -100 * gain; }

// Every setting, or under the sanitizers every fourth: there each setting costs 15 times its
// Release time (two minutes for the sweep, CI's longest test), and a quarter of the settings runs
// the same code as the whole sweep, whose figures the Release build checks.
#ifdef PIPESCOPE_SANITIZED_TESTS
constexpr std::size_t kSettingStride = 4;
#else
constexpr std::size_t kSettingStride = 1;
#endif

// The table a comparison gives, against its committed copy (rewritten on request); a sampled
// sweep's table is not the whole one and is not compared.
void check_table(const std::filesystem::path& path, const std::string& table) {
  if (kSettingStride != 1) return;
  if (std::getenv("PIPESCOPE_UPDATE_GOLDEN")) {
    write_file_atomic(path.string(), table);
    WARN("rewrote " << path.string());
  }
  CHECK(table == read_text(path));
}

struct VSetting {
  std::string scheduler;
  int p = 0, m = 0;
  double f = 0, b = 0, w = 0, c = 0;
  ComputeOrder order;
};

// "F<chunk>.<mb>": chunk 0 is stage `rank`, chunk 1 stage 2p - 1 - rank (V placement).
std::vector<VSetting> read_v_settings(const std::filesystem::path& file) {
  const std::regex header(R"(## scheduler=(\S+) p=(\d+) m=(\d+) f=([\d.]+) b=([\d.]+) w=([\d.]+) c=([\d.]+))");
  std::vector<VSetting> settings;
  std::ifstream in(file);
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, header)) {
      VSetting s;
      s.scheduler = match[1];
      s.p = std::stoi(match[2]);
      s.m = std::stoi(match[3]);
      s.f = std::stod(match[4]);
      s.b = std::stod(match[5]);
      s.w = std::stod(match[6]);
      s.c = std::stod(match[7]);
      s.order.name = s.scheduler;
      s.order.num_ranks = s.p;
      s.order.num_stages = 2 * s.p;
      s.order.num_micro_batches = s.m;
      s.order.stage_to_rank = v_placement(s.p);
      s.order.per_rank.resize(s.p);
      settings.push_back(std::move(s));
    } else if (line.starts_with("r")) {
      VSetting& s = settings.back();
      const int rank = std::stoi(line.substr(1, line.find(':') - 1));
      std::istringstream ops(line.substr(line.find(':') + 1));
      for (std::string op; ops >> op;) {
        const Op kind = op[0] == 'F' ? Op::ForwardPass : op[0] == 'B' ? Op::BackwardInput : Op::BackwardWeight;
        const int chunk = op[1] - '0';
        const int stage = chunk == 0 ? rank : 2 * s.p - 1 - rank;
        s.order.per_rank[rank].push_back({kind, stage, std::stoi(op.substr(op.find('.') + 1))});
      }
    } else if (line.starts_with("refused")) {
      FAIL("the authors' V scheduler refused a setting: " << line);
    }
  }
  return settings;
}

}  // namespace

TEST_CASE("zb-auto is never slower than the Zero Bubble authors' scheduler, under the same limit", "[zb-authors]") {
  const std::vector<AuthorsSetting> settings = read_settings(kGoldenDir / "authors-zb.txt");
  REQUIRE(settings.size() == 252u);
  int faster = 0, equal = 0, slower = 0;
  double largest_gain = 0;
  std::string rows;
  for (std::size_t i = 0; i < settings.size(); i += kSettingStride) {
    const AuthorsSetting& s = settings[i];
    INFO(fmt::format("p={} m={} f={} b={} w={} c={} limit={}", s.p, s.m, s.f, s.b, s.w, s.c, s.limit));
    const ZbAutoRequest request = request_for(s);
    const std::int64_t limit_bytes = 2LL * s.limit;

    // Our port of their scheduler gives their order in the setting they kept.
    const ComputeOrder port = zb_authors_greedy_order(request, zb_auto_rank_limits(request), s.flags);
    CHECK(port.per_rank == s.order.per_rank);

    const Summary authors = simulated(lower(s.order), request.costs);
    CHECK(authors.max_peak_memory_bytes() <= limit_bytes);
    const Schedule ours_schedule = zb_auto_schedule(request);
    const Summary ours = simulated(ours_schedule, request.costs);
    CHECK(ours.max_peak_memory_bytes() <= limit_bytes);
    CHECK(ours.iteration_time_s <= authors.iteration_time_s * (1 + 1e-12));

    const double gain = (authors.iteration_time_s - ours.iteration_time_s) / authors.iteration_time_s;
    if (gain > 1e-9)
      ++faster;
    else if (gain < -1e-9)
      ++slower;
    else
      ++equal;
    largest_gain = std::max(largest_gain, gain);
    rows +=
        fmt::format("| {} | {} | {:g}/{:g}/{:g} | {:g} | {} | {:.4g} | {:.4g} | {:.4g} | {:+.1f} % | {} / {} |\n", s.p,
                    s.m, s.f, s.b, s.w, s.c, s.limit, s.authors_time, authors.iteration_time_s, ours.iteration_time_s,
                    percent_faster(gain), authors.max_peak_memory_bytes(), ours.max_peak_memory_bytes());
  }
  CHECK(slower == 0);
  const std::string table =
      fmt::format(
          "zb-auto against the Zero Bubble authors' scheduler, {} settings: faster in {}, equal in {}, slower in "
          "{}; largest gain {:.1f} %.\n\n"
          "| p | m | f/b/w | c | limit (micro-batches) | authors, their clock | authors, replayed | zb-auto | "
          "zb-auto vs authors | peak memory, authors / zb-auto |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n",
          settings.size(), faster, equal, slower, 100 * largest_gain) +
      rows;
  check_table(kGoldenDir / "comparison.txt", table);
}

TEST_CASE("zb-auto --chunks 2 against the authors' V schedules, at the memory they use", "[zb-authors]") {
  const std::vector<VSetting> settings = read_v_settings(kGoldenDir / "authors-v.txt");
  REQUIRE(settings.size() == 180u);
  std::map<std::string, std::array<int, 3>> outcomes;  // per scheduler: faster, equal, slower
  std::map<std::string, double> largest_gain, largest_loss;
  std::string rows;
  for (std::size_t i = 0; i < settings.size(); i += kSettingStride) {
    const VSetting& s = settings[i];
    INFO(fmt::format("{} p={} m={} f={} b={} w={} c={}", s.scheduler, s.p, s.m, s.f, s.b, s.w, s.c));
    const CostModel costs = CostModel::uniform(s.f, s.b, s.w, s.c, 2, -1, -1);
    if (s.scheduler == "zbv") {
      // zb-auto's port of ZB-V gives the authors' order exactly, with their default memory.
      const ZbAuthorsVCosts inputs{s.f, s.b, s.w, s.c, 2, -1, -1, 4LL * s.p};
      CHECK(zb_authors_v_order(s.p, s.m, inputs).per_rank == s.order.per_rank);
    } else {
      // And of V-Half and V-Min, timed with the setting's costs as the fixture ran them.
      const ZbAuthorsVPattern kind = s.scheduler == "v-half" ? ZbAuthorsVPattern::v_half : ZbAuthorsVPattern::v_min;
      const ZbAuthorsVCosts inputs{s.f, s.b, s.w, s.c, 2, -1, -1, 0};
      CHECK(zb_authors_v_pattern_order(kind, s.p, s.m, inputs).per_rank == s.order.per_rank);
    }
    const Summary authors = simulated(lower(s.order), costs);
    ZbAutoRequest request;
    request.params.num_ranks = s.p;
    request.params.num_micro_batches = s.m;
    request.params.chunks = 2;
    request.params.chunks_given = true;
    request.costs = costs;
    request.max_mem_bytes = authors.max_peak_memory_bytes();
    const Summary ours = simulated(zb_auto_schedule(request), costs);
    CHECK(ours.max_peak_memory_bytes() <= authors.max_peak_memory_bytes());
    const double gain = (authors.iteration_time_s - ours.iteration_time_s) / authors.iteration_time_s;
    auto& counts = outcomes[s.scheduler];
    ++counts[gain > 1e-9 ? 0 : gain < -1e-9 ? 2 : 1];
    largest_gain[s.scheduler] = std::max(largest_gain[s.scheduler], gain);
    largest_loss[s.scheduler] = std::max(largest_loss[s.scheduler], -gain);
    rows += fmt::format("| {} | {} | {} | {:g}/{:g}/{:g} | {:g} | {} | {:.4g} | {:.4g} | {:+.1f} % |\n", s.scheduler,
                        s.p, s.m, s.f, s.b, s.w, s.c, authors.max_peak_memory_bytes(), authors.iteration_time_s,
                        ours.iteration_time_s, percent_faster(gain));
  }
  std::string summary;
  for (const auto& [scheduler, counts] : outcomes) {
    CHECK(counts[2] == 0);
    summary += fmt::format(
        "{}: zb-auto faster in {}, equal in {}, slower in {} (largest gain {:.1f} %, largest loss "
        "{:.1f} %). ",
        scheduler, counts[0], counts[1], counts[2], 100 * largest_gain[scheduler], 100 * largest_loss[scheduler]);
  }
  const std::string table = summary +
                            "\n\n| scheduler | p | m | f/b/w | c | memory (peak, bytes) | authors, replayed | "
                            "zb-auto --chunks 2 | zb-auto vs authors |\n|---|---|---|---|---|---|---|---|---|\n" +
                            rows;
  check_table(kGoldenDir / "comparison-v.txt", table);
}
