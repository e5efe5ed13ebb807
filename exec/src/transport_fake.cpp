// The in-process fake transport: ranks are threads sharing one FakeNetwork of mailboxes.
// Sends copy eagerly (as a real transport owns its buffer once posted); receives and
// collectives wait with a deadline, and a rank marked failed breaks every wait involving it.
#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

struct FakeMessage {
  at::Tensor data;
  bool consumed = false;
};

struct FakeCollective {
  std::vector<at::Tensor> contributions;  // by group rank
  int arrived = 0;
  int departed = 0;
};

class FakeNetwork {
 public:
  explicit FakeNetwork(int world_size) : world_size_(world_size) {}

  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<std::string, int, int, int>, std::deque<std::shared_ptr<FakeMessage>>> mailboxes;
  std::map<std::string, FakeCollective> collectives;
  std::set<int> failed_ranks;
  int world_size() const { return world_size_; }

  // Waits under `lock` until `ready` holds; throws naming `what` on timeout or failure of one of
  // `involved` (world ranks).
  template <typename Ready>
  void wait_for(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, const std::vector<int>& involved,
                const std::string& what, Ready ready) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!ready()) {
      for (int r : involved)
        if (failed_ranks.count(r)) throw TransportError(fmt::format("{}: rank {} failed", what, r));
      if (changed.wait_until(lock, deadline) == std::cv_status::timeout && !ready())
        throw TransportError(fmt::format("{}: timed out after {:g} s", what, timeout.count() / 1000.0));
    }
  }

 private:
  int world_size_;
};

namespace {

class FakePending : public PendingTransfer {
 public:
  using WaitFn = std::function<void(std::chrono::milliseconds)>;
  explicit FakePending(WaitFn fn) : fn_(std::move(fn)) {}
  void wait(std::chrono::milliseconds timeout) override {
    if (fn_) fn_(timeout);
    fn_ = nullptr;
  }

 private:
  WaitFn fn_;
};

class FakeTransport : public Transport {
 public:
  FakeTransport(std::shared_ptr<FakeNetwork> network, std::vector<int> members, int group_rank, std::string name)
      : network_(std::move(network)), members_(std::move(members)), group_rank_(group_rank), name_(std::move(name)) {}

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "fake"; }

  std::unique_ptr<PendingTransfer> send(at::Tensor tensor, int peer, int tag) override {
    auto message = std::make_shared<FakeMessage>();
    message->data = tensor.clone();
    {
      std::lock_guard<std::mutex> lock(network_->mutex);
      network_->mailboxes[{name_, members_[group_rank_], members_.at(peer), tag}].push_back(message);
    }
    network_->changed.notify_all();
    const int peer_world = members_.at(peer);
    const int self_world = members_[group_rank_];
    return std::make_unique<FakePending>([net = network_, message, peer_world, self_world](std::chrono::milliseconds timeout) {
      std::unique_lock<std::mutex> lock(net->mutex);
      net->wait_for(lock, timeout, {peer_world, self_world}, fmt::format("send to rank {}", peer_world),
                    [&] { return message->consumed; });
    });
  }

  std::unique_ptr<PendingTransfer> recv(at::Tensor tensor, int peer, int tag) override {
    const auto key = std::make_tuple(name_, members_.at(peer), members_[group_rank_], tag);
    const int peer_world = members_.at(peer);
    return std::make_unique<FakePending>([net = network_, key, tensor, peer_world](std::chrono::milliseconds timeout) mutable {
      std::unique_lock<std::mutex> lock(net->mutex);
      auto& box = net->mailboxes[key];
      net->wait_for(lock, timeout, {peer_world}, fmt::format("receive from rank {}", peer_world),
                    [&] { return !box.empty(); });
      auto message = box.front();
      box.pop_front();
      tensor.copy_(message->data);
      message->consumed = true;
      lock.unlock();
      net->changed.notify_all();
    });
  }

