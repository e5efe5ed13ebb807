// One checked-call macro for CUDA and NCCL status codes (DESIGN.md item 7): a failed call
// becomes an exception at the boundary, carrying the call, the file and the line. NCCL failures
// are transport failures (TransportError); CUDA failures are device failures (DeviceError).
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "pipescope/exec/device.hpp"
#include "pipescope/exec/transport.hpp"

namespace pipescope::exec::cuda_detail {

inline void check_status(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error so the next call does not report it again
  throw DeviceError(fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorString(status), cudaGetErrorName(status)));
}

inline void check_status(ncclResult_t status, const char* call, const char* file, int line) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* last = ncclGetLastError(nullptr);
  throw TransportError(fmt::format("{}:{}: {} failed: {}{}{}", file, line, call, ncclGetErrorString(status),
                                   last && *last ? ": " : "", last ? last : ""));
}

}  // namespace pipescope::exec::cuda_detail

#define PIPESCOPE_CHECKED_CALL(call) ::pipescope::exec::cuda_detail::check_status((call), #call, __FILE__, __LINE__)
