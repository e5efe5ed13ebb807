// Megatron-Core's orders, as its own schedules.py runs them (tests/golden/megatron/README.md).
// - Golden orders in tests/golden/megatron/0.19.2/, written by megatron-core 0.19.2's
//   forward_backward_pipelining_without_interleaving / _with_interleaving on the CPU: 1f1b for
//   p = 2..8, m = 1..4p (140 cases, m < p included: rank r warms up with min(p - r - 1, m)
//   forwards); interleaved-1f1b for p = 2..8, v = 2..4, m = 1..4p and group sizes G = p, p + 1,
//   2p (and p - 1, 2p + 1 at m = 2p). Every case Megatron runs is reproduced forward for forward
//   and backward for backward on every rank; every case it refuses is refused, with its reason
//   (G outside [p, m]; a last group of 1..p-1 micro-batches).
// - Hand-checked: p = 2, v = 2, m = 5, G = 3 is Megatron's docstring example (rank 0 forwards
//   0 1 2 | 0 1 2 | 3 4 | 3 4 by chunk 0, 1, 0, 1); p = 4, m = 2 1F1B warms up 2, 2, 1, 0.
// - The older behaviour, interleaved-1f1b@0.1 (megatron-core 0.1.0 .. 0.9.x), against golden
//   orders written by megatron-core 0.9.0's own functions (tests/golden/megatron/0.9.0/, p = 2..8,
//   v = 2..4, m = 1..4p: 84 run, 336 refused, every m not a multiple of p; 1F1B the same as
//   0.19.2's in all 140): every forward first at m = p (p = 4, v = 2: 8 forwards then 8 backwards on every rank, where 0.19.2's rank
//   3 alternates after 4); m not a multiple of p and any G other than p refused; where m is a
//   multiple of p above p it equals today's order (so the 2021 runs of docs/VALIDATION.md are
//   unchanged). Versions 0.1 .. 0.9.9 resolve to it, 0.10 .. 0.19.2 to today's; 0.20 and 0.0.9
//   are refused.
// - --microbatch-group-size-per-vp-stage is refused by every schedule that does not group
//   micro-batches (1f1b, zb-h1, ...), naming the option.
// - --overlap-moe-expert-parallel-comm (ScheduleParams::overlap_moe_expert_parallel_comm): one
//   more warm-up forward on every rank (get_pp_rank_microbatches), derived by hand from
//   Megatron's code for p = 2, v = 2, m = 4 (G = 2; table 0.0 0.1 1.0 1.1 0.2 0.3 1.2 1.3 as
//   chunk.micro-batch): rank 0 warms up with 2 x 1 + 2 + 1 = 5 forwards instead of 4, rank 1
//   with 0 + 2 + 1 = 3 instead of 2; the k-th steady step is still forward k + warm-up with
//   backward k, so every steady step pairs two micro-batches (rank 1's F1.0 B1.0 becomes F1.1
//   B1.0). Capped at m x v (p = 2, v = 2, m = 2: unchanged); refused by the schedules other than
//   Megatron's interleaved one, and by interleaved-1f1b@0.1, whose releases had no such option.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "test_generators_support.hpp"

#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;
using namespace test_support;

namespace {

struct MegatronCase {
  int p = 0, v = 1, m = 0, g = 0;
  std::vector<std::string> rank_lines;  // "r0: F0.0 F0.1 B0.0 ..."
  std::string refusal;                  // Megatron's message when it refuses the case
};

// "## p=P v=V m=M [g=G]" opens a case; "r<rank>: ..." or "refused: ..." follow.
std::vector<MegatronCase> read_cases(const std::filesystem::path& file) {
  const std::regex header(R"(## p=(\d+) v=(\d+) m=(\d+)(?: g=(\d+))?)");
  std::vector<MegatronCase> cases;
  std::ifstream in(file);
  REQUIRE(in.good());
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, header)) {
      MegatronCase c;
      c.p = std::stoi(match[1]);
      c.v = std::stoi(match[2]);
      c.m = std::stoi(match[3]);
      c.g = match[4].matched ? std::stoi(match[4]) : 0;
      cases.push_back(c);
    } else if (line.starts_with("refused: ")) {
      REQUIRE(!cases.empty());
      cases.back().refusal = line.substr(9);
    } else if (!line.empty() && line[0] != '#') {
      REQUIRE(!cases.empty());
      cases.back().rank_lines.push_back(line);
    }
  }
  return cases;
}

ScheduleParams params_of(const MegatronCase& c) {
  ScheduleParams params = test_support::params(c.p, c.m, c.v, c.v != 1);
  params.microbatch_group_size = c.g;
  return params;
}

