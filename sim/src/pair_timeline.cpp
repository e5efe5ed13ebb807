// The overlapped step's event loop (pair_timeline.hpp). Between two events every running piece
// progresses at a fixed rate: the link at its own, the compute at 1 / slowdown of its own while a
// link piece runs and at its own otherwise. A piece's end is planned when it starts and moved
// only when the compute's rate changes, so with a slowdown of 1 every end is its start plus its
// work_s, as a list schedule gives it. An off-chain piece (a delayed weight gradient) does not
// hold its pass: the pass's next piece may start beside it on the other resource.
#include "pair_timeline.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>

namespace pipescope::sim::detail {

namespace {

constexpr int kNoPiece = -1;
constexpr int kForwardPass = 0;
constexpr int kBackwardPass = 1;

int resource_index(PairResource r) { return r == PairResource::Compute ? 0 : 1; }

class PairTimelineRun {
 public:
  PairTimelineRun(const std::vector<PairPiece>& issued, PairOrder order, double compute_slowdown)
      : issued_(issued), order_(order), slowdown_(std::max(compute_slowdown, 1.0)) {
    done_.assign(issued_.size(), false);
    for (std::size_t i = 0; i < issued_.size(); ++i) {
      const int id = static_cast<int>(i);
      std::vector<int>& chain = pass_pieces_[pass_of(id)];
      if (is_filler(id)) {
        fillers_.push_back({id, chain.empty() ? kNoPiece : chain.back()});
        continue;
      }
      chain.push_back(id);
      resource_pieces_[resource_index(issued_[i].resource)].push_back(id);
    }
  }

  PairTimeline run() {
    while (start_ready_pieces()) advance_to_next_end();
    const bool fillers_left = std::any_of(fillers_.begin(), fillers_.end(), [](const Filler& f) { return !f.started; });
    if (pass_next_[kForwardPass] < pass_pieces_[kForwardPass].size() ||
        pass_next_[kBackwardPass] < pass_pieces_[kBackwardPass].size() || fillers_left)
      throw std::logic_error("overlapped step: pieces issued in an order their passes cannot run");
    return result_;
  }

 private:
  int pass_of(int id) const {
    return issued_[static_cast<std::size_t>(id)].backward_pass ? kBackwardPass : kForwardPass;
  }

  // In the free interleaving a delayed weight gradient leaves its pass's chain: it fills the
  // compute when no pass has a compute piece ready (as a zero-bubble schedule's W fills a
  // bubble), once the piece issued before it in its pass has ended. In issue order it keeps its
  // place on its stream.
  bool is_filler(int id) const {
    return order_ == PairOrder::FirstReady && issued_[static_cast<std::size_t>(id)].off_chain;
  }

  int ready_filler() {
    for (Filler& f : fillers_)
      if (!f.started && (f.after == kNoPiece || done_[static_cast<std::size_t>(f.after)])) {
        f.started = true;
        return f.id;
      }
    return kNoPiece;
  }

  // The piece a free resource runs next, if one is ready: its pass's previous piece has ended.
  int next_piece_for(int resource) {
    if (order_ == PairOrder::IssueOrder) {
      const std::vector<int>& queue = resource_pieces_[resource];
      if (resource_next_[resource] >= queue.size()) return kNoPiece;
      const int id = queue[resource_next_[resource]];
      return pass_ready_next(pass_of(id)) == id ? id : kNoPiece;
    }
    for (const int pass : {kBackwardPass, kForwardPass}) {
      const int id = pass_ready_next(pass);
      if (id != kNoPiece && resource_index(issued_[static_cast<std::size_t>(id)].resource) == resource) return id;
    }
    return resource == resource_index(PairResource::Compute) ? ready_filler() : kNoPiece;
  }

  // The pass's next piece while none of its pieces runs.
  int pass_ready_next(int pass) const {
    if (pass_busy_[pass] || pass_next_[pass] >= pass_pieces_[pass].size()) return kNoPiece;
    return pass_pieces_[pass][pass_next_[pass]];
  }

