// MSL shim for ggml's Metal kernels (src/ggml-metal/ggml-metal.metal), on top
// of the MLX shim (metal_shim.h: half/bfloat rounding, simd_sum and the other
// simdgroup collectives). Adds what ggml's TQ1_0 kernels and the templates
// they instantiate use: short vectors and matrices, threadgroup memory with
// threadgroup_barrier across all simdgroups of a threadgroup (tg.h),
// simdgroup 8x8 matrices, function constants set by the launcher, and a
// registry of [[host_name]] entry points. See docs/kernels/ggml-tq1_0.md.
#pragma once
#include "metal_std.h"
// metal_shim.h's `half` (msim::narrow<0>) converts implicitly to float and
// from int, so `c ? (half) x : 0` is ambiguous in C++ where MSL converts the
// 0 to half. ggml gets its own binary16 type below (same rounding, no
// conversion to integers); the MLX emulation keeps narrow<0>.
#define half msim_mlx_half
#include "metal_shim.h"
#undef half

// IEEE binary16, round to nearest even on every conversion and operation.
struct half {
  uint16_t bits = 0;
  half() = default;
  half(float f) : bits(msim::f32_to_f16(f)) {}
  half(double f) : bits(msim::f32_to_f16(float(f))) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  half(I i) : bits(msim::f32_to_f16(float(i))) {}
  // Only to floating types: an integer needs an explicit float step, so the
  // conditional operator with an integer operand converts that operand.
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  operator T() const {
    return T(msim::f16_to_f32(bits));
  }
  float f() const { return msim::f16_to_f32(bits); }
  half operator-() const {
    half h;
    h.bits = bits ^ 0x8000u;
    return h;
  }
};
inline half operator+(half a, half b) { return half(a.f() + b.f()); }
inline half operator-(half a, half b) { return half(a.f() - b.f()); }
inline half operator*(half a, half b) { return half(a.f() * b.f()); }
inline float operator*(half a, float b) { return a.f() * b; }
inline float operator*(float a, half b) { return a * b.f(); }
inline float operator+(half a, float b) { return a.f() + b; }
inline float operator+(float a, half b) { return a + b.f(); }

namespace msim {

// ---------------------------------------------------------------------------
// Short vectors: float2/float4/ushort3/..., indexed and named (.x .. .w).
template <class T, int N>
struct vec;

#define MSIM_VEC_COMMON(N)                                                       \
  T& operator[](int i) { return (&x)[i]; }                                     \
  const T& operator[](int i) const { return (&x)[i]; }                         \
  template <class U>                                                           \
  explicit vec(const vec<U, N>& o) {                                           \
    for (int i = 0; i < N; i++) (*this)[i] = T(o[i]);                          \
  }
template <class T>
struct vec<T, 2> {
  T x{}, y{};
  vec() = default;
  vec(T a, T b) : x(a), y(b) {}
  MSIM_VEC_COMMON(2)
};
template <class T>
struct vec<T, 3> {
  T x{}, y{}, z{};
  vec() = default;
  vec(T a, T b, T c) : x(a), y(b), z(c) {}
  MSIM_VEC_COMMON(3)
};
template <class T>
struct vec<T, 4> {
  T x{}, y{}, z{}, w{};
  vec() = default;
  vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  MSIM_VEC_COMMON(4)
};
#undef MSIM_VEC_COMMON

#define MSIM_VEC_OP(op)                                                        \
  template <class T, int N>                                                   \
  vec<T, N> operator op(const vec<T, N>& a, const vec<T, N>& b) {             \
    vec<T, N> r;                                                              \
    for (int i = 0; i < N; i++) r[i] = a[i] op b[i];                          \
    return r;                                                                 \
  }                                                                           \
  template <class T, int N>                                                   \
  vec<T, N> operator op(const vec<T, N>& a, T b) {                            \
    vec<T, N> r;                                                              \
    for (int i = 0; i < N; i++) r[i] = a[i] op b;                             \
    return r;                                                                 \
  }                                                                           \
  template <class T, int N>                                                   \
  vec<T, N> operator op(T a, const vec<T, N>& b) {                            \
    vec<T, N> r;                                                              \
    for (int i = 0; i < N; i++) r[i] = a op b[i];                             \
    return r;                                                                 \
  }
MSIM_VEC_OP(+)
MSIM_VEC_OP(-)
MSIM_VEC_OP(*)
MSIM_VEC_OP(/)
#undef MSIM_VEC_OP

// Column-major matrices as MSL lays them out: C columns of R-vectors.
template <class T, int C, int R>
struct mat {
  vec<T, R> c[C];
  mat() = default;
  vec<T, R>& operator[](int i) { return c[i]; }
  const vec<T, R>& operator[](int i) const { return c[i]; }
  template <class U>
  explicit mat(const mat<U, C, R>& o) {
    for (int i = 0; i < C; i++)
      for (int j = 0; j < R; j++) c[i][j] = T(o[i][j]);
  }
};

// ---------------------------------------------------------------------------
// Simdgroup 8x8 matrices. Every lane holds the whole matrix and computes the
// whole operation (the operations are simdgroup-uniform in the kernels under
// test: same pointer, stride and operands on every lane), so no lane needs
// another's data; the result is what the cooperative operation defines.
// multiply_accumulate sums products in float in k order 0..7 then adds c;
// the hardware's order inside the 8x8 product is not modelled.
template <class T>
struct smat {
  T m[8][8];  // [row][col]
};

template <class T>
smat<T> make_filled(T v) {
  smat<T> r;
  for (auto& row : r.m)
    for (auto& e : row) e = v;
  return r;
}

// ---------------------------------------------------------------------------
// Function constants: declared by the kernels as globals
// (`constant short FC_x [[function_constant(i)]];` becomes `short FC_x;`), set
// by the launcher by name before a launch, as the host's
// ggml_metal_cv_set_* sets them by index.
struct FcSlot {
  const char* name;
  int index;
  void* ptr;
  const std::type_info* ty;
};
inline std::vector<FcSlot>& fc_slots() {
  static std::vector<FcSlot> v;
  return v;
}
template <class T>
struct FcReg {
  FcReg(const char* name, int index, T* p) { fc_slots().push_back({name, index, p, &typeid(T)}); }
};
template <class T>
inline void set_fc(int index, T value) {
  for (auto& s : fc_slots()) {
    if (s.index != index) continue;
    if (*s.ty != typeid(T)) {
      std::fprintf(stderr, "function constant %s (%d): wrong type\n", s.name, index);
      std::abort();
    }
    *static_cast<T*>(s.ptr) = value;
    return;
  }
  std::fprintf(stderr, "no function constant with index %d\n", index);
  std::abort();
}

// ---------------------------------------------------------------------------
// [[host_name]] registry: the instantiation lines of the tree under test,
// looked up by the name the host asks for; the pointer's exact type is
// checked at lookup.
struct KernelEntry {
  std::string name;
  void* fn;
  const std::type_info* ty;
};
inline std::vector<KernelEntry>& kernels() {
  static std::vector<KernelEntry> v;
  return v;
}
struct KReg {
  template <class F>
  KReg(const char* name, F* f) {
    kernels().push_back({name, reinterpret_cast<void*>(f), &typeid(F*)});
  }
};
template <class F>
F* kernel_by_name(const std::string& name) {
  for (auto& k : kernels()) {
    if (k.name != name) continue;
    if (*k.ty != typeid(F*)) {
      std::fprintf(stderr, "kernel %s: signature differs from the launcher's\n", name.c_str());
      std::abort();
    }
    return reinterpret_cast<F*>(k.fn);
  }
  std::fprintf(stderr, "kernel %s: no such [[host_name]] in the library\n", name.c_str());
  std::abort();
}

}  // namespace msim

