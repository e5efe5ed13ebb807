// The compute baton of overlapped F&B steps and the pass of each thread (compute_baton.hpp).
#include "runtime/compute_baton.hpp"

#include "runtime/clock.hpp"

namespace pipescope::exec::runtime {
namespace {

thread_local PassOnThread this_threads_pass;

}  // namespace

void ComputeBaton::take(int pass, const Instruction& instr) {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [this, pass] { return holder_ < 0 && (first_taken_ || pass == 0); });
  first_taken_ = true;
  holder_ = pass;
  held_since_us_ = now_us();
  current_ = &instr;
}

void ComputeBaton::give_back(int pass) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (holder_ != pass) return;
    holds_[pass].emplace_back(held_since_us_, now_us());
    holder_ = -1;
  }
  freed_.notify_all();
}

std::vector<std::pair<double, double>> ComputeBaton::holds(int pass) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holds_[pass];
}

const PassOnThread& pass_on_this_thread() { return this_threads_pass; }

bool backward_on_this_thread() {
  const Instruction* instr = this_threads_pass.instr;
  return instr && (is_backward(instr->op) || instr->op == Op::BackwardWeight);
}

PassScope::PassScope(const Instruction& instr, ComputeBaton* baton, int pass) : saved_(this_threads_pass) {
  this_threads_pass = {&instr, baton, pass};
}

PassScope::~PassScope() { this_threads_pass = saved_; }

OffCompute::OffCompute() : pass_(this_threads_pass) {
  if (pass_.baton) pass_.baton->give_back(pass_.pass);
}

OffCompute::~OffCompute() {
  if (pass_.baton) pass_.baton->take(pass_.pass, *pass_.instr);
}

}  // namespace pipescope::exec::runtime
