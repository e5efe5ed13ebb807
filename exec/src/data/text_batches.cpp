#include "data/text_batches.hpp"

#include <vector>

namespace pipescope::exec {

TextBatches::TextBatches(TextCorpus corpus, int seq_len, int micro_batch_size, std::uint64_t seed, const std::string& corpus_name)
    : corpus_(std::move(corpus)), windows_(corpus_.size_bytes(), seq_len, seed, corpus_name), micro_batch_size_(micro_batch_size) {}

template <typename WindowStart>
MicroBatch TextBatches::micro_batch(std::int64_t first, WindowStart start) const {
  const int window = windows_.window_bytes();
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(micro_batch_size_) * static_cast<std::size_t>(window));
  for (int b = 0; b < micro_batch_size_; ++b)
    corpus_.copy(start(first + b), window, bytes.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(window));
  const at::Tensor tokens = at::from_blob(bytes.data(), {micro_batch_size_, window}, at::kByte).to(at::kLong);
  MicroBatch batch;
  batch.inputs = {tokens.slice(1, 0, window - 1).contiguous()};
  batch.labels = tokens.slice(1, 1, window).contiguous();
  return batch;
}

MicroBatch TextBatches::training_micro_batch(std::int64_t global_micro_batch) const {
  return micro_batch(global_micro_batch * micro_batch_size_, [this](std::int64_t s) { return windows_.training_window_start(s); });
}

MicroBatch TextBatches::held_out_micro_batch(std::int64_t index) const {
  return micro_batch(index * micro_batch_size_, [this](std::int64_t w) { return windows_.held_out_window_start(w); });
}

}  // namespace pipescope::exec
