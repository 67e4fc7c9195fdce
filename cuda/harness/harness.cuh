// Kernel-level harness for the streamed qmv: upstream's qmv_kernel and the
// overlay's qmv_streamed_kernel, both compiled from the materialized (patched)
// qmv.cu (extracted by build.sh into qmv_kernels.cuh), launched directly.
//
//   qmv_harness parity            every accepted (dtype, bits, gs), K with and
//                                 without residue, odd N, N < 8, batch 2,
//                                 M = 1..16: each streamed output bit-identical
//                                 to upstream's qmv output for that vector
//   qmv_harness bench [shapes]    time upstream qmv (grid.y = M) and streamed
//                                 launch shapes, weights rotated past L2
//
// Prints one JSON object per line (the Rust side renders them) and exits 1 on
// any difference or CUDA error.
#pragma once
#include "qmv_kernels.cuh"
#include "qmv_split.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace mlx::core;

#define CHECK(x)                                                            \
  do {                                                                      \
    cudaError_t e_ = (x);                                                   \
    if (e_ != cudaSuccess) {                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,            \
              cudaGetErrorString(e_));                                      \
      exit(2);                                                              \
    }                                                                       \
  } while (0)

// After CHECK, which it uses.
#include "timing.cuh"

inline void launch(void* kernel, dim3 grid, dim3 block, void** args) {
  CHECK(cudaLaunchKernel(kernel, grid, block, args, 0, 0));
}

// The invariant kernels' launcher: with dynamic shared memory, raising the kernel's limit past
// 48 KiB as MLX's launcher does.
inline void launch_smem(void* kernel, dim3 grid, dim3 block, void** args, uint32_t smem) {
  if (smem > 48 * 1024) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  CHECK(cudaLaunchKernel(kernel, grid, block, args, smem, 0));
}

// The same with programmatic dependent launch: the kernel may start while the one before it in
// the stream finishes, and waits for its inputs itself (griddepcontrol.wait; the XP path's staged
// kernel issues its first weight copies before it waits for x's preparation).
inline cudaError_t launch_pdl_try(void* kernel, dim3 grid, dim3 block, void** args,
                                  uint32_t smem) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelExC(&cfg, kernel, args);
}

inline void launch_smem_pdl(void* kernel, dim3 grid, dim3 block, void** args, uint32_t smem) {
  if (smem > 48 * 1024) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  CHECK(launch_pdl_try(kernel, grid, block, args, smem));
}

// ---------------------------------------------------------------- timing
// The median of seven repetitions (timing.cuh); the bytes a call moves are the caller's to print.
template <typename F>
inline float time_us(F&& f, int copies, size_t /*bytes_per_call*/) {
  return median_time_us(f, copies);
}

// ---------------------------------------------------------------- data
static __global__ void fill_bytes(uint8_t* p, size_t n, uint64_t seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = uint8_t(z >> 56);
  }
}

template <typename T>
__global__ void fill_vals(T* p, size_t n, uint64_t seed, float lo, float hi) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 29)) * 0x94D049BB133111EBull;
    float u = float(z >> 40) / float(1ull << 24);
    p[i] = T(lo + (hi - lo) * u);
  }
}

template <typename T>
static T* alloc_vals(size_t n, uint64_t seed, float lo, float hi) {
  T* p;
  CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  fill_vals<<<1024, 256>>>(p, n, seed, lo, hi);
  CHECK(cudaGetLastError());
  return p;
}

static uint8_t* alloc_bytes(size_t n, uint64_t seed) {
  uint8_t* p;
  CHECK(cudaMalloc(&p, std::max<size_t>(n, 1)));
  fill_bytes<<<1024, 256>>>(p, n, seed);
  CHECK(cudaGetLastError());
  return p;
}

template <typename T>
const char* tname() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, cutlass::half_t>) return "float16";
  else return "bfloat16";
}

