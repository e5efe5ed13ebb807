// What a build without the CUDA path links instead of exec/src/cuda/: the same functions,
// saying why they cannot be used. pprun and pipescope::exec link this file; the CUDA program
// (PIPESCOPE_WITH_CUDA, exec/cuda/pprun) links the real ones instead.
#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"
#include "rendezvous_store.hpp"

namespace pipescope::exec {

bool cuda_support_built() { return false; }
int cuda_device_count() { return 0; }

std::shared_ptr<ComputeDevice> make_cuda_device(int) {
  throw DeviceError("--device cuda: this pprun was built without the CUDA path (configure with -DPIPESCOPE_WITH_CUDA=ON and run exec/cuda/pprun, see scripts/build-cuda.sh)");
}

World make_nccl_world(const WorldOptions&, int) {
  throw TransportError("NCCL: this pprun was built without the CUDA path (configure with -DPIPESCOPE_WITH_CUDA=ON and run exec/cuda/pprun)");
}

}  // namespace pipescope::exec
