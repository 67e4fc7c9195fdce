// C++ side of src/metal_policy.rs (feature `metal`): the fork's Metal qmv batch policy.
#pragma once

#include <cstdint>

namespace mlx_sys::metal_policy {

uint8_t qmv_batch_policy();
void set_qmv_batch_policy(uint8_t policy);

} // namespace mlx_sys::metal_policy
