// The spin limit of this thread's waits (transport_wait.hpp).
#include "transport_wait.hpp"

namespace pipescope::exec {
namespace {

thread_local std::chrono::microseconds this_threads_spin_limit{0};

}  // namespace

SpinWhileWaiting::SpinWhileWaiting(std::chrono::microseconds limit) : saved_(this_threads_spin_limit) {
  this_threads_spin_limit = limit;
}

SpinWhileWaiting::~SpinWhileWaiting() { this_threads_spin_limit = saved_; }

std::chrono::microseconds spin_limit_of_this_thread() { return this_threads_spin_limit; }

}  // namespace pipescope::exec