// ---------------------------------------------------------------------------
// MSL spellings used by ggml.
typedef msim::vec<float, 2> float2;
typedef msim::vec<float, 3> float3;
typedef msim::vec<float, 4> float4;
typedef msim::vec<half, 2> half2;
typedef msim::vec<half, 4> half4;
typedef msim::vec<ushort, 2> ushort2;
typedef msim::vec<ushort, 3> ushort3;
typedef msim::vec<int, 2> int2;
typedef msim::vec<int, 4> int4;
typedef msim::vec<uint, 2> uint2;
typedef msim::vec<uchar, 4> uchar4;
typedef msim::mat<float, 4, 4> float4x4;
typedef msim::mat<half, 4, 4> half4x4;
typedef msim::mat<float, 2, 4> float2x4;
typedef msim::mat<half, 2, 4> half2x4;
typedef msim::smat<float> simdgroup_float8x8;
typedef msim::smat<half> simdgroup_half8x8;

#define kernel

namespace metal {
using std::is_same;
inline float floor(float x) { return std::floor(x); }
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags);  // tg.h
inline void simdgroup_barrier(mem_flags) {}

template <class T, int N>
msim::smat<T> make_filled_simdgroup_matrix(T v) {
  static_assert(N == 8, "8x8 only");
  return msim::make_filled<T>(v);
}
template <class T, class P>
void simdgroup_load(msim::smat<T>& d, const P* src, long stride, int origin, bool transpose) {
  if (origin != 0) std::abort();
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++)
      d.m[i][j] = T(transpose ? src[j * stride + i] : src[i * stride + j]);
}
template <class T, class P>
void simdgroup_store(const msim::smat<T>& s, P* dst, long stride, int origin, bool transpose) {
  if (origin != 0) std::abort();
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) (transpose ? dst[j * stride + i] : dst[i * stride + j]) = P(s.m[i][j]);
}
template <class TA, class TB>
void simdgroup_multiply_accumulate(msim::smat<float>& d, const msim::smat<TA>& a,
                                   const msim::smat<TB>& b, const msim::smat<float>& c) {
  msim::smat<float> r;
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      float s = 0.f;
      for (int k = 0; k < 8; k++) s += float(a.m[i][k]) * float(b.m[k][j]);
      r.m[i][j] = s + c.m[i][j];
    }
  d = r;
}
}  // namespace metal
using metal::mem_flags;
