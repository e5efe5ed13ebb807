// One rank's compute during an overlapped F&B step (DualPipe's "F&B", dualpipev's marked pairs):
// two passes of two micro-batches run on two threads, but only the one holding the baton
// computes, as on a GPU's one compute stream. A pass gives the baton back while its experts'
// all-to-all is on the wire (Gloo's threads move the bytes), so the other pass computes
// meanwhile, and takes it again when the bytes are in. With one pass computing at a time the
// cores are not oversubscribed, and what runs is what the simulator models (one compute stream,
// the all-to-all beside it). The baton also guards the rank's state: every write to the stages,
// their micro-batches and the step's result happens while holding it.
//
// The pass being run on a thread (its instruction and its baton, if any) is thread-local: the
// MoE layers ask it which expert-parallel group to use (forward or backward instructions each
// have their own, so that two threads never issue collectives on one group) and whether to give
// the baton back around an exchange.
#pragma once

#include <array>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "pipescope/core/instruction.hpp"

namespace pipescope::exec::runtime {

class ComputeBaton {
 public:
  // `current` (the rank's RankContext::current) follows the baton: errors raised while computing
  // name the holder's instruction.
  explicit ComputeBaton(const Instruction*& current) : current_(current) {}

  // Waits until no pass holds the baton, then holds it for `pass` (0 or 1), running `instr`.
  // Pass 0 holds it first.
  void take(int pass, const Instruction& instr);
  void give_back(int pass);
  // When `pass` held the baton, on the runtime's clock (runtime/clock.hpp), oldest first.
  std::vector<std::pair<double, double>> holds(int pass) const;

 private:
  const Instruction*& current_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  int holder_ = -1;
  bool first_taken_ = false;
  double held_since_us_ = 0;
  std::array<std::vector<std::pair<double, double>>, 2> holds_;
};

// Holds the baton for a pass's lifetime, also when the pass fails.
class HeldBaton {
 public:
  HeldBaton(ComputeBaton& baton, int pass, const Instruction& instr) : baton_(baton), pass_(pass) {
    baton_.take(pass, instr);
  }
  ~HeldBaton() { baton_.give_back(pass_); }
  HeldBaton(const HeldBaton&) = delete;
  HeldBaton& operator=(const HeldBaton&) = delete;

 private:
  ComputeBaton& baton_;
  int pass_;
};

// The pass this thread runs: what it is, and the baton it shares (null outside overlapped steps).
struct PassOnThread {
  const Instruction* instr = nullptr;
  ComputeBaton* baton = nullptr;
  int pass = 0;  // its number at the baton
};

// What this thread runs now: no instruction outside the runtime's passes.
const PassOnThread& pass_on_this_thread();

// A backward, input-backward or weight-backward instruction is being run on this thread: its
// collectives use the backward group. A forward recomputed inside a backward is part of it.
bool backward_on_this_thread();

// Sets this thread's pass for its lifetime, restoring the one before.
class PassScope {
 public:
  explicit PassScope(const Instruction& instr, ComputeBaton* baton = nullptr, int pass = 0);
  ~PassScope();
  PassScope(const PassScope&) = delete;
  PassScope& operator=(const PassScope&) = delete;

 private:
  PassOnThread saved_;
};

// Around a wait for bytes on the wire: this thread's pass gives its baton back (if it has one)
// and takes it again, after the other pass's compute, when the wait is over.
class OffCompute {
 public:
  OffCompute();
  ~OffCompute();
  OffCompute(const OffCompute&) = delete;
  OffCompute& operator=(const OffCompute&) = delete;

 private:
  PassOnThread pass_;
};

}  // namespace pipescope::exec::runtime
