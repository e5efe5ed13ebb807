#include "pipescope/traces/time_accounting.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>

namespace pipescope::traces {
namespace {

double mean_or_nan(double total, std::size_t count) {
  return count ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}

// A transfer as both ends name it: sender, receiver, direction, micro-batch, receiving stage.
struct TransferKey {
  int from_rank, to_rank;
  char direction;  // 'F' activations, 'B' gradients (direction_of)
  int micro_batch, to_stage;
  bool operator==(const TransferKey& o) const {
    return from_rank == o.from_rank && to_rank == o.to_rank && direction == o.direction &&
           micro_batch == o.micro_batch && to_stage == o.to_stage;
  }
};

char direction_of(EventKind transfer) { return carries_activation(transfer) ? 'F' : 'B'; }

struct TransferKeyHash {
  std::size_t operator()(const TransferKey& k) const {
    std::size_t h = std::hash<int>{}(k.from_rank);
    for (const int part : {k.to_rank, static_cast<int>(k.direction), k.micro_batch, k.to_stage})
      h = h * 1000003u ^ std::hash<int>{}(part);
    return h;
  }
};

// When each transfer's send was posted. Stages and micro-batches of a pipeline trace are small
// numbers counted from 0, so posts sit in a table indexed by them (a million-event trace is
// matched in one pass over memory in order); any key outside that, or beyond a table of a few
// slots per event (a trace of odd numbers must not make it huge), goes to a hash map.
class PostTimes {
 public:
  explicit PostTimes(std::size_t events)
      : max_micro_batch_(static_cast<int>(std::min<std::size_t>(events, 1 << 24))), slot_budget_(4 * events + 1024) {}

  // The first post of a key counts.
  void add(const TransferKey& k, double posted_us) {
    if (in_table(k) && fits(k)) {
      const auto row = row_of(k);
      if (row >= rows_.size()) {
        slots_used_ += row + 1 - rows_.size();
        rows_.resize(row + 1);
      }
      auto& slots = rows_[row];
      if (static_cast<std::size_t>(k.micro_batch) >= slots.size()) {
        slots_used_ += static_cast<std::size_t>(k.micro_batch) + 1 - slots.size();
        slots.resize(static_cast<std::size_t>(k.micro_batch) + 1);
      }
      Slot& slot = slots[static_cast<std::size_t>(k.micro_batch)];
      if (!slot.set) {
        slot = {posted_us, k.from_rank, k.to_rank, true};
        return;
      }
      if (slot.from_rank == k.from_rank && slot.to_rank == k.to_rank) return;
      // The same stages and micro-batch between other ranks: the map keeps it.
    }
    sparse_.emplace(k, posted_us);
  }

  // When the transfer's send was posted; NaN when no send of it was seen.
  double find(const TransferKey& k) const {
    if (in_table(k)) {
      const auto row = row_of(k);
      if (row < rows_.size() && static_cast<std::size_t>(k.micro_batch) < rows_[row].size()) {
        const Slot& slot = rows_[row][static_cast<std::size_t>(k.micro_batch)];
        if (slot.set && slot.from_rank == k.from_rank && slot.to_rank == k.to_rank) return slot.posted_us;
      }
      if (sparse_.empty()) return std::numeric_limits<double>::quiet_NaN();
    }
    const auto it = sparse_.find(k);
    return it == sparse_.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
  }

 private:
  struct Slot {
    double posted_us = 0;
    int from_rank = -1, to_rank = -1;
    bool set = false;
  };
  static constexpr int kMaxTableStage = 4096;

  bool in_table(const TransferKey& k) const {
    return k.to_stage >= 0 && k.to_stage < kMaxTableStage && k.micro_batch >= 0 && k.micro_batch <= max_micro_batch_;
  }
  // Whether the key's slot exists or can be made within the budget.
  bool fits(const TransferKey& k) const {
    const auto row = row_of(k);
    const std::size_t have = row < rows_.size() ? rows_[row].size() : 0;
    const std::size_t need = static_cast<std::size_t>(k.micro_batch) + 1;
    return need <= have || slots_used_ + (need - have) + (row >= rows_.size() ? row + 1 - rows_.size() : 0) <= slot_budget_;
  }
  static std::size_t row_of(const TransferKey& k) {
    return static_cast<std::size_t>(k.to_stage) * 2 + (k.direction == 'F' ? 0 : 1);
  }

