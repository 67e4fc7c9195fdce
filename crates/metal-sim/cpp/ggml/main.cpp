// Driver for ggml's TQ1_0 kernels (included at the end of the generated unit,
// after the extracted kernels and the [[host_name]] registry). One request
// per stdin line, one JSON object per line on stdout:
//   deq                                   every byte value x digit, bitwise vs dequantize_row_tq1_0
//   get_rows SEED NROWS K NIDX            bitwise vs dequantize_row_tq1_0
//   cpy SEED ROWS K f32|f16               bitwise vs dequantize_row_tq1_0 (f16: rounded)
//   mul_mv SEED N K M                     kernel_mul_mv_tq1_0_f32, M <= 8 columns
//   mul_mm SEED N K M [f16]               kernel_mul_mm_tq1_0_f32 (_f16: half src1), M > 8 columns
//   mul_mv_id SEED NEXP NUSED NTOK N K    kernel_mul_mv_id_tq1_0_f32 (NTOK < 32)
//   mul_mm_id SEED NEXP NUSED NTOK N K [f16]  map0 + kernel_mul_mm_id_tq1_0_f32 (_f16: half src1), NTOK >= 32
// The launches (grid, threadgroup, function constants, kargs) follow
// ggml_metal_op_{get_rows,cpy,mul_mat,mul_mat_id} and
// ggml_metal_library_get_pipeline_* at the pin (docs/kernels/ggml-tq1_0.md).

#include "rng.h"

extern "C" {
void dequantize_row_tq1_0(const void* x, float* y, int64_t k);
void quantize_row_tq1_0_ref(const float* x, void* y, int64_t k);
void quantize_row_q8_K_ref(const float* x, void* y, int64_t k);
void ggml_vec_dot_tq1_0_q8_K_generic(int n, float* s, size_t bs, const void* vx, size_t bx,
                                     const void* vy, size_t by, int nrc);
}

