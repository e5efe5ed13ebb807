// Byte sizes as users type them: "4096" = 4096, "8e9" = 8,000,000,000, "80GB" = 80e9,
// "1.5GiB" = 1,610,612,736, "-2MB" = -2e6 where negative is allowed; "12 parsecs", "" and a
// negative size where it is not are refused naming the option.
#include <catch2/catch.hpp>

#include "pipescope/core/errors.hpp"
#include "pipescope/sim/units.hpp"

using namespace pipescope;
using namespace pipescope::sim;

TEST_CASE("byte sizes with and without units") {
  CHECK(parse_bytes("4096", "--x") == 4096);
  CHECK(parse_bytes("8e9", "--x") == 8'000'000'000);
  CHECK(parse_bytes("80GB", "--x") == 80'000'000'000);
  CHECK(parse_bytes("1.5GiB", "--x") == 1'610'612'736);
  CHECK(parse_bytes("-2MB", "--x", true) == -2'000'000);
  CHECK_THROWS_WITH(parse_bytes("12 parsecs", "--max-mem"), Catch::Contains("--max-mem"));
  CHECK_THROWS_AS(parse_bytes("", "--x"), UsageError);
  CHECK_THROWS_AS(parse_bytes("-1", "--x"), UsageError);
}

TEST_CASE("sizes and times print with a fitting unit") {
  CHECK(format_bytes(312) == "312 B");
  CHECK(format_bytes(1'500'000'000) == "1.50 GB");
  CHECK(format_seconds(33) == "33 s");
  CHECK(format_seconds(0.0123) == "12.3 ms");
  CHECK(format_seconds(0) == "0 s");
}
