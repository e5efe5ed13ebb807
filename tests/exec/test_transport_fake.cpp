// The fake transport. Scenario: rank 0 sends [1,2] then [3,4] with the same tag; rank 1
// receives them in that order. An all-reduce over 3 ranks of (r+1) gives 6 on every rank, and
// an all-gather gives [1,2,3]. A receive from a rank that never sends times out after 50 ms
// with "timed out"; one from a rank marked failed throws "rank 0 failed". Packing [2,3] and [4]
// floats gives 10 elements that unpack to the same tensors.
#include <catch2/catch.hpp>

#include <thread>

#include "pipescope/exec/transport.hpp"

using namespace pipescope::exec;
using namespace std::chrono_literals;

TEST_CASE("point to point keeps order per tag") {
  auto net = make_fake_network(2);
  auto t0 = make_fake_transport(net, 0), t1 = make_fake_transport(net, 1);
  auto s1 = t0->send(at::tensor({1.f, 2.f}), 1, 7);
  auto s2 = t0->send(at::tensor({3.f, 4.f}), 1, 7);
  auto a = at::empty({2}), b = at::empty({2});
  t1->recv(a, 0, 7)->wait(1000ms);
  t1->recv(b, 0, 7)->wait(1000ms);
  s1->wait(1000ms);
  s2->wait(1000ms);
  CHECK(at::equal(a, at::tensor({1.f, 2.f})));
  CHECK(at::equal(b, at::tensor({3.f, 4.f})));
}

TEST_CASE("collectives over threads") {
  auto net = make_fake_network(3);
  std::vector<at::Tensor> sums(3), gathers(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto t = make_fake_transport(net, r);
      sums[r] = at::full({1}, static_cast<float>(r + 1));
      t->all_reduce_sum(sums[r])->wait(2000ms);
      gathers[r] = at::empty({3});
      t->all_gather(at::full({1}, static_cast<float>(r + 1)), gathers[r])->wait(2000ms);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    CHECK(sums[r].item<float>() == 6.f);
    CHECK(at::equal(gathers[r], at::tensor({1.f, 2.f, 3.f})));
  }
}

TEST_CASE("timeouts and injected failures") {
  auto net = make_fake_network(2);
  auto t1 = make_fake_transport(net, 1);
  auto buffer = at::empty({1});
  CHECK_THROWS_WITH(t1->recv(buffer, 0, 0)->wait(50ms), Catch::Contains("timed out"));
  fake_network_fail_rank(*net, 0);
  CHECK_THROWS_WITH(t1->recv(buffer, 0, 0)->wait(5000ms), Catch::Contains("rank 0 failed"));
}

TEST_CASE("packing several tensors") {
  std::vector<at::Tensor> parts{at::arange(6, at::kFloat).reshape({2, 3}), at::full({4}, 9.f)};
  at::Tensor flat = pack_tensors(parts);
  CHECK(flat.numel() == 10);
  auto back = unpack_tensors(flat, parts);
  REQUIRE(back.size() == 2);
  CHECK(at::equal(back[0], parts[0]));
  CHECK(at::equal(back[1], parts[1]));
}
