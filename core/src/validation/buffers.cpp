// Buffer reuse. A buffer id of a stage holds micro-batch mb from the first instruction of that
// stage naming (buffer, mb) to the last one; another micro-batch may use the id only outside
// that interval. DeepSpeed's cyclic ids (mb % num_buffers, with its extra buffer so that the
// receive of a new micro-batch does not clobber a gradient still to be sent) pass this rule.
//
// When each micro-batch keeps one id per stage (every schedule pipescope or DeepSpeed makes),
// one walk in program order with the last use of every (stage, micro-batch) finds the first
// overlap. Otherwise the uses are grouped by slot, where two intervals overlap exactly when a
// micro-batch comes back after another one took the slot (the pattern A .. B .. A).
#include <algorithm>
#include <unordered_map>
#include <string>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

// Dense numbers for the buffer ids in use: a table when ids are small (the usual case), a
// sorted list otherwise (ids read from a file may be anything up to INT_MAX).
class BufferIds {
 public:
  explicit BufferIds(const FlatSchedule& flat) {
    int max_id = -1;
    for (const Node& in : flat.node) max_id = std::max(max_id, in.buffer);
    if (max_id < kTableLimit) {
      table_.assign(static_cast<std::size_t>(max_id + 1), -1);
      for (const Node& in : flat.node)
        if (in.buffer >= 0 && table_[in.buffer] == -1) table_[in.buffer] = count_++;
    } else {
      for (const Node& in : flat.node)
        if (in.buffer >= 0) sorted_.push_back(in.buffer);
      std::sort(sorted_.begin(), sorted_.end());
      sorted_.erase(std::unique(sorted_.begin(), sorted_.end()), sorted_.end());
      count_ = static_cast<int>(sorted_.size());
    }
  }
  int count() const { return count_; }
  int dense(int id) const {
    if (!table_.empty() || sorted_.empty()) return table_[id];
    return static_cast<int>(std::lower_bound(sorted_.begin(), sorted_.end(), id) - sorted_.begin());
  }

 private:
  static constexpr int kTableLimit = 1 << 20;
  std::vector<int> table_;
  std::vector<int> sorted_;
  int count_ = 0;
};

// Dense numbers for the (stage, buffer id) slots: stage x id when that table is small, which
// it is for every real schedule; numbered in order of first use otherwise, so that memory stays
// proportional to the schedule whatever stage count and ids a file declares.
class Slots {
 public:
  explicit Slots(const FlatSchedule& flat) : flat_(flat), ids_(flat) {
    const long long table = static_cast<long long>(flat.schedule->num_stages) * ids_.count();
    if (table <= 4 * static_cast<long long>(flat.size()) + 1024) {
      count_ = static_cast<std::size_t>(table);
      return;
    }
    std::unordered_map<long long, int> numbers;
    by_vertex_.assign(flat.size(), -1);
    for (std::size_t v = 0; v < flat.size(); ++v) {
      const Node& in = flat.node[v];
      if (in.buffer < 0) continue;
      const long long key = static_cast<long long>(in.stage) * ids_.count() + ids_.dense(in.buffer);
      by_vertex_[v] = numbers.emplace(key, static_cast<int>(numbers.size())).first->second;
    }
    count_ = numbers.size();
  }
  bool empty() const { return ids_.count() == 0; }
  std::size_t count() const { return count_; }
  // The slot of a buffered vertex.
  std::size_t of(Vertex v) const {
    if (!by_vertex_.empty()) return static_cast<std::size_t>(by_vertex_[v]);
    const Node& in = flat_.node[v];
    return static_cast<std::size_t>(in.stage) * ids_.count() + ids_.dense(in.buffer);
  }

 private:
  const FlatSchedule& flat_;
  BufferIds ids_;
  std::size_t count_ = 0;
  std::vector<int> by_vertex_;
};

// One buffered instruction: its slot and (stage, micro-batch) pair spelled out, so the scan
// over a slot's uses walks memory in order.
struct Use {
  std::size_t slot;
  std::size_t pair;
  Vertex vertex;
};