  // Starts what can start now; false when nothing runs (every piece done). Starting an
  // off-chain piece frees its pass's next piece at once, so the resources are asked again until
  // neither starts one.
  bool start_ready_pieces() {
    bool started = true;
    while (started) {
      started = false;
      for (const int resource : {1, 0}) {
        if (running_[resource] != kNoPiece) continue;
        const int id = next_piece_for(resource);
        if (id == kNoPiece) continue;
        start(id, resource);
        started = true;
      }
    }
    set_compute_stretch();
    return running_[0] != kNoPiece || running_[1] != kNoPiece;
  }

  void start(int id, int resource) {
    const PairPiece& piece = issued_[static_cast<std::size_t>(id)];
    const int pass = pass_of(id);
    running_[resource] = id;
    pass_busy_[pass] = !piece.off_chain;
    if (!is_filler(id)) ++pass_next_[pass];
    ++resource_next_[resource];
    stretch_[resource] = 1;
    end_s_[resource] = now_s_ + piece.work_s;
    if (piece.resource == PairResource::Link) {
      running_link_piece_ = result_.link_pieces.size();
      result_.link_pieces.push_back({piece.kind, piece.backward_pass, now_s_, end_s_[resource]});
    }
  }

  // The compute runs `slowdown_` times longer while a link piece is running: what is left of
  // its work is stretched or shrunk from now on.
  void set_compute_stretch() {
    const double stretch = running_[1] != kNoPiece ? slowdown_ : 1.0;
    if (running_[0] == kNoPiece || stretch == stretch_[0]) return;
    const double work_left_s = (end_s_[0] - now_s_) / stretch_[0];
    stretch_[0] = stretch;
    end_s_[0] = now_s_ + work_left_s * stretch;
  }

  void advance_to_next_end() {
    double next_s = 0;
    bool any = false;
    for (int r = 0; r < 2; ++r) {
      if (running_[r] == kNoPiece) continue;
      next_s = any ? std::min(next_s, end_s_[r]) : end_s_[r];
      any = true;
    }
    now_s_ = next_s;
    for (int r = 0; r < 2; ++r)
      if (running_[r] != kNoPiece && end_s_[r] <= now_s_) finish(r);
  }

  void finish(int resource) {
    const int id = running_[resource];
    const int pass = pass_of(id);
    running_[resource] = kNoPiece;
    done_[static_cast<std::size_t>(id)] = true;
    if (!issued_[static_cast<std::size_t>(id)].off_chain) pass_busy_[pass] = false;
    (pass == kForwardPass ? result_.forward_end_s : result_.backward_end_s) = now_s_;
    if (resource == 0) {
      result_.compute_free_s = now_s_;
      return;
    }
    result_.link_free_s = now_s_;
    result_.link_pieces[running_link_piece_].end_s = now_s_;
  }

  const std::vector<PairPiece>& issued_;
  PairOrder order_;
  double slowdown_;
  std::array<std::vector<int>, 2> pass_pieces_;      // forward, backward: their pieces in order
  std::array<std::vector<int>, 2> resource_pieces_;  // compute, link: the pieces issued to each
  std::array<std::size_t, 2> pass_next_{0, 0};
  std::array<std::size_t, 2> resource_next_{0, 0};
  std::array<bool, 2> pass_busy_{false, false};
  std::array<int, 2> running_{kNoPiece, kNoPiece};  // per resource
  std::array<double, 2> end_s_{0, 0};               // per resource: its running piece's planned end
  std::array<double, 2> stretch_{1, 1};             // per resource: seconds a second of work takes now
  struct Filler {
    int id = kNoPiece;
    int after = kNoPiece;  // the piece of its pass issued before it, which it waits for
    bool started = false;
  };
  std::vector<Filler> fillers_;  // FirstReady's delayed weight gradients, in issue order
  std::vector<bool> done_;       // per piece: ended
  std::size_t running_link_piece_ = 0;
  double now_s_ = 0;
  PairTimeline result_;
};

}  // namespace

PairTimeline run_pair_timeline(const std::vector<PairPiece>& issued, PairOrder order, double compute_slowdown) {
  return PairTimelineRun(issued, order, compute_slowdown).run();
}

}  // namespace pipescope::sim::detail
