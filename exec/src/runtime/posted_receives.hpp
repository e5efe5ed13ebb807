// torch's receive semantics (SPEC.md section 4): a RECV_F/RECV_B posts the receive and goes on;
// the first compute that needs its data waits for it. This keeps the receives a step has posted,
// in posting order, and finishes them when asked: those of one (stage, micro-batch, direction)
// and, before each, every receive posted earlier on the same channel. The transfers of a channel
// are matched in posting order, so a receive that only takes its messages when it is finished
// (shape headers, skip tensors) must not let a later one take them first. No tensors here: a
// receive is a closure, so the bookkeeping is testable alone.
#pragma once

#include <deque>
#include <functional>
#include <utility>

namespace pipescope::exec::runtime {

class PostedReceives {
 public:
  struct Key {
    int stage = 0;
    int micro_batch = 0;
    bool activation = true;  // RecvActivation; false: RecvGrad
    friend bool operator==(const Key&, const Key&) = default;
  };
  // Transfers matched in order with each other: (peer rank, tag).
  using Channel = std::pair<int, int>;
  using Finish = std::function<void()>;

  // A new step: nothing posted (what a failed step left is dropped).
  void clear() { entries_.clear(); }
  void post(Key key, Channel channel, Finish finish);
  // Finishes every receive of `key` (several when skip tensors come from other stages), each
  // after the receives posted before it on its channel; nothing when none was posted.
  void finish(Key key);
  // The end of a step: every receive still posted, in posting order.
  void finish_all();
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    Key key;
    Channel channel;
    Finish finish;
  };
  // Removes entry `index` before running it, so a failure does not run it twice.
  void run(std::size_t index);

  std::deque<Entry> entries_;
};

}  // namespace pipescope::exec::runtime
