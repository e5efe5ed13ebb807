// The dry run of all ranks as a dependency graph (Boost.Graph). An edge u -> v says that
// instruction v cannot finish before u has:
//   program order   each instruction after the previous one of its rank;
//   message         a receive after its matching send has been posted (a send does not wait);
//                   under torch's semantics (Schedule::communication) the receive only posts,
//                   and the compute that consumes its data waits for the send instead;
//   rendezvous      with blocking sends, a send after its receive has been posted, that is
//                   after the instruction before the receive (DeepSpeed's rule).
// Only instructions that can wait on another rank (receives, and sends when they block) are
// vertices: any other instruction finishes as soon as the one before it, so it is folded into
// the last waiting instruction at or before it, which keeps exactly the same cycles in a graph
// a third of the size. Data dependencies (F -> B/I -> W, a send after the compute it sends)
// stay within one rank, where check_program_order has held them against program order, so
// here they would only repeat program-order edges. The schedule runs to completion exactly
// when the graph is acyclic; a cycle is reported as the chain of waits around it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/depth_first_search.hpp>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

// Compressed sparse row storage: built in one counting pass from the edge list, and searched
// without per-vertex allocations, which matters at millions of instructions.
using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                                 boost::no_property, std::uint32_t, std::uint32_t>;
using GraphVertex = boost::graph_traits<Graph>::vertex_descriptor;
using GraphEdge = boost::graph_traits<Graph>::edge_descriptor;

struct CycleFound {
  GraphVertex from;  // the back edge from -> to closes the cycle
  GraphVertex to;
};

class CycleRecorder : public boost::default_dfs_visitor {
 public:
  explicit CycleRecorder(std::vector<GraphVertex>& parent) : parent_(&parent) {}
  void tree_edge(GraphEdge e, const Graph& g) const { (*parent_)[boost::target(e, g)] = boost::source(e, g); }
  void back_edge(GraphEdge e, const Graph& g) const { throw CycleFound{boost::source(e, g), boost::target(e, g)}; }

 private:
  std::vector<GraphVertex>* parent_;
};

enum class Wait { ProgramOrder, Message, Rendezvous };

class DeadlockReporter {
 public:
  // last_waiting[v]: the last waiting instruction at or before v on its rank, -1 if none.
  DeadlockReporter(const FlatSchedule& flat, const std::vector<Vertex>& partner, const std::vector<Vertex>& waited_send,
                   const std::vector<Vertex>& last_waiting, bool blocking)
      : flat_(flat), partner_(partner), waited_send_(waited_send), last_waiting_(last_waiting), blocking_(blocking) {}

  // `waits[i]` waits for `waits[i + 1]`, and the last one waits for the first.
  ValidationProblem report(std::vector<Vertex> waits) const {
    // Start at the first instruction (lowest rank, earliest) that waits for another rank, so
    // the same deadlock always reads the same way.
    const std::size_t n = waits.size();
    std::size_t start = n;
    for (std::size_t i = 0; i < n; ++i)
      if (kind(waits[i], waits[(i + 1) % n]) != Wait::ProgramOrder && (start == n || waits[i] < waits[start])) start = i;
    if (start == n) start = 0;
    std::rotate(waits.begin(), waits.begin() + static_cast<std::ptrdiff_t>(start), waits.end());
    waits.push_back(waits.front());

    // The end of the run of program-order waits that starts at waits[i].
    auto run_end = [&](std::size_t i) {
      while (i + 1 < waits.size() && kind(waits[i], waits[i + 1]) == Wait::ProgramOrder) ++i;
      return i;
    };
    std::vector<std::string> links;  // "waits for its send X", "comes after Y", ...
    for (std::size_t i = 0; i + 1 < waits.size();) {
      const Vertex waiter = waits[i];
      switch (kind(waiter, waits[i + 1])) {
        case Wait::Message: {
          const Vertex send = waited_send_[waiter];
          std::string link = is_recv(flat_.node[waiter].op) ? "waits for its send " + flat_.short_name(send)
                                                              : "waits for the data of its posted receive, sent by " + flat_.short_name(send);
          std::size_t j = i + 1;
          if (send != waits[j]) {
            // The send is not itself a waiting instruction: it goes as soon as what precedes it.
            j = run_end(j);
            link += ", which comes after " + flat_.short_name(waits[j]);
          }
          links.push_back(link);
          i = j;
          break;
        }
        case Wait::Rendezvous: {
          const std::size_t j = run_end(i + 1);
          links.push_back("waits (blocking send) for its receive " + flat_.short_name(partner_[waiter]) +
                          " to be posted, which comes after " + flat_.short_name(waits[j]));
          i = j;
          break;
        }
        case Wait::ProgramOrder: {
          const std::size_t j = run_end(i);
          links.push_back("comes after " + flat_.short_name(waits[j]));
          i = j;
          break;
        }
      }
    }
    constexpr std::size_t kMaxLinks = 12;
    std::string chain = flat_.short_name(waits.front());
    for (std::size_t i = 0; i < links.size(); ++i) {
      if (links.size() > kMaxLinks && i == kMaxLinks / 2) {
        const std::size_t skipped = links.size() - kMaxLinks;
        chain += ", ... (" + std::to_string(skipped) + " more waits) ...";
        i += skipped - 1;
        continue;
      }
      chain += (i == 0 ? " " : ", which ") + links[i];
    }
    return problem_at(flat_, waits.front(), "deadlock: " + chain);
  }

