// Attention's pass 1 for several query rows a block (overlay 0013's kernel_sdpav_2pass_1_rows),
// straight from the materialized tree's kernels (build.sh SDPA_ONLY=1 extracts the device half
// of scaled_dot_product_attention.cu into sdpa_kernels.cuh): no MLX build.
//
//   sdpa_rows [KL]   the 7b decoder's attention (28 query heads over 4 KV heads, head dim 128,
//                    bf16) over KL keys (default 1040: prompt 1024 and 16 drafted tokens); built
//                    with -DSDPA_DIM=64 or 96, that head dim instead
//
// First a line naming the setup (sdpa_setup). Checks, one JSON line each (exit 1 when one
// fails):
//   - every row of a causal 16-row call, for R = 1, 2, 4, 8, 16 rows a block, against the same
//     row as decode runs it (one non-causal row over its own KL - 16 + i + 1 keys, R = 1):
//     partials, sums and maxs bit for bit; a flipped bit must count one more difference (the
//     negative control);
//   - the same rows against upstream's kernel_sdpav_2pass_1 (one block a row): how many differ
//     (reported; a difference is not a failure: the policy never mixes the two);
//   - the outputs combined on the host (pass 2 in double) against float64 attention: the
//     largest absolute error, which must stay under 1e-2 (a kernel that writes nothing fails).
// Then CUDA events over back-to-back launches of each kernel at 1, 4, 8 and 16 rows (µs).
// Where KL is at most 1,024 (MLX's one-pass range), the same for the one-pass kernel
// (kernel_sdpav_1pass_rows at R = 1, 2, 4 against decode's rows at R = 1 and upstream's
// kernel_sdpav_1pass, on the bf16 outputs; float64 within 2e-2): sdpa_one_check, sdpa_one_time.
// Last, the invariant policy's kernels (overlay 0018's mlx/backend/cuda/sdpa_mma.cuh, which
// sdpa_kernels.cuh includes: every query row of a KV head at once on tensor cores):
// each verify row's bf16 output against decode's through the same kernels, a flipped-bit
// control, float64 (within 2e-2), and its two launches timed at 1, 4, 8 and 16 rows beside the
// kernels MLX runs (sdpa_mma_check, sdpa_mma_time).
#include "sdpa_kernels.cuh"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

