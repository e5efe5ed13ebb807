// Starting a user's pipeline program on several processes the way pprun starts: run as
// `PROGRAM --nproc-per-node N ARGS...` it starts N copies of itself on this node (a private
// rendezvous, the first failing rank named, the others stopped); run under torchrun-style
// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) it is one of them. Each copy gets its
// device, its world (make_world: Gloo on the CPU, NCCL on a GPU) and the arguments left after
// --nproc-per-node.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"

namespace pipescope::exec {

struct ProcessContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::shared_ptr<ComputeDevice> device;   // ProcessOptions::device (for EngineOptions::device)
  Transport* world = nullptr;              // every rank; lives until the body returns
  std::shared_ptr<KeyValueStore> store;    // small key/value exchanges
  std::vector<std::string> args;           // the program's arguments without --nproc-per-node N
};

struct ProcessOptions {
  std::chrono::milliseconds timeout{60000};  // how long a rank waits on a peer
  at::DeviceType device = at::kCPU;            // kCUDA: GPU local_rank of the node (see make_local_device)
  int threads_per_rank = 1;    // LibTorch's and OpenBLAS's threads (set_rank_threads; 1: reproducible, bit for bit)
};

// Sets LibTorch's intra-op threads and, when the process's BLAS is OpenBLAS, OpenBLAS's own
// thread count to `n`, and LibTorch's inter-op threads to 1 where they are not fixed yet.
// OpenBLAS keeps a pool of its own that at::set_num_threads does not reach: left alone, every
// rank would start one thread per core, and ranks sharing a machine would fight for the cores.
// run_pipeline_processes calls it with ProcessOptions::threads_per_rank.
void set_rank_threads(int n);

// Returns the program's exit status: 0, 1 after a failure while running (one line
// `PROGRAM: error: rank R: ...`), 2 for bad usage (a UsageError from the body).
int run_pipeline_processes(int argc, char** argv, const std::function<void(ProcessContext&)>& body,
                           ProcessOptions options = {});

}  // namespace pipescope::exec
