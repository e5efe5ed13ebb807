// The dry run of all ranks as a dependency graph (Boost.Graph). A vertex is an instruction
// finishing; an edge u -> v says v cannot finish before u has:
//   program order   each instruction after the previous one of its rank;
//   message         a receive after its matching send has been posted (a send does not wait);
//   rendezvous      with blocking sends, a send after its receive has been posted, that is
//                   after the instruction before the receive (DeepSpeed's rule).
// Data dependencies (F -> B/I -> W, a send after the compute it sends) stay within one rank,
// where check_program_order has already held them against program order, so here they would
// only repeat program-order edges. The schedule runs to completion exactly when the graph is
// acyclic; a cycle is reported as the chain of waits around it.
#include <algorithm>
#include <string>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/depth_first_search.hpp>

#include "checks.hpp"

namespace pipescope::validation {
namespace {

// Compressed sparse row: the edges are generated already sorted by source, and building and
// searching it over millions of instructions costs a fraction of an adjacency_list.
using Graph = boost::compressed_sparse_row_graph<boost::directedS>;
using GraphVertex = boost::graph_traits<Graph>::vertex_descriptor;
using GraphEdge = boost::graph_traits<Graph>::edge_descriptor;

struct CycleFound {
  GraphVertex from;  // the back edge from -> to closes the cycle
  GraphVertex to;
};

class CycleRecorder : public boost::default_dfs_visitor {
 public:
  explicit CycleRecorder(std::vector<Vertex>& parent) : parent_(&parent) {}
  void tree_edge(GraphEdge e, const Graph& g) const {
    (*parent_)[boost::target(e, g)] = static_cast<Vertex>(boost::source(e, g));
  }
  void back_edge(GraphEdge e, const Graph& g) const { throw CycleFound{boost::source(e, g), boost::target(e, g)}; }

 private:
  std::vector<Vertex>* parent_;
};

enum class Wait { ProgramOrder, Message, Rendezvous };

class DeadlockReporter {
 public:
  DeadlockReporter(const FlatSchedule& flat, const std::vector<Vertex>& partner, bool blocking)
      : flat_(flat), partner_(partner), blocking_(blocking) {}

  // `waits[i]` waits for `waits[i + 1]`, and the last one waits for the first.
  ValidationProblem report(std::vector<Vertex> waits) const {
    // Start at the first instruction (lowest rank, earliest) that waits for another rank, so
    // the same deadlock always reads the same way.
    std::size_t start = 0;
    for (std::size_t i = 0; i < waits.size(); ++i) {
      const Vertex next = waits[(i + 1) % waits.size()];
      if (kind(waits[i], next) != Wait::ProgramOrder &&
          (kind(waits[start], waits[(start + 1) % waits.size()]) == Wait::ProgramOrder || waits[i] < waits[start]))
        start = i;
    }
    std::rotate(waits.begin(), waits.begin() + static_cast<std::ptrdiff_t>(start), waits.end());
    waits.push_back(waits.front());

    std::vector<std::string> links;  // "waits for its send X", "comes after Y", ...
    for (std::size_t i = 0; i + 1 < waits.size();) {
      const Vertex waiter = waits[i];
      const Wait wait = kind(waiter, waits[i + 1]);
      if (wait == Wait::ProgramOrder) {
        // A run of program-order edges reads as one "comes after".
        std::size_t j = i + 1;
        while (j + 1 < waits.size() && kind(waits[j], waits[j + 1]) == Wait::ProgramOrder) ++j;
        links.push_back("comes after " + flat_.short_name(waits[j]));
        i = j;
      } else if (wait == Wait::Message) {
        links.push_back("waits for its send " + flat_.short_name(waits[i + 1]));
        ++i;
      } else {
        const Vertex receive = partner_[waiter];
        std::string link = "waits (blocking send) for its receive " + flat_.short_name(receive) + " to be posted";
        // The receive is posted once the instruction before it is done, which is the next vertex.
        std::size_t j = i + 1;
        while (j + 1 < waits.size() && kind(waits[j], waits[j + 1]) == Wait::ProgramOrder) ++j;
        link += ", which comes after " + flat_.short_name(waits[j]);
        links.push_back(link);
        i = j;
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
    return flat_.problem_at(waits.front(), "deadlock: " + chain);
  }

 private:
  Wait kind(Vertex waiter, Vertex waited_for) const {
    if (is_recv(flat_.instr[waiter]->op) && partner_[waiter] == waited_for) return Wait::Message;
    if (blocking_ && is_send(flat_.instr[waiter]->op) && partner_[waiter] != -1 &&
        partner_[waiter] - 1 == waited_for && !flat_.is_first_of_rank(partner_[waiter]))
      return Wait::Rendezvous;
    return Wait::ProgramOrder;
  }

  const FlatSchedule& flat_;
  const std::vector<Vertex>& partner_;
  bool blocking_;
};

}  // namespace

Problem check_deadlock(const FlatSchedule& flat, const std::vector<Vertex>& partner, bool blocking_sends) {
  const std::size_t n = flat.size();
  if (n == 0) return std::nullopt;
  std::vector<std::pair<GraphVertex, GraphVertex>> edges;
  edges.reserve(n * 2);
  // Edges in source order, as the sorted-edges constructor wants them.
  for (std::size_t u = 0; u < n; ++u) {
    const Vertex v = static_cast<Vertex>(u);
    if (!flat.is_last_of_rank(v)) edges.emplace_back(u, u + 1);
    const Op op = flat.instr[v]->op;
    if (is_send(op) && partner[v] != -1) edges.emplace_back(u, partner[v]);
    if (blocking_sends && !flat.is_last_of_rank(v)) {
      // v is the instruction before v + 1; if v + 1 is a receive, its send waits for v.
      const Vertex next = v + 1;
      if (is_recv(flat.instr[next]->op) && partner[next] != -1) edges.emplace_back(u, partner[next]);
    }
  }
  // Several edges per source come out in order of target only per kind; the sorted-edges
  // constructor needs sources ascending, which holds.
  const Graph graph(boost::edges_are_sorted, edges.begin(), edges.end(), n);
  edges.clear();
  edges.shrink_to_fit();

  std::vector<Vertex> parent(n, -1);
  std::vector<boost::default_color_type> colors(n, boost::white_color);
  try {
    boost::depth_first_search(
        graph, CycleRecorder(parent),
        boost::make_iterator_property_map(colors.begin(), boost::get(boost::vertex_index, graph)));
  } catch (const CycleFound& cycle) {
    // The tree path to -> ... -> from plus the back edge from -> to is the cycle; each vertex
    // waits for its predecessor on it, so walking parents from `from` lists the waits.
    std::vector<Vertex> waits{static_cast<Vertex>(cycle.to)};
    for (Vertex v = static_cast<Vertex>(cycle.from); v != static_cast<Vertex>(cycle.to); v = parent[v]) waits.push_back(v);
    return DeadlockReporter(flat, partner, blocking_sends).report(std::move(waits));
  }
  return std::nullopt;
}

}  // namespace pipescope::validation