template <int bits> struct QOf;
template <> struct QOf<2> { using type = cutlass::uint2b_t; };
template <> struct QOf<3> { using type = cutlass::uint3b_t; };
template <> struct QOf<4> { using type = cutlass::uint4b_t; };
template <> struct QOf<5> { using type = cutlass::uint5b_t; };
template <> struct QOf<6> { using type = cutlass::uint6b_t; };
template <> struct QOf<8> { using type = uint8_t; };

// ---------------------------------------------------------------- bench
// One benchmark record (the shape of every "bench" line the Rust side reads).
template <typename T>
void print_bench(int bits, int gs, int n, int k, int m, const std::string& arm, float us,
                 size_t bytes) {
  printf("{\"kind\":\"bench\",\"dtype\":\"%s\",\"bits\":%d,\"gs\":%d,\"n\":%d,\"k\":%d,"
         "\"m\":%d,\"arm\":\"%s\",\"us\":%.3f,\"bytes\":%zu}\n",
         tname<T>(), bits, gs, n, k, m, arm.c_str(), us, bytes);
}

// What one call reads (weights, scales and biases) and how many copies of them the timing
// rotates through: 640 MiB in all, at least two, so each timed call's weights come from DRAM.
template <typename T>
std::pair<size_t, int> footprint(int n, int k, int bits, int gs) {
  size_t w_bytes = size_t(n) * k * bits / 8 + size_t(n) * (k / gs) * 2 * sizeof(T);
  return {w_bytes, int(std::max<size_t>(2, (size_t(640) << 20) / w_bytes + 1))};
}

// Arms timed in rotated rounds (round r starts at arm r): one "ab" line per arm and round, then
// each arm's median as a "bench" line (inv-ab and qmv_wgmma ab).
template <typename T>
void ab_rounds(int bits, int gs, int n, int k, int m,
               const std::vector<std::pair<const char*, std::function<void(int)>>>& arms,
               int rounds, int copies, size_t w_bytes) {
  std::vector<std::vector<float>> got(arms.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < arms.size(); ++i) {
      size_t a = (i + r) % arms.size();
      float us = time_us(arms[a].second, copies, w_bytes);
      got[a].push_back(us);
      printf("{\"kind\":\"ab\",\"round\":%d,\"dtype\":\"%s\",\"bits\":%d,\"n\":%d,"
             "\"k\":%d,\"m\":%d,\"arm\":\"%s\",\"us\":%.3f}\n",
             r, tname<T>(), bits, n, k, m, arms[a].first, us);
    }
  }
  for (size_t a = 0; a < arms.size(); ++a) {
    std::sort(got[a].begin(), got[a].end());
    print_bench<T>(bits, gs, n, k, m, arms[a].first, got[a][got[a].size() / 2], w_bytes);
  }
}

// ---------------------------------------------------------------- shapes
// Launch shapes of the streamed kernel under test (the overlay's default is
// cu::QmvStreamedShape).
// S > 1: the split experiment of qmv_split.cuh (S warps share the 32 lanes of R rows; W == S;
// bits 2/4/8 only).
template <int W, int R, int V, int P, int S = 1>
struct LaunchShape {
  static constexpr int warps_per_block = W;
  static constexpr int rows_per_warp = R;
  static constexpr int vecs = V;
  static constexpr int prefetch = P;
  static constexpr int split = S;
};

// The overlay's own choice of launch shape by M (cu::qmv_streamed_by_m).
struct ByM {
  static constexpr int warps_per_block = 0, rows_per_warp = 0, vecs = 0, prefetch = 0,
                       split = 0;
};

template <typename Sh>
std::string shape_name() {
  if constexpr (std::is_same_v<Sh, ByM>) return "by_m";
  char b[64];
  int n = snprintf(b, sizeof b, "w%d_r%d_v%d_p%d", Sh::warps_per_block,
                   Sh::rows_per_warp, Sh::vecs, Sh::prefetch);
  if (Sh::split > 1) snprintf(b + n, sizeof b - n, "_s%d", Sh::split);
  return b;
}

