// C++ side of src/metal_policy.rs (feature `metal`, MLX built with Metal).
#include "mlx-sys/src/metal_policy.h"

#include <stdexcept>
#include <string>

#include "mlx/backend/metal/qmv_policy.h"

namespace mlx_sys::metal_policy {

namespace mm = mlx::core::metal;

// The Rust codes, pinned to the enumerators: a reordered enum fails to compile here instead
// of silently selecting another policy.
static_assert(static_cast<int>(mm::QmvBatchPolicy::Upstream) == 0);
static_assert(static_cast<int>(mm::QmvBatchPolicy::Narrow) == 1);
static_assert(static_cast<int>(mm::QmvBatchPolicy::Streamed) == 2);

uint8_t qmv_batch_policy() {
  return static_cast<uint8_t>(mm::qmv_batch_policy());
}

void set_qmv_batch_policy(uint8_t policy) {
  if (policy > 2) {
    throw std::invalid_argument(
        "[set_qmv_batch_policy] unknown policy code " + std::to_string(policy));
  }
  mm::set_qmv_batch_policy(static_cast<mm::QmvBatchPolicy>(policy));
}

} // namespace mlx_sys::metal_policy