  int max_micro_batch_;  // a micro-batch number beyond the event count cannot be a dense one
  std::size_t slot_budget_;
  std::size_t slots_used_ = 0;  // rows count as slots too: an empty row costs a vector
  std::vector<std::vector<Slot>> rows_;
  std::unordered_map<TransferKey, double, TransferKeyHash> sparse_;
};


}  // namespace

double ReceiveCosts::ready_mean_us() const { return mean_or_nan(ready_total_us, ready); }
double ReceiveCosts::waited_mean_us() const { return mean_or_nan(waited_total_us, waited); }

std::vector<OperationTime> time_by_operation(const Trace& trace) {
  // A trace has a handful of names and ranks and up to millions of events: events are summed
  // into a (rank, name number) table, and names compared only when the table is ordered.
  std::unordered_map<std::string_view, std::size_t> name_ids;
  std::vector<std::string_view> names;
  std::vector<std::vector<OperationTime>> by_rank;
  std::string_view last_name;
  std::size_t last_id = 0;
  for (const TraceEvent& e : trace.events) {
    if (e.rank < 0) continue;
    if (names.empty() || e.name != last_name) {
      const auto [it, added] = name_ids.emplace(e.name, names.size());
      if (added) names.push_back(e.name);
      last_name = e.name;
      last_id = it->second;
    }
    if (static_cast<std::size_t>(e.rank) >= by_rank.size()) by_rank.resize(static_cast<std::size_t>(e.rank) + 1);
    auto& row = by_rank[static_cast<std::size_t>(e.rank)];
    if (row.size() <= last_id) row.resize(names.size());
    OperationTime& t = row[last_id];
    ++t.count;
    t.total_us += e.dur_us;
  }
  std::vector<std::size_t> by_name(names.size());
  for (std::size_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
  std::sort(by_name.begin(), by_name.end(), [&](std::size_t a, std::size_t b) { return names[a] < names[b]; });
  std::vector<OperationTime> out;
  for (std::size_t rank = 0; rank < by_rank.size(); ++rank)
    for (const std::size_t id : by_name) {
      if (id >= by_rank[rank].size() || by_rank[rank][id].count == 0) continue;
      OperationTime t = by_rank[rank][id];
      t.rank = static_cast<int>(rank);
      t.name = std::string(names[id]);
      out.push_back(std::move(t));
    }
  return out;
}

ReceiveCosts receive_costs(const Trace& trace) {
  // Activations go to the next stage, gradients to the previous one. A repeated key (a trace
  // of several iterations) keeps the first post: the k-th receive then matches nothing later.
  PostTimes posted(trace.events.size());
  for (const TraceEvent& e : trace.events) {
    if (!is_send(e.kind) || e.peer_rank < 0 || e.stage < 0) continue;
    const char direction = direction_of(e.kind);
    const int to_stage = carries_activation(e.kind) ? e.stage + 1 : e.stage - 1;
    posted.add(TransferKey{e.rank, e.peer_rank, direction, e.micro_batch, to_stage}, e.ts_us);
  }
  ReceiveCosts costs;
  for (const TraceEvent& e : trace.events) {
    if (!is_receive(e.kind)) continue;
    const double posted_us =
        e.peer_rank < 0 ? std::numeric_limits<double>::quiet_NaN()
                        : posted.find(TransferKey{e.peer_rank, e.rank, direction_of(e.kind), e.micro_batch, e.stage});
    if (std::isnan(posted_us)) {
      ++costs.unmatched;
    } else if (posted_us <= e.ts_us) {
      ++costs.ready;
      costs.ready_total_us += e.dur_us;
    } else {
      ++costs.waited;
      costs.waited_total_us += std::max(0.0, e.end_us() - posted_us);
    }
  }
  return costs;
}

}  // namespace pipescope::traces