// The golden form of one rank: F<chunk>.<micro-batch>, chunk = stage / p in loop placement.
std::string megatron_line(const ComputeOrder& order, int rank) {
  std::string line = "r" + std::to_string(rank) + ":";
  for (const Instruction& instr : order.per_rank[rank])
    line += std::string(" ") + (instr.op == Op::ForwardPass ? "F" : "B") +
            std::to_string(instr.stage / order.num_ranks) + "." + std::to_string(instr.micro_batch);
  return line;
}

std::vector<std::string> megatron_lines(const ComputeOrder& order) {
  std::vector<std::string> lines;
  lines.reserve(static_cast<std::size_t>(order.num_ranks));
  for (int r = 0; r < order.num_ranks; ++r) lines.push_back(megatron_line(order, r));
  return lines;
}

std::string refusal_of(const std::string& name, const ScheduleParams& params) {
  try {
    make_compute_order(name, params);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(accepted)";
}

const std::filesystem::path kGoldenRoot = std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "tests/golden/megatron";
const std::filesystem::path kGoldenDir = kGoldenRoot / "0.19.2";

}  // namespace

TEST_CASE("1f1b gives megatron-core 0.19.2's order for every p = 2..8, m = 1..4p", "[megatron]") {
  const std::vector<MegatronCase> cases = read_cases(kGoldenDir / "1f1b.txt");
  REQUIRE(cases.size() == 140u);
  int matched = 0;
  for (const MegatronCase& c : cases) {
    INFO("p=" << c.p << " m=" << c.m);
    REQUIRE(c.refusal.empty());  // Megatron's 1F1B runs every m
    const ComputeOrder order = *make_compute_order("1f1b", params_of(c));
    CHECK(megatron_lines(order) == c.rank_lines);
    matched += megatron_lines(order) == c.rank_lines;
  }
  CHECK(matched == 140);
}

TEST_CASE("interleaved-1f1b gives megatron-core 0.19.2's order, or its refusal, in every case", "[megatron]") {
  const std::vector<MegatronCase> cases = read_cases(kGoldenDir / "interleaved-1f1b.txt");
  REQUIRE(cases.size() > 1000u);
  int run = 0, refused = 0;
  for (const MegatronCase& c : cases) {
    INFO("p=" << c.p << " v=" << c.v << " m=" << c.m << " g=" << c.g);
    if (c.refusal.empty()) {
      const ComputeOrder order = *make_compute_order("interleaved-1f1b", params_of(c));
      CHECK(megatron_lines(order) == c.rank_lines);
      ++run;
      continue;
    }
    ++refused;
    const std::string ours = refusal_of("interleaved-1f1b", params_of(c));
    CHECK_THAT(ours, Catch::StartsWith("interleaved-1f1b: "));
    if (c.refusal.find("should range in") != std::string::npos)
      CHECK_THAT(ours, Catch::Contains("range in [PP=" + std::to_string(c.p) + ", M=" + std::to_string(c.m) + "]"));
    else
      CHECK_THAT(ours, Catch::Contains("leaves a remainder of " + std::to_string(c.m % c.g)));
  }
  // Both kinds are there in numbers: Megatron runs a few hundred of these and refuses the rest.
  CHECK(run > 300);
  CHECK(refused > 500);
}

TEST_CASE("interleaved-1f1b's group size, hand-checked against Megatron's docstring", "[megatron]") {
  // ModelParallelConfig's example: PP 2, VP 2, group 3, 5 micro-batches: rank 0 runs forwards
  // 0 1 2 (chunk 0), 0 1 2 (chunk 1), 3 4 (chunk 0), 3 4 (chunk 1).
  ScheduleParams p = params(2, 5, 2, true);
  p.microbatch_group_size = 3;
  const ComputeOrder order = *make_compute_order("interleaved-1f1b", p);
  std::string forwards;
  for (const Instruction& instr : order.per_rank[0])
    if (instr.op == Op::ForwardPass)
      forwards += std::to_string(instr.stage / 2) + ":" + std::to_string(instr.micro_batch) + " ";
  CHECK(forwards == "0:0 0:1 0:2 1:0 1:1 1:2 0:3 0:4 1:3 1:4 ");
  CHECK_NOTHROW(validate(make_schedule("interleaved-1f1b", p)));
  // The default is p: the same as giving it.
  ScheduleParams explicit_p = params(4, 8, 2, true);
  explicit_p.microbatch_group_size = 4;
  CHECK(megatron_lines(*make_compute_order("interleaved-1f1b", explicit_p)) ==
        megatron_lines(*make_compute_order("interleaved-1f1b", params(4, 8, 2, true))));
}