 private:
  Wait kind(Vertex waiter, Vertex waited_for) const {
    const Op op = flat_.node[waiter].op;
    if (waited_send_[waiter] != -1 && last_waiting_[waited_send_[waiter]] == waited_for) return Wait::Message;
    if (blocking_ && is_send(op)) {
      const Vertex receive = partner_[waiter];
      if (!flat_.is_first_of_rank(receive) && last_waiting_[receive - 1] == waited_for) return Wait::Rendezvous;
    }
    return Wait::ProgramOrder;
  }

  const FlatSchedule& flat_;
  const std::vector<Vertex>& partner_;
  const std::vector<Vertex>& waited_send_;
  const std::vector<Vertex>& last_waiting_;
  bool blocking_;
};

// For every instruction, the send whose message it waits for, -1 for none: a receive waits
// for its partner under pipescope's semantics; under torch's, the first compute of the same
// (stage, micro-batch) and kind after a receive (F for activations, B/I for gradients) waits
// for that receive's send, and the receive itself waits for nothing.
std::vector<Vertex> waited_sends(const FlatSchedule& flat, const std::vector<Vertex>& partner) {
  std::vector<Vertex> waited(flat.size(), -1);
  const Schedule& schedule = *flat.schedule;
  if (schedule.communication != Communication::Torch) {
    for (std::size_t v = 0; v < flat.size(); ++v)
      if (is_recv(flat.node[v].op)) waited[v] = partner[v];
    return waited;
  }
  const std::size_t m = static_cast<std::size_t>(schedule.num_micro_batches);
  std::vector<Vertex> posted(static_cast<std::size_t>(schedule.num_stages) * m * 2, -1);  // by (stage, mb, is grad)
  auto key = [&](const Node& in, bool grad) { return (static_cast<std::size_t>(in.stage) * m + in.micro_batch) * 2 + grad; };
  for (std::size_t v = 0; v < flat.size(); ++v) {
    const Node& in = flat.node[v];
    if (is_recv(in.op)) {
      posted[key(in, in.op == Op::RecvGrad)] = partner[v];
    } else if (in.op == Op::ForwardPass || in.op == Op::BackwardPass || in.op == Op::BackwardInput) {
      Vertex& send = posted[key(in, in.op != Op::ForwardPass)];
      waited[v] = send;
      send = -1;
    }
  }
  return waited;
}

}  // namespace

Problem check_deadlock(const FlatSchedule& flat, const std::vector<Vertex>& partner, bool blocking_sends) {
  const std::vector<Vertex> waited_send = waited_sends(flat, partner);
  auto waits_on_peer = [&](Vertex v) { return waited_send[v] != -1 || (blocking_sends && is_send(flat.node[v].op)); };
  // Graph ids of the waiting instructions, and for every instruction the last waiting one at
  // or before it on its rank.
  std::vector<Vertex> vertex_of_id;
  std::vector<Vertex> last_waiting(flat.size(), -1);
  std::vector<std::uint32_t> id_of(flat.size(), 0);
  for (std::size_t r = 0; r + 1 < flat.rank_begin.size(); ++r) {
    Vertex last = -1;
    for (Vertex v = flat.rank_begin[r]; v < flat.rank_begin[r + 1]; ++v) {
      if (waits_on_peer(v)) {
        id_of[v] = static_cast<std::uint32_t>(vertex_of_id.size());
        vertex_of_id.push_back(v);
        last = v;
      }
      last_waiting[v] = last;
    }
  }
  if (vertex_of_id.empty()) return std::nullopt;

  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  edges.reserve(vertex_of_id.size() * (blocking_sends ? 3 : 2));
  for (Vertex v : vertex_of_id) {
    // Program order: the previous waiting instruction of the same rank.
    if (!flat.is_first_of_rank(v) && last_waiting[v - 1] != -1) edges.emplace_back(id_of[last_waiting[v - 1]], id_of[v]);
    if (waited_send[v] != -1) {
      const Vertex send = waited_send[v];
      if (last_waiting[send] != -1) edges.emplace_back(id_of[last_waiting[send]], id_of[v]);
    } else {
      const Vertex receive = partner[v];
      if (!flat.is_first_of_rank(receive) && last_waiting[receive - 1] != -1)
        edges.emplace_back(id_of[last_waiting[receive - 1]], id_of[v]);
    }
  }
  const Graph graph(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(), vertex_of_id.size());
  edges = {};

  std::vector<GraphVertex> parent(vertex_of_id.size(), 0);
  std::vector<boost::default_color_type> colors(vertex_of_id.size(), boost::white_color);
  try {
    boost::depth_first_search(graph, CycleRecorder(parent),
                              boost::make_iterator_property_map(colors.begin(), boost::get(boost::vertex_index, graph)));
  } catch (const CycleFound& cycle) {
    // The tree path to -> ... -> from plus the back edge from -> to is the cycle; each vertex
    // waits for its predecessor on it, so walking parents from `from` lists the waits.
    std::vector<Vertex> waits{vertex_of_id[cycle.to]};
    for (GraphVertex g = cycle.from; g != cycle.to; g = parent[g]) waits.push_back(vertex_of_id[g]);
    return DeadlockReporter(flat, partner, waited_send, last_waiting, blocking_sends).report(std::move(waits));
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
