// The runtime's wire format (exec/src/runtime/wire_format.hpp). Scenario: a dict of a float
// [2, 3] 'hidden' and a long [2] 'mask' has a 40-byte payload (24 + 16) and a header of 12
// words: count 2, then per tensor dtype, rank, sizes, name length and one word of name
// characters ('h' in the lowest byte); it parses back to the same layout. A tuple's header has
// 10 words and comes back without names. Words that end early fail naming the tensor, or "no
// tensor count". The two tensors packed after the words unpack, from byte 12 * 8, unchanged.
#include <catch2/catch.hpp>

#include "runtime/wire_format.hpp"

using namespace pipescope::exec;
using namespace pipescope::exec::runtime;

namespace {

TensorList hidden_and_mask() {
  return {at::arange(6, at::kFloat).view({2, 3}), at::tensor({7, 8}, at::TensorOptions().dtype(at::kLong))};
}

}  // namespace

TEST_CASE("a shape header round trip keeps dtypes, sizes and names", "[runtime][wire_format]") {
  const TensorLayout layout = TensorLayout::of(hidden_and_mask(), {"hidden", "mask"});
  CHECK(layout.payload_bytes() == 40);
  const auto words = layout.words();
  REQUIRE(words.size() == 12);
  CHECK(words[0] == 2);
  CHECK(words[1] == static_cast<std::int64_t>(at::kFloat));
  CHECK(words[2] == 2);  // rank
  CHECK(words[3] == 2);
  CHECK(words[4] == 3);
  CHECK(words[5] == 6);  // "hidden": six characters, one word
  CHECK(words[6] == 0x6e6564646968);  // 'h' in the lowest byte
  const TensorLayout parsed = TensorLayout::parse(words.data(), static_cast<std::int64_t>(words.size()));
  CHECK(parsed.dtypes == layout.dtypes);
  CHECK(parsed.sizes == layout.sizes);
  CHECK(parsed.names == std::vector<std::string>{"hidden", "mask"});
  CHECK(parsed.payload_bytes() == 40);
}

TEST_CASE("a tuple's header comes back without names", "[runtime][wire_format]") {
  const auto words = TensorLayout::of(hidden_and_mask(), {}).words();
  CHECK(words.size() == 10);  // no name words, a zero length each
  const TensorLayout parsed = TensorLayout::parse(words.data(), static_cast<std::int64_t>(words.size()));
  CHECK(parsed.names.empty());
  CHECK(parsed.sizes == std::vector<std::vector<std::int64_t>>{{2, 3}, {2}});
}

TEST_CASE("malformed shape headers name what is missing", "[runtime][wire_format]") {
  const std::int64_t negative_count[] = {-1};
  CHECK_THROWS_WITH(TensorLayout::parse(negative_count, 1), "malformed shape header (no tensor count)");
  CHECK_THROWS_WITH(TensorLayout::parse(negative_count, 0), "malformed shape header (no tensor count)");
  const auto words = TensorLayout::of(hidden_and_mask(), {"hidden", "mask"}).words();
  // Cut inside the second tensor's sizes, then inside the first tensor's name.
  CHECK_THROWS_WITH(TensorLayout::parse(words.data(), 9), "malformed shape header (tensor 1)");
  CHECK_THROWS_WITH(TensorLayout::parse(words.data(), 6), "malformed shape header (name of tensor 0)");
  const std::int64_t negative_rank[] = {1, static_cast<std::int64_t>(at::kFloat), -2, 0};
  CHECK_THROWS_WITH(TensorLayout::parse(negative_rank, 4), "malformed shape header (tensor 0)");
}

TEST_CASE("packed bytes unpack to the same tensors after the header words", "[runtime][wire_format]") {
  const TensorList tensors = hidden_and_mask();
  const TensorLayout layout = TensorLayout::of(tensors, {"hidden", "mask"});
  const auto words = layout.words();
  const at::Tensor bytes = pack_bytes(tensors, words, at::kCPU);
  CHECK(bytes.scalar_type() == at::kByte);
  CHECK(bytes.numel() == 12 * 8 + 40);
  const TensorList back = unpack_bytes(bytes, 12 * 8, layout.dtypes, layout.sizes, at::kCPU);
  REQUIRE(back.size() == 2);
  CHECK(at::equal(back[0], tensors[0]));
  CHECK(at::equal(back[1], tensors[1]));
  CHECK(pack_bytes({}, {}, at::kCPU).numel() == 0);
}

TEST_CASE("only tensors of several dtypes need the byte form", "[runtime][wire_format]") {
  CHECK(mixed_dtypes(hidden_and_mask()));
  CHECK_FALSE(mixed_dtypes({at::zeros({2}), at::ones({3})}));
  CHECK(carries_grad(at::zeros({1})));
  CHECK_FALSE(carries_grad(at::zeros({1}, at::kLong)));
  CHECK(shape_text(at::IntArrayRef({2, 3})) == "[2, 3]");
}
