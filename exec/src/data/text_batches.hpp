// The micro-batches pprun trains and evaluates on from a text corpus, as byte tokens: every byte
// is a token (vocabulary 256, no tokenizer file to ship or match), inputs [micro-batch size,
// seq_len] and next-byte labels of the same shape, int64 as tiny-gpt reads them.
#pragma once

#include <cstdint>
#include <string>

#include "data/text_corpus.hpp"
#include "data/text_windows.hpp"
#include "pipescope/exec/model.hpp"

namespace pipescope::exec {

// The first global micro-batch of `replica` in the step that starts at `data_position` (the
// engine's global count, engine.hpp), with `micro_batches` per replica: replicas take
// consecutive, disjoint runs of M, so dp replicas of M micro-batches read what one replica of
// dp x M would.
inline std::int64_t replica_first_micro_batch(std::int64_t data_position, int replica, int micro_batches) {
  return data_position + static_cast<std::int64_t>(replica) * micro_batches;
}

class TextBatches {
 public:
  // Throws UsageError as TextWindows does when the corpus is too small.
  TextBatches(TextCorpus corpus, int seq_len, int micro_batch_size, std::uint64_t seed, const std::string& corpus_name);

  // Global micro-batch g: global training samples g x B .. g x B + B - 1 (B the micro-batch size).
  MicroBatch training_micro_batch(std::int64_t global_micro_batch) const;
  // Held-out micro-batch h: held-out windows h x B .. h x B + B - 1 (modulo their number).
  MicroBatch held_out_micro_batch(std::int64_t index) const;

  const TextCorpus& corpus() const { return corpus_; }
  const TextWindows& windows() const { return windows_; }

 private:
  template <typename WindowStart>
  MicroBatch micro_batch(std::int64_t first, WindowStart start) const;

  TextCorpus corpus_;
  TextWindows windows_;
  int micro_batch_size_;
};

}  // namespace pipescope::exec
