// Sends complete in the background: the compute thread posts them and goes on, and a watcher
// thread waits on each in order, closes its trace event, and keeps the first failure for the
// end of the step (a failed send must not be lost, nor stop the program mid-instruction).
// A program may also wait for one send where it stands (torch's WAIT_SEND_F/B).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec::runtime {

class SendWatcher {
 public:
  explicit SendWatcher(std::chrono::milliseconds timeout);
  ~SendWatcher();
  SendWatcher(const SendWatcher&) = delete;
  SendWatcher& operator=(const SendWatcher&) = delete;

  // `on_done(end_us)` runs on the watcher thread; `describe` names the send in errors. Returns
  // the send's ticket for wait_for.
  std::uint64_t watch(std::unique_ptr<PendingTransfer> pending, std::function<void(double)> on_done, std::string describe);
  // Waits until the send of `ticket` completed (the watcher finishes sends in the order they
  // were posted, so the ones before it too); throws as drain does when a send failed.
  void wait_for(std::uint64_t ticket);
  // Waits until every watched send completed; throws TransportError with the first failure
  // ("<describe>: <first line of the error>") and forgets it.
  void drain();

 private:
  struct Item {
    std::unique_ptr<PendingTransfer> pending;
    std::function<void(double)> on_done;
    std::string describe;
  };
  void loop();
  void throw_first_failure();  // with the mutex held

  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;
  std::uint64_t posted_ = 0;     // sends watched so far (the next ticket)
  std::uint64_t completed_ = 0;  // sends finished, in posting order
  bool stop_ = false;
  std::string error_;
  std::thread thread_;  // last: starts once the state it reads is built
};

// Several transfers waited on as one (the messages of one send instruction).
class PendingGroup : public PendingTransfer {
 public:
  void add(std::unique_ptr<PendingTransfer> pending) { parts_.push_back(std::move(pending)); }
  void wait(std::chrono::milliseconds timeout) override {
    for (auto& p : parts_) p->wait(timeout);
  }

 private:
  std::vector<std::unique_ptr<PendingTransfer>> parts_;
};

}  // namespace pipescope::exec::runtime
