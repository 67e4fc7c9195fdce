// MSL shim for MLX's SDPA vector kernels (mlx/backend/metal/kernels/sdpa_vector.h),
// on top of the MLX shim (metal_shim.h: half/bfloat16 rounding, simd_sum). Written
// into the unit's folder as "shim.h" so that the threadgroup scheduler (ggml/tg.h)
// builds on it. Adds what the three kernels use beyond metal_shim.h: ushort3 ids,
// mem_flags and threadgroup_barrier (tg.h), simd_max, fast::exp and MLX's Limits.
// Threadgroup arrays declared in a kernel body become `static thread_local`
// (simt.h defines `threadgroup` away; sdpa main.cpp redefines it): every lane of a
// threadgroup is a coroutine on one OS thread, threadgroups run one after another,
// so one static array per instantiation is exactly one threadgroup's memory.
// See docs/kernels/metal-sim.md.
#pragma once
#include "metal_std.h"
#include "metal_shim.h"
#include <cfloat>

struct ushort3 {
  ushort x = 0, y = 0, z = 0;
  ushort3() = default;
  ushort3(ushort a, ushort b, ushort c) : x(a), y(b), z(c) {}
};

namespace msim {
enum { kSimdMax = 100 };
template <class T>
void combine_simd_max(Group& g) {
  T m = *static_cast<const T*>(g.lanes[0].post.in);
  for (int i = 1; i < 32; i++) {
    T v = *static_cast<const T*>(g.lanes[i].post.in);
    m = m < v ? v : m;
  }
  for (auto& l : g.lanes) *static_cast<T*>(l.post.out) = m;
}
}  // namespace msim

namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags);  // tg.h
template <class T>
inline T simd_max(T v) {
  T out{};
  msim::exchange(msim::kSimdMax, 0, typeid(T), &v, &out, &msim::combine_simd_max<T>);
  return out;
}
// Metal's fast::exp is an approximation of unknown exact form; any
// deterministic function serves a block-vs-chain identity claim (both sides
// call the same one on the same operands), so the C library's is used.
namespace fast {
inline float exp(float x) { return std::exp(x); }
}  // namespace fast
}  // namespace metal
using metal::mem_flags;

// MLX's Limits (kernels/utils.h): the kernels read finite_min only.
template <class T>
struct Limits;
template <>
struct Limits<float> {
  static inline const float finite_min = -FLT_MAX;
};
template <>
struct Limits<half> {
  static inline const half finite_min = half(-65504.0f);
};
template <>
struct Limits<bfloat16_t> {
  static inline const bfloat16_t finite_min = bfloat16_t(-3.38953139e38f);
};