TEST_CASE("1f1b with fewer micro-batches than ranks warms up with min(p - r - 1, m)", "[megatron]") {
  const ComputeOrder order = *make_compute_order("1f1b", params(4, 2));
  CHECK(megatron_lines(order) == std::vector<std::string>{"r0: F0.0 F0.1 B0.0 B0.1", "r1: F0.0 F0.1 B0.0 B0.1",
                                                          "r2: F0.0 F0.1 B0.0 B0.1", "r3: F0.0 B0.0 F0.1 B0.1"});
  CHECK_NOTHROW(validate(make_schedule("1f1b", params(4, 2))));
}

TEST_CASE("interleaved-1f1b@0.1 keeps megatron-core 0.1 .. 0.9's rules", "[megatron]") {
  // At m = p every forward runs first on every rank; today's rank 3 alternates after 4.
  const ComputeOrder old_order = *make_compute_order("interleaved-1f1b@0.1", params(4, 4, 2, true));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    for (int k = 0; k < 8; ++k) CHECK(old_order.per_rank[r][k].op == Op::ForwardPass);
  }
  const ComputeOrder today = *make_compute_order("interleaved-1f1b", params(4, 4, 2, true));
  CHECK(megatron_line(today, 3) ==
        "r3: F0.0 F0.1 F0.2 F0.3 F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3 B0.0 B0.1 B0.2 B0.3");
  CHECK_NOTHROW(validate(make_schedule("interleaved-1f1b@0.1", params(4, 4, 2, true))));

  // m a multiple of p above p: the same order as today's (the SC'21 runs: p 4, v 3, m 28, ...).
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = 2 * p; m <= 4 * p; m += p) {
        INFO("p=" << p << " v=" << v << " m=" << m);
        CHECK(megatron_lines(*make_compute_order("interleaved-1f1b@0.1", params(p, m, v, true))) ==
              megatron_lines(*make_compute_order("interleaved-1f1b", params(p, m, v, true))));
      }

  CHECK_THAT(
      refusal_of("interleaved-1f1b@0.1", params(4, 6, 2, true)),
      Catch::StartsWith("interleaved-1f1b@0.1: ") && Catch::Contains("multiple of the number of pipeline ranks"));
  ScheduleParams grouped = params(4, 8, 2, true);
  grouped.microbatch_group_size = 5;
  CHECK_THAT(refusal_of("interleaved-1f1b@0.1", grouped), Catch::Contains("--microbatch-group-size-per-vp-stage 5"));
  grouped.microbatch_group_size = 4;  // its one group size, given
  CHECK(refusal_of("interleaved-1f1b@0.1", grouped) == "(accepted)");
}

TEST_CASE("interleaved-1f1b@0.1 gives megatron-core 0.9.0's order, or its refusal, in every case", "[megatron]") {
  const std::vector<MegatronCase> one_f_one_b = read_cases(kGoldenRoot / "0.9.0/1f1b.txt");
  REQUIRE(one_f_one_b.size() == 140u);
  for (const MegatronCase& c : one_f_one_b) {
    INFO("1f1b p=" << c.p << " m=" << c.m);
    CHECK(megatron_lines(*make_compute_order("1f1b", params_of(c))) == c.rank_lines);  // 1F1B never changed
  }
  const std::vector<MegatronCase> cases = read_cases(kGoldenRoot / "0.9.0/interleaved-1f1b.txt");
  REQUIRE(cases.size() == 420u);
  int run = 0;
  for (const MegatronCase& c : cases) {
    INFO("p=" << c.p << " v=" << c.v << " m=" << c.m);
    for (const char* name : {"interleaved-1f1b@0.1", "interleaved-1f1b@0.9.0"}) {
      if (c.refusal.empty()) {
        CHECK(megatron_lines(*make_compute_order(name, params_of(c))) == c.rank_lines);
      } else {
        CHECK_THAT(c.refusal, Catch::Contains("is not divisible by pipeline-model-parallel-size"));
        CHECK_THAT(refusal_of(name, params_of(c)), Catch::StartsWith("interleaved-1f1b@0.1: ") &&
                                                       Catch::Contains("multiple of the number of pipeline ranks"));
      }
    }
    run += c.refusal.empty();
  }
  CHECK(run == 84);  // m = p, 2p, 3p, 4p for each p and v
}