// The walk for one id per (stage, micro-batch); sets `applies` to false when some micro-batch
// uses two ids on one stage.
Problem check_single_id_per_pair(const FlatSchedule& flat, const Slots& slots, bool& applies) {
  const Schedule& schedule = *flat.schedule;
  const int m = schedule.num_micro_batches;
  const std::size_t pairs = static_cast<std::size_t>(schedule.num_stages) * m;
  std::vector<int> id_of_pair(pairs, -1);
  std::vector<Vertex> last_use(pairs, -1);
  const Vertex n = static_cast<Vertex>(flat.size());
  for (Vertex v = 0; v < n; ++v) {
    const Node& in = flat.node[v];
    if (in.buffer < 0 || !needs_micro_batch(in.op)) continue;
    const std::size_t pair = static_cast<std::size_t>(in.stage) * m + in.micro_batch;
    if (id_of_pair[pair] == -1) id_of_pair[pair] = in.buffer;
    if (id_of_pair[pair] != in.buffer) {
      applies = false;
      return std::nullopt;
    }
    last_use[pair] = v;
  }
  applies = true;
  std::vector<long long> holder(slots.count(), -1);  // the pair in each slot
  for (Vertex v = 0; v < n; ++v) {
    const Node& in = flat.node[v];
    if (in.buffer < 0 || !needs_micro_batch(in.op)) continue;
    const std::size_t pair = static_cast<std::size_t>(in.stage) * m + in.micro_batch;
    long long& held = holder[slots.of(v)];
    if (held == static_cast<long long>(pair)) continue;
    if (held != -1 && last_use[held] > v) {
      // Name the next use of the displaced micro-batch, found by a scan only on this error path.
      const int displaced = static_cast<int>(held % m);
      Vertex next_use = v + 1;
      while (!(flat.node[next_use].stage == in.stage && flat.node[next_use].micro_batch == displaced &&
               flat.node[next_use].buffer == in.buffer && needs_micro_batch(flat.node[next_use].op)))
        ++next_use;
      return problem_at(flat, v, "overwrites buffer " + num(in.buffer) + " of stage " + num(in.stage) + " while it still holds micro-batch " +
                                     num(displaced) + " (used again by " + flat.short_name(next_use) + ")");
    }
    held = static_cast<long long>(pair);
  }
  return std::nullopt;
}

}  // namespace

Problem check_buffers(const FlatSchedule& flat) {
  const Schedule& schedule = *flat.schedule;
  const Slots slots(flat);
  if (slots.empty()) return std::nullopt;
  const int m = schedule.num_micro_batches;
  bool single_id = false;
  if (Problem problem = check_single_id_per_pair(flat, slots, single_id)) return problem;
  if (single_id) return std::nullopt;

  // Group the uses by slot with a stable counting sort, keeping program order inside a slot.
  std::vector<Use> uses;
  const Vertex n = static_cast<Vertex>(flat.size());
  for (Vertex v = 0; v < n; ++v) {
    const Node& in = flat.node[v];
    if (in.buffer < 0 || !needs_micro_batch(in.op)) continue;
    uses.push_back({slots.of(v), static_cast<std::size_t>(in.stage) * m + in.micro_batch, v});
  }
  std::vector<std::size_t> next(slots.count() + 1, 0);
  for (const Use& use : uses) ++next[use.slot + 1];
  for (std::size_t s = 0; s + 1 < next.size(); ++s) next[s + 1] += next[s];
  std::vector<Use> grouped(uses.size());
  for (const Use& use : uses) grouped[next[use.slot]++] = use;
  uses.swap(grouped);

  // last_slot[pair] and run_end[pair]: the slot where the pair was last seen and the index
  // (into uses) of the last instruction of that run.
  const std::size_t pairs = static_cast<std::size_t>(schedule.num_stages) * m;
  std::vector<long long> last_slot(pairs, -1);
  std::vector<std::size_t> run_end(pairs, 0);
  for (std::size_t k = 0; k < uses.size(); ++k) {
    const Use& use = uses[k];
    const bool continues_run = k > 0 && uses[k - 1].slot == use.slot && uses[k - 1].pair == use.pair;
    if (!continues_run && last_slot[use.pair] == static_cast<long long>(use.slot)) {
      // The micro-batch is back in a slot that another one took over in between.
      const Node& in = flat.node[use.vertex];
      const Vertex intruder = uses[run_end[use.pair] + 1].vertex;
      return problem_at(flat, intruder, "overwrites buffer " + num(in.buffer) + " of stage " + num(in.stage) +
                                            " while it still holds micro-batch " + num(in.micro_batch) + " (used again by " +
                                            flat.short_name(use.vertex) + ")");
    }
    last_slot[use.pair] = static_cast<long long>(use.slot);
    run_end[use.pair] = k;
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