  std::unique_ptr<PendingTransfer> all_reduce_sum(at::Tensor tensor) override {
    return collective(tensor, [tensor](const std::vector<at::Tensor>& parts) mutable {
      // Summed in rank order, the same on every rank.
      at::Tensor sum = parts[0].clone();
      for (std::size_t i = 1; i < parts.size(); ++i) sum.add_(parts[i]);
      tensor.copy_(sum);
    });
  }

  std::unique_ptr<PendingTransfer> all_gather(at::Tensor input, at::Tensor output) override {
    return collective(input, [output](const std::vector<at::Tensor>& parts) mutable {
      auto flat = output.view({-1});
      const auto n = parts[0].numel();
      for (std::size_t i = 0; i < parts.size(); ++i)
        flat.slice(0, static_cast<std::int64_t>(i) * n, static_cast<std::int64_t>(i + 1) * n).copy_(parts[i].reshape({-1}));
    });
  }

  std::unique_ptr<Transport> subgroup(const std::vector<int>& ranks, const std::string& name) override {
    std::vector<int> world_members;
    int my_index = -1;
    for (int r : ranks) {
      if (r == group_rank_) my_index = static_cast<int>(world_members.size());
      world_members.push_back(members_.at(r));
    }
    if (my_index < 0) throw TransportError(fmt::format("subgroup {}: rank {} is not a member", name, group_rank_));
    return std::make_unique<FakeTransport>(network_, world_members, my_index, name_ + "/" + name);
  }

 private:
  std::unique_ptr<PendingTransfer> collective(at::Tensor input, std::function<void(const std::vector<at::Tensor>&)> finish) {
    const std::string key = fmt::format("{}#{}", name_, sequence_++);
    {
      std::lock_guard<std::mutex> lock(network_->mutex);
      auto& c = network_->collectives[key];
      if (c.contributions.empty()) c.contributions.resize(members_.size());
      c.contributions[group_rank_] = input.clone();
      ++c.arrived;
    }
    network_->changed.notify_all();
    return std::make_unique<FakePending>([net = network_, key, members = members_, finish](std::chrono::milliseconds timeout) {
      std::unique_lock<std::mutex> lock(net->mutex);
      auto& c = net->collectives[key];
      net->wait_for(lock, timeout, members, fmt::format("collective {}", key),
                    [&] { return c.arrived == static_cast<int>(members.size()); });
      finish(c.contributions);
      if (++c.departed == static_cast<int>(members.size())) net->collectives.erase(key);
    });
  }

  std::shared_ptr<FakeNetwork> network_;
  std::vector<int> members_;  // world ranks, by group rank
  int group_rank_;
  std::string name_;
  std::uint64_t sequence_ = 0;
};

}  // namespace

std::shared_ptr<FakeNetwork> make_fake_network(int world_size) { return std::make_shared<FakeNetwork>(world_size); }

std::unique_ptr<Transport> make_fake_transport(std::shared_ptr<FakeNetwork> network, int rank) {
  std::vector<int> members(static_cast<std::size_t>(network->world_size()));
  for (int r = 0; r < network->world_size(); ++r) members[r] = r;
  return std::make_unique<FakeTransport>(std::move(network), std::move(members), rank, "world");
}

void fake_network_fail_rank(FakeNetwork& network, int rank) {
  {
    std::lock_guard<std::mutex> lock(network.mutex);
    network.failed_ranks.insert(rank);
  }
  network.changed.notify_all();
}

at::Tensor pack_tensors(const std::vector<at::Tensor>& tensors) {
  if (tensors.size() == 1) return tensors[0].contiguous();
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type())
      throw TransportError("tensors sent together must share one dtype");
    flat.push_back(t.reshape({-1}));
  }
  return at::cat(flat);
}

std::vector<at::Tensor> unpack_tensors(const at::Tensor& flat, const std::vector<at::Tensor>& like) {
  if (like.size() == 1) return {flat.view(like[0].sizes())};
  std::vector<at::Tensor> out;
  std::int64_t offset = 0;
  auto f = flat.view({-1});
  for (const auto& t : like) {
    out.push_back(f.slice(0, offset, offset + t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  return out;
}

}  // namespace pipescope::exec
