// The send watcher thread (see send_watcher.hpp).
#include "runtime/send_watcher.hpp"

#include "runtime/clock.hpp"
#include "error_text.hpp"

namespace pipescope::exec::runtime {

SendWatcher::SendWatcher(std::chrono::milliseconds timeout) : timeout_(timeout), thread_([this] { loop(); }) {}

SendWatcher::~SendWatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::uint64_t SendWatcher::watch(std::unique_ptr<PendingTransfer> pending, std::function<void(double)> on_done,
                                 std::string describe) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(pending), std::move(on_done), std::move(describe)});
    ticket = posted_++;
  }
  cv_.notify_all();
  return ticket;
}

void SendWatcher::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  throw_first_failure();
}

void SendWatcher::wait_for(std::uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ > ticket; });
  throw_first_failure();
}

void SendWatcher::throw_first_failure() {
  if (error_.empty()) return;
  std::string e = error_;
  error_.clear();
  throw TransportError(e);
}

void SendWatcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::string failure;
    try {
      item.pending->wait(timeout_);
      item.on_done(now_us());
    } catch (const std::exception& e) {
      failure = item.describe + ": " + first_line(e.what());
    }
    lock.lock();
    busy_ = false;
    ++completed_;
    // Later failures are usually consequences of the first (a dead peer fails every send).
    if (!failure.empty() && error_.empty()) error_ = failure;
    cv_.notify_all();
  }
}

}  // namespace pipescope::exec::runtime
