// The wire format of stage-to-stage transfers (see wire_format.hpp).
#include "runtime/wire_format.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace pipescope::exec::runtime {

std::string shape_text(at::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

TensorLayout TensorLayout::of(const TensorList& tensors, const std::vector<std::string>& names) {
  TensorLayout layout;
  for (const auto& t : tensors) {
    layout.dtypes.push_back(t.scalar_type());
    layout.sizes.push_back(t.sizes().vec());
  }
  layout.names = names;
  return layout;
}

std::int64_t TensorLayout::payload_bytes() const {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    std::int64_t numel = 1;
    for (auto d : sizes[i]) numel *= d;
    total += numel * static_cast<std::int64_t>(c10::elementSize(dtypes[i]));
  }
  return total;
}

std::vector<std::int64_t> TensorLayout::words() const {
  std::vector<std::int64_t> w{static_cast<std::int64_t>(dtypes.size())};
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    w.push_back(static_cast<std::int64_t>(dtypes[i]));
    w.push_back(static_cast<std::int64_t>(sizes[i].size()));
    w.insert(w.end(), sizes[i].begin(), sizes[i].end());
    const std::string name = names.empty() ? std::string() : names[i];
    w.push_back(static_cast<std::int64_t>(name.size()));
    // Eight characters per word, the first in the lowest byte.
    std::vector<std::int64_t> chars((name.size() + 7) / 8, 0);
    for (std::size_t k = 0; k < name.size(); ++k)
      chars[k / 8] |= static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<unsigned char>(name[k])) << (8 * (k % 8)));
    w.insert(w.end(), chars.begin(), chars.end());
  }
  return w;
}

TensorLayout TensorLayout::parse(const std::int64_t* w, std::int64_t count) {
  TensorLayout layout;
  if (count < 1 || w[0] < 0) throw std::runtime_error("malformed shape header (no tensor count)");
  std::int64_t pos = 1;
  bool named = false;
  for (std::int64_t i = 0; i < w[0]; ++i) {
    if (pos + 2 > count || w[pos + 1] < 0 || pos + 3 + w[pos + 1] > count)
      throw std::runtime_error(fmt::format("malformed shape header (tensor {})", i));
    layout.dtypes.push_back(static_cast<at::ScalarType>(w[pos]));
    const std::int64_t rank = w[pos + 1];
    layout.sizes.emplace_back(w + pos + 2, w + pos + 2 + rank);
    pos += 2 + rank;
    const std::int64_t name_bytes = w[pos++];
    const std::int64_t name_words = (name_bytes + 7) / 8;
    if (name_bytes < 0 || pos + name_words > count) throw std::runtime_error(fmt::format("malformed shape header (name of tensor {})", i));
    std::string name;
    for (std::int64_t k = 0; k < name_bytes; ++k)
      name.push_back(static_cast<char>((static_cast<std::uint64_t>(w[pos + k / 8]) >> (8 * (k % 8))) & 0xFF));
    named = named || name_bytes > 0;
    layout.names.push_back(std::move(name));
    pos += name_words;
  }
  if (!named) layout.names.clear();
  return layout;
}

at::Tensor pack_bytes(const TensorList& tensors, const std::vector<std::int64_t>& prefix_words, at::Device device) {
  TensorList parts;
  if (!prefix_words.empty())
    parts.push_back(at::tensor(prefix_words, at::TensorOptions().dtype(at::kLong)).view(at::kByte).to(device));
  for (const auto& t : tensors) parts.push_back(t.detach().contiguous().reshape({-1}).view(at::kByte));
  if (parts.empty()) return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device));
  return at::cat(parts);
}

TensorList unpack_bytes(const at::Tensor& bytes, std::int64_t offset, const std::vector<at::ScalarType>& dtypes,
                        const std::vector<std::vector<std::int64_t>>& sizes, at::Device device) {
  TensorList out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    std::int64_t numel = 1;
    for (auto d : sizes[i]) numel *= d;
    const std::int64_t nbytes = numel * static_cast<std::int64_t>(c10::elementSize(dtypes[i]));
    out.push_back(bytes.slice(0, offset, offset + nbytes).clone().view(dtypes[i]).view(sizes[i]).to(device));
    offset += nbytes;
  }
  return out;
}

at::ScalarType wire_dtype(at::ScalarType declared, at::ScalarType compute) {
  return compute != at::kFloat && at::isFloatingType(declared) ? compute : declared;
}

std::string dtype_mismatch(const std::vector<at::ScalarType>& dtypes, at::ScalarType compute) {
  const bool sixteen_bit_compute = compute == at::kBFloat16 || compute == at::kHalf;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    const at::ScalarType d = dtypes[i];
    if (!at::isFloatingType(d)) continue;
    const bool sixteen_bit = d == at::kBFloat16 || d == at::kHalf;
    if (sixteen_bit_compute ? d != compute : sixteen_bit)
      return fmt::format("tensor {} is {}, but this stage computes in {} (was every rank given the same dtype?)", i,
                         c10::toString(d), c10::toString(compute));
  }
  return "";
}

bool mixed_dtypes(const TensorList& tensors) {
  for (const auto& t : tensors)
    if (t.scalar_type() != tensors.front().scalar_type()) return true;
  return false;
}

}  // namespace pipescope::exec::runtime
