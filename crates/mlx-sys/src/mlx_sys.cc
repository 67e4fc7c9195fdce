#include "mlx-sys/include/mlx_sys.h"
#include "mlx-sys/src/ffi.rs.h"

#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

#include "mlx/mlx.h"
#include "../probe/exactness.h"
#if MLX_SYS_QMM_POLICY
#include "mlx/backend/cpu/quantized_policy.h"
#endif

namespace mx = mlx::core;

namespace mlx_sys {
namespace {

// At this pin a stream made by new_stream() is registered only in the creating thread's
// encoder map, and each thread gets its own default stream. Rust callers (cargo test above
// all) hop between threads, so we use one stream that any thread may use,
// new_thread_unsafe_stream(), and serialize every MLX call behind one mutex so it is never
// used concurrently. Recursive so that an MlxArray destroyed while a call holds the lock
// (e.g. during exception unwinding) cannot deadlock.
std::recursive_mutex& mlx_mutex() {
  static std::recursive_mutex m;
  return m;
}

struct Locked {
  std::lock_guard<std::recursive_mutex> guard{mlx_mutex()};
  mx::Stream stream;
  Locked() : stream(shared_stream()) {
    // Internal default_stream() lookups (e.g. in eval) must not create per-thread streams.
    mx::set_default_stream(stream);
  }
  static mx::Stream shared_stream() {
    static mx::Stream s = mx::new_thread_unsafe_stream(mx::default_device());
    return s;
  }
};

// Stable codes shared with src/ffi.rs; spelled out so an upstream enum reorder cannot
// silently change their meaning.
uint8_t dtype_code(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return 0;
    case mx::Dtype::Val::uint8: return 1;
    case mx::Dtype::Val::uint16: return 2;
    case mx::Dtype::Val::uint32: return 3;
    case mx::Dtype::Val::uint64: return 4;
    case mx::Dtype::Val::int8: return 5;
    case mx::Dtype::Val::int16: return 6;
    case mx::Dtype::Val::int32: return 7;
    case mx::Dtype::Val::int64: return 8;
    case mx::Dtype::Val::float16: return 9;
    case mx::Dtype::Val::float32: return 10;
    case mx::Dtype::Val::float64: return 11;
    case mx::Dtype::Val::bfloat16: return 12;
    case mx::Dtype::Val::complex64: return 13;
  }
  throw std::logic_error("mlx-sys: unknown MLX dtype");
}

mx::Dtype dtype_from_code(uint8_t c) {
  static const mx::Dtype table[] = {
      mx::bool_, mx::uint8, mx::uint16, mx::uint32, mx::uint64,
      mx::int8, mx::int16, mx::int32, mx::int64, mx::float16,
      mx::float32, mx::float64, mx::bfloat16, mx::complex64};
  if (c >= sizeof(table) / sizeof(table[0])) {
    throw std::invalid_argument("mlx-sys: invalid dtype code " + std::to_string(c));
  }
  return table[c];
}

bool is_half_or_single(mx::Dtype d) {
  return d == mx::float32 || d == mx::float16 || d == mx::bfloat16;
}

std::string describe(const mx::array& a) {
  std::ostringstream s;
  s << a.dtype() << " " << a.shape();
  return s.str();
}

[[noreturn]] void invalid(const std::string& tag, const std::string& msg) {
  throw std::invalid_argument("[" + tag + "] " + msg);
}

mx::Shape checked_shape(rust::Slice<const int32_t> shape, size_t len, const char* tag) {
  size_t n = 1;
  for (int32_t d : shape) {
    if (d < 0) {
      invalid(tag, "negative dimension " + std::to_string(d));
    }
    n *= static_cast<size_t>(d);
  }
  if (n != len) {
    invalid(tag, "shape holds " + std::to_string(n) + " elements but data has " +
                     std::to_string(len));
  }
  return mx::Shape(shape.begin(), shape.end());
}

// Copies raw bytes into an MLX-owned buffer: a leaf array, bit-exact (no value conversion).
mx::array from_bytes(const void* data, size_t nbytes, mx::Shape shape, mx::Dtype dtype) {
  auto buf = mx::allocator::malloc(nbytes);
  if (nbytes > 0) {
    std::memcpy(buf.raw_ptr(), data, nbytes);
  }
  return mx::array(buf, std::move(shape), dtype);
}

// Reads an evaluated array in logical row-major order, honouring strides (views and
// broadcasts are not contiguous).
template <typename T>
rust::Vec<T> read_strided(const mx::array& a) {
  rust::Vec<T> out;
  out.reserve(a.size());
  if (a.size() == 0) {
    return out;
  }
  const T* p = a.data<T>();
  const auto& shape = a.shape();
  const auto& strides = a.strides();
  const int nd = static_cast<int>(shape.size());
  std::vector<int32_t> idx(nd, 0);
  for (size_t n = 0; n < a.size(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) {
      off += static_cast<int64_t>(idx[d]) * strides[d];
    }
    out.push_back(p[off]);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        break;
      }
      idx[d] = 0;
    }
  }
  return out;
}

