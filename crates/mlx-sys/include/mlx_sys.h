// Thin C++ side of the mlx-sys cxx bridge. Every function validates its inputs before
// building an MLX graph: an exception thrown by a kernel inside eval() aborts the process,
// while one thrown here reaches Rust as Err.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "mlx/array.h"
#include "rust/cxx.h"

namespace mlx_sys {

struct Quantized;
struct QmmPathCounts;

// Owns one mlx::core::array. The destructor takes the global MLX lock because dropping the
// last reference to a graph node touches state shared with a concurrent eval().
class MlxArray {
 public:
  explicit MlxArray(mlx::core::array a);
  ~MlxArray();
  MlxArray(const MlxArray&) = delete;
  MlxArray& operator=(const MlxArray&) = delete;
  const mlx::core::array& get() const { return *a_; }

 private:
  std::optional<mlx::core::array> a_;
};

std::unique_ptr<MlxArray> from_f32(rust::Slice<const float> data, rust::Slice<const int32_t> shape);
std::unique_ptr<MlxArray> from_u16_bits(
    rust::Slice<const uint16_t> data,
    rust::Slice<const int32_t> shape,
    uint8_t dtype);
rust::Vec<int32_t> shape(const MlxArray& a);
uint8_t dtype(const MlxArray& a);
void eval(const MlxArray& a);
rust::Vec<float> to_f32(const MlxArray& a);
rust::Vec<uint16_t> to_u16_bits(const MlxArray& a);
rust::Vec<uint32_t> to_u32(const MlxArray& a);
std::unique_ptr<MlxArray> astype(const MlxArray& a, uint8_t dtype);
std::unique_ptr<MlxArray> matmul(const MlxArray& a, const MlxArray& b);
Quantized quantize(const MlxArray& w, int32_t group_size, int32_t bits);
std::unique_ptr<MlxArray> dequantize(
    const MlxArray& wq,
    const MlxArray& scales,
    const MlxArray& biases,
    int32_t group_size,
    int32_t bits);
std::unique_ptr<MlxArray> quantized_matmul(
    const MlxArray& x,
    const MlxArray& wq,
    const MlxArray& scales,
    const MlxArray& biases,
    bool transpose,
    int32_t group_size,
    int32_t bits);

// The exactness probe (probe/exactness.h) under the bridge's lock and stream.
rust::String exactness_probe(rust::Str spec);
void exactness_write_checkpoint(rust::Str spec, rust::Str file);

// The CPU policy switch of the fork's local overlay (mlx/backend/cpu/quantized_policy.h).
// Without it in the built MLX, available() is false and the others throw.
bool qmm_policy_available();
void set_qmm_t_streamed(bool enabled);
bool qmm_t_streamed();
QmmPathCounts qmm_t_path_counts();

} // namespace mlx_sys