TEST_CASE("interleaved-1f1b@VERSION picks megatron-core's behaviour by release", "[megatron]") {
  const ScheduleRegistry& registry = ScheduleRegistry::instance();
  for (const char* version : {"0.1", "0.1.0", "0.5", "0.9.0", "0.9.9"}) {
    INFO(version);
    const GeneratorInfo* info = registry.find(std::string("interleaved-1f1b@") + version);
    REQUIRE(info != nullptr);
    CHECK(info->name == "interleaved-1f1b@0.1");
  }
  for (const char* version : {"0.10", "0.10.0", "0.14.2", "0.19", "0.19.2"}) {
    INFO(version);
    const GeneratorInfo* info = registry.find(std::string("interleaved-1f1b@") + version);
    REQUIRE(info != nullptr);
    CHECK(info->name == "interleaved-1f1b@0.10");
  }
  CHECK(registry.find("interleaved-1f1b@0.20") == nullptr);
  CHECK_THAT(registry.why_unknown("interleaved-1f1b@0.20"),
             Catch::Contains("newer than the newest one checked, 0.19.2"));
  CHECK(registry.find("interleaved-1f1b@0.0.9") == nullptr);
  CHECK_THAT(registry.why_unknown("interleaved-1f1b@0.0.9"), Catch::Contains("older than the oldest one reproduced"));
  // The plain name and the newest entry are the same behaviour.
  ScheduleParams p = params(4, 4, 3, true);
  CHECK(megatron_lines(*make_compute_order("interleaved-1f1b", p)) ==
        megatron_lines(*make_compute_order("interleaved-1f1b@0.19.2", p)));
}

TEST_CASE("a group size is refused by the schedules that do not group micro-batches", "[megatron]") {
  for (const char* name : {"1f1b", "gpipe", "zb-h1", "zb-h2", "looped-bfs", "deepspeed-train"}) {
    INFO(name);
    ScheduleParams p = params(4, 8);
    p.microbatch_group_size = 4;
    std::string message;
    try {
      make_schedule(name, p);
    } catch (const ScheduleError& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::StartsWith(std::string(name) + ": ") &&
                            Catch::Contains("--microbatch-group-size-per-vp-stage 4 cannot be honoured"));
  }
}

TEST_CASE("interleaved-1f1b under --overlap-moe-expert-parallel-comm warms up with one more forward", "[megatron]") {
  ScheduleParams p = params(2, 4, 2, true);
  CHECK(
      megatron_lines(*make_compute_order("interleaved-1f1b", p)) ==
      std::vector<std::string>{"r0: F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3",
                               "r1: F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3"});
  p.overlap_moe_expert_parallel_comm = true;
  CHECK(
      megatron_lines(*make_compute_order("interleaved-1f1b", p)) ==
      std::vector<std::string>{"r0: F0.0 F0.1 F1.0 F1.1 F0.2 F0.3 B1.0 F1.2 B1.1 F1.3 B0.0 B0.1 B1.2 B1.3 B0.2 B0.3",
                               "r1: F0.0 F0.1 F1.0 F1.1 B1.0 F0.2 B1.1 F0.3 B0.0 F1.2 B0.1 F1.3 B1.2 B1.3 B0.2 B0.3"});
  CHECK_NOTHROW(validate(make_schedule("interleaved-1f1b", p)));

  // Every steady-state step of a larger case pairs a forward with another micro-batch's backward.
  ScheduleParams larger = params(4, 8, 2, true);
  larger.overlap_moe_expert_parallel_comm = true;
  const ComputeOrder order = *make_compute_order("interleaved-1f1b", larger);
  for (const std::vector<Instruction>& ops : order.per_rank)
    for (std::size_t i = 0; i + 1 < ops.size(); ++i)
      if (ops[i].op == Op::ForwardPass && ops[i + 1].op == Op::BackwardPass)
        CHECK(ops[i].micro_batch != ops[i + 1].micro_batch);
  CHECK_NOTHROW(validate(make_schedule("interleaved-1f1b", larger)));

  // No more warm-up forwards than there are forwards.
  ScheduleParams all_warm_up = params(2, 2, 2, true);
  const std::vector<std::string> plain = megatron_lines(*make_compute_order("interleaved-1f1b", all_warm_up));
  all_warm_up.overlap_moe_expert_parallel_comm = true;
  CHECK(megatron_lines(*make_compute_order("interleaved-1f1b", all_warm_up))[0] == plain[0]);
}

TEST_CASE("the overlap's warm-up forward is refused where Megatron's interleaved schedule does not run", "[megatron]") {
  for (const char* name : {"1f1b", "zb-h1", "dualpipev", "interleaved-1f1b@0.1"}) {
    INFO(name);
    ScheduleParams p = params(4, 8, std::string(name) == "interleaved-1f1b@0.1" ? 2 : 1, true);
    if (std::string(name) == "dualpipev") p.chunks = 2;
    p.overlap_moe_expert_parallel_comm = true;
    std::string message;
    try {
      make_schedule(name, p);
    } catch (const ScheduleError& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::Contains("--overlap-moe-expert-parallel-comm"));
  }
}