using mlx::core::cu::AttnParams;
using T = __nv_bfloat16;
// The head dim: 128 (the 7b decoder's) unless built with -DSDPA_DIM (build.sh's SDPA_DIM); the
// softmax scale stays 1/sqrt(128) (any scale serves the checks: the reference uses the same).
#ifndef SDPA_DIM
#define SDPA_DIM 128
#endif
static_assert(SDPA_DIM == 64 || SDPA_DIM == 96 || SDPA_DIM == 128, "sdpa_vector's head dims");
constexpr int kHeads = 28, kKvHeads = 4, kDim = SDPA_DIM, kRows = 16, kBlocks = 32;

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::fprintf(stderr, "sdpa_rows: %s: %s\n", #x, cudaGetErrorString(e));      \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

// Pass 1's outputs of a call, on the host.
struct Pass1 {
  std::vector<float> part, sum, max;
};

struct Bufs {
  T *q, *k, *v;
  float *part, *sum, *max;
};

using Kernel = void (*)(const T*, const T*, const T*, const T*, float*, float*, float*,
                        AttnParams);

AttnParams params(int q_len, int k_len, int k_rows) {
  // Q [1, H, 16, D] and K, V [1, Hkv, k_rows, D], row-contiguous; qL rows from q's first.
  return AttnParams{1,      kHeads, kDim, q_len, k_len, kHeads / kKvHeads, 0.08838834764f,
                    {int64_t(kHeads) * kRows * kDim, kRows * kDim, kDim},
                    {int64_t(kKvHeads) * k_rows * kDim, int64_t(k_rows) * kDim, kDim},
                    {int64_t(kKvHeads) * k_rows * kDim, int64_t(k_rows) * kDim, kDim},
                    {int64_t(kHeads) * kRows * kDim, kRows * kDim, kDim}};
}

void launch(Kernel f, int rows_per_block, const Bufs& b, const T* q, const AttnParams& p) {
  dim3 grid(p.H, (p.qL + rows_per_block - 1) / rows_per_block, p.B * kBlocks);
  f<<<grid, 256>>>(q, b.k, b.v, nullptr, b.part, b.sum, b.max, p);
  CHECK(cudaGetLastError());
}

Pass1 fetch(const Bufs& b, int q_len) {
  const size_t n = size_t(kHeads) * q_len * kBlocks;
  Pass1 r{std::vector<float>(n * kDim), std::vector<float>(n), std::vector<float>(n)};
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(r.part.data(), b.part, n * kDim * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(r.sum.data(), b.sum, n * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(r.max.data(), b.max, n * 4, cudaMemcpyDeviceToHost));
  return r;
}

Pass1 run(Kernel f, int rows_per_block, const Bufs& b, const T* q, const AttnParams& p) {
  launch(f, rows_per_block, b, q, p);
  return fetch(b, p.qL);
}

// Row `row` of head h of a call's pass 1 (q_len rows) against row 0 of a one-row call's:
// the number of values that differ in their bits.
int differ(const Pass1& a, int q_len, int row, const Pass1& one, int h) {
  int n = 0;
  for (int blk = 0; blk < kBlocks; ++blk) {
    const size_t ia = (size_t(h) * q_len + row) * kBlocks + blk, io = size_t(h) * kBlocks + blk;
    n += std::memcmp(&a.sum[ia], &one.sum[io], 4) != 0;
    n += std::memcmp(&a.max[ia], &one.max[io], 4) != 0;
    for (int d = 0; d < kDim; ++d)
      n += std::memcmp(&a.part[ia * kDim + d], &one.part[io * kDim + d], 4) != 0;
  }
  return n;
}

// How many of two calls' pass-1 values (the same layout) differ in their bits.
long words_differ(const Pass1& a, const Pass1& b) {
  auto n = [](const std::vector<float>& x, const std::vector<float>& y) {
    long d = 0;
    for (size_t i = 0; i < x.size(); ++i) d += std::memcmp(&x[i], &y[i], 4) != 0;
    return d;
  };
  return n(a.part, b.part) + n(a.sum, b.sum) + n(a.max, b.max);
}

// Pass 2 in double for row `row` of head h: the attention output.
std::vector<double> combine(const Pass1& a, int q_len, int row, int h) {
  double m = -INFINITY, s = 0;
  for (int blk = 0; blk < kBlocks; ++blk)
    m = std::fmax(m, a.max[(size_t(h) * q_len + row) * kBlocks + blk]);
  std::vector<double> o(kDim, 0.0);
  for (int blk = 0; blk < kBlocks; ++blk) {
    const size_t i = (size_t(h) * q_len + row) * kBlocks + blk;
    const double f = std::exp2(a.max[i] - m);
    s += a.sum[i] * f;
    for (int d = 0; d < kDim; ++d) o[d] += a.part[i * kDim + d] * f;
  }
  for (double& x : o) x /= s;
  return o;
}

// float64 attention of query row `row` (causal: its keys 0 .. k_len - 16 + row) for head h.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int k_len, int row, int h) {
  const int kv = h / (kHeads / kKvHeads), n = k_len - kRows + row + 1;
  std::vector<double> s(n);
  double m = -INFINITY;
  for (int j = 0; j < n; ++j) {
    double d = 0;
    for (int c = 0; c < kDim; ++c)
      d += double(q[(size_t(h) * kRows + row) * kDim + c]) * k[(size_t(kv) * k_len + j) * kDim + c];
    s[j] = d * 0.08838834764;
    m = std::fmax(m, s[j]);
  }
  std::vector<double> o(kDim, 0.0);
  double z = 0;
  for (int j = 0; j < n; ++j) {
    const double e = std::exp(s[j] - m);
    z += e;
    for (int c = 0; c < kDim; ++c) o[c] += e * v[(size_t(kv) * k_len + j) * kDim + c];
  }
  for (double& x : o) x /= z;
  return o;
}

// CUDA events over 50 back-to-back calls of `call`, after 5 untimed: µs a call.
template <class F>
float time_us(F&& call) {
  for (int i = 0; i < 5; ++i) call();
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  constexpr int n = 50;
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < n; ++i) call();
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return ms * 1000 / n;
}

template <int R>
Kernel rows_kernel() {
  return mlx::core::cu::kernel_sdpav_2pass_1_rows<T, true, kDim, R>;
}

// The one-pass kernels: the bf16 outputs [1, H, 16, D] straight.
using Kernel1 = void (*)(const T*, const T*, const T*, T*, const T*, AttnParams);

void launch1(Kernel1 f, int rows_per_block, const Bufs& b, const T* q, T* o,
             const AttnParams& p) {
  dim3 grid(p.H, (p.qL + rows_per_block - 1) / rows_per_block, p.B);
  f<<<grid, 1024>>>(q, b.k, b.v, o, nullptr, p);
  CHECK(cudaGetLastError());
}

