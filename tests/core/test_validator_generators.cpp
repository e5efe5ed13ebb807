// The validator accepts every built-in schedule (SPEC.md section 2) for p in {1, 2, 3, 4},
// m in {1, 2, 4, 8} and chunks in {1, 2} wherever the generator accepts the parameters;
// DeepSpeed's schedules also pass under blocking (rendezvous) sends, as DeepSpeed runs them.
// And one large schedule (16 ranks x 4 chunks x 256 micro-batches, interleaved 1F1B) passes.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/registry.hpp"
#include "pipescope/core/validator.hpp"

using namespace pipescope;

TEST_CASE("every built-in schedule validates") {
  int validated = 0;
  for (const std::string& name : ScheduleRegistry::instance().names()) {
    for (int ranks : {1, 2, 3, 4}) {
      for (int micro_batches : {1, 2, 4, 8}) {
        for (int chunks : {1, 2}) {
          ScheduleParams params;
          params.num_ranks = ranks;
          params.num_micro_batches = micro_batches;
          params.chunks = chunks;
          params.chunks_given = chunks > 1;
          Schedule schedule;
          try {
            schedule = make_schedule(name, params);
          } catch (const ScheduleError&) {
            continue;  // parameters this schedule refuses
          }
          INFO(name << " p=" << ranks << " m=" << micro_batches << " chunks=" << chunks);
          const auto problem = find_problem(schedule);
          CHECK_FALSE(problem.has_value());
          if (problem) FAIL_CHECK(problem->message);
          const bool deepspeed = name.rfind("deepspeed", 0) == 0 || name == "data-parallel";
          if (deepspeed) {
            const auto blocking_problem = find_problem(schedule, {true});
            CHECK_FALSE(blocking_problem.has_value());
            if (blocking_problem) FAIL_CHECK(blocking_problem->message);
          }
          ++validated;
        }
      }
    }
  }
  CHECK(validated > 50);
}

TEST_CASE("a large interleaved schedule validates") {
  ScheduleParams params;
  params.num_ranks = 16;
  params.chunks = 4;
  params.chunks_given = true;
  params.num_micro_batches = 256;
  const Schedule schedule = make_schedule("interleaved-1f1b", params);
  CHECK(schedule.instruction_count() > 16 * 4 * 256 * 2);
  const auto problem = find_problem(schedule);
  CHECK_FALSE(problem.has_value());
  if (problem) FAIL(problem->message);
}