struct Problem {
  int m, n, k, l;
};

template <typename T, int bits, int gs>
struct Buffers {
  using Q = typename QOf<bits>::type;
  size_t w_bytes, sb_elems;
  uint8_t* w;
  T* scales;
  T* biases;
  T* x;
  T* out;
  int copies;
  Buffers(Problem p, int copies_, uint64_t seed) : copies(copies_) {
    w_bytes = size_t(p.n) * p.k * bits / 8;
    sb_elems = size_t(p.n) * (p.k / gs);
    w = alloc_bytes(w_bytes * copies, seed);
    scales = alloc_vals<T>(sb_elems * copies, seed + 1, 0.002f, 0.02f);
    biases = alloc_vals<T>(sb_elems * copies, seed + 2, -0.1f, 0.1f);
    x = alloc_vals<T>(size_t(p.l) * p.m * p.k, seed + 3, -1.f, 1.f);
    CHECK(cudaMalloc(&out, size_t(p.l) * p.m * p.n * sizeof(T)));
  }
  ~Buffers() {
    cudaFree(w); cudaFree(scales); cudaFree(biases); cudaFree(x); cudaFree(out);
  }
  const Q* wq(int c) const { return reinterpret_cast<const Q*>(w + w_bytes * c); }
};

template <typename T, int bits, int gs>
void run_upstream(const Buffers<T, bits, gs>& b, Problem p, int c, T* out) {
  cu::qmv<gs, true>(b.x, b.wq(c), b.scales + b.sb_elems * c,
                    b.biases + b.sb_elems * c, (const float*)nullptr, out, p.m,
                    p.n, p.k, p.l, p.l == 1, launch);
}

template <typename Sh, typename T, int bits, int gs>
void run_streamed(const Buffers<T, bits, gs>& b, Problem p, int c, T* out) {
  if constexpr (Sh::split > 1) {
    cu::qmv_split<Sh, gs, true>(b.x, b.wq(c), b.scales + b.sb_elems * c,
                                b.biases + b.sb_elems * c, out, p.m, p.n, p.k, p.l,
                                p.l == 1, launch);
  } else if constexpr (std::is_same_v<Sh, ByM>) {
    cu::qmv_streamed_by_m<gs, true>(b.x, b.wq(c), b.scales + b.sb_elems * c,
                                    b.biases + b.sb_elems * c, out, p.m, p.n, p.k,
                                    p.l, p.l == 1, launch);
  } else {
    cu::qmv_streamed<Sh, gs, true>(b.x, b.wq(c), b.scales + b.sb_elems * c,
                                   b.biases + b.sb_elems * c, out, p.m, p.n, p.k,
                                   p.l, p.l == 1, launch);
  }
}

