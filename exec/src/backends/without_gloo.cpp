// What a build without Gloo's headers (Debian: libgloo-dev) links instead of transport_gloo.cpp:
// the CPU transport, saying why it cannot be used. LibTorch carries Gloo itself but not the
// headers its ProcessGroupGloo.hpp includes.
#include "pipescope/exec/transport.hpp"
#include "rendezvous_store.hpp"

namespace pipescope::exec {

bool gloo_support_built() { return false; }

World make_gloo_world(const WorldOptions&) {
  throw TransportError("Gloo: this pprun was built without Gloo's headers (Debian: libgloo-dev); use --device cuda (NCCL)");
}

}  // namespace pipescope::exec
