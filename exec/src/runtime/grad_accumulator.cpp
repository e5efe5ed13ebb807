// Ordered gradient accumulation (see grad_accumulator.hpp).
#include "runtime/grad_accumulator.hpp"

namespace pipescope::exec::runtime {

void OrderedGradAccumulator::reset(int num_micro_batches) {
  expected_ = num_micro_batches;
  next_ = 0;
  pending_.clear();
  sum_.clear();
}

void OrderedGradAccumulator::add(int micro_batch, std::vector<at::Tensor> grads) {
  pending_.emplace(micro_batch, std::move(grads));
  for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(next_)) {
    if (sum_.empty()) {
      sum_ = std::move(it->second);  // the first micro-batch's tensors become the sum: no copy
    } else {
      for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i].add_(it->second[i]);
    }
    pending_.erase(it);
    ++next_;
  }
}

}  // namespace pipescope::exec::runtime
