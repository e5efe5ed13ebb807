// The threads a rank computes with.
#pragma once

namespace pipescope::exec {

// Sets LibTorch's intra-op threads and, when the process's BLAS is OpenBLAS, OpenBLAS's own
// thread count to `n`, and LibTorch's inter-op threads to 1 where they are not fixed yet.
// OpenBLAS keeps a pool of its own that at::set_num_threads does not reach: left alone, every
// rank would start one thread per core, and ranks sharing a machine would fight for the cores.
void set_rank_threads(int n);

// The BLAS the process calls: "OpenBLAS <config>" when it is OpenBLAS, else "unknown".
const char* blas_description();

}  // namespace pipescope::exec
