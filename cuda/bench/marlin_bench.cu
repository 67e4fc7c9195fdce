// IST-DASLab's original Marlin (FP16 x INT4, groupwise 4-bit) as a peer arm of the CUDA qmv
// benchmark, without PyTorch: the pinned marlin/marlin_cuda_kernel.cu (pins.toml
// [upstream.mlx.sources.marlin], in the bundle's deps/marlin/) is included as it is and its
// host entry point marlin_cuda() is timed as cuda/bench/peers.py times its peers.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -I <bundle>/deps/marlin/marlin \
//       -o marlin_bench marlin_bench.cu     (cuda/machine/gpu-session.sh's bench has every flag)
//   marlin_bench [SHAPE_INDEX...]           (indices into SHAPES, as peers.py; default all)
//
// Marlin supports fp16 activations and scales, symmetric 4-bit weights (zero point 8) and group
// size 128 (or per channel); with the 64 x 256 thread tiles used here (below) it needs N a
// multiple of 256 and K of 64, which all nine shapes are. So this arm runs float16, gs 128, where
// the benchmark's rows are bfloat16, gs 64: collect.py files it in the row of the same bits, N,
// K and M and records its own config there. Weights are random packed int4 words (every bit
// pattern is a valid Marlin tile), scales uniform in [0.002, 0.02), A uniform in [-1, 1): the
// time does not depend on the values.
//
// One JSON object per line: "bench" records with peers.py's keys (arm "marlin", "bytes" the
// packed weights plus the fp16 scales, "row0_bit_identical": row 0 at M equals row 0 at M = 1 bit
// for bit, "rows_differ": how many of the M rows differ from the same A row alone at M = 1, so each
// row is also compared in another column position), one "marlin_sanity" record per shape (the
// M = 16 output is finite and not all zero), one "marlin_control" record per shape (the row
// comparison, with one bit of one reference flipped, counts exactly that row more: "caught"), and
// "marlin_error" records where Marlin refuses a shape (nonzero return) or CUDA fails.
#include "marlin_cuda_kernel.cu"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// The benchmark's nine (N, K) and its Ms: the same lists, in the same order, as peers.py's SHAPES
// and MS (xtask's tests check that they agree).
constexpr int SHAPES[][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336},
                             {128256, 4096}, {3584, 3584}, {18944, 3584}, {3584, 18944},
                             {152064, 3584}};
