// set_rank_threads: one compute thread per rank, and a BLAS that ranks sharing a process (the
// in-process ranks of these tests, LibTorch's intra-op threads) may call at the same time.
// Expected:
// - after set_rank_threads(1), LibTorch has 1 intra-op thread; when the BLAS is OpenBLAS, it
//   reports 1 thread too and blas_description() names it.
// - 3 threads multiplying small matrices at once (12..19 x 16 times 16 x 24..31, 20000
//   products each) get exactly the products each computed alone. Run in a child process with
//   OPENBLAS_CORETYPE=Haswell: OpenBLAS's kernels for CPUs without AVX-512 go through its
//   shared packing buffers, which its serial build hands out without a lock (Debian's
//   libopenblas0-serial 0.3.21 got 108 of 60000 products wrong that way; the AVX-512 kernels
//   of small products never touch the buffers, so the default core type would hide it).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "threads.hpp"

using namespace pipescope::exec;

TEST_CASE("set_rank_threads leaves one thread to LibTorch and OpenBLAS") {
  set_rank_threads(1);
  CHECK(at::get_num_threads() == 1);
  if (auto* get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
    CHECK(get_threads() == 1);
    CHECK_THAT(blas_description(), Catch::StartsWith("OpenBLAS"));
  } else {
    CHECK(std::string(blas_description()) == "unknown");
  }
}

TEST_CASE("blas worker: concurrent products", "[.]") {
  set_rank_threads(1);
  struct Work {
    std::vector<at::Tensor> a, b, alone;  // `alone`: the products taken before any thread starts
  };
  std::vector<Work> work(3);
  for (std::size_t t = 0; t < work.size(); ++t) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(t + 1);
    for (int i = 0; i < 8; ++i) {
      work[t].a.push_back(at::randn({12 + i, 16}, generator));
      work[t].b.push_back(at::randn({16, 24 + i}, generator));
      work[t].alone.push_back(at::mm(work[t].a.back(), work[t].b.back()));
    }
  }
  std::atomic<long> wrong{0};
  std::vector<std::thread> threads;
  for (auto& w : work)
    threads.emplace_back([&w, &wrong] {
      for (int rep = 0; rep < 20000; ++rep)
        if (!at::equal(at::mm(w.a[rep % 8], w.b[rep % 8]), w.alone[rep % 8])) ++wrong;
    });
  for (auto& t : threads) t.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("threads of one process multiply matrices at once without corrupting each other") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "OPENBLAS_CORETYPE=Haswell '" + self + "' 'blas worker: concurrent products' > /dev/null";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