std::vector<uint16_t> fetch1(const T* o) {
  std::vector<uint16_t> h(size_t(kHeads) * kRows * kDim);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(h.data(), o, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

long count_differ(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  long n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// The largest absolute difference of bf16 outputs ([H][16][D]) from float64, every `step`-th
// head.
double bf16_error(const std::vector<uint16_t>& got, const std::vector<float>& qf,
                  const std::vector<float>& kf, const std::vector<float>& vf, int k_len,
                  int step) {
  double err = 0;
  for (int h = 0; h < kHeads; h += step)
    for (int i = 0; i < kRows; ++i) {
      auto want = reference(qf, kf, vf, k_len, i, h);
      for (int d = 0; d < kDim; ++d) {
        const uint32_t bits = uint32_t(got[(size_t(h) * kRows + i) * kDim + d]) << 16;
        float x;
        std::memcpy(&x, &bits, 4);
        err = std::fmax(err, std::fabs(x - want[d]));
      }
    }
  return err;
}

// How many of `got` differ from decode's outputs, and whether a flipped bit in decode's counts
// once more (the negative control).
std::pair<long, bool> against_decode(const std::vector<uint16_t>& got,
                                     const std::vector<uint16_t>& decode) {
  std::vector<uint16_t> flipped = decode;
  flipped[3] ^= 1;
  const long dif = count_differ(got, decode);
  return {dif, count_differ(got, flipped) == dif + 1};
}

// The one-pass checks and times (KL <= 1,024); false when a check fails.
bool one_pass(const Bufs& b, int k_len, const std::vector<float>& qf,
              const std::vector<float>& kf, const std::vector<float>& vf) {
  namespace cu = mlx::core::cu;
  T* o;
  CHECK(cudaMalloc(&o, size_t(kHeads) * kRows * kDim * sizeof(T)));
  // Decode's rows: row i alone, not causal, over its own keys, one a block; into row i's place.
  for (int i = 0; i < kRows; ++i)
    launch1(cu::kernel_sdpav_1pass_rows<T, false, kDim, 1>, 1, b, b.q + i * kDim, o + i * kDim,
            params(1, k_len - kRows + i + 1, k_len));
  const std::vector<uint16_t> decode = fetch1(o);
  const AttnParams verify = params(kRows, k_len, k_len);
  launch1(cu::kernel_sdpav_1pass<T, true, kDim>, 1, b, b.q, o, verify);
  const std::vector<uint16_t> up = fetch1(o);
  const std::pair<int, Kernel1> arms[] = {{1, cu::kernel_sdpav_1pass_rows<T, true, kDim, 1>},
                                          {2, cu::kernel_sdpav_1pass_rows<T, true, kDim, 2>},
                                          {4, cu::kernel_sdpav_1pass_rows<T, true, kDim, 4>}};
  bool ok = true;
  for (auto [r, f] : arms) {
    launch1(f, r, b, b.q, o, verify);
    const std::vector<uint16_t> got = fetch1(o);
    const double err = bf16_error(got, qf, kf, vf, k_len, 9);
    const auto [dif, caught] = against_decode(got, decode);
    const bool pass = dif == 0 && caught && err < 2e-2 && std::isfinite(err);
    ok = ok && pass;
    std::printf("{\"kind\":\"sdpa_one_check\",\"rows_per_block\":%d,\"k_len\":%d,\"values\":%zu,"
                "\"differ_from_decode\":%ld,\"differ_from_upstream\":%ld,\"control_caught\":%s,"
                "\"max_abs_err\":%.3g,\"ok\":%s}\n",
                r, k_len, got.size(), dif, count_differ(got, up), caught ? "true" : "false", err,
                pass ? "true" : "false");
  }
  for (int q_len : {1, 4, 8, 16}) {
    const AttnParams p = params(q_len, k_len, k_len);
    std::printf("{\"kind\":\"sdpa_one_time\",\"kernel\":\"upstream\",\"rows_per_block\":1,"
                "\"q_len\":%d,\"k_len\":%d,\"us\":%.2f}\n",
                q_len, k_len,
                time_us([&] { launch1(cu::kernel_sdpav_1pass<T, true, kDim>, 1, b, b.q, o, p); }));
    for (auto [r, f] : arms)
      std::printf("{\"kind\":\"sdpa_one_time\",\"kernel\":\"rows\",\"rows_per_block\":%d,"
                  "\"q_len\":%d,\"k_len\":%d,\"us\":%.2f}\n",
                  r, q_len, k_len, time_us([&] { launch1(f, r, b, b.q, o, p); }));
  }
  CHECK(cudaFree(o));
  return ok;
}

// The invariant policy's two launches (overlay 0018's sdpa_mma.cuh, as its sdpa_mma() makes
// them) for `q_len` rows from q into o over k_len keys of K and V's k_rows (scratch `part`,
// big enough for 16 rows: m, l, then o).
void launch_mma(const Bufs& b, const T* q, T* o, float* part, int q_len, int k_len, int k_rows,
                bool causal) {
  namespace sm = mlx::core::cu::sdpa_mma;
  // Q and O [1, H, 16, D] (q_len rows from q's first), K and V [1, Hkv, k_rows, D]; the call
  // sees the first k_len keys.
  const int64_t kv[3] = {int64_t(kKvHeads) * k_rows * kDim, int64_t(k_rows) * kDim, kDim};
  const int64_t qo[3] = {int64_t(kHeads) * kRows * kDim, kRows * kDim, kDim};
  const sm::Params p{1, kHeads, q_len, k_len, kHeads / kKvHeads, 0.08838834764f,
                     {qo[0], qo[1], qo[2]}, {kv[0], kv[1], kv[2]}, {kv[0], kv[1], kv[2]},
                     {qo[0], qo[1], qo[2]}};
  const size_t rows = size_t(kHeads) * kRows * sm::kSplits;
  float *pm = part, *pl = part + rows, *po = part + 2 * rows;
  const dim3 grid = sm::split_grid(p);
  if (causal) {
    sm::kernel_sdpa_mma_split<T, true, kDim><<<grid, sm::kWarps * 32>>>(q, b.k, b.v, pm, pl, po,
                                                                       p);
  } else {
    sm::kernel_sdpa_mma_split<T, false, kDim><<<grid, sm::kWarps * 32>>>(q, b.k, b.v, pm, pl,
                                                                        po, p);
  }
  CHECK(cudaGetLastError());
  sm::kernel_sdpa_mma_combine<T, kDim><<<kHeads * q_len, kDim>>>(pm, pl, po, o, p);
  CHECK(cudaGetLastError());
}

// The invariant policy's kernels: checks and times; false when a check fails.
bool mma_arm(const Bufs& b, int k_len, const std::vector<float>& qf,
             const std::vector<float>& kf, const std::vector<float>& vf) {
  T* o;
  float* part;
  CHECK(cudaMalloc(&o, size_t(kHeads) * kRows * kDim * sizeof(T)));
  constexpr int kSplits = mlx::core::cu::sdpa_mma::kSplits;
  CHECK(cudaMalloc(&part, size_t(kHeads) * kRows * kSplits * (kDim + 2) * 4));
  for (int i = 0; i < kRows; ++i)
    launch_mma(b, b.q + i * kDim, o + i * kDim, part, 1, k_len - kRows + i + 1, k_len, false);
  const std::vector<uint16_t> decode = fetch1(o);
  launch_mma(b, b.q, o, part, kRows, k_len, k_len, true);
  const std::vector<uint16_t> got = fetch1(o);
  const double err = bf16_error(got, qf, kf, vf, k_len, 3);
  const auto [dif, caught] = against_decode(got, decode);
  const bool ok = dif == 0 && caught && err < 2e-2 && std::isfinite(err);
  std::printf("{\"kind\":\"sdpa_mma_check\",\"k_len\":%d,\"values\":%zu,\"differ_from_decode\":%ld,"
              "\"control_caught\":%s,\"max_abs_err\":%.3g,\"ok\":%s}\n",
              k_len, got.size(), dif, caught ? "true" : "false", err, ok ? "true" : "false");
  for (int q_len : {1, 4, 8, 16}) {
    const float us = time_us([&] { launch_mma(b, b.q, o, part, q_len, k_len, k_len, true); });
    std::printf("{\"kind\":\"sdpa_mma_time\",\"q_len\":%d,\"k_len\":%d,\"us\":%.2f}\n", q_len,
                k_len, us);
  }
  CHECK(cudaFree(o));
  CHECK(cudaFree(part));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int k_len = argc > 1 ? std::atoi(argv[1]) : 1040;
  if (k_len < kRows || k_len > 65536) {
    std::fprintf(stderr, "sdpa_rows: KL is 16..65536 keys, not '%s'\n", argv[1]);
    return 2;
  }
  std::printf("{\"kind\":\"sdpa_setup\",\"dtype\":\"bfloat16\",\"heads\":%d,\"kv_heads\":%d,"
              "\"head_dim\":%d,\"k_len\":%d}\n",
              kHeads, kKvHeads, kDim, k_len);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto fill = [&](size_t n, std::vector<float>& f) {
    std::vector<T> h(n);
    f.resize(n);
    for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16(nd(rng)), f[i] = __bfloat162float(h[i]);
    T* d;
    CHECK(cudaMalloc(&d, n * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  std::vector<float> qf, kf, vf;
  Bufs b{};
  b.q = fill(size_t(kHeads) * kRows * kDim, qf);
  b.k = fill(size_t(kKvHeads) * k_len * kDim, kf);
  b.v = fill(size_t(kKvHeads) * k_len * kDim, vf);
  const size_t n = size_t(kHeads) * kRows * kBlocks;
  CHECK(cudaMalloc(&b.part, n * kDim * 4));
  CHECK(cudaMalloc(&b.sum, n * 4));
  CHECK(cudaMalloc(&b.max, n * 4));

  // Decode's rows: row i alone, not causal, over its own keys, one row a block (as the policy
  // runs a one-row call: sdpa_vector_rows_per_block).
  const Kernel decode = mlx::core::cu::kernel_sdpav_2pass_1_rows<T, false, kDim, 1>;
  std::vector<Pass1> one(kRows);
  for (int i = 0; i < kRows; ++i)
    one[i] = run(decode, 1, b, b.q + i * kDim, params(1, k_len - kRows + i + 1, k_len));

  bool ok = true;
  const AttnParams verify = params(kRows, k_len, k_len);
  const Pass1 up = run(mlx::core::cu::kernel_sdpav_2pass_1<T, true, kDim>, 1, b, b.q, verify);
  const std::pair<int, Kernel> arms[] = {{1, rows_kernel<1>()}, {2, rows_kernel<2>()},
                                         {4, rows_kernel<4>()}, {8, rows_kernel<8>()},
                                         {16, rows_kernel<16>()}};
  for (auto [r, f] : arms) {
    Pass1 a = run(f, r, b, b.q, verify);
    // Upstream's kernel lays out its rows as this one does: the same indices.
    const long up_dif = words_differ(a, up);
    long dif = 0, values = 0;
    double err = 0;
    for (int h = 0; h < kHeads; ++h) {
      for (int i = 0; i < kRows; ++i) {
        dif += differ(a, kRows, i, one[i], h);
        values += kBlocks * (kDim + 2);
        if (h % 9 == 0) {
          auto got = combine(a, kRows, i, h), want = reference(qf, kf, vf, k_len, i, h);
          for (int d = 0; d < kDim; ++d) err = std::fmax(err, std::fabs(got[d] - want[d]));
        }
      }
    }
    // The negative control: one flipped bit in the reference of row 5 must count once more.
    Pass1 flipped = one[5];
    uint32_t bits;
    std::memcpy(&bits, &flipped.part[3], 4);
    bits ^= 1u;
    std::memcpy(&flipped.part[3], &bits, 4);
    const bool caught = differ(a, kRows, 5, flipped, 0) == differ(a, kRows, 5, one[5], 0) + 1;
    const bool pass = dif == 0 && caught && err < 1e-2 && std::isfinite(err);
    ok = ok && pass;
    std::printf("{\"kind\":\"sdpa_rows_check\",\"rows_per_block\":%d,\"k_len\":%d,\"values\":%ld,"
                "\"differ_from_decode\":%ld,\"differ_from_upstream\":%ld,\"control_caught\":%s,"
                "\"max_abs_err\":%.3g,\"ok\":%s}\n",
                r, k_len, values, dif, up_dif, caught ? "true" : "false", err,
                pass ? "true" : "false");
  }
  for (int q_len : {1, 4, 8, 16}) {
    const AttnParams p = params(q_len, k_len, k_len);
    std::printf("{\"kind\":\"sdpa_rows_time\",\"kernel\":\"upstream\",\"rows_per_block\":1,"
                "\"q_len\":%d,\"k_len\":%d,\"us\":%.2f}\n",
                q_len, k_len, time_us([&] {
                  launch(mlx::core::cu::kernel_sdpav_2pass_1<T, true, kDim>, 1, b, b.q, p);
                }));
    for (auto [r, f] : arms) {
      std::printf("{\"kind\":\"sdpa_rows_time\",\"kernel\":\"rows\",\"rows_per_block\":%d,"
                  "\"q_len\":%d,\"k_len\":%d,\"us\":%.2f}\n",
                  r, q_len, k_len, time_us([&] { launch(f, r, b, b.q, p); }));
    }
  }
  if (k_len <= 1024) ok = one_pass(b, k_len, qf, kf, vf) && ok;
  ok = mma_arm(b, k_len, qf, kf, vf) && ok;
  std::fflush(stdout);
  return ok ? 0 : 1;
}