// ---------------------------------------------------------------- invariant (overlay 0015)
inline int sm_count() {
  static int c = [] {
    int dev, v;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return c;
}

// The launcher alone (cu::qmv_invariant).
template <typename T, int bits, int gs>
void run_launcher(const Buffers<T, bits, gs>& b, Problem p, int c, const T* x, T* out,
                  bool broadcast, int sms) {
  cu::qmv_invariant<gs>(x, b.wq(c), b.scales + b.sb_elems * c, b.biases + b.sb_elems * c,
                        out, p.m, p.n, p.k, p.l, broadcast, sms, launch_smem);
}

inline int device_id() {
  static int d = [] {
    int v;
    CHECK(cudaGetDevice(&v));
    return v;
  }();
  return d;
}

inline void* scratch(size_t bytes);

// How many calls the warpgroup-mma kernel took in this process (a parity run in which it took
// none on a device it fits says nothing about it).
inline long& wgmma_runs() {
  static long n = 0;
  return n;
}

// Whether the warpgroup-mma kernel (qmv_wgmma.cuh, overlay 0015) fits these arrays and device.
template <typename T, int bits, int gs>
bool wgmma_fits(const Buffers<T, bits, gs>& b, Problem p, int c, const T* x, bool broadcast) {
  return cu::qmv_wgmma_fits<gs>(x, b.wq(c), b.scales + b.sb_elems * c,
                                b.biases + b.sb_elems * c, p.k, p.l, broadcast, device_id());
}

// The warpgroup-mma kernel where it fits; false (nothing launched) where it does not. PDL: its
// launches with programmatic dependent launch, as the library's (qmv_wgmma_pdl).
template <typename T, int bits, int gs>
bool run_wgmma(const Buffers<T, bits, gs>& b, Problem p, int c, const T* x, T* out,
               bool broadcast, int sms, bool pdl = false) {
  if (!wgmma_fits(b, p, c, x, broadcast)) {
    return false;
  }
  const T* sc = b.scales + b.sb_elems * c;
  const T* bi = b.biases + b.sb_elems * c;
  void* s = scratch(cu::qmv_wgmma_scratch_bytes(p.m, p.n, p.k, p.l, broadcast, sms));
  ++wgmma_runs();
  cu::qmv_wgmma<gs>(x, b.wq(c), sc, bi, out, p.m, p.n, p.k, p.l, broadcast, sms,
                    pdl ? launch_smem_pdl : launch_smem, s);
  return true;
}

// As the library's qmv_invariant (qmv.cu) dispatches: the warpgroup-mma kernel where it fits and
// wins (M = 9..16 on large shapes, unless MLX_CUDA_QMV_WGMMA=0), else the launcher.
template <typename T, int bits, int gs>
void run_invariant(const Buffers<T, bits, gs>& b, Problem p, int c, const T* x, T* out,
                   bool broadcast, int sms) {
  if (cu::qmv_wgmma_wins(p.m, p.n, p.k, p.l, broadcast) &&
      run_wgmma(b, p, c, x, out, broadcast, sms)) {
    return;
  }
  run_launcher(b, p, c, x, out, broadcast, sms);
}

// One device buffer that grows to the largest scratch asked of it (the XP path's prepared x, the
// warpgroup-mma kernel's). Timing's warm-up calls size it: a timed call never allocates.
inline void* scratch(size_t bytes) {
  static void* p = nullptr;
  static size_t size = 0;
  if (bytes > size) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    CHECK(cudaMalloc(&p, bytes));
    size = bytes;
  }
  return p;
}

// Whether this device and driver take a launch with programmatic dependent launch (asked once,
// with an empty launch; its error, if any, is cleared).
inline bool pdl_ok() {
  static int ok = [] {
    uint8_t* p = nullptr;
    size_t n = 0;
    uint64_t seed = 0;
    void* args[] = {&p, &n, &seed};
    cudaError_t e = launch_pdl_try(reinterpret_cast<void*>(&fill_bytes), dim3(1), dim3(32),
                                   args, 0);
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize());
    if (e != cudaSuccess) {
      printf("{\"kind\":\"pdl_unavailable\",\"error\":\"%s\"}\n", cudaGetErrorString(e));
    }
    return e == cudaSuccess ? 1 : 0;
  }();
  return ok;
}

