// The experts' calls, timed (expert_calls.hpp).
#include "moe/expert_calls.hpp"

#include <torch/autograd.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "runtime/clock.hpp"
#include "runtime/device_time.hpp"

namespace pipescope::exec::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ExpertCallLog* log_at(AutogradContext* ctx) {
  // saved_data holds IValues only, so the log travels as its address; logs live as long as the
  // process (expert_call_log).
  return reinterpret_cast<ExpertCallLog*>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<std::intptr_t>(ctx->saved_data["expert_call_log"].toInt()));
}

void save_call(AutogradContext* ctx, ExpertCallLog* log, const std::string& layer, int expert, std::int64_t rows) {
  ctx->saved_data["expert_call_log"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(log));
  ctx->saved_data["layer"] = layer;
  ctx->saved_data["expert"] = static_cast<std::int64_t>(expert);
  ctx->saved_data["rows"] = rows;
}

// Identity on the expert's output: its backward runs first of the expert's, when the output's
// gradient arrives.
class ExpertBackwardBegins : public torch::autograd::Function<ExpertBackwardBegins> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, std::int64_t log, std::string layer,
                            std::int64_t expert) {
    save_call(ctx, reinterpret_cast<ExpertCallLog*>(static_cast<std::intptr_t>(log)),  // NOLINT
              layer, static_cast<int>(expert), 0);
    return output.view_as(output);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    log_at(ctx)->begin_backward(ctx->saved_data["layer"].toStringRef(),
                                static_cast<int>(ctx->saved_data["expert"].toInt()), runtime::now_us());
    return {grads.at(0), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Identity on the expert's input: its backward runs last of the expert's, once the input's
// gradient is computed.
class ExpertBackwardEnds : public torch::autograd::Function<ExpertBackwardEnds> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, std::int64_t log, std::string layer,
                            std::int64_t expert) {
    save_call(ctx, reinterpret_cast<ExpertCallLog*>(static_cast<std::intptr_t>(log)),  // NOLINT
              layer, static_cast<int>(expert), input.size(0));
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    log_at(ctx)->end_backward(ctx->saved_data["layer"].toStringRef(),
                              static_cast<int>(ctx->saved_data["expert"].toInt()), ctx->saved_data["rows"].toInt(),
                              runtime::now_us());
    return {grads.at(0), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::unique_ptr<DeviceTiming> ExpertCallLog::start_device_timing() const {
  return device_ ? device_->start_timing() : nullptr;
}

void ExpertCallLog::record(ExpertCallRecord record, std::unique_ptr<DeviceTiming> timing) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(std::move(record));
  timings_.push_back(std::move(timing));
}

std::vector<ExpertCallRecord> ExpertCallLog::take_records() {
  std::vector<ExpertCallRecord> out;
  std::vector<std::unique_ptr<DeviceTiming>> timings;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(records_);
    timings.swap(timings_);
    backward_started_.clear();
  }
  // Outside the lock: reading a device span waits for the device to get there.
  for (std::size_t i = 0; i < out.size(); ++i)
    runtime::take_device_span(timings[i].get(), out[i].start_us, out[i].end_us);
  return out;
}

void ExpertCallLog::begin_backward(const std::string& layer, int expert, double now_us) {
  BackwardStart start{now_us, start_device_timing()};
  std::lock_guard<std::mutex> lock(mutex_);
  backward_started_[{layer, expert, std::this_thread::get_id()}] = std::move(start);
}

void ExpertCallLog::end_backward(const std::string& layer, int expert, std::int64_t rows, double now_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = backward_started_.find({layer, expert, std::this_thread::get_id()});
  // A backward that computes the weights' gradients alone never reaches the input: no end, and
  // one without a beginning is not a call of its own.
  if (it == backward_started_.end()) return;
  std::unique_ptr<DeviceTiming> timing = std::move(it->second.timing);
  if (timing) timing->stop();
  records_.push_back({layer, expert, true, rows, it->second.host_us, now_us});
  timings_.push_back(std::move(timing));
  backward_started_.erase(it);
}

ExpertCallLog& expert_call_log(const ExpertParallel& expert_parallel) {
  // ExpertParallel is the one object a model's MoE blocks and the worker share; the timings
  // are the measured trace's business, not the expert placement's, so they hang off it here.
  static std::mutex mutex;
  static std::map<const ExpertParallel*, std::unique_ptr<ExpertCallLog>> logs;
  std::lock_guard<std::mutex> lock(mutex);
  auto& log = logs[&expert_parallel];
  if (!log) log = std::make_unique<ExpertCallLog>();
  return *log;
}

at::Tensor timed_expert_call(const std::function<at::Tensor(const at::Tensor&)>& expert, const at::Tensor& rows,
                             ExpertCallLog& log, const std::string& layer, int expert_id) {
  const bool grad = at::GradMode::is_enabled();
  const auto address = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&log));
  const at::Tensor input = grad ? ExpertBackwardEnds::apply(rows, address, layer, expert_id) : rows;
  std::unique_ptr<DeviceTiming> timing = log.start_device_timing();
  const double start_us = runtime::now_us();
  at::Tensor output = expert(input);
  const double end_us = runtime::now_us();
  if (timing) timing->stop();
  log.record({layer, expert_id, false, rows.size(0), start_us, end_us}, std::move(timing));
  return grad ? ExpertBackwardBegins::apply(output, address, layer, expert_id) : output;
}

}  // namespace pipescope::exec::moe
