// The bounds on times and sizes every trace reader holds (traces/trace_limits.hpp). Expected:
// timestamps within +-1e17 us pass and 1e18, infinity and NaN do not; durations from 0 to 1e12 us
// pass, -25 is "is negative (-25)" and 1e300 is beyond the limit; bytes within 2^60 either way
// pass (negative ones only where allowed), 1e30 does not; a span of 1e15 us is named with its ends.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "pipescope/traces/trace_limits.hpp"

using namespace pipescope::traces;

TEST_CASE("times and sizes beyond the readers' bounds are named", "[trace_limits]") {
  CHECK_FALSE(timestamp_problem(1.7e15));
  CHECK_FALSE(timestamp_problem(-1e17));
  CHECK(timestamp_problem(1e18) == std::optional<std::string>("is 1e+18 us, beyond the readers' limit of 1e+17 us (about 3,170 years)"));
  CHECK(timestamp_problem(std::numeric_limits<double>::infinity()));
  CHECK(timestamp_problem(std::nan("")));

  CHECK_FALSE(duration_problem(0));
  CHECK_FALSE(duration_problem(1e12));
  CHECK(duration_problem(-25) == std::optional<std::string>("is negative (-25)"));
  CHECK(duration_problem(1e300) == std::optional<std::string>("is 1e+300 us, beyond the readers' limit of 1e+12 us (about 11.6 days)"));

  CHECK_FALSE(bytes_problem(static_cast<double>(kMaxTraceBytes)));
  CHECK(bytes_problem(-4096) == std::optional<std::string>("is negative (-4096 bytes)"));
  CHECK_FALSE(bytes_problem(-4096, true));
  CHECK(bytes_problem(1e30, true) == std::optional<std::string>("is 1e+30 bytes, beyond the readers' limit of 2^60 bytes (1 EiB)"));

  CHECK_FALSE(span_problem(0, 1e9));
  CHECK_FALSE(span_problem(std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()));  // nothing read
  CHECK(span_problem(0, 1e15) ==
        std::optional<std::string>("its times span 1e+15 us (from 0 to 1e+15), beyond the readers' limit of 1e+12 us (about 11.6 days)"));
}
