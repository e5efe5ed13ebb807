#include "rendezvous_store.hpp"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdint>
#include <vector>

namespace pipescope::exec {

std::string first_line_of(const std::exception& e) {
  std::string message = e.what();
  if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
  return message;
}

c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const WorldOptions& o) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(o.master_port);
  store_options.isServer = o.rank == 0;
  store_options.numWorkers = static_cast<std::size_t>(o.world_size);
  store_options.waitWorkers = false;
  store_options.timeout = o.timeout;
  try {
    if (!o.store_file.empty()) {
      auto store = c10::make_intrusive<c10d::FileStore>(o.store_file, o.world_size);
      store->setTimeout(o.timeout);
      return store;
    }
    return c10::make_intrusive<c10d::TCPStore>(o.master_addr, store_options);
  } catch (const std::exception& e) {
    const std::string where = o.store_file.empty() ? fmt::format("{}:{}", o.master_addr, o.master_port) : o.store_file;
    throw TransportError(fmt::format("rendezvous at {}: {}", where, first_line_of(e)));
  }
}

void StoreAdapter::set(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::string StoreAdapter::get(const std::string& key) {
  try {
    auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw TransportError(fmt::format("store key '{}': {}", key, first_line_of(e)));
  }
}

World make_world(const at::Device& device, const WorldOptions& options) {
  if (device.is_cuda()) return make_nccl_world(options, device.has_index() ? device.index() : 0);
  if (device.is_cpu()) return make_gloo_world(options);
  throw TransportError(fmt::format("no transport for device '{}' (cpu: Gloo, cuda: NCCL)", device.str()));
}

}  // namespace pipescope::exec

// The backends a build leaves out still link, and say why they cannot be used.
namespace pipescope::exec {

#ifndef PIPESCOPE_HAS_GLOO
bool gloo_support_built() { return false; }
World make_gloo_world(const WorldOptions&) {
  throw TransportError("Gloo: this pprun was built against a LibTorch without Gloo headers (the CUDA build); use --device cuda (NCCL)");
}
#else
bool gloo_support_built() { return true; }
#endif

#ifndef PIPESCOPE_WITH_CUDA
World make_nccl_world(const WorldOptions&, int) {
  throw TransportError("NCCL: this pprun was built without the CUDA path (configure with -DPIPESCOPE_WITH_CUDA=ON)");
}
#endif

}  // namespace pipescope::exec