// The launcher with x prepared first (XP, overlay 0015: x paired and summed by one launch before
// the staged kernel; the same bits), without or with programmatic dependent launch (PDL), and
// with the staged kernel's copy addresses from one base per tile (TA; the same bytes copied).
// Only the staged kernel and x's preparation wait for their inputs (griddepcontrol.wait): where
// the launcher takes the register kernel, it is launched without.
template <bool XP, bool TA, bool PDL, typename T, int bits, int gs>
void run_invariant_as(const Buffers<T, bits, gs>& b, Problem p, int c, const T* x, T* out,
                      bool broadcast, int sms) {
  using Q = typename QOf<bits>::type;
  void* s = XP ? scratch(cu::qmv_invariant_prep_bytes<gs, T, Q>(p.m, p.l, p.k, broadcast))
               : nullptr;
  const T* sc = b.scales + b.sb_elems * c;
  const T* bi = b.biases + b.sb_elems * c;
  bool staged = cu::qmv_invariant_staged_fits<gs>(b.wq(c), sc, bi, p.k);
  cu::qmv_invariant<gs, XP, TA>(x, b.wq(c), sc, bi, out, p.m, p.n, p.k, p.l, broadcast, sms,
                                PDL && staged ? launch_smem_pdl : launch_smem, s);
}

// The launcher's paths, by name: as the library runs it (""), with XP ("_xp"), with XP and
// programmatic dependent launch ("_xp_pdl", where the device takes it), with TA ("_ta") and with
// both ("_xp_ta"); and the warpgroup-mma kernel at every M and shape ("_wgmma", where it fits the
// arrays and the device: 4-bit gs 64 on an sm_90a build on compute capability 9.0; elsewhere the
// launcher, so the case is run but says nothing new), also with programmatic dependent launch
// ("_wgmma_pdl", where the device takes it), as the library launches it.
enum class InvPath { Plain, Xp, XpPdl, Ta, XpTa, Wgmma, WgmmaPdl };
inline const char* inv_path_name(InvPath path) {
  switch (path) {
    case InvPath::Plain: return "";
    case InvPath::Xp: return "_xp";
    case InvPath::XpPdl: return "_xp_pdl";
    case InvPath::Ta: return "_ta";
    case InvPath::Wgmma: return "_wgmma";
    case InvPath::WgmmaPdl: return "_wgmma_pdl";
    default: return "_xp_ta";
  }
}
inline std::vector<InvPath> inv_paths() {
  std::vector<InvPath> v = {InvPath::Plain, InvPath::Xp};
  if (pdl_ok()) v.push_back(InvPath::XpPdl);
  v.push_back(InvPath::Ta);
  v.push_back(InvPath::XpTa);
  v.push_back(InvPath::Wgmma);
  if (pdl_ok()) v.push_back(InvPath::WgmmaPdl);
  return v;
}

template <typename T, int bits, int gs>
void run_invariant_path(InvPath path, const Buffers<T, bits, gs>& b, Problem p, int c,
                        const T* x, T* out, bool broadcast, int sms) {
  switch (path) {
    case InvPath::Plain: return run_invariant(b, p, c, x, out, broadcast, sms);
    case InvPath::Wgmma:
    case InvPath::WgmmaPdl:
      if (!run_wgmma(b, p, c, x, out, broadcast, sms, path == InvPath::WgmmaPdl))
        run_launcher(b, p, c, x, out, broadcast, sms);
      return;
    case InvPath::Xp: return run_invariant_as<true, false, false>(b, p, c, x, out, broadcast, sms);
    case InvPath::XpPdl: return run_invariant_as<true, false, true>(b, p, c, x, out, broadcast, sms);
    case InvPath::Ta: return run_invariant_as<false, true, false>(b, p, c, x, out, broadcast, sms);
    default: return run_invariant_as<true, true, false>(b, p, c, x, out, broadcast, sms);
  }
}

