// Layer partitioning. uniform: 10 layers on 4 stages -> 3,3,2,2 (DeepSpeed gives the first
// 10 % 4 stages one more). parameters: [1,1,1,1,10,1,1,1] on 3 stages -> the 10 alone,
// bottleneck 10. type:block on [embed, 6 x Block, head] over 3 stages -> 2 blocks per stage,
// case-insensitive search. cost: [4,2,2,2,2,4] on 2 stages -> bottleneck 8 ([4,2,2] | [2,2,4]);
// the cost method always reaches the brute-force optimum on random inputs. partition_at splits
// before named layers. Impossible requests are refused with the reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <random>

#include "pipescope/core/errors.hpp"
#include "pipescope/core/partitioner.hpp"

using namespace pipescope;

namespace {

std::vector<LayerInfo> layers_with_costs(const std::vector<double>& costs) {
  std::vector<LayerInfo> layers;
  for (std::size_t i = 0; i < costs.size(); ++i)
    layers.push_back({"layers." + std::to_string(i), "Linear", static_cast<std::int64_t>(costs[i] * 100), costs[i]});
  return layers;
}

std::vector<LayerInfo> layers_with_parameters(const std::vector<std::int64_t>& parameters) {
  std::vector<LayerInfo> layers;
  for (std::size_t i = 0; i < parameters.size(); ++i) layers.push_back({"l" + std::to_string(i), "Linear", parameters[i], 1.0});
  return layers;
}

// The optimum bottleneck over every split, by brute force over the k-1 cut positions.
double brute_force_bottleneck(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  double best = 1e300;
  std::vector<int> cuts(static_cast<std::size_t>(stages - 1));
  std::function<void(int, int)> place = [&](int index, int first) {
    if (index == stages - 1) {
      double worst = 0;
      int start = 0;
      for (int s = 0; s < stages; ++s) {
        const int end = s + 1 < stages ? cuts[s] : n;
        double sum = 0;
        for (int l = start; l < end; ++l) sum += costs[l];
        worst = std::max(worst, sum);
        start = end;
      }
      best = std::min(best, worst);
      return;
    }
    for (int c = first; c <= n - (stages - 1 - index); ++c) {
      cuts[index] = c;
      place(index + 1, c + 1);
    }
  };
  place(0, 1);
  return best;
}

std::string error_of(const std::vector<LayerInfo>& layers, int stages, const std::string& method) {
  try {
    partition_layers(layers, stages, method);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("uniform follows DeepSpeed's partition_uniform") {
  const Partition partition = partition_layers(layers_with_costs(std::vector<double>(10, 1.0)), 4, "uniform");
  CHECK(partition.bounds == std::vector<int>{0, 3, 6, 8, 10});
  CHECK(partition.num_stages() == 4);
  CHECK(partition.stage_cost == std::vector<double>{3, 3, 2, 2});
}

TEST_CASE("parameters balance parameter counts") {
  const Partition partition = partition_layers(layers_with_parameters({1, 1, 1, 1, 10, 1, 1, 1}), 3, "parameters");
  CHECK(partition.bounds == std::vector<int>{0, 4, 5, 8});
  CHECK(partition.stage_parameters == std::vector<std::int64_t>{4, 10, 3});
}

TEST_CASE("type:REGEX balances the layers whose type matches") {
  std::vector<LayerInfo> layers{{"embed", "Embedding", 100, 1.0}};
  for (int i = 0; i < 6; ++i) layers.push_back({"blocks." + std::to_string(i), "TransformerBlock", 10, 1.0});
  layers.push_back({"head", "LMHead", 100, 1.0});
  const Partition partition = partition_layers(layers, 3, "type:block");
  // Each stage holds two blocks; the embedding rides with the first, the head with the last.
  CHECK(partition.bounds == std::vector<int>{0, 3, 5, 8});
  CHECK(error_of(layers, 3, "type:Conv") == "partition 'type:Conv': no layer type matches 'Conv'");
  CHECK(error_of(layers, 3, "type:[").rfind("partition 'type:[': bad regular expression", 0) == 0);
}

TEST_CASE("cost minimises the slowest stage") {
  const Partition partition = partition_layers(layers_with_costs({4, 2, 2, 2, 2, 4}), 2, "cost");
  CHECK(partition.bounds == std::vector<int>{0, 3, 6});
  CHECK(partition.stage_cost == std::vector<double>{8, 8});

  std::mt19937 random(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(random() % 9);
    const int stages = 1 + static_cast<int>(random() % std::min(n, 5));
    std::vector<double> costs;
    for (int i = 0; i < n; ++i) costs.push_back(cost(random));
    const Partition got = partition_layers(layers_with_costs(costs), stages, "cost");
    INFO("trial " << trial << " n=" << n << " stages=" << stages);
    REQUIRE(got.num_stages() == stages);
    for (int s = 0; s < stages; ++s) CHECK(got.bounds[s] < got.bounds[s + 1]);
    const double worst = *std::max_element(got.stage_cost.begin(), got.stage_cost.end());
    CHECK(worst == Approx(brute_force_bottleneck(costs, stages)).epsilon(1e-12));
  }
}

TEST_CASE("partition_at splits before the named layers") {
  const auto layers = layers_with_costs({1, 1, 1, 1, 1});
  const Partition partition = partition_at(layers, {"layers.2", "layers.4"});
  CHECK(partition.bounds == std::vector<int>{0, 2, 4, 5});
  CHECK(partition.stage_cost == std::vector<double>{2, 2, 1});
  CHECK_THROWS_WITH(partition_at(layers, {"layers.9"}), "partition 'split points': no layer is named 'layers.9'");
  CHECK_THROWS_WITH(partition_at(layers, {"layers.0"}),
                    "partition 'split points': 'layers.0' is the first layer; splitting before it leaves stage 0 empty");
  CHECK_THROWS_WITH(partition_at(layers, {"layers.3", "layers.2"}),
                    Catch::Matchers::Contains("does not come after the previous split point"));
}

TEST_CASE("impossible partitions are refused with the reason") {
  const auto three = layers_with_costs({1, 1, 1});
  CHECK(error_of(three, 4, "uniform") == "partition 'uniform': 3 layers cannot fill 4 non-empty stages");
  CHECK(error_of(three, 0, "cost") == "partition 'cost': needs at least one stage, got 0");
  CHECK(error_of(three, 2, "balanced") == "partition 'balanced': unknown method (known: uniform, parameters, type:REGEX, cost)");
  const std::vector<LayerInfo> negative_cost{{"a", "Linear", 10, 1.0}, {"b", "Linear", 10, -1.0}};
  CHECK(error_of(negative_cost, 1, "cost") ==
        "partition 'cost': layer 1 ('b') has cost -1.000000; costs must be finite and non-negative");
  CHECK(error_of(layers_with_parameters({0, 0}), 2, "parameters") == "partition 'parameters': no layer has parameters to balance");
}
