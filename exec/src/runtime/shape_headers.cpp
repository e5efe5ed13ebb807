// Sending and receiving shape headers (see shape_headers.hpp).
#include "runtime/shape_headers.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace pipescope::exec::runtime {
namespace {

std::string layout_entry(const TensorLayout& layout, std::size_t i) {
  return fmt::format("{} {}", shape_text(layout.sizes[i]), c10::toString(layout.dtypes[i]));
}

}  // namespace

// A later micro-batch must match the header its batch sent first on the channel.
void ShapeHeaders::check_against_header(const StageState& st, int micro_batch, const TensorLayout& now,
                                        const TensorLayout& header, int to_stage, const char* what) const {
  const std::string advice =
      "shapes may change between batches but not between the micro-batches of one batch; turn on per-micro-batch shape "
      "headers (EngineOptions::shapes_per_micro_batch, DeepSpeed's dynamic_shape) for data whose shapes vary inside a "
      "batch";
  if (now.dtypes.size() != header.dtypes.size())
    ctx_.fail_here(fmt::format(
        "{}: micro-batch {} sends {} {}(s) to stage {}, but the shape header sent with micro-batch {} of this "
        "batch describes {}; {}",
        ctx_.stage_name(st), micro_batch, now.dtypes.size(), what, to_stage, header.micro_batch, header.dtypes.size(),
        advice));
  for (std::size_t i = 0; i < now.dtypes.size(); ++i) {
    const std::string name = now.names.empty() ? std::string() : fmt::format(" '{}'", now.names[i]);
    const std::string header_name = header.names.empty() ? std::string() : fmt::format(" '{}'", header.names[i]);
    if (now.sizes[i] != header.sizes[i] || now.dtypes[i] != header.dtypes[i] || name != header_name)
      ctx_.fail_here(
          fmt::format("{}: micro-batch {}: {} {}{} is {}, but the shape header sent to stage {} with micro-batch {} of "
                      "this batch says {}{}; {}",
                      ctx_.stage_name(st), micro_batch, what, i, name, layout_entry(now, i), to_stage,
                      header.micro_batch, layout_entry(header, i), header_name, advice));
  }
}

std::int64_t ShapeHeaders::append_messages(TensorList& messages, const TensorList& payload,
                                           const std::vector<std::string>& names, const ShapeChannel& channel,
                                           const StageState& st, int micro_batch, const char* what) {
  const at::Device device = ctx_.device();
  TensorLayout layout = TensorLayout::of(payload, names);
  layout.micro_batch = micro_batch;
  if (auto known = sent_.find(channel); known != sent_.end() && !ctx_.options.shapes_per_micro_batch) {
    check_against_header(st, micro_batch, layout, known->second, std::get<1>(channel), what);
    messages.push_back(pack_bytes(payload, {}, device));
    return messages.back().numel();
  }
  const auto words = layout.words();
  at::Tensor body = pack_bytes(payload, words, device);
  const std::int64_t descriptor_bytes = static_cast<std::int64_t>(words.size()) * 8;
  messages.push_back(
      at::tensor(std::vector<std::int64_t>{static_cast<std::int64_t>(words.size()), body.numel() - descriptor_bytes},
                 at::TensorOptions().dtype(at::kLong))
          .to(device));
  messages.push_back(body);
  sent_[channel] = std::move(layout);
  return body.numel();
}

TensorList ShapeHeaders::receive_messages(const ShapeChannel& channel, const Receive& receive, int peer,
                                          std::int64_t& bytes, std::vector<std::string>& names) {
  const at::Device device = ctx_.device();
  if (auto known = received_.find(channel); known != received_.end() && !ctx_.options.shapes_per_micro_batch) {
    at::Tensor body = at::empty({known->second.payload_bytes()}, at::TensorOptions().dtype(at::kByte).device(device));
    receive(body);
    bytes = body.numel();
    names = known->second.names;
    return unpack_bytes(body, 0, known->second.dtypes, known->second.sizes, device);
  }
  at::Tensor header = at::empty({kHeaderWords}, at::TensorOptions().dtype(at::kLong).device(device));
  receive(header);
  header = header.cpu();
  const std::int64_t words = header[0].item<std::int64_t>(), payload_bytes = header[1].item<std::int64_t>();
  if (words < 1 || payload_bytes < 0)
    ctx_.fail_here(fmt::format("malformed shape header from rank {} ({} words, {} bytes)", peer, words, payload_bytes));
  at::Tensor body = at::empty({words * 8 + payload_bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  receive(body);
  const at::Tensor descriptor = body.slice(0, 0, words * 8).cpu().clone().view(at::kLong);
  TensorLayout layout;
  try {
    layout = TensorLayout::parse(descriptor.data_ptr<std::int64_t>(), words);
  } catch (const std::runtime_error& e) {
    ctx_.fail_here(fmt::format("{} from rank {}", e.what(), peer));
  }
  if (layout.payload_bytes() != payload_bytes)
    ctx_.fail_here(fmt::format("malformed shape header from rank {} ({} bytes announced, {} described)", peer,
                               payload_bytes, layout.payload_bytes()));
  if (auto wrong = dtype_mismatch(layout.dtypes, ctx_.options.dtype); !wrong.empty())
    ctx_.fail_here(fmt::format("from rank {}: {}", peer, wrong));
  bytes = body.numel();
  names = layout.names;
  TensorList out = unpack_bytes(body, words * 8, layout.dtypes, layout.sizes, device);
  received_[channel] = std::move(layout);
  return out;
}

}  // namespace pipescope::exec::runtime
