#include "pipescope/traces/transfer_pairs.hpp"

#include <algorithm>
#include <tuple>

namespace pipescope::traces {
namespace {

// One end of a transfer, keyed as both ends see it.
struct TransferEnd {
  int from_rank = 0;
  int to_rank = 0;
  bool activation = false;  // activations (forward) or gradients (backward)
  int micro_batch = -1;
  int to_stage = -1;  // the receiving stage; -1 when unknown
  double ts_us = 0;
  std::size_t event = 0;
  auto strict_key() const { return std::tie(from_rank, to_rank, activation, micro_batch, to_stage); }
  auto loose_key() const { return std::tie(from_rank, to_rank, activation, micro_batch); }
};

// Pairs ends of equal keys in time order; the ends left unpaired stay in `sends`/`receives`.
template <class Key>
void pair_by(std::vector<TransferEnd>& sends, std::vector<TransferEnd>& receives, Key key, std::vector<TransferPair>& pairs) {
  const auto by_key_then_time = [&](const TransferEnd& a, const TransferEnd& b) {
    return std::tuple_cat(key(a), std::tie(a.ts_us, a.event)) < std::tuple_cat(key(b), std::tie(b.ts_us, b.event));
  };
  std::sort(sends.begin(), sends.end(), by_key_then_time);
  std::sort(receives.begin(), receives.end(), by_key_then_time);
  std::vector<TransferEnd> left_sends, left_receives;
  std::size_t s = 0, r = 0;
  while (s < sends.size() && r < receives.size()) {
    if (key(sends[s]) < key(receives[r])) {
      left_sends.push_back(sends[s++]);
    } else if (key(receives[r]) < key(sends[s])) {
      left_receives.push_back(receives[r++]);
    } else {
      pairs.push_back({sends[s++].event, receives[r++].event});
    }
  }
  left_sends.insert(left_sends.end(), sends.begin() + static_cast<std::ptrdiff_t>(s), sends.end());
  left_receives.insert(left_receives.end(), receives.begin() + static_cast<std::ptrdiff_t>(r), receives.end());
  sends = std::move(left_sends);
  receives = std::move(left_receives);
}

}  // namespace

std::vector<TransferPair> pair_transfers(const Trace& trace) {
  std::vector<TransferEnd> sends, receives;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.peer_rank < 0) continue;
    const bool activation = carries_activation(e.kind);
    if (is_send(e.kind)) {
      const int to_stage = e.stage < 0 ? -1 : activation ? e.stage + 1 : e.stage - 1;
      sends.push_back({e.rank, e.peer_rank, activation, e.micro_batch, to_stage, e.ts_us, i});
    } else if (is_receive(e.kind)) {
      receives.push_back({e.peer_rank, e.rank, activation, e.micro_batch, e.stage, e.ts_us, i});
    }
  }
  std::vector<TransferPair> pairs;
  if (sends.empty() || receives.empty()) return pairs;
  pair_by(sends, receives, [](const TransferEnd& t) { return t.strict_key(); }, pairs);
  if (!sends.empty() && !receives.empty()) pair_by(sends, receives, [](const TransferEnd& t) { return t.loose_key(); }, pairs);
  std::sort(pairs.begin(), pairs.end(), [](const TransferPair& a, const TransferPair& b) { return a.send < b.send; });
  return pairs;
}

Flow flow_of(const Trace& trace, const TransferPair& pair) {
  const TraceEvent& send = trace.events.at(pair.send);
  const TraceEvent& receive = trace.events.at(pair.receive);
  return Flow{send.rank, send.lane, send.ts_us, receive.rank, receive.lane, receive.end_us()};
}

}  // namespace pipescope::traces
