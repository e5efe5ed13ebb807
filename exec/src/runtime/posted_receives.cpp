// The receives posted in a step (see posted_receives.hpp).
#include "runtime/posted_receives.hpp"

namespace pipescope::exec::runtime {

void PostedReceives::post(Key key, Channel channel, Finish finish) { entries_.push_back({key, channel, std::move(finish)}); }

void PostedReceives::run(std::size_t index) {
  Finish finish = std::move(entries_[index].finish);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  finish();
}

void PostedReceives::finish(Key key) {
  for (;;) {
    std::size_t target = 0;
    while (target < entries_.size() && !(entries_[target].key == key)) ++target;
    if (target == entries_.size()) return;
    // The earliest receive on the target's channel goes first; it may be the target itself.
    std::size_t first = 0;
    while (entries_[first].channel != entries_[target].channel) ++first;
    run(first);
  }
}

void PostedReceives::finish_all() {
  while (!entries_.empty()) run(0);
}

}  // namespace pipescope::exec::runtime
