// Gloo through c10d: a store rendezvous (rendezvous_store.hpp) and one ProcessGroupGloo per
// group. c10d errors (timeouts, closed connections) become TransportError.
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "pipescope/exec/transport.hpp"
#include "rendezvous_store.hpp"
#include "transport_errors.hpp"
#include "transport_wait.hpp"

namespace pipescope::exec {
namespace {

class GlooPending : public PendingTransfer {
 public:
  GlooPending(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keep_alive, std::string what)
      : work_(std::move(work)), keep_alive_(std::move(keep_alive)), what_(std::move(what)) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (!work_) return;
    try {
      spin(timeout);
      work_->wait(timeout);
    } catch (const std::exception& e) {
      work_.reset();
      throw TransportError(fmt::format("{}: {}", what_, plain_transport_message(e.what())));
    }
    work_.reset();
    keep_alive_.clear();
  }

 private:
  // Within this thread's spin limit (transport_wait.hpp), the core stays this rank's: the
  // transport's threads, runnable on it, get it at each yield.
  void spin(std::chrono::milliseconds timeout) {
    const auto limit = std::min<std::chrono::microseconds>(spin_limit_of_this_thread(), timeout);
    if (limit.count() <= 0) return;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!work_->isCompleted() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keep_alive_;
  std::string what_;
};

class GlooTransport : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::Store> store, std::vector<int> members, int group_rank, std::string name,
                c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options)
      : store_(std::move(store)),
        members_(std::move(members)),
        group_rank_(group_rank),
        name_(std::move(name)),
        options_(std::move(options)) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name_, store_);
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank_, static_cast<int>(members_.size()),
                                                           options_);
    } catch (const std::exception& e) {
      std::string message = e.what();
      if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
      throw TransportError(
          fmt::format("process group '{}' (rank {} of {}): {}", name_, group_rank_, members_.size(), message));
    }
  }

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "gloo"; }

  std::unique_ptr<PendingTransfer> send(at::Tensor tensor, int peer, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    return run(fmt::format("send to rank {}", members_.at(peer)), tensors,
               [&] { return group_->send(tensors, peer, tag); });
  }
  std::unique_ptr<PendingTransfer> recv(at::Tensor tensor, int peer, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    return run(fmt::format("receive from rank {}", members_.at(peer)), tensors,
               [&] { return group_->recv(tensors, peer, tag); });
  }
  std::unique_ptr<PendingTransfer> all_reduce_sum(at::Tensor tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    return run(fmt::format("all-reduce over group '{}'", name_), tensors, [&] { return group_->allreduce(tensors); });
  }
  std::unique_ptr<PendingTransfer> all_gather(at::Tensor input, at::Tensor output) override {
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs{output.view({-1}).chunk(size())};
    for (auto& o : outputs[0]) o = o.view(input.sizes());
    std::vector<at::Tensor> keep{input, output};
    return run(fmt::format("all-gather over group '{}'", name_), keep,
               [&] { return group_->allgather(outputs, inputs); });
  }

  std::unique_ptr<PendingTransfer> all_to_all(at::Tensor output, at::Tensor input,
                                              const std::vector<std::int64_t>& output_splits,
                                              const std::vector<std::int64_t>& input_splits) override {
    std::vector<std::int64_t> out_splits = output_splits, in_splits = input_splits;
    std::vector<at::Tensor> keep{input, output};
    return run(fmt::format("all-to-all over group '{}'", name_), keep,
               [&] { return group_->alltoall_base(output, input, out_splits, in_splits); });
  }

  std::unique_ptr<Transport> subgroup(const std::vector<int>& ranks, const std::string& name) override {
    std::vector<int> world_members;
    int my_index = -1;
    for (int r : ranks) {
      if (r == group_rank_) my_index = static_cast<int>(world_members.size());
      world_members.push_back(members_.at(r));
    }
    if (my_index < 0) throw TransportError(fmt::format("subgroup {}: rank {} is not a member", name, group_rank_));
    return std::make_unique<GlooTransport>(store_, world_members, my_index, name_ + "/" + name, options_);
  }

 private:
  template <typename Start>
  std::unique_ptr<PendingTransfer> run(std::string what, std::vector<at::Tensor> keep, Start start) {
    try {
      return std::make_unique<GlooPending>(start(), std::move(keep), std::move(what));
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("{}: {}", what, plain_transport_message(e.what())));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int> members_;
  int group_rank_;
  std::string name_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

bool is_loopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "localhost" || addr == "::1" || addr.starts_with("127.");
}

}  // namespace

bool gloo_support_built() { return true; }

World make_gloo_world(const WorldOptions& o) {
  c10::intrusive_ptr<c10d::Store> store = open_rendezvous_store(o);
  auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
  // On one node the pipeline traffic stays on the loopback interface.
  options->devices.push_back(is_loopback(o.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                        : c10d::ProcessGroupGloo::createDefaultDevice());
  options->threads = 2;
  std::vector<int> members(static_cast<std::size_t>(o.world_size));
  for (int r = 0; r < o.world_size; ++r) members[r] = r;
  World world;
  world.transport = std::make_unique<GlooTransport>(store, members, o.rank, "world", options);
  world.store = std::make_shared<StoreAdapter>(c10::make_intrusive<c10d::PrefixStore>("kv", store));
  return world;
}

}  // namespace pipescope::exec
