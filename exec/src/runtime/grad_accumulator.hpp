// Ordered gradient accumulation: the sum of the per-micro-batch weight gradients, added in
// micro-batch order whatever order the schedule finishes them in. Floating-point addition is
// not associative, so this is what makes every schedule's gradients bit-for-bit equal.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <vector>

namespace pipescope::exec::runtime {

class OrderedGradAccumulator {
 public:
  void reset(int num_micro_batches);
  // Micro-batch `micro_batch`'s gradients, one per parameter; held until every earlier one came.
  void add(int micro_batch, std::vector<at::Tensor> grads);
  bool complete() const { return next_ == expected_; }
  int missing() const { return expected_ - next_; }
  // The sum so far; empty when no micro-batch was added (a stage without parameters).
  std::vector<at::Tensor>& sum() { return sum_; }

 private:
  int expected_ = 0;
  int next_ = 0;  // the micro-batch the sum waits for
  std::map<int, std::vector<at::Tensor>> pending_;
  std::vector<at::Tensor> sum_;
};

}  // namespace pipescope::exec::runtime
