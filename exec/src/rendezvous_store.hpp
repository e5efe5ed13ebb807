// The c10d store every backend rendezvouses through (a FileStore for one node, else a TCPStore
// that rank 0 serves), its KeyValueStore face, and the two backends make_world chooses between.
// Shared by the Gloo and NCCL transports.
//
// Before a backend starts, the ranks check through the store that they are one run: rank 0
// publishes its WORLD_SIZE and a fresh nonce with a proof that it knows the run's secret
// (an HMAC of them keyed by WorldOptions::run_secret); each other rank checks it and answers
// under a key only holders of the secret can name. A worker of another run, or one with another
// WORLD_SIZE, is refused by name on both sides; a stranger's answer lands under a key nobody
// reads, so it does not disturb the run.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

// Opens the store and checks this rank's membership (see above). Throws TransportError naming
// the store file or address, the port in use, or the rank that does not belong.
c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const WorldOptions& options);

// `bytes` random bytes (getrandom) as hex: run secrets and nonces.
std::string random_hex(std::size_t bytes);

// The first line of a c10 error (c10 appends a backtrace).
std::string first_line_of(const std::exception& e);

class StoreAdapter : public KeyValueStore {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  c10::intrusive_ptr<c10d::Store> store() const { return store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// The backends behind make_world; a build that lacks one has a stand-in that throws
// TransportError saying why.
World make_gloo_world(const WorldOptions& options);
World make_nccl_world(const WorldOptions& options, int device_index);

}  // namespace pipescope::exec
