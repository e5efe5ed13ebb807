// How tensors travel between stages: one byte message per transfer, and, for data without
// declared shapes, a shape header describing it. Pure functions of tensors, testable alone.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipescope/exec/model.hpp"

namespace pipescope::exec::runtime {

// Gradients flow through floating-point tensors only; masks and token ids travel forward alone.
inline bool carries_grad(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

// "[2, 3]": how errors print a shape.
std::string shape_text(at::IntArrayRef sizes);

// Dynamic shapes: a transfer that carries its shapes is a fixed two-word header (descriptor
// words, payload bytes) and one byte message holding the descriptor and the tensors; a
// transfer that reuses the shapes of an earlier one is the byte message of the tensors alone.
constexpr std::int64_t kHeaderWords = 2;

// What a shape header describes: per tensor its dtype, sizes and (for dicts) its name.
struct TensorLayout {
  std::vector<at::ScalarType> dtypes;
  std::vector<std::vector<std::int64_t>> sizes;
  std::vector<std::string> names;  // empty: a tuple
  int micro_batch = -1;            // the micro-batch whose transfer carried the header

  static TensorLayout of(const TensorList& tensors, const std::vector<std::string>& names);
  std::int64_t payload_bytes() const;
  // Words: count, then per tensor dtype, rank, sizes, name length and the name's bytes in words.
  std::vector<std::int64_t> words() const;
  // Throws std::runtime_error on malformed words.
  static TensorLayout parse(const std::int64_t* words, std::int64_t count);
};

// The tensors as one contiguous byte buffer, in order (any mix of dtypes), after
// `prefix_words` when given.
at::Tensor pack_bytes(const TensorList& tensors, const std::vector<std::int64_t>& prefix_words, at::Device device);

// Copies of the tensors packed in `bytes` from `offset` (dtypes and sizes in order), on `device`.
TensorList unpack_bytes(const at::Tensor& bytes, std::int64_t offset, const std::vector<at::ScalarType>& dtypes,
                        const std::vector<std::vector<std::int64_t>>& sizes, at::Device device);

// The dtype a declared floating-point boundary tensor travels in: in bf16 and fp16 runs every
// floating-point activation and gradient between stages is in the compute dtype (half the bytes
// of fp32); in fp32 runs the declared dtype.
at::ScalarType wire_dtype(at::ScalarType declared, at::ScalarType compute);
// Why floating-point tensors of `dtypes` (from a header) cannot reach a stage computing in
// `compute`: another dtype than a 16-bit compute dtype, or 16-bit ones where the stage computes
// in fp32 (the peer was started with another dtype). Empty when they fit.
std::string dtype_mismatch(const std::vector<at::ScalarType>& dtypes, at::ScalarType compute);

// Tensors of one dtype travel as one typed tensor; a mix needs the byte form.
bool mixed_dtypes(const TensorList& tensors);

}  // namespace pipescope::exec::runtime