// n 16-bit values of a device buffer (after the device is idle).
template <typename T>
std::vector<uint16_t> fetch(const T* d, size_t n) {
  std::vector<uint16_t> h(n);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

// A 16-bit T's value from its bits (as fetch returns them).
template <typename T>
double to_double(uint16_t h) {
  T t;
  memcpy(&t, &h, 2);
  return double(float(t));
}


// The invariant kernels' negative controls: `s` gets `a`'s weights, scales, biases and x with
// groups 2i and 2i + 1 swapped in every row (the same products, folded in another order).
template <typename T, int bits, int gs>
void swap_group_pairs(Buffers<T, bits, gs>& s, const Buffers<T, bits, gs>& a, Problem p) {
  int groups = p.k / gs;
  auto swap_groups = [&](void* dst, const void* src, size_t rows, size_t row_bytes,
                         size_t group_bytes) {
    std::vector<uint8_t> h(rows * row_bytes);
    CHECK(cudaMemcpy(h.data(), src, h.size(), cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < rows; ++r) {
      for (int g = 0; g + 1 < groups; g += 2) {
        uint8_t* g0 = h.data() + r * row_bytes + g * group_bytes;
        std::swap_ranges(g0, g0 + group_bytes, g0 + group_bytes);
      }
    }
    CHECK(cudaMemcpy(dst, h.data(), h.size(), cudaMemcpyHostToDevice));
  };
  swap_groups(s.w, a.w, p.n, size_t(p.k) * bits / 8, size_t(gs) * bits / 8);
  swap_groups(s.scales, a.scales, p.n, groups * sizeof(T), sizeof(T));
  swap_groups(s.biases, a.biases, p.n, groups * sizeof(T), sizeof(T));
  swap_groups(s.x, a.x, p.m, size_t(p.k) * sizeof(T), gs * sizeof(T));
}

// The reordered-fold negative control of an invariant kernel: `run(buffers)` on random data and on
// the same data with groups 2i and 2i + 1 swapped (the same products, another fold order) must
// change some output bits, or the parity comparisons could not see an order change. Prints one
// `kind` line; returns how many outputs differ.
template <typename T, int bits, int gs, typename Run>
long reordered_fold_control(const char* kind, Problem p, Run&& run) {
  Buffers<T, bits, gs> a(p, 1, 77), s(p, 1, 78);
  swap_group_pairs(s, a, p);
  run(a);
  run(s);
  size_t outn = size_t(p.m) * p.n;
  auto ha = fetch(a.out, outn), hs = fetch(s.out, outn);
  long d = 0;
  for (size_t i = 0; i < outn; ++i) d += ha[i] != hs[i];
  printf("{\"kind\":\"%s\",\"differ\":%ld,\"of\":%zu}\n", kind, d, outn);
  return d;
}

// ---------------------------------------------------------------- parity
// Totals across the parity translation units.
struct ParityTotals {
  long checked = 0;
  long differ = 0;
};
ParityTotals parity_float32();
// The mma.sync.m16n8k16 issue rate (peak.cu).
void mma_peak();
// The invariant kernel's parity units (invariant.cu), one per dtype and bits.
#define INV_DECL(d, b) ParityTotals inv_parity_##d##_##b();
#define INV_DECL_BITS(d) INV_DECL(d, 2) INV_DECL(d, 3) INV_DECL(d, 4) INV_DECL(d, 5) INV_DECL(d, 6) INV_DECL(d, 8)
INV_DECL_BITS(bfloat16)
INV_DECL_BITS(float16)
ParityTotals parity_float16();
ParityTotals parity_bfloat16();
ParityTotals parity_candidates();

#ifndef HARNESS_SHAPES
#define HARNESS_SHAPES ByM, LaunchShape<4, 2, 1, 8>, LaunchShape<4, 2, 2, 8>, LaunchShape<4, 2, 4, 4>, LaunchShape<4, 2, 8, 4>, LaunchShape<4, 2, 4, 2, 4>, LaunchShape<4, 2, 8, 2, 4>, LaunchShape<4, 4, 8, 2, 4>, LaunchShape<4, 8, 8, 2, 4>, LaunchShape<4, 2, 16, 2, 4>, LaunchShape<4, 4, 16, 2, 4>, LaunchShape<4, 4, 16, 4, 4>
#endif
#ifndef HARNESS_PARITY_SHAPE
#define HARNESS_PARITY_SHAPE ByM
#endif
