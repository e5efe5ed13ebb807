// Buffer reuse. A buffer id of a stage holds micro-batch mb from the first instruction of that
// stage naming (buffer, mb) to the last one; another micro-batch may use the id only outside
// that interval. DeepSpeed's cyclic ids (mb % num_buffers, with its extra buffer so that the
// receive of a new micro-batch does not clobber a gradient still to be sent) pass this rule.
//
// In the sequence of micro-batches that use one (stage, buffer) slot, in program order, two
// intervals overlap exactly when a micro-batch comes back after another one took the slot
// (the pattern A .. B .. A); that is what is searched for.
#include <algorithm>
#include <string>
#include <vector>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

std::string num(long long value) { return std::to_string(value); }

// Dense numbers for the buffer ids in use: a table when ids are small (the usual case), a
// sorted list otherwise (ids read from a file may be anything up to INT_MAX).
class BufferIds {
 public:
  explicit BufferIds(const FlatSchedule& flat) {
    int max_id = -1;
    for (const Instruction* in : flat.instr) max_id = std::max(max_id, in->buffer);
    if (max_id < kTableLimit) {
      table_.assign(static_cast<std::size_t>(max_id + 1), -1);
      for (const Instruction* in : flat.instr)
        if (in->buffer >= 0 && table_[in->buffer] == -1) table_[in->buffer] = count_++;
    } else {
      for (const Instruction* in : flat.instr)
        if (in->buffer >= 0) sorted_.push_back(in->buffer);
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

}  // namespace

Problem check_buffers(const FlatSchedule& flat) {
  const Schedule& schedule = *flat.schedule;
  const BufferIds ids(flat);
  if (ids.count() == 0) return std::nullopt;
  const int m = schedule.num_micro_batches;

  // Group the buffered per-micro-batch instructions by slot (stage, dense id), keeping program
  // order inside a slot: a counting sort when the slots fit in a table, a sort otherwise.
  std::vector<Vertex> used;
  for (std::size_t v = 0; v < flat.size(); ++v)
    if (flat.instr[v]->buffer >= 0 && needs_micro_batch(flat.instr[v]->op)) used.push_back(static_cast<Vertex>(v));
  auto slot_of = [&](Vertex v) {
    return static_cast<long long>(flat.instr[v]->stage) * ids.count() + ids.dense(flat.instr[v]->buffer);
  };
  const long long num_slots = static_cast<long long>(schedule.num_stages) * ids.count();
  std::vector<Vertex> by_slot(used.size());
  std::vector<std::size_t> slot_start;
  if (num_slots <= 4 * static_cast<long long>(used.size()) + 1024) {
    slot_start.assign(static_cast<std::size_t>(num_slots) + 1, 0);
    for (Vertex v : used) ++slot_start[static_cast<std::size_t>(slot_of(v)) + 1];
    for (std::size_t s = 0; s + 1 < slot_start.size(); ++s) slot_start[s + 1] += slot_start[s];
    std::vector<std::size_t> next(slot_start.begin(), slot_start.end() - 1);
    for (Vertex v : used) by_slot[next[static_cast<std::size_t>(slot_of(v))]++] = v;
  } else {
    by_slot = used;
    std::stable_sort(by_slot.begin(), by_slot.end(), [&](Vertex a, Vertex b) { return slot_of(a) < slot_of(b); });
  }

  // last_slot[pair] and run_end[pair]: the slot where the micro-batch of that pair was last seen
  // and the index (into by_slot) of the last instruction of that run.
  const std::size_t pairs = static_cast<std::size_t>(schedule.num_stages) * m;
  std::vector<long long> last_slot(pairs, -1);
  std::vector<std::size_t> run_end(pairs, 0);
  for (std::size_t k = 0; k < by_slot.size(); ++k) {
    const Instruction& in = *flat.instr[by_slot[k]];
    const long long slot = slot_of(by_slot[k]);
    const std::size_t pair = static_cast<std::size_t>(in.stage) * m + in.micro_batch;
    const bool continues_run = k > 0 && slot_of(by_slot[k - 1]) == slot &&
                               flat.instr[by_slot[k - 1]]->micro_batch == in.micro_batch;
    if (!continues_run && last_slot[pair] == slot) {
      // The micro-batch is back in a slot that another one took over in between.
      const Vertex intruder = by_slot[run_end[pair] + 1];
      return flat.problem_at(intruder, "overwrites buffer " + num(in.buffer) + " of stage " + num(in.stage) +
                                           " while it still holds micro-batch " + num(in.micro_batch) + " (used again by " +
                                           flat.short_name(by_slot[k]) + ")");
    }
    last_slot[pair] = slot;
    run_end[pair] = k;
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
