// NCCL for GPUs. Each group holds three communicators, each with its own stream from the
// caching allocator's pool: one for collectives, one for point-to-point traffic from a lower to
// a higher group rank and one for the other direction. NCCL matches sends and receives by
// issue order, not by tag, and a send blocks its stream until the receiver posts the matching
// receive; with one stream per direction a rank that sends downstream while it receives from
// downstream (1F1B's steady state) does not deadlock on itself. Tags are therefore checked only
// in the order the schedule issues them, as the Transport contract allows (order per peer).
//
// The unique ids come from the group's rank 0 through the store (its key names the group), so
// subgroups need no call from non-members. Waiting polls the operation's CUDA event; on a
// timeout or an asynchronous NCCL error the group's communicators are aborted (ncclCommAbort),
// which frees the peer-facing kernels, and every later operation of the group fails at once.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "checked_call.hpp"
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"
#include "../rendezvous_store.hpp"
#include "../shared_gpu.hpp"

namespace pipescope::exec {
namespace {

ncclDataType_t nccl_type(at::ScalarType type, const std::string& what) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: throw TransportError(fmt::format("{}: NCCL has no type for {}", what, c10::toString(type)));
  }
}

enum Channel { kCollective = 0, kUpward = 1, kDownward = 2, kNumChannels = 3 };

// The communicators of one group. Shared with its pending operations, which abort it on failure.
class NcclGroup {
 public:
  NcclGroup(const std::array<ncclUniqueId, kNumChannels>& ids, int rank, int size, c10::DeviceIndex device,
            std::string name)
      : rank_(rank), size_(size), device_(device), name_(std::move(name)) {
    c10::cuda::CUDAGuard guard(device_);
    // Blocking, one after the other: every rank initialises the channels in the same order.
    for (int c = 0; c < kNumChannels; ++c) PIPESCOPE_CHECKED_CALL(ncclCommInitRank(&comms_[c], size_, ids[c], rank_));
    for (int c = 0; c < kNumChannels; ++c)
      streams_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_));
  }
  ~NcclGroup() {
    if (aborted_) return;
    for (auto comm : comms_)
      if (comm) ncclCommDestroy(comm);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  c10::DeviceIndex device() const { return device_; }
  const std::string& name() const { return name_; }
  ncclComm_t comm(Channel c) const { return comms_[c]; }
  c10::cuda::CUDAStream stream(Channel c) const { return streams_[static_cast<std::size_t>(c)]; }

  void throw_if_aborted(const std::string& what) const {
    if (aborted_)
      throw TransportError(
          fmt::format("{}: the NCCL communicators of group '{}' were aborted by an earlier failure", what, name_));
  }
  bool aborted() const { return aborted_; }
  // The first asynchronous error of any communicator, or ncclSuccess. Holds the mutex: an abort
  // from another thread frees the communicators.
  ncclResult_t async_error() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return ncclSuccess;
    for (auto comm : comms_) {
      ncclResult_t result = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclSystemError;
      if (result != ncclSuccess && result != ncclInProgress) return result;
    }
    return ncclSuccess;
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_.exchange(true)) return;
    for (auto comm : comms_)
      if (comm) ncclCommAbort(comm);
  }
  std::mutex& issue_mutex() { return mutex_; }

 private:
  int rank_;
  int size_;
  c10::DeviceIndex device_;
  std::string name_;
  std::array<ncclComm_t, kNumChannels> comms_{};
  std::vector<c10::cuda::CUDAStream> streams_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
};

class NcclPending final : public PendingTransfer {
 public:
  // `device_tensor` is what NCCL wrote into; `host_result` (defined for CPU tensors that receive
  // data) gets it copied back once done.
  NcclPending(std::shared_ptr<NcclGroup> group, cudaEvent_t done, std::vector<at::Tensor> keep_alive,
              at::Tensor device_result, at::Tensor host_result, bool writes, std::string what)
      : group_(std::move(group)),
        done_(done),
        keep_alive_(std::move(keep_alive)),
        device_result_(std::move(device_result)),
        host_result_(std::move(host_result)),
        writes_(writes),
        what_(std::move(what)) {}
  ~NcclPending() override {
    if (done_) cudaEventDestroy(done_);
  }

