// The runtime's ordered gradient accumulation (exec/src/runtime/grad_accumulator.hpp).
// Scenario: three micro-batches whose float32 gradients are 1e8, 1 and -1e8. Added in
// micro-batch order the sum is (1e8 + 1) - 1e8 = 0 (1e8 + 1 rounds to 1e8); added in the
// order 2, 0, 1 it would be 1. The accumulator gives 0 for every one of the six arrival
// orders, is complete only once all three came (missing 3, 2, 1, 0 when micro-batch 0 comes
// last: 3, 3, 0), and starts over after reset.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>

#include "runtime/grad_accumulator.hpp"

using pipescope::exec::runtime::OrderedGradAccumulator;

namespace {

std::vector<at::Tensor> gradient(float value) { return {at::full({1}, value, at::kFloat)}; }

const std::array<float, 3> kValues = {1e8f, 1.f, -1e8f};

}  // namespace

TEST_CASE("the gradient sum does not depend on the order micro-batches finish in", "[runtime][grad_accumulator]") {
  CHECK((-1e8f + 1e8f) + 1.f == 1.f);  // what the arrival order 2, 0, 1 would give
  std::array<int, 3> order = {0, 1, 2};
  do {
    OrderedGradAccumulator accumulator;
    accumulator.reset(3);
    for (int micro_batch : order) accumulator.add(micro_batch, gradient(kValues[static_cast<std::size_t>(micro_batch)]));
    REQUIRE(accumulator.complete());
    CHECK(accumulator.sum().at(0).item<float>() == 0.f);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_CASE("the accumulator waits for the earliest micro-batch", "[runtime][grad_accumulator]") {
  OrderedGradAccumulator accumulator;
  accumulator.reset(3);
  CHECK(accumulator.missing() == 3);
  accumulator.add(2, gradient(kValues[2]));
  CHECK(accumulator.missing() == 3);
  CHECK(accumulator.sum().empty());  // nothing added before micro-batch 0
  accumulator.add(1, gradient(kValues[1]));
  CHECK(accumulator.missing() == 3);
  accumulator.add(0, gradient(kValues[0]));
  CHECK(accumulator.missing() == 0);
  CHECK(accumulator.complete());

  accumulator.reset(1);
  CHECK_FALSE(accumulator.complete());
  CHECK(accumulator.sum().empty());
  accumulator.add(0, gradient(5.f));
  CHECK(accumulator.sum().at(0).item<float>() == 5.f);
}