void check_quant_params(const char* tag, int32_t group_size, int32_t bits) {
  // MLX's CPU kernels throw for anything else from inside eval(), which aborts.
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    invalid(tag, "group_size must be 32, 64 or 128, got " + std::to_string(group_size));
  }
  if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8) {
    invalid(tag, "bits must be 2, 3, 4, 5, 6 or 8, got " + std::to_string(bits));
  }
}

void check_float(const char* tag, const char* what, const mx::array& a) {
  if (!is_half_or_single(a.dtype())) {
    invalid(tag, std::string(what) + " must be float32, float16 or bfloat16, got " + describe(a));
  }
}

std::unique_ptr<MlxArray> wrap(mx::array a) {
  return std::make_unique<MlxArray>(std::move(a));
}

} // namespace

MlxArray::MlxArray(mx::array a) : a_(std::move(a)) {}

MlxArray::~MlxArray() {
  std::lock_guard<std::recursive_mutex> g(mlx_mutex());
  a_.reset();
}

std::unique_ptr<MlxArray> from_f32(rust::Slice<const float> data, rust::Slice<const int32_t> shape) {
  Locked l;
  auto s = checked_shape(shape, data.size(), "from_f32");
  return wrap(from_bytes(data.data(), data.size() * sizeof(float), std::move(s), mx::float32));
}

std::unique_ptr<MlxArray> from_u16_bits(
    rust::Slice<const uint16_t> data,
    rust::Slice<const int32_t> shape,
    uint8_t dtype) {
  Locked l;
  auto dt = dtype_from_code(dtype);
  if (dt.size() != 2) {
    invalid("from_u16_bits", "dtype must be 2 bytes wide (float16, bfloat16, uint16)");
  }
  auto s = checked_shape(shape, data.size(), "from_u16_bits");
  return wrap(from_bytes(data.data(), data.size() * sizeof(uint16_t), std::move(s), dt));
}

rust::Vec<int32_t> shape(const MlxArray& a) {
  Locked l;
  rust::Vec<int32_t> out;
  for (auto d : a.get().shape()) {
    out.push_back(d);
  }
  return out;
}

uint8_t dtype(const MlxArray& a) {
  Locked l;
  return dtype_code(a.get().dtype());
}

void eval(const MlxArray& a) {
  Locked l;
  mx::array x = a.get();
  mx::eval(x);
}

rust::Vec<float> to_f32(const MlxArray& a) {
  Locked l;
  mx::array x = a.get().dtype() == mx::float32 ? a.get() : mx::astype(a.get(), mx::float32, l.stream);
  mx::eval(x);
  return read_strided<float>(x);
}

rust::Vec<uint16_t> to_u16_bits(const MlxArray& a) {
  Locked l;
  mx::array x = a.get();
  if (x.dtype().size() != 2) {
    invalid("to_u16_bits", "needs a 2-byte dtype, got " + describe(x));
  }
  mx::eval(x);
  return read_strided<uint16_t>(x);
}

rust::Vec<uint32_t> to_u32(const MlxArray& a) {
  Locked l;
  mx::array x = a.get();
  if (x.dtype() != mx::uint32) {
    invalid("to_u32", "needs uint32, got " + describe(x));
  }
  mx::eval(x);
  return read_strided<uint32_t>(x);
}

std::unique_ptr<MlxArray> astype(const MlxArray& a, uint8_t dtype) {
  Locked l;
  return wrap(mx::astype(a.get(), dtype_from_code(dtype), l.stream));
}