constexpr int MS[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
constexpr int NUM_SHAPES = sizeof(SHAPES) / sizeof(SHAPES[0]);
constexpr int MAX_M = 16;
constexpr int GS = 128;
constexpr int MAX_PAR = 16;  // marlin_cuda's default; the locks are n / 128 * MAX_PAR ints
// Marlin's 64 x 256 thread tiles (K x N): its own choice above M = 16, and one of the two its
// test.py runs at M <= 16. Its choice at M <= 16, 128 x 128 (-1 here), stops with "an illegal
// instruction was encountered" on the H200 at the pinned commit (compute-sanitizer: in
// Marlin<256, 1, 8, 8, 4, 8>), the error upstream's issues 30 and 40 report; the workaround given
// in 40, B's async copy without its L2 cache hint, makes 128 x 128 run here, but that is no
// longer the original. -DMARLIN_THREAD_K=... -DMARLIN_THREAD_N=... override them.
#ifndef MARLIN_THREAD_K
#define MARLIN_THREAD_K 64
#endif
#ifndef MARLIN_THREAD_N
#define MARLIN_THREAD_N 256
#endif
constexpr size_t ROTATE_BYTES = size_t(640) << 20;  // as peers.py: past the H200's 60 MiB L2

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      printf("{\"kind\":\"marlin_error\",\"what\":\"%s\",\"error\":\"%s\",\"line\":%d}\n", \
             #call, cudaGetErrorString(e_), __LINE__);                                   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

// After CHECK, which it uses.
#include "../harness/timing.cuh"

__device__ uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_words(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint32_t(splitmix(seed ^ (i * 0x2545f4914f6cdd1dull)) >> 32);
}

__global__ void fill_halves(__half* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float u = float(splitmix(seed ^ (i * 0x2545f4914f6cdd1dull)) >> 40) / float(1 << 24);
    p[i] = __float2half(lo + (hi - lo) * u);
  }
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  return p;
}

// One shape's buffers: `copies` packed weights and scales (rotated so that the rotation exceeds
// L2), A [MAX_M, k], C [MAX_M, n], and Marlin's zeroed locks (it leaves them zero after a call).
struct Problem {
  int n, k, copies, sms;
  std::vector<void*> b, s;
  void *a, *c, *locks;

  size_t b_bytes() const { return size_t(k) * n / 2; }  // k * n / 8 int32 words
  size_t s_count() const { return size_t(k / GS) * n; }
  size_t weight_bytes() const { return b_bytes() + s_count() * sizeof(__half); }
};

Problem make_problem(int n, int k, uint64_t seed, int sms) {
  Problem p{n, k, 0, sms, {}, {}, nullptr, nullptr, nullptr};
  p.copies = int(std::max<size_t>(2, ROTATE_BYTES / p.weight_bytes() + 1));
  for (int c = 0; c < p.copies; ++c) {
    p.b.push_back(device_alloc(p.b_bytes()));
    p.s.push_back(device_alloc(p.s_count() * sizeof(__half)));
    fill_words<<<1024, 256>>>((uint32_t*)p.b[c], p.b_bytes() / 4, seed + 2 * c);
    fill_halves<<<1024, 256>>>((__half*)p.s[c], p.s_count(), seed + 2 * c + 1, 0.002f, 0.02f);
  }
  p.a = device_alloc(size_t(MAX_M) * k * sizeof(__half));
  p.c = device_alloc(size_t(MAX_M) * n * sizeof(__half));
  fill_halves<<<1024, 256>>>((__half*)p.a, size_t(MAX_M) * k, seed ^ 0xa5a5a5a5ull, -1.0f, 1.0f);
  size_t locks = size_t(n / 128) * MAX_PAR * sizeof(int);
  p.locks = device_alloc(locks);
  CHECK(cudaMemset(p.locks, 0, locks));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return p;
}

void free_problem(Problem& p) {
  for (void* q : p.b) CHECK(cudaFree(q));
  for (void* q : p.s) CHECK(cudaFree(q));
  CHECK(cudaFree(p.a));
  CHECK(cudaFree(p.c));
  CHECK(cudaFree(p.locks));
}

// Marlin on rows [r0, r0 + m) of A with weight copy `c`, on the default stream: its return code
// (nonzero: a shape it has no kernel for).
int marlin(const Problem& p, int m, int c, int r0 = 0) {
  const __half* a = static_cast<const __half*>(p.a) + size_t(r0) * p.k;
  return marlin_cuda(a, p.b[c], p.c, p.s[c], m, p.n, p.k, p.locks, GS, 0, 0, MARLIN_THREAD_K,
                     MARLIN_THREAD_N, p.sms, MAX_PAR);
}

// As peers.py's time_us (the kernel harness's timing: ../harness/timing.cuh).
template <typename F>
double time_us(F&& fn, int copies) {
  return median_time_us(fn, copies);
}

// The first `rows` rows of C (fp16 bits) after Marlin at M = m on A's rows from r0, with copy
// 0; false (and a "marlin_error" record) when Marlin refuses the shape.
bool output(const Problem& p, int m, int rows, std::vector<uint16_t>& out, int r0 = 0) {
  int rc = marlin(p, m, 0, r0);
  CHECK(cudaGetLastError());
  if (rc != 0) {
    printf("{\"kind\":\"marlin_error\",\"n\":%d,\"k\":%d,\"m\":%d,\"gs\":%d,\"rc\":%d}\n", p.n, p.k,
           m, GS, rc);
    fflush(stdout);
    return false;
  }
  out.resize(size_t(rows) * p.n);
  CHECK(cudaMemcpy(out.data(), p.c, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  return true;
}

// Once per shape: the M = MAX_M output is finite and not all zero.
void sanity(const Problem& p) {
  std::vector<uint16_t> out;
  if (!output(p, MAX_M, MAX_M, out)) return;
  size_t finite = 0, nonzero = 0;
  for (uint16_t bits : out) {
    __half_raw raw;
    raw.x = bits;
    float v = __half2float(__half(raw));
    finite += std::isfinite(v);
    nonzero += v != 0.0f;
  }
  bool ok = finite == out.size() && nonzero > 0;
  printf("{\"kind\":\"marlin_sanity\",\"n\":%d,\"k\":%d,\"m\":%d,\"values\":%zu,\"finite\":%zu,"
         "\"nonzero\":%zu,\"ok\":%s}\n",
         p.n, p.k, MAX_M, out.size(), finite, nonzero, ok ? "true" : "false");
  fflush(stdout);
}

// How many of rows [0, m) of `out` (Marlin at M = m) differ from refs[r], A's row r alone at
// M = 1: each row against itself in column 0 of a one-row call.
int rows_differing(const std::vector<uint16_t>& out, const std::vector<std::vector<uint16_t>>& refs,
                   int m, int n) {
  int differ = 0;
  for (int r = 0; r < m; ++r) {
    differ += std::memcmp(out.data() + size_t(r) * n, refs[r].data(), n * sizeof(uint16_t)) != 0;
  }
  return differ;
}

// The negative control of the row comparison: at M = MAX_M, a reference with one bit flipped
// must count exactly one more differing row.
void control(const Problem& p, const std::vector<std::vector<uint16_t>>& refs,
             std::vector<uint16_t>& out) {
  if (!output(p, MAX_M, MAX_M, out)) return;
  auto flipped = refs;
  flipped[MAX_M - 1][p.n / 2] ^= 1;
  int more = rows_differing(out, flipped, MAX_M, p.n) - rows_differing(out, refs, MAX_M, p.n);
  printf("{\"kind\":\"marlin_control\",\"n\":%d,\"k\":%d,\"m\":%d,\"caught\":%s}\n", p.n, p.k,
         MAX_M, more == 1 ? "true" : "false");
  fflush(stdout);
}

// Each M's time, and each of its rows against that row alone (`row0_bit_identical` for collect.py;
// `rows_differ`: rows of the M call that differ from their one-row call).
void bench_shape(int n, int k, uint64_t seed, int sms) {
  Problem p = make_problem(n, k, seed, sms);
  std::vector<std::vector<uint16_t>> refs(MAX_M);
  bool ok = true;
  for (int r = 0; r < MAX_M && ok; ++r) ok = output(p, 1, 1, refs[r], r);
  if (ok) {
    sanity(p);
    std::vector<uint16_t> out;
    for (int m : MS) {
      if (!output(p, m, m, out)) continue;
      int differ = rows_differing(out, refs, m, n);
      bool same = std::memcmp(out.data(), refs[0].data(), n * sizeof(uint16_t)) == 0;
      double us = time_us([&](int c) { marlin(p, m, c); }, p.copies);
      CHECK(cudaGetLastError());
      printf("{\"kind\":\"bench\",\"arm\":\"marlin\",\"dtype\":\"float16\",\"bits\":4,\"gs\":%d,"
             "\"n\":%d,\"k\":%d,\"m\":%d,\"us\":%.3f,\"bytes\":%zu,\"row0_bit_identical\":%s,"
             "\"rows_differ\":%d}\n",
             GS, n, k, m, us, p.weight_bytes(), same ? "true" : "false", differ);
      fflush(stdout);
    }
    control(p, refs, out);
  }
  free_problem(p);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> which;
  for (int i = 1; i < argc; ++i) {
    char* end;
    long s = strtol(argv[i], &end, 10);
    if (*end != '\0' || s < 0 || s >= NUM_SHAPES) {
      fprintf(stderr, "marlin_bench: %s is not a shape index (0..%d)\n", argv[i], NUM_SHAPES - 1);
      return 2;
    }
    which.push_back(int(s));
  }
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int s = 0; s < NUM_SHAPES; ++s) {
    if (!which.empty() && std::find(which.begin(), which.end(), s) == which.end()) continue;
    bench_shape(SHAPES[s][0], SHAPES[s][1], 7 + 1000 * uint64_t(s), sms);
  }
  return 0;
}
