// The runtime's posted receives (exec/src/runtime/posted_receives.hpp), torch's semantics:
// receives are posted in program order and finished by the compute that needs them.
// Scenario: on one channel (rank 1, tag 4) receives of micro-batches 0, 1 and 2 are posted, and
// one of micro-batch 0's gradient on another channel. Finishing micro-batch 1 first runs
// micro-batch 0's receive (posted before it on its channel: transfers match in posting order),
// then its own, and leaves the gradient alone; finishing a key nobody posted does nothing;
// finish_all runs the rest in posting order (gradient 0, then activation 2). A stage with two
// receives for one micro-batch (a skip tensor from another stage) finishes both. A receive that
// throws is gone: it is not run a second time by finish_all.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/posted_receives.hpp"

using pipescope::exec::runtime::PostedReceives;

TEST_CASE("posted receives finish in their channel's order", "[runtime][posted_receives]") {
  PostedReceives posted;
  std::vector<std::string> ran;
  auto record = [&](std::string name) { return [&ran, name] { ran.push_back(name); }; };
  posted.post({1, 0, true}, {1, 4}, record("F0"));
  posted.post({1, 0, false}, {2, 7}, record("B0"));
  posted.post({1, 1, true}, {1, 4}, record("F1"));
  posted.post({1, 2, true}, {1, 4}, record("F2"));

  posted.finish({1, 1, true});
  CHECK(ran == std::vector<std::string>{"F0", "F1"});
  posted.finish({1, 1, true});  // already finished
  posted.finish({3, 0, true});  // never posted
  CHECK(ran.size() == 2);
  CHECK_FALSE(posted.empty());
  posted.finish_all();
  CHECK(ran == std::vector<std::string>{"F0", "F1", "B0", "F2"});
  CHECK(posted.empty());
}

TEST_CASE("every receive of one micro-batch finishes together", "[runtime][posted_receives]") {
  PostedReceives posted;
  std::vector<std::string> ran;
  auto record = [&](std::string name) { return [&ran, name] { ran.push_back(name); }; };
  posted.post({2, 0, true}, {0, 1}, record("main"));
  posted.post({2, 0, true}, {0, 9}, record("skip"));
  posted.post({2, 1, true}, {0, 1}, record("next"));
  posted.finish({2, 0, true});
  CHECK(ran == std::vector<std::string>{"main", "skip"});
}

TEST_CASE("a receive that fails is not run again", "[runtime][posted_receives]") {
  PostedReceives posted;
  int runs = 0;
  posted.post({0, 0, false}, {1, 1}, [&] {
    ++runs;
    throw std::runtime_error("peer gone");
  });
  CHECK_THROWS_WITH(posted.finish({0, 0, false}), "peer gone");
  posted.finish_all();
  CHECK(runs == 1);
  CHECK(posted.empty());
}