namespace drv {

using msim::tg::Launch;
using msim::tg::ThreadIds;

using msim::Rng;

constexpr size_t kBlock = sizeof(block_tq1_0);
static_assert(kBlock == 54, "block_tq1_0 is 54 bytes");

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Random blocks: every byte uniform in 0..255 (a superset of what the
// quantizer writes), d a random half in +-[2^-8, 4).
std::vector<uint8_t> random_blocks(Rng& r, size_t nblocks) {
  std::vector<uint8_t> v(nblocks * kBlock);
  for (size_t b = 0; b < nblocks; b++) {
    uint8_t* p = v.data() + b * kBlock;
    for (size_t i = 0; i < kBlock - 2; i++) p[i] = uint8_t(r.next());
    float d = std::ldexp(1.f + 0.5f * (r.uniform() + 1.f), int(r.below(10)) - 8) * (r.next() & 1 ? -1.f : 1.f);
    half h(d);
    std::memcpy(p + kBlock - 2, &h.bits, 2);
  }
  return v;
}

// Weights as the model would hold them: random floats through ggml's quantizer.
std::vector<uint8_t> quantized_rows(Rng& r, size_t rows, int k) {
  std::vector<uint8_t> v(rows * (k / 256) * kBlock);
  std::vector<float> x(k);
  for (size_t i = 0; i < rows; i++) {
    float scale = 0.25f + 0.75f * (r.uniform() + 1.f);
    for (auto& e : x) e = scale * r.uniform();
    quantize_row_tq1_0_ref(x.data(), v.data() + i * (k / 256) * kBlock, k);
  }
  return v;
}

std::vector<float> ref_row(const uint8_t* row, int k) {
  std::vector<float> y(k);
  dequantize_row_tq1_0(row, y.data(), k);
  return y;
}

// ---------------------------------------------------------------------------
// (i) every byte value x digit, at every position of a block, d in {1, -1,
// 0.1 rounded, a subnormal}: the Metal dequantize_tq1_0 (each il) equals the
// CPU reference bit for bit, into float4x4 and half4x4.
void req_deq() {
  const float ds[] = {1.f, -1.f, 0.1f, -3.5f, 6.1035156e-05f, 5.9604645e-08f};
  uint64_t compared = 0, mismatches = 0;
  std::string first;
  std::vector<char> wrong_pairs(256 * 5, 0);  // (byte, digit) pairs with any wrong value
  for (float dv : ds) {
    for (int b = 0; b < 256; b++) {
      block_tq1_0 blk;
      std::memset(&blk, 0, sizeof blk);
      for (auto& q : blk.qs) q = uint8_t(b);
      for (auto& q : blk.qh) q = uint8_t(b);
      blk.d = half(dv);
      std::vector<float> want = ref_row(reinterpret_cast<const uint8_t*>(&blk), 256);
      for (short il = 0; il < 16; il++) {
        float4x4 f;
        half4x4 h;
        dequantize_tq1_0<float4x4>(&blk, il, f);
        dequantize_tq1_0<half4x4>(&blk, il, h);
        for (int e = 0; e < 16; e++) {
          float w = want[il * 16 + e];
          float got = f[e / 4][e % 4];
          uint16_t hw = half(w).bits, hg = h[e / 4][e % 4].bits;
          compared += 2;
          if (f32_bits(got) != f32_bits(w) || hw != hg) {
            mismatches++;
            int digit = il < 10 ? il / 2 : il < 15 ? il - 10 : e / 4;
            wrong_pairs[b * 5 + digit] = 1;
            if (first.empty()) {
              std::ostringstream m;
              m << "byte " << b << " d " << dv << " il " << il << " e " << e << ": metal " << got << " cpu " << w;
              first = m.str();
            }
          }
        }
      }
    }
  }
  int pairs = 0;
  for (char w : wrong_pairs) pairs += w;
  std::printf("{\"req\":\"deq\",\"compared\":%llu,\"mismatches\":%llu,\"wrong_digit_pairs\":%d,\"first\":\"%s\"}\n",
              (unsigned long long)compared, (unsigned long long)mismatches, pairs, first.c_str());
}

// ---------------------------------------------------------------------------
// (ii) get_rows and cpy, as ggml_metal_op_get_rows / ggml_metal_op_cpy launch them.
using get_rows_fn = void(ggml_metal_kargs_get_rows&, const void*, const void*, void*, uint3, ushort, ushort3);
using cpy_fn = void(ggml_metal_kargs_cpy&, const char*, char*, uint3, ushort3, ushort3);

struct Bitwise {
  uint64_t compared = 0, mismatches = 0, unwritten = 0;
  void add(float want, float got) {
    compared++;
    if (std::isnan(got)) unwritten++;
    else if (f32_bits(want) != f32_bits(got)) mismatches++;
  }
  void print(const char* req, const std::string& err, const std::string& extra) const {
    std::printf("{\"req\":\"%s\",\"compared\":%llu,\"mismatches\":%llu,\"unwritten\":%llu,\"error\":\"%s\"%s}\n",
                req, (unsigned long long)compared, (unsigned long long)mismatches,
                (unsigned long long)unwritten, err.c_str(), extra.c_str());
  }
};

void req_get_rows(uint64_t seed, int nrows, int k, int nidx) {
  Rng r{seed};
  auto src = random_blocks(r, size_t(nrows) * (k / 256));
  std::vector<int32_t> ids(nidx);
  for (auto& i : ids) i = int32_t(r.below(nrows));
  std::vector<float> dst(size_t(nidx) * k, NAN);
  const uint64_t nb01 = (k / 256) * kBlock;
  ggml_metal_kargs_get_rows a{};
  a.ne00t = k / 16;
  a.ne00 = k;
  a.nb01 = nb01;
  a.nb02 = nb01 * nrows;
  a.nb03 = a.nb02;
  a.ne10 = nidx;
  a.nb10 = 4;
  a.nb11 = 4 * nidx;
  a.nb12 = a.nb11;
  a.nb1 = 4 * k;
  a.nb2 = a.nb1 * nidx;
  a.nb3 = a.nb2;
  const int nth = std::min(a.ne00t, 1024);
  const int nw0 = (a.ne00t + nth - 1) / nth;
  auto* f = msim::kernel_by_name<get_rows_fn>("kernel_get_rows_tq1_0");
  std::string err = msim::tg::launch(Launch{{uint32_t(nw0 * nidx), 1, 1}, {uint32_t(nth), 1, 1}}, [&](const ThreadIds& t) {
    f(a, src.data(), ids.data(), dst.data(), t.tgpig, t.tiitg, t.ntg);
  });
  Bitwise b;
  for (int i = 0; i < nidx; i++) {
    auto want = ref_row(src.data() + size_t(ids[i]) * nb01, k);
    for (int e = 0; e < k; e++) b.add(want[e], dst[size_t(i) * k + e]);
  }
  b.print("get_rows", err, "");
}

template <class T>
float as_float(T v) { return float(v); }

template <class T>
void run_cpy(uint64_t seed, int rows, int k, const char* name) {
  Rng r{seed};
  auto src = random_blocks(r, size_t(rows) * (k / 256));
  std::vector<T> dst(size_t(rows) * k, T(NAN));
  const uint64_t nb01 = (k / 256) * kBlock;
  ggml_metal_kargs_cpy a{};
  a.nk0 = k / 16;
  a.ne00 = k; a.ne01 = rows; a.ne02 = 1; a.ne03 = 1;
  a.nb00 = kBlock; a.nb01 = nb01; a.nb02 = nb01 * rows; a.nb03 = a.nb02;
  a.ne0 = k; a.ne1 = rows; a.ne2 = 1; a.ne3 = 1;
  a.nb0 = sizeof(T); a.nb1 = sizeof(T) * k; a.nb2 = a.nb1 * rows; a.nb3 = a.nb2;
  int nth = std::min<int>(a.nk0 * rows, 256);
  nth = std::min<int>(nth, a.nk0);
  const int nw0 = (a.nk0 + nth - 1) / nth;
  auto* f = msim::kernel_by_name<cpy_fn>(name);
  std::string err = msim::tg::launch(Launch{{uint32_t(nw0 * rows), 1, 1}, {uint32_t(nth), 1, 1}}, [&](const ThreadIds& t) {
    f(a, reinterpret_cast<const char*>(src.data()), reinterpret_cast<char*>(dst.data()), t.tgpig, t.tpitg, t.ntg);
  });
  Bitwise b;
  for (int i = 0; i < rows; i++) {
    auto want = ref_row(src.data() + size_t(i) * nb01, k);
    for (int e = 0; e < k; e++) b.add(as_float(T(want[e])), as_float(dst[size_t(i) * k + e]));
  }
  b.print("cpy", err, std::string(",\"kernel\":\"") + name + "\"");
}

// ---------------------------------------------------------------------------
// (iii) products: Metal vs a float64 reference on the same quantized data and
// vs ggml's CPU result (src1 quantized to q8_K, ggml_vec_dot_tq1_0_q8_K_generic).
struct Cmp {
  double se_cpu = 0, ss_cpu = 0, se_ref = 0, ss_ref = 0, max_rel = 0;
  uint64_t n = 0, unwritten = 0;
  // metal output, CPU output, float64 value, sum of |w*y| (the scale of the rounding error)
  void add(float got, float cpu, double ref, double mag) {
    n++;
    if (std::isnan(got)) {
      unwritten++;
      return;
    }
    se_cpu += (double(got) - cpu) * (double(got) - cpu);
    ss_cpu += double(cpu) * cpu;
    se_ref += (got - ref) * (got - ref);
    ss_ref += ref * ref;
    if (mag > 0) max_rel = std::max(max_rel, std::fabs(got - ref) / mag);
  }
  void print(const char* req, const std::string& err, const std::string& extra) const {
    std::printf("{\"req\":\"%s\",\"outputs\":%llu,\"unwritten\":%llu,\"nmse_cpu\":%.6e,\"nmse_ref\":%.6e,"
                "\"max_rel_ref\":%.6e,\"error\":\"%s\"%s}\n",
                req, (unsigned long long)n, (unsigned long long)unwritten, ss_cpu > 0 ? se_cpu / ss_cpu : 0.0,
                ss_ref > 0 ? se_ref / ss_ref : 0.0, max_rel, err.c_str(), extra.c_str());
  }
};

// Dequantized weights (float, exact) and q8_K rows of y, for the references.
struct Refs {
  int k;
  std::vector<float> w;      // rows x k
  std::vector<uint8_t> y8;   // q8_K of each y row
  size_t q8_row;
  bool half_y;               // the kernel rounds src1 to half (mat-mat tiles)
  Refs(const std::vector<uint8_t>& wq, size_t rows, const std::vector<float>& y, size_t yrows, int k_,
       bool half_y_ = false)
      : k(k_), half_y(half_y_) {
    const size_t nb01 = (k / 256) * kBlock;
    w.resize(rows * k);
    for (size_t i = 0; i < rows; i++) dequantize_row_tq1_0(wq.data() + i * nb01, w.data() + i * k, k);
    q8_row = (k / 256) * sizeof(block_q8_K);
    y8.resize(yrows * q8_row);
    for (size_t j = 0; j < yrows; j++) quantize_row_q8_K_ref(y.data() + j * k, y8.data() + j * q8_row, k);
  }
  void expect(const std::vector<uint8_t>& wq, size_t wrow, const std::vector<float>& y, size_t yrow, float got, Cmp& c) const {
    double ref = 0, mag = 0;
    for (int e = 0; e < k; e++) {
      double yv = half_y ? double(float(half(y[yrow * k + e]))) : double(y[yrow * k + e]);
      ref += double(w[wrow * k + e]) * yv;
      mag += std::fabs(double(w[wrow * k + e]) * yv);
    }
    float cpu = 0;
    const size_t nb01 = (k / 256) * kBlock;
    ggml_vec_dot_tq1_0_q8_K_generic(k, &cpu, 0, wq.data() + wrow * nb01, 0, y8.data() + yrow * q8_row, 0, 1);
    c.add(got, cpu, ref, mag);
  }
};

std::vector<float> random_floats(Rng& r, size_t n) {
  std::vector<float> v(n);
  for (auto& e : v) e = r.uniform();
  return v;
}

using mul_mv_fn = void(ggml_metal_kargs_mul_mv&, const char*, const char*, char*, uint3, ushort, ushort);
using mul_mm_fn = void(ggml_metal_kargs_mul_mm&, const char*, const char*, char*, char*, uint3, ushort, ushort);

// ggml_metal_op_mul_mat: mat-vec path (ne11 <= 8) and mat-mat path (ne11 > 8, ne00 >= 64).
// f16: src1 is half (the mat-mat kernel's `_f16` entry); the references see
// the same half values, as ggml's CPU backend converts them to float.
void req_mul(bool mm, uint64_t seed, int n, int k, int m, bool f16 = false) {
  Rng r{seed};
  auto wq = quantized_rows(r, n, k);
  auto y = random_floats(r, size_t(m) * k);
  std::vector<half> yh;
  if (f16) {
    for (auto& e : y) yh.push_back(half(e));
    for (size_t i = 0; i < y.size(); i++) y[i] = float(yh[i]);
  }
  const char* ysrc = f16 ? reinterpret_cast<const char*>(yh.data()) : reinterpret_cast<const char*>(y.data());
  const uint64_t ysz = f16 ? 2 : 4;
  std::vector<float> dst(size_t(m) * n + 64, NAN);
  Refs refs(wq, n, y, m, k, mm);
  const uint64_t nb01 = (k / 256) * kBlock;
  std::string err;
  uint64_t barriers = 0;
  const char* kname = !mm ? "kernel_mul_mv_tq1_0_f32" : f16 ? "kernel_mul_mm_tq1_0_f16" : "kernel_mul_mm_tq1_0_f32";
  if (!mm) {
    ggml_metal_kargs_mul_mv a{};
    a.ne00 = k; a.ne01 = n; a.ne02 = 1; a.nb00 = kBlock; a.nb01 = nb01; a.nb02 = nb01 * n; a.nb03 = a.nb02;
    a.ne10 = k; a.ne11 = m; a.ne12 = 1; a.nb10 = 4; a.nb11 = 4 * k; a.nb12 = a.nb11 * m; a.nb13 = a.nb12;
    a.ne0 = n; a.ne1 = m; a.nr0 = N_R0_TQ1_0; a.r2 = 1; a.r3 = 1;
    const int nsg = N_SG_TQ1_0, nr0 = N_R0_TQ1_0, nr1 = 1;
    msim::set_fc<short>(FC_MUL_MV + 0, nsg);
    msim::set_fc<short>(FC_MUL_MV + 2, 1);
    msim::set_fc<short>(FC_MUL_MV + 3, 1);
    msim::set_fc<short>(FC_MUL_MV + 4, 1);
    auto* f = msim::kernel_by_name<mul_mv_fn>(kname);
    Launch l{{uint32_t((n + nr0 * nsg - 1) / (nr0 * nsg)), uint32_t((m + nr1 - 1) / nr1), 1}, {32, uint32_t(nsg), 1}};
    err = msim::tg::launch(l, [&](const ThreadIds& t) {
      f(a, reinterpret_cast<const char*>(wq.data()), reinterpret_cast<const char*>(y.data()),
        reinterpret_cast<char*>(dst.data()), t.tgpig, t.tiisg, t.sgitg);
    }, &barriers);
  } else {
    ggml_metal_kargs_mul_mm a{};
    a.ne00 = k; a.ne02 = 1; a.nb01 = nb01; a.nb02 = nb01 * n; a.nb03 = a.nb02;
    a.ne12 = 1; a.nb10 = ysz; a.nb11 = ysz * k; a.nb12 = a.nb11 * m; a.nb13 = a.nb12;
    a.ne0 = n; a.ne1 = m; a.r2 = 1; a.r3 = 1;
    const bool bc_out = n % 64 != 0 || m % 32 != 0;
    msim::set_fc<bool>(FC_MUL_MM + 0, k % 32 != 0);
    msim::set_fc<bool>(FC_MUL_MM + 1, bc_out);
    msim::set_fc<short>(FC_MUL_MM + 2, 1);
    msim::set_fc<short>(FC_MUL_MM + 3, 1);
    msim::set_fc<short>(FC_MUL_MM + 4, 1);
    msim::set_fc<short>(FC_MUL_MM + 5, 1);
    auto* f = msim::kernel_by_name<mul_mm_fn>(kname);
    const int nsg = N_MM_SIMD_GROUP_X * N_MM_SIMD_GROUP_Y;
    Launch l{{uint32_t((m + 31) / 32), uint32_t((n + 63) / 64), 1}, {32, uint32_t(nsg), 1}, size_t(bc_out ? 8192 : 4096 + 2048)};
    err = msim::tg::launch(l, [&](const ThreadIds& t) {
      f(a, reinterpret_cast<const char*>(wq.data()), ysrc,
        reinterpret_cast<char*>(dst.data()), t.shmem, t.tgpig, t.tiitg, t.sgitg);
    }, &barriers);
  }
  Cmp c;
  for (int j = 0; j < m; j++)
    for (int i = 0; i < n; i++) refs.expect(wq, i, y, j, dst[size_t(j) * n + i], c);
  bool past = false;
  for (size_t i = size_t(m) * n; i < dst.size(); i++) past |= !std::isnan(dst[i]);
  if (past && err.empty()) err = "write past the output";
  std::ostringstream x;
  x << ",\"kernel\":\"" << kname << "\",\"barriers\":" << barriers;
  c.print(mm ? "mul_mm" : "mul_mv", err, x.str());
}


// ---------------------------------------------------------------------------
// MUL_MAT_ID, as ggml_metal_op_mul_mat_id launches it: mat-vec per (expert
// slot, token) for ne21 < 32 tokens, else map0 (token lists per expert) then
// the mat-mat kernel per expert. NEXP experts, NUSED < NEXP used per token
// (distinct, random), src1 with ne11 = NUSED rows per token.
using mul_mv_id_fn = void(ggml_metal_kargs_mul_mv_id&, const char*, const char*, char*, const char*, char*, uint3,
                          ushort, ushort, ushort);
using map0_fn = void(ggml_metal_kargs_mul_mm_id_map0&, const char*, char*, char*, char*, ushort, ushort);
using mul_mm_id_fn = void(ggml_metal_kargs_mul_mm_id&, const char*, const char*, const char*, const char*, char*,
                          char*, uint3, ushort, ushort, ushort);

struct IdCase {
  int nexp, nused, ntok, n, k;
  std::vector<uint8_t> wq;   // nexp x n rows
  std::vector<float> y;      // ntok x nused rows
  std::vector<int32_t> ids;  // ntok x nused
  uint64_t nb01;
  IdCase(uint64_t seed, int nexp_, int nused_, int ntok_, int n_, int k_)
      : nexp(nexp_), nused(nused_), ntok(ntok_), n(n_), k(k_) {
    Rng r{seed};
    wq = quantized_rows(r, size_t(nexp) * n, k);
    y = random_floats(r, size_t(ntok) * nused * k);
    for (int t = 0; t < ntok; t++) {
      std::vector<int32_t> pool(nexp);
      for (int e = 0; e < nexp; e++) pool[e] = e;
      for (int e = 0; e < nused; e++) {
        std::swap(pool[e], pool[e + r.below(nexp - e)]);
        ids.push_back(pool[e]);
      }
    }
    nb01 = (k / 256) * kBlock;
  }
  void check(const std::vector<float>& dst, Cmp& c, bool half_y) const {
    Refs refs(wq, size_t(nexp) * n, y, size_t(ntok) * nused, k, half_y);
    for (int t = 0; t < ntok; t++)
      for (int e = 0; e < nused; e++)
        for (int i = 0; i < n; i++) {
          size_t wrow = size_t(ids[t * nused + e]) * n + i;
          refs.expect(wq, wrow, y, size_t(t) * nused + e, dst[(size_t(t) * nused + e) * n + i], c);
        }
  }
};

void req_mul_mv_id(uint64_t seed, int nexp, int nused, int ntok, int n, int k) {
  IdCase c(seed, nexp, nused, ntok, n, k);
  std::vector<float> dst(size_t(ntok) * nused * n + 64, NAN);
  ggml_metal_kargs_mul_mv_id a{};
  a.nei0 = nused; a.nei1 = ntok; a.nbi1 = 4 * nused;
  a.ne00 = k; a.ne01 = n; a.ne02 = nexp; a.nb00 = kBlock; a.nb01 = c.nb01; a.nb02 = c.nb01 * n;
  a.ne10 = k; a.ne11 = nused; a.ne12 = ntok; a.ne13 = 1;
  a.nb10 = 4; a.nb11 = 4 * k; a.nb12 = a.nb11 * nused;
  a.ne0 = n; a.ne1 = nused; a.nb1 = 4 * n; a.nr0 = N_R0_TQ1_0;
  const int nsg = N_SG_TQ1_0, nr0 = N_R0_TQ1_0;
  msim::set_fc<short>(FC_MUL_MV + 0, nsg);
  msim::set_fc<short>(FC_MUL_MV + 2, 1);
  msim::set_fc<short>(FC_MUL_MV + 3, 1);
  msim::set_fc<short>(FC_MUL_MV + 4, 1);
  auto* f = msim::kernel_by_name<mul_mv_id_fn>("kernel_mul_mv_id_tq1_0_f32");
  Launch l{{uint32_t((n + nr0 * nsg - 1) / (nr0 * nsg)), 1, uint32_t(nused * ntok)}, {32, uint32_t(nsg), 1}};
  std::string err = msim::tg::launch(l, [&](const ThreadIds& t) {
    f(a, reinterpret_cast<const char*>(c.wq.data()), reinterpret_cast<const char*>(c.y.data()),
      reinterpret_cast<char*>(dst.data()), reinterpret_cast<const char*>(c.ids.data()), t.shmem, t.tgpig, t.tiitg,
      t.tiisg, t.sgitg);
  });
  Cmp cmp;
  c.check(dst, cmp, false);
  for (size_t i = size_t(ntok) * nused * n; i < dst.size(); i++)
    if (!std::isnan(dst[i]) && err.empty()) err = "write past the output";
  cmp.print("mul_mv_id", err, ",\"kernel\":\"kernel_mul_mv_id_tq1_0_f32\"");
}

void req_mul_mm_id(uint64_t seed, int nexp, int nused, int ntok, int n, int k, bool f16 = false) {
  IdCase c(seed, nexp, nused, ntok, n, k);
  // _f16: src1 is half; the references see the same half values (as in req_mul).
  std::vector<half> yh;
  if (f16) {
    for (auto& e : c.y) yh.push_back(half(e));
    for (size_t i = 0; i < c.y.size(); i++) c.y[i] = float(yh[i]);
  }
  const char* ysrc = f16 ? reinterpret_cast<const char*>(yh.data()) : reinterpret_cast<const char*>(c.y.data());
  const uint64_t ysz = f16 ? 2 : 4;
  const char* kname = f16 ? "kernel_mul_mm_id_tq1_0_f16" : "kernel_mul_mm_id_tq1_0_f32";
  std::vector<float> dst(size_t(ntok) * nused * n + 64, NAN);
  std::vector<uint32_t> tpe(nexp, 0xdeadbeefu);
  std::vector<int32_t> hids(size_t(nexp) * ntok, -1);
  ggml_metal_kargs_mul_mm_id_map0 m0{};
  m0.ne02 = nexp; m0.ne10 = k; m0.ne11 = nused; m0.nb11 = ysz * k; m0.nb12 = ysz * k * nused;
  m0.ne21 = ntok; m0.ne20 = nused; m0.nb21 = 4 * nused;
  auto* fm = msim::kernel_by_name<map0_fn>("kernel_mul_mm_id_map0_ne20_" + std::to_string(nused));
  uint64_t barriers = 0;
  std::string err = msim::tg::launch(Launch{{1, 1, 1}, {uint32_t(nexp), 1, 1}, size_t(nexp) * nused * 2}, [&](const ThreadIds& t) {
    fm(m0, reinterpret_cast<const char*>(c.ids.data()), reinterpret_cast<char*>(tpe.data()),
       reinterpret_cast<char*>(hids.data()), t.shmem, t.tpitg.x, t.ntg.x);
  }, &barriers);
  ggml_metal_kargs_mul_mm_id a{};
  a.ne00 = k; a.ne02 = nexp; a.nb01 = c.nb01; a.nb02 = c.nb01 * n; a.nb03 = a.nb02 * nexp;
  a.ne11 = nused; a.nb10 = ysz; a.nb11 = ysz * k; a.nb12 = a.nb11 * nused; a.nb13 = a.nb12 * ntok;
  a.ne20 = nused; a.ne21 = ntok; a.ne0 = n; a.ne1 = nused; a.r2 = 1; a.r3 = 1;
  msim::set_fc<bool>(FC_MUL_MM + 0, k % 32 != 0);
  auto* f = msim::kernel_by_name<mul_mm_id_fn>(kname);
  Launch l{{uint32_t((ntok + 31) / 32), uint32_t((n + 63) / 64), uint32_t(nexp)}, {128, 1, 1}, 8192};
  if (err.empty()) {
    err = msim::tg::launch(l, [&](const ThreadIds& t) {
      f(a, reinterpret_cast<const char*>(c.wq.data()), ysrc,
        reinterpret_cast<const char*>(tpe.data()), reinterpret_cast<const char*>(hids.data()),
        reinterpret_cast<char*>(dst.data()), t.shmem, t.tgpig, t.tiitg, t.tiisg, t.sgitg);
    }, &barriers);
  }
  Cmp cmp;
  c.check(dst, cmp, true);
  for (size_t i = size_t(ntok) * nused * n; i < dst.size(); i++)
    if (!std::isnan(dst[i]) && err.empty()) err = "write past the output";
  std::ostringstream x;
  x << ",\"kernel\":\"" << kname << "\",\"barriers\":" << barriers;
  cmp.print("mul_mm_id", err, x.str());
}
}  // namespace drv

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string req;
    in >> req;
    if (req == "deq") {
      drv::req_deq();
    } else if (req == "get_rows") {
      uint64_t s; int rows, k, nidx;
      in >> s >> rows >> k >> nidx;
      drv::req_get_rows(s, rows, k, nidx);
    } else if (req == "cpy") {
      uint64_t s; int rows, k; std::string t;
      in >> s >> rows >> k >> t;
      if (t == "f16") drv::run_cpy<half>(s, rows, k, "kernel_cpy_tq1_0_f16");
      else drv::run_cpy<float>(s, rows, k, "kernel_cpy_tq1_0_f32");
    } else if (req == "mul_mv" || req == "mul_mm") {
      uint64_t s; int n, k, m; std::string t;
      in >> s >> n >> k >> m >> t;
      drv::req_mul(req == "mul_mm", s, n, k, m, t == "f16");
    } else if (req == "mul_mv_id" || req == "mul_mm_id") {
      uint64_t s; int nexp, nused, ntok, n, k; std::string t;
      in >> s >> nexp >> nused >> ntok >> n >> k >> t;
      if (req == "mul_mv_id") drv::req_mul_mv_id(s, nexp, nused, ntok, n, k);
      else drv::req_mul_mm_id(s, nexp, nused, ntok, n, k, t == "f16");
    } else {
      std::printf("{\"req\":\"%s\",\"error\":\"unknown request\"}\n", req.c_str());
    }
    std::fflush(stdout);
  }
}