std::unique_ptr<MlxArray> matmul(const MlxArray& a, const MlxArray& b) {
  Locked l;
  const auto& x = a.get();
  const auto& y = b.get();
  check_float("matmul", "a", x);
  check_float("matmul", "b", y);
  if (x.ndim() < 1 || y.ndim() < 1) {
    invalid("matmul", "inputs need at least one dimension, got " + describe(x) + " and " + describe(y));
  }
  return wrap(mx::matmul(x, y, l.stream));
}

Quantized quantize(const MlxArray& w, int32_t group_size, int32_t bits) {
  Locked l;
  check_quant_params("quantize", group_size, bits);
  const auto& x = w.get();
  check_float("quantize", "w", x);
  auto parts = mx::quantize(x, group_size, bits, "affine", std::nullopt, l.stream);
  if (parts.size() != 3) {
    throw std::logic_error("mlx-sys: affine quantize returned " + std::to_string(parts.size()) + " arrays");
  }
  return Quantized{wrap(parts[0]), wrap(parts[1]), wrap(parts[2])};
}

std::unique_ptr<MlxArray> dequantize(
    const MlxArray& wq,
    const MlxArray& scales,
    const MlxArray& biases,
    int32_t group_size,
    int32_t bits) {
  Locked l;
  check_quant_params("dequantize", group_size, bits);
  check_float("dequantize", "scales", scales.get());
  check_float("dequantize", "biases", biases.get());
  return wrap(mx::dequantize(
      wq.get(), scales.get(), biases.get(), group_size, bits, "affine", std::nullopt,
      std::nullopt, l.stream));
}

std::unique_ptr<MlxArray> quantized_matmul(
    const MlxArray& x,
    const MlxArray& wq,
    const MlxArray& scales,
    const MlxArray& biases,
    bool transpose,
    int32_t group_size,
    int32_t bits) {
  Locked l;
  check_quant_params("quantized_matmul", group_size, bits);
  const auto& xa = x.get();
  const auto& w = wq.get();
  check_float("quantized_matmul", "x", xa);
  check_float("quantized_matmul", "scales", scales.get());
  check_float("quantized_matmul", "biases", biases.get());
  // MLX indexes shape(-1)/shape(-2) of these before checking ranks.
  if (xa.ndim() < 1) {
    invalid("quantized_matmul", "x needs at least one dimension");
  }
  if (w.ndim() < 2 || scales.get().ndim() < 2 || biases.get().ndim() < 2) {
    invalid("quantized_matmul", "w, scales and biases need at least two dimensions, got " +
                                    describe(w) + ", " + describe(scales.get()) + ", " +
                                    describe(biases.get()));
  }
  return wrap(mx::quantized_matmul(
      xa, w, scales.get(), biases.get(), transpose, group_size, bits, "affine", l.stream));
}

rust::String exactness_probe(rust::Str spec) {
  Locked l;
  auto opts = exactness::parse_options(std::string(spec));
  std::ostringstream out;
  exactness::run(opts, out);
  return rust::String(out.str());
}

void exactness_write_checkpoint(rust::Str spec, rust::Str file) {
  Locked l;
  exactness::write_checkpoint(exactness::parse_options(std::string(spec)), std::string(file));
}

bool qmm_policy_available() {
  return MLX_SYS_QMM_POLICY;
}

#if MLX_SYS_QMM_POLICY
// Under the lock: kernels only run inside a locked eval(), so a switch never lands mid-call.
void set_qmm_t_streamed(bool enabled) {
  Locked l;
  mx::cpu::set_qmm_t_streamed(enabled);
}

bool qmm_t_streamed() {
  Locked l;
  return mx::cpu::qmm_t_streamed();
}

QmmPathCounts qmm_t_path_counts() {
  Locked l;
  auto c = mx::cpu::qmm_t_path_counts();
  return QmmPathCounts{c.streamed, c.row_by_row};
}
#else
[[noreturn]] static void no_policy(const char* tag) {
  invalid(tag, "the MLX build lacks the CPU qmm policy overlay (mlx/backend/cpu/quantized_policy.h)");
}

void set_qmm_t_streamed(bool) {
  no_policy("set_qmm_t_streamed");
}

bool qmm_t_streamed() {
  no_policy("qmm_t_streamed");
}

QmmPathCounts qmm_t_path_counts() {
  no_policy("qmm_t_path_counts");
}
#endif

} // namespace mlx_sys
