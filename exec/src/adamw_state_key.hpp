// The key torch::optim::AdamW files a parameter's state under, for the code that reads or writes
// that state directly (FusedAdamW, checkpoints filed by layer).
#pragma once

#include <ATen/ATen.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace pipescope::exec {

// The parameter's TensorImpl address: as a string up to LibTorch 2.0, as the pointer itself
// after. Both forms are kept because PIPESCOPE_TORCH_DIR may name an older LibTorch.
template <typename Key>
Key adamw_state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;  // how c10::guts::to_string printed it
    address << p.unsafeGetTensorImpl();
    return address.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

}  // namespace pipescope::exec
