// The runtime's send watcher (exec/src/runtime/send_watcher.hpp) over the fake transport.
// Scenario: rank 0 posts two sends to rank 1 and goes on; once rank 1 receives them, drain()
// returns and both completions ran, in posting order. Sends to a rank marked failed make
// drain() throw TransportError with the first send's description only ("first: send to rank 1:
// rank 1 failed"), and a second drain() returns (the failure is reported once). A send nobody
// receives fails after the watcher's 50 ms timeout ("lonely: send to rank 1: timed out after
// 0.05 s"). wait_for(ticket) returns once that send completed, while a later one is still
// pending (torch's WAIT_SEND_F/B), and reports a failure like drain().
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <mutex>
#include <thread>

#include "runtime/send_watcher.hpp"

using namespace pipescope::exec;
using namespace pipescope::exec::runtime;
using namespace std::chrono_literals;

TEST_CASE("the send watcher drains the sends in posting order", "[runtime][send_watcher]") {
  auto net = make_fake_network(2);
  auto sender = make_fake_transport(net, 0), receiver = make_fake_transport(net, 1);
  std::mutex mutex;
  std::vector<int> done;
  SendWatcher watcher(2000ms);
  for (int i = 0; i < 2; ++i)
    watcher.watch(sender->send(at::full({2}, static_cast<float>(i)), 1, 3),
                  [&, i](double end_us) {
                    CHECK(end_us > 0);
                    std::lock_guard<std::mutex> lock(mutex);
                    done.push_back(i);
                  },
                  fmt::format("send {}", i));
  std::thread receiving([&] {
    for (float expected : {0.f, 1.f}) {
      at::Tensor buffer = at::empty({2});
      receiver->recv(buffer, 0, 3)->wait(2000ms);
      CHECK(buffer[0].item<float>() == expected);
    }
  });
  watcher.drain();
  receiving.join();
  CHECK(done == std::vector<int>{0, 1});
}

TEST_CASE("the send watcher reports the first failure once", "[runtime][send_watcher]") {
  auto net = make_fake_network(2);
  auto sender = make_fake_transport(net, 0);
  fake_network_fail_rank(*net, 1);
  bool completed = false;
  SendWatcher watcher(2000ms);
  watcher.watch(sender->send(at::zeros({1}), 1, 0), [&](double) { completed = true; }, "first");
  watcher.watch(sender->send(at::zeros({1}), 1, 0), [&](double) { completed = true; }, "second");
  CHECK_THROWS_AS(watcher.drain(), TransportError);
  CHECK_FALSE(completed);
  CHECK_NOTHROW(watcher.drain());

  watcher.watch(sender->send(at::zeros({1}), 1, 0), [](double) {}, "first");
  CHECK_THROWS_WITH(watcher.drain(), "first: send to rank 1: rank 1 failed");
}

TEST_CASE("a send nobody receives times out in the watcher", "[runtime][send_watcher]") {
  auto net = make_fake_network(2);
  auto sender = make_fake_transport(net, 0);
  SendWatcher watcher(50ms);
  watcher.watch(sender->send(at::zeros({1}), 1, 0), [](double) {}, "lonely");
  CHECK_THROWS_WITH(watcher.drain(), "lonely: send to rank 1: timed out after 0.05 s");
}

TEST_CASE("the send watcher waits for one send while later ones are pending", "[runtime][send_watcher]") {
  auto net = make_fake_network(2);
  auto sender = make_fake_transport(net, 0), receiver = make_fake_transport(net, 1);
  std::mutex mutex;
  std::vector<int> done;
  SendWatcher watcher(2000ms);
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < 2; ++i)
    tickets.push_back(watcher.watch(sender->send(at::full({2}, static_cast<float>(i)), 1, 3),
                                    [&, i](double) {
                                      std::lock_guard<std::mutex> lock(mutex);
                                      done.push_back(i);
                                    },
                                    fmt::format("send {}", i)));
  CHECK(tickets == std::vector<std::uint64_t>{0, 1});
  at::Tensor first = at::empty({2});
  receiver->recv(first, 0, 3)->wait(2000ms);
  watcher.wait_for(tickets[0]);
  {
    std::lock_guard<std::mutex> lock(mutex);
    CHECK(done == std::vector<int>{0});  // the second has no receive yet: it cannot have completed
  }
  at::Tensor second = at::empty({2});
  receiver->recv(second, 0, 3)->wait(2000ms);
  watcher.wait_for(tickets[1]);
  CHECK(done == std::vector<int>{0, 1});
  CHECK(second[0].item<float>() == 1.f);

  fake_network_fail_rank(*net, 1);
  const auto failing = watcher.watch(sender->send(at::zeros({1}), 1, 0), [](double) {}, "third");
  CHECK_THROWS_WITH(watcher.wait_for(failing), "third: send to rank 1: rank 1 failed");
  CHECK_NOTHROW(watcher.drain());
}
