// The c10d store every backend rendezvouses through (a FileStore for one node, else a TCPStore
// that rank 0 serves), its KeyValueStore face, and the two backends make_world chooses between.
// Shared by the Gloo and NCCL transports.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

// Throws TransportError naming the store file or address.
c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const WorldOptions& options);

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
