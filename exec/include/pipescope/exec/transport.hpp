// How ranks talk (DESIGN item 6): one small interface that every backend implements. Sends and
// receives return a pending handle that is waited on with a timeout; a failed or timed-out wait
// throws TransportError. Backends: an in-process fake (tests; can inject failures), Gloo
// through c10d for CPUs and NCCL for GPUs (builds with PIPESCOPE_WITH_CUDA).
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipescope::exec {

// A transfer or collective that failed: timed out, or the peer is gone.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  // Blocks until done; throws TransportError after `timeout` or when the peer failed.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;  // in this group
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // Point to point, matched in order per (peer, tag). `tensor` must stay alive and untouched
  // until the transfer is waited on; a receive writes into `tensor` (preallocated, contiguous).
  virtual std::unique_ptr<PendingTransfer> send(at::Tensor tensor, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingTransfer> recv(at::Tensor tensor, int peer, int tag) = 0;

  // Collectives over the whole group, in place.
  virtual std::unique_ptr<PendingTransfer> all_reduce_sum(at::Tensor tensor) = 0;
  // `output` holds size() * input.numel() elements: rank r's input lands at r * numel.
  virtual std::unique_ptr<PendingTransfer> all_gather(at::Tensor input, at::Tensor output) = 0;

  // All-to-all with per-rank split sizes (MoE dispatch and combine, dropless): rows
  // [sum(input_splits[0..r)), + input_splits[r]) of `input` go to rank r, and rank r's rows for
  // this rank land at the same place of `output` by `output_splits`. Both are contiguous with
  // the same row shape; a split is counted in rows (first dimension). Backends without it throw
  // TransportError naming themselves.
  virtual std::unique_ptr<PendingTransfer> all_to_all(at::Tensor output, at::Tensor input,
                                                      const std::vector<std::int64_t>& output_splits,
                                                      const std::vector<std::int64_t>& input_splits);

  // A transport over `ranks` (ascending ranks of this group; this rank among them). Every
  // member must call it with the same ranks and name, in the same order as the other groups.
  virtual std::unique_ptr<Transport> subgroup(const std::vector<int>& ranks, const std::string& name) = 0;
};

// ---- the in-process fake -----------------------------------------------------------------
// Ranks are threads of one process sharing a FakeNetwork. Failures are injected per rank:
// a rank marked failed makes every wait that involves it throw, as a dead peer would.
class FakeNetwork;
std::shared_ptr<FakeNetwork> make_fake_network(int world_size);
std::unique_ptr<Transport> make_fake_transport(std::shared_ptr<FakeNetwork> network, int rank);
void fake_network_fail_rank(FakeNetwork& network, int rank);

// ---- the world: every rank of a run ---------------------------------------------------------
// How the ranks find each other (torchrun's env:// rendezvous, or a file for one node) and how
// long any rank waits on another.
struct WorldOptions {
  // A file store (c10d FileStore) for ranks on one node: no listening socket at all. When empty,
  // rank 0 serves a TCPStore at master_addr:master_port.
  std::string store_file;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  // Ranks started on this node (LOCAL_WORLD_SIZE; 0 when unknown). With more of them than GPUs,
  // NCCL connects the ranks that share a GPU as ranks of different hosts (exec/src/shared_gpu.hpp).
  int local_world_size = 0;
  // What each rank proves it knows before the backend starts (never sent itself): a worker of
  // another run, or with another world size, is refused by name. Empty: nothing to prove.
  std::string run_secret;
  std::chrono::milliseconds timeout{60000};
};
// Small key/value exchanges between ranks (metrics, traces) through the rendezvous store.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;  // waits for the key (the world's timeout)
};
struct World {
  std::unique_ptr<Transport> transport;
  std::shared_ptr<KeyValueStore> store;
};
// Rendezvous through the store, then the backend that fits `device`: Gloo for the CPU, NCCL on
// the GPU for a CUDA device (made the current device; tensors may live on the CPU, they are
// staged through the GPU). Throws TransportError naming the rendezvous or the backend this build
// lacks (NCCL in a program built without PIPESCOPE_WITH_CUDA; Gloo in a build without Gloo's
// headers).
World make_world(const at::Device& device, const WorldOptions& options);
// False in builds without Gloo's headers (Debian: libgloo-dev): make_world then refuses the CPU.
bool gloo_support_built();

// Packs several tensors into one contiguous buffer (one message) and back.
at::Tensor pack_tensors(const std::vector<at::Tensor>& tensors);
std::vector<at::Tensor> unpack_tensors(const at::Tensor& flat, const std::vector<at::Tensor>& like);

}  // namespace pipescope::exec