  void wait(std::chrono::milliseconds timeout) override {
    if (!done_) return;
    c10::cuda::CUDAGuard guard(group_->device());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) break;
      group_->throw_if_aborted(what_);
      if (state != cudaErrorNotReady) {
        group_->abort();
        throw TransportError(
            fmt::format("{}: CUDA failed while waiting: {}; aborted the NCCL communicators of group '{}'", what_,
                        cudaGetErrorString(state), group_->name()));
      }
      if (const ncclResult_t error = group_->async_error(); error != ncclSuccess) {
        group_->abort();
        throw TransportError(fmt::format("{}: NCCL failed: {}; aborted the communicators of group '{}'", what_,
                                         ncclGetErrorString(error), group_->name()));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        group_->abort();
        throw TransportError(fmt::format("{}: timed out after {} ms; aborted the NCCL communicators of group '{}'",
                                         what_, timeout.count(), group_->name()));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    if (writes_) {
      // Later work of this thread's stream sees the data NCCL wrote.
      PIPESCOPE_CHECKED_CALL(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(group_->device()).stream(), done_, 0));
      if (host_result_.defined()) host_result_.copy_(device_result_.view(host_result_.sizes()));
    }
    cudaEventDestroy(done_);
    done_ = nullptr;
    keep_alive_.clear();
  }

 private:
  std::shared_ptr<NcclGroup> group_;
  cudaEvent_t done_;
  std::vector<at::Tensor> keep_alive_;
  at::Tensor device_result_;
  at::Tensor host_result_;
  bool writes_;
  std::string what_;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(std::shared_ptr<NcclGroup> group, c10::intrusive_ptr<c10d::Store> store, std::vector<int> members)
      : group_(std::move(group)), store_(std::move(store)), members_(std::move(members)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<PendingTransfer> send(at::Tensor tensor, int peer, int /*tag*/) override {
    const std::string what = fmt::format("send to rank {}", member(peer));
    const Channel channel = rank() < peer ? kUpward : kDownward;
    at::Tensor buffer = on_device(tensor, what);
    return issue(what, channel, {tensor, buffer}, buffer, at::Tensor(), false,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   PIPESCOPE_CHECKED_CALL(ncclSend(buffer.data_ptr(), static_cast<std::size_t>(buffer.numel()),
                                                   nccl_type(buffer.scalar_type(), what), peer, comm, stream));
                 });
  }

  std::unique_ptr<PendingTransfer> recv(at::Tensor tensor, int peer, int /*tag*/) override {
    const std::string what = fmt::format("receive from rank {}", member(peer));
    const Channel channel = peer < rank() ? kUpward : kDownward;
    at::Tensor buffer = device_buffer(tensor, what);
    return issue(what, channel, {tensor, buffer}, buffer, host_side(tensor), true,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   PIPESCOPE_CHECKED_CALL(ncclRecv(buffer.data_ptr(), static_cast<std::size_t>(buffer.numel()),
                                                   nccl_type(buffer.scalar_type(), what), peer, comm, stream));
                 });
  }

  std::unique_ptr<PendingTransfer> all_reduce_sum(at::Tensor tensor) override {
    const std::string what = fmt::format("all-reduce over group '{}'", group_->name());
    at::Tensor buffer = on_device(tensor, what);
    return issue(what, kCollective, {tensor, buffer}, buffer, host_side(tensor), true,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   PIPESCOPE_CHECKED_CALL(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(),
                                                        static_cast<std::size_t>(buffer.numel()),
                                                        nccl_type(buffer.scalar_type(), what), ncclSum, comm, stream));
                 });
  }

  std::unique_ptr<PendingTransfer> all_gather(at::Tensor input, at::Tensor output) override {
    const std::string what = fmt::format("all-gather over group '{}'", group_->name());
    if (output.numel() != input.numel() * size())
      throw TransportError(
          fmt::format("{}: output has {} elements, expected {}", what, output.numel(), input.numel() * size()));
    at::Tensor in = on_device(input, what);
    at::Tensor out = device_buffer(output, what);
    return issue(
        what, kCollective, {input, output, in, out}, out, host_side(output), true,
        [&](ncclComm_t comm, cudaStream_t stream) {
          PIPESCOPE_CHECKED_CALL(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(in.numel()),
                                               nccl_type(in.scalar_type(), what), comm, stream));
        });
  }

  // ProcessGroupNCCL's alltoall_base: one grouped send and receive per peer (this rank too).
  std::unique_ptr<PendingTransfer> all_to_all(at::Tensor output, at::Tensor input,
                                              const std::vector<std::int64_t>& output_splits,
                                              const std::vector<std::int64_t>& input_splits) override {
    const std::string what = fmt::format("all-to-all over group '{}'", group_->name());
    const auto peers = static_cast<std::size_t>(size());
    if (output_splits.size() != peers || input_splits.size() != peers)
      throw TransportError(fmt::format("{}: {} output and {} input split sizes for {} ranks", what,
                                       output_splits.size(), input_splits.size(), peers));
    at::Tensor in = on_device(input, what);
    at::Tensor out = device_buffer(output, what);
    const std::int64_t rows = input.dim() > 0 ? input.size(0) : 0;
    const std::int64_t row_elements =
        rows > 0 ? input.numel() / rows
                 : (output.dim() > 0 && output.size(0) > 0 ? output.numel() / output.size(0) : 0);
    const std::size_t row_bytes = static_cast<std::size_t>(row_elements) * in.element_size();
    return issue(what, kCollective, {input, output, in, out}, out, host_side(output), true,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   const ncclDataType_t type = nccl_type(in.scalar_type(), what);
                   auto* send_base = static_cast<char*>(in.data_ptr());
                   auto* receive_base = static_cast<char*>(out.data_ptr());
                   std::size_t send_offset = 0, receive_offset = 0;
                   for (std::size_t p = 0; p < peers; ++p) {
                     const auto send_rows = static_cast<std::size_t>(input_splits[p]),
                                receive_rows = static_cast<std::size_t>(output_splits[p]);
                     if (send_rows > 0)
                       PIPESCOPE_CHECKED_CALL(ncclSend(send_base + send_offset * row_bytes,
                                                       send_rows * static_cast<std::size_t>(row_elements), type,
                                                       static_cast<int>(p), comm, stream));
                     if (receive_rows > 0)
                       PIPESCOPE_CHECKED_CALL(ncclRecv(receive_base + receive_offset * row_bytes,
                                                       receive_rows * static_cast<std::size_t>(row_elements), type,
                                                       static_cast<int>(p), comm, stream));
                     send_offset += send_rows;
                     receive_offset += receive_rows;
                   }
                 });
  }

  std::unique_ptr<Transport> subgroup(const std::vector<int>& ranks, const std::string& name) override {
    int my_index = -1;
    std::vector<int> world_members;
    for (int r : ranks) {
      if (r < 0 || r >= size())
        throw TransportError(fmt::format("subgroup {}: rank {} is outside group '{}'", name, r, group_->name()));
      if (r == rank()) my_index = static_cast<int>(world_members.size());
      world_members.push_back(members_.at(static_cast<std::size_t>(r)));
    }
    if (my_index < 0) throw TransportError(fmt::format("subgroup {}: rank {} is not a member", name, rank()));
    auto group =
        make_group(store_, group_->name() + "/" + name, my_index, static_cast<int>(ranks.size()), group_->device());
    return std::make_unique<NcclTransport>(std::move(group), store_, std::move(world_members));
  }

  // Rank 0 of the group makes the unique ids and publishes them under the group's name.
  static std::shared_ptr<NcclGroup> make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                               int rank, int size, c10::DeviceIndex device) {
    std::array<ncclUniqueId, kNumChannels> ids{};
    const std::string key = "nccl/" + name + "/unique-ids";
    try {
      if (rank == 0) {
        for (auto& id : ids) PIPESCOPE_CHECKED_CALL(ncclGetUniqueId(&id));
        std::vector<std::uint8_t> bytes(sizeof(ids));
        std::memcpy(bytes.data(), ids.data(), sizeof(ids));
        store->set(key, bytes);
      } else {
        const auto bytes = store->get(key);
        if (bytes.size() != sizeof(ids))
          throw TransportError(
              fmt::format("store key '{}' holds {} bytes, expected {}", key, bytes.size(), sizeof(ids)));
        std::memcpy(ids.data(), bytes.data(), sizeof(ids));
      }
      return std::make_shared<NcclGroup>(ids, rank, size, device, name);
    } catch (const TransportError& e) {
      throw TransportError(fmt::format("NCCL group '{}' (rank {} of {}): {}", name, rank, size, e.what()));
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("NCCL group '{}' (rank {} of {}): {}", name, rank, size, first_line_of(e)));
    }
  }

 private:
  int member(int group_rank) const {
    if (group_rank < 0 || group_rank >= size())
      throw TransportError(
          fmt::format("group '{}': peer {} is outside the group of {}", group_->name(), group_rank, size()));
    return members_[static_cast<std::size_t>(group_rank)];
  }

  void check_tensor(const at::Tensor& t, const std::string& what) const {
    if (!t.is_contiguous()) throw TransportError(fmt::format("{}: the tensor is not contiguous", what));
    if (t.is_cuda() && t.device().index() != group_->device())
      throw TransportError(
          fmt::format("{}: the tensor is on GPU {}, the group on GPU {}", what, t.device().index(), group_->device()));
  }
  // The tensor itself when it is on this GPU, else a GPU copy (CPU tensors are staged).
  at::Tensor on_device(const at::Tensor& t, const std::string& what) const {
    check_tensor(t, what);
    return t.is_cuda() ? t : t.to(at::Device(at::kCUDA, group_->device()));
  }
  // Where NCCL writes: the tensor itself on this GPU, else an uninitialised GPU buffer.
  at::Tensor device_buffer(const at::Tensor& t, const std::string& what) const {
    check_tensor(t, what);
    return t.is_cuda() ? t : at::empty(t.sizes(), t.options().device(at::Device(at::kCUDA, group_->device())));
  }
  static at::Tensor host_side(const at::Tensor& t) { return t.is_cuda() ? at::Tensor() : t; }

  template <typename Launch>
  std::unique_ptr<PendingTransfer> issue(const std::string& what, Channel channel, std::vector<at::Tensor> keep,
                                         at::Tensor device_result, at::Tensor host_result, bool writes, Launch launch) {
    group_->throw_if_aborted(what);
    c10::cuda::CUDAGuard guard(group_->device());
    std::lock_guard<std::mutex> lock(group_->issue_mutex());
    const c10::cuda::CUDAStream comm_stream = group_->stream(channel);
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    try {
      // The communication stream starts after the work that produced (or last read) the tensors.
      PIPESCOPE_CHECKED_CALL(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      PIPESCOPE_CHECKED_CALL(cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream(group_->device()).stream()));
      PIPESCOPE_CHECKED_CALL(cudaStreamWaitEvent(comm_stream.stream(), ready, 0));
      PIPESCOPE_CHECKED_CALL(cudaEventDestroy(ready));
      ready = nullptr;
      PIPESCOPE_CHECKED_CALL(ncclGroupStart());
      try {
        launch(group_->comm(channel), comm_stream.stream());
      } catch (...) {
        ncclGroupEnd();
        throw;
      }
      PIPESCOPE_CHECKED_CALL(ncclGroupEnd());
      PIPESCOPE_CHECKED_CALL(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      PIPESCOPE_CHECKED_CALL(cudaEventRecord(done, comm_stream.stream()));
    } catch (const std::exception& e) {
      if (ready) cudaEventDestroy(ready);
      if (done) cudaEventDestroy(done);
      throw TransportError(fmt::format("{}: {}", what, first_line_of(e)));
    }
    // The caching allocator must not hand the GPU memory to another tensor before NCCL is done.
    for (const auto& t : keep)
      if (t.defined() && t.is_cuda())
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm_stream);
    return std::make_unique<NcclPending>(group_, done, std::move(keep), std::move(device_result),
                                         std::move(host_result), writes, what);
  }

  std::shared_ptr<NcclGroup> group_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int> members_;  // world rank of each group rank
};

}  // namespace

World make_nccl_world(const WorldOptions& o, int device_index) {
  // Before the first communicator: NCCL reads its host identity when a rank joins one.
  if (const auto host_id = nccl_host_id_for_shared_gpu(o.rank, o.local_world_size, cuda_device_count(),
                                                       std::getenv("NCCL_HOSTID"), this_host_name()))
    setenv("NCCL_HOSTID", host_id->c_str(), 1);
  c10::intrusive_ptr<c10d::Store> store = open_rendezvous_store(o);
  auto nccl_store = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
  const auto device = static_cast<c10::DeviceIndex>(device_index);
  c10::cuda::set_device(device);
  std::vector<int> members(static_cast<std::size_t>(o.world_size));
  for (int r = 0; r < o.world_size; ++r) members[static_cast<std::size_t>(r)] = r;
  World world;
  world.transport = std::make_unique<NcclTransport>(
      NcclTransport::make_group(nccl_store, "world", o.rank, o.world_size, device), nccl_store, std::move(members));
  world.store = std::make_shared<StoreAdapter>(c10::make_intrusive<c10d::PrefixStore>("kv", store));
  return world;
}

}  // namespace pipescope::exec
