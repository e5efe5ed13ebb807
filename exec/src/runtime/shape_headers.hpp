// Shape headers of one step: the first transfer of a step on a channel carries the layout of
// its tensors; later ones reuse it (DeepSpeed), unless shapes_per_micro_batch sends it every
// time. Both ends agree because the transfers of a channel are matched in order.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/rank_context.hpp"
#include "runtime/wire_format.hpp"

namespace pipescope::exec::runtime {

// (from stage, to stage, part): part 0 the stage's tensors, 1 its skip tensors.
using ShapeChannel = std::tuple<int, int, int>;

// Fills `buffer` with the next message from the peer (blocking).
using Receive = std::function<void(at::Tensor)>;

class ShapeHeaders {
 public:
  explicit ShapeHeaders(RankContext& ctx) : ctx_(ctx) {}

  // A new step: every channel sends its header again.
  void clear() {
    sent_.clear();
    received_.clear();
  }
  // Appends the messages of `payload` on `channel`; returns the bytes of the data message. A
  // later micro-batch whose layout differs from the step's header fails, naming both.
  std::int64_t append_messages(TensorList& messages, const TensorList& payload, const std::vector<std::string>& names,
                               const ShapeChannel& channel, const StageState& st, int micro_batch, const char* what);
  // The tensors of a transfer on `channel` (and their names), with or without a header as
  // append_messages sent them; `bytes` is the size of the data message.
  TensorList receive_messages(const ShapeChannel& channel, const Receive& receive, int peer, std::int64_t& bytes,
                     std::vector<std::string>& names);

 private:
  void check_against_header(const StageState& st, int micro_batch, const TensorLayout& now, const TensorLayout& header,
                            int to_stage, const char* what) const;

  RankContext& ctx_;
  std::map<ShapeChannel, TensorLayout> sent_, received_;  // this step's headers
};

}  // namespace pipescope::exec::runtime
