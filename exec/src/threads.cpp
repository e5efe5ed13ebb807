#include "threads.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <exception>

namespace pipescope::exec {
namespace {

// OpenBLAS's entry points, looked up at run time: LibTorch reaches the BLAS through
// libblas.so.3, which may be OpenBLAS, the reference BLAS or another (MKL is linked into
// PyPI's LibTorch and has no such symbols).
template <typename Function>
Function* openblas_symbol(const char* name) {
  return reinterpret_cast<Function*>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void set_rank_threads(int n) {
  at::set_num_threads(n);
  if (auto* set_threads = openblas_symbol<void(int)>("openblas_set_num_threads")) set_threads(n);
  try {
    at::set_num_interop_threads(1);
  } catch (const std::exception&) {
    // Already fixed by an earlier use in this process; the default is harmless.
  }
}

const char* blas_description() {
  if (auto* config = openblas_symbol<char*()>("openblas_get_config")) return config();
  return "unknown";
}

}  // namespace pipescope::exec
