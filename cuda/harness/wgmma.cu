// A prototype beside overlay 0015's launcher (`qmv_wgmma`, gpu-session.sh's `wgmma` phase):
// the batch-invariant quantized mat-vec on Hopper's warpgroup mma (wgmma.mma_async, sm_90a)
// instead of mma.sync, 4-bit gs 64 bf16 and f16, to measure whether it is flatter and faster.
//
// What changes against the launcher's staged kernel (docs/kernels/cuda-invariant-qmm.md,
// "Session 27"):
//   - one instruction shape for every M <= 16: wgmma m64n16k16, weights as A from registers (the
//     same dequantized registers, the same k pairing), x as B from shared memory; columns past
//     the last vector are zeros and their folds are skipped (M <= 8: one half of the
//     accumulator is folded, no operation of a live column changes);
//   - a block of two (or four) warpgroups takes 128 (256) rows over its span of K: each chunk
//     of x (16 vectors x 256 values) is staged once per block through the ring beside the
//     weights, paired and in the layout wgmma reads, with each (vector, group)'s sum of x
//     (`xs`) summed by the launcher's own instructions (four mma.sync with A = 1, from zero, in
//     step order: the same xs bits); with XP a first launch stages every chunk once into a
//     scratch buffer and the kernel copies it like the weights; the _ws arms (warp
//     specialized) leave every copy to one producer warp and replace the block barrier by full
//     and empty mbarriers per stage (bulk copies per row, cp.async with _wsc, a 2D tensor copy
//     with _tma; _lag, _split, _wgrel and _poison vary the tma feed to tell where its race
//     lies, _pdl overlaps it with x's preparation: see Variant);
//   - the fold is the launcher's: p = fma(bias', xs, fma(scale, acc, p)), groups in order, each
//     group's four k steps chained in fp32 from zero as the launcher's four mma.sync are; and
//     so is the sum over K: the launcher's 8 K parts, each folded from zero, added in part
//     order (Sums). Where tiles are few, the parts are split across blocks (grid z) and a
//     second launch adds their partials in the same order.
// So every output is a fixed sequence of operations of its own row, its own vector and K: M,
// the column a vector lands in, the block shape, the splits and the tile a block walks change
// no bit. Whether its bits are also the launcher's depends on whether one wgmma k step sums as
// one mma.sync does; `check` counts the outputs that differ.
//
//   qmv_wgmma arms             the arms' names (all_arms: block shapes, groups in flight, x
//                              prepared, feeds and their variants)
//   qmv_wgmma check [arm...]   on bf16, then f16 (a wg_parity line each): invariance of each
//                              arm named (all by default) against wg2_s3's
//                              M = 1 (M = 1..16 per vector, the grid's blocks and one, one
//                              vector in all 16 columns), accuracy against float64 beside the
//                              launcher's, how many outputs differ from the launcher's, and a
//                              reordered-fold negative control; exit 1 on a difference, each
//                              failing comparison saying where its outputs differ (per vector,
//                              per 8-row unit of a tile, NaN, the largest relative
//                              difference, the first three)
//   qmv_wgmma ab [R] [arm...]  the launcher and the arms in R rotated rounds (default 5; bf16) on
//                              28672x4096, the two heads, 3584x3584 and 3584x18944 (K parts
//                              split across blocks), 18944x3584 (148 tiles), 6144x4096 and
//                              4096x14336 (where the library takes the kernel from), M = 1, 8,
//                              9, 16
//   qmv_wgmma one [arm...]     one launch of the launcher and each arm at M = 1 and 16 on the
//                              128256x4096 head (for Nsight Compute)
#include "harness.cuh"

#include <cuda.h>

#include <cmath>
#include <set>
#include <string>
#include <type_traits>

namespace wg {

// T (the activations, scales and biases): cutlass::bfloat16_t or cutlass::half_t, a template
// parameter of every kernel below.
using Q = cutlass::uint4b_t;
constexpr int kGs = 64;
constexpr int kChunk = 256;                  // k per stage
constexpr int kGroups = kChunk / kGs;        // 4
constexpr int kRowBytes = kChunk / 2;        // 128 weight bytes per row per chunk
constexpr int kStride = kRowBytes + 16;      // padded: fragment loads start in other banks
constexpr int kSteps = kChunk / 16;          // wgmma k steps per chunk
constexpr int kXStep = 16 * 16 * 2;          // B of one step: 16 vectors x 16 k, 16-bit

// How a block's stages are fed: by its own threads between block barriers (kStaged), or by one
// producer warp beside the warpgroups through full and empty mbarriers (warp specialized),
// a row's 128 weight bytes and the prepared x by one bulk copy each (kBulk: cp.async.bulk,
// the copy engine), in 16-byte cp.async (kCopy), or the tile's weights of a chunk by one 2D
// tensor copy (kTma: cp.async.bulk.tensor, rows of 128 bytes without padding, 128-byte
// swizzled) and x by one bulk copy.
enum Feed { kStaged, kBulk, kCopy, kTma };

// A block of WGS warpgroups (64 rows each) and its ring of S stages: each stage x (kSteps
// core-matrix tiles), the weights (rows x kStride), scales and biases (rows x kGroups bf16)
// and xs (kGroups x 16 fp32) of one chunk; fed by a producer warp, then the stages' full and
// empty mbarriers (and kSplit's fullw).
template <int WGS, int S, Feed F = kStaged>
struct Geo {
  static constexpr int rows = 64 * WGS;
  static constexpr int threads = 128 * WGS + (F == kStaged ? 0 : 32);
  // kTma: a weight row's 16-byte pieces at (piece ^ row % 8) (the swizzle spreads a fragment
  // load's 8 rows over the banks as the padding does); the stage 1024-byte aligned.
  static constexpr bool swz = F == kTma;
  static constexpr int wstride = swz ? kRowBytes : kStride;
  static constexpr int x = 0;
  static constexpr int w = x + kSteps * kXStep;
  static constexpr int s = w + rows * wstride;
  static constexpr int b = s + rows * kGroups * 2;
  static constexpr int xs = b + rows * kGroups * 2;
  static constexpr int align = swz ? 1024 : 128;
  static constexpr int stage = (xs + kGroups * 16 * 4 + align - 1) / align * align;
  static constexpr int bars = S * stage;
  static constexpr int smem = bars + (F == kStaged ? 0 : 3 * S * 8);  // full, empty, fullw
  // Blocks per SM: as many as fit 227 KiB (1 KiB reserved each), at most two.
  static constexpr int blocks = 2 * (smem + 1024) <= 228 * 1024 && WGS <= 2 ? 2 : 1;
};

// K-major, no swizzle: core matrices of 8 vectors x 16 bytes (8 k), the next 8 k at LBO = 128
// bytes, the next 8 vectors at SBO = 256 bytes. `lo` is the descriptor's low word: the start
// address >> 4 (shared addresses are below 2^18) with LBO >> 4 at bit 16, so a start further
// on by 16 j bytes is lo + j.
__device__ __forceinline__ uint32_t b_desc_lo(uint32_t addr) {
  return (addr >> 4) | (uint32_t(128 >> 4) << 16);
}
constexpr uint32_t kDescHi = 256 >> 4;

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void keep(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void keep(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// d (+)= A B: A 64 x 16 from the warpgroup's registers (this warp's 16 rows, mma.sync's A
// fragment), B 16 k x 16 vectors at desc, both of type T; accumulate unless `first`.
#define QMV_WGMMA_16(TY)                                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"                                 \
               "wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " "                    \
               "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),     \
                 "+f"(d[6]), "+f"(d[7])                                                      \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(!first)))
template <class T>
__device__ __forceinline__ void wgmma_16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc,
                                         bool first) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, cutlass::half_t>) {
    QMV_WGMMA_16("f16");
  } else {
    QMV_WGMMA_16("bf16");
  }
#else
  __trap();
#endif
}
#undef QMV_WGMMA_16

// XP: x prepared once per launch by qmv_wg_prep_kernel, per (16-vector block, chunk) a tile of
// kPrepTile bytes: the chunk's B as the kernel's stage holds it (kSteps x kXStep), then its xs
// (kGroups x 16 fp32). The kernel then copies x like the weights (cp.async): no staging warp.
constexpr int kPrepX = kSteps * kXStep;
constexpr int kPrepTile = kPrepX + kGroups * 16 * 4;

// Stores x of one group and 8 vectors as wgmma reads B, and their xs, for warp (g, nb) (lane
// (gid, tig): vector 8 nb + gid's 16 values at tig * 16 of group g, paired as the weights, in
// steps 4 g .. 4 g + 3, slots 2 tig, + 1 of core rows 0 and 1; xs by the launcher's
// instructions: four mma.sync with A = 1, from zero, in step order). The kernel's staging and
// qmv_wg_prep_kernel share it: the same bits either way.
template <class T>
__device__ __forceinline__ void stage_group(const uint4 (&xr)[2], int g, int nb, int gid,
                                            int tig, uint8_t* xb, float* xsb) {
  using namespace cu::qmv_invariant_detail;
  const uint32_t r[8] = {xr[0].x, xr[0].y, xr[0].z, xr[0].w, xr[1].x, xr[1].y, xr[1].z, xr[1].w};
  uint32_t pr[8];
  pair_like_weights<Q, 16>(r, pr);
  constexpr uint32_t one = kOnes<T>;
  const uint32_t ones[4] = {one, one, one, one};
  float xs[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<uint32_t*>(xb + (g * 4 + i) * kXStep + nb * 256 + h * 128 + gid * 16 +
                                   4 * tig) = pr[2 * i + h];
    }
    mma_16816<T>(xs, ones, pr[2 * i], pr[2 * i + 1]);
  }
  if (gid == 0) {
    *reinterpret_cast<float2*>(xsb + g * 16 + nb * 8 + 2 * tig) = make_float2(xs[0], xs[1]);
  }
}

// One block per (chunk, 16-vector block): warp (g, nb) = (warp / 2, warp % 2) stages group g of
// vectors 8 nb..8 nb + 7 into `prep` (zeros past the last vector).
template <class T>
__global__ void __launch_bounds__(256) qmv_wg_prep_kernel(const T* x, uint8_t* prep, int tokens,
                                                          int k) {
  // A kernel launched after this one with programmatic dependent launch (kPdl) may start now;
  // it waits for this one's writes itself.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gid = lane / 4, tig = lane % 4, g = warp / 2, nb = warp % 2;
  const int c = blockIdx.x, tok0 = blockIdx.y * 16;
  const int n_tok = min(16, tokens - tok0);
  const int v = nb * 8 + gid;
  uint4 xr[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (v < n_tok) {
    const uint4* src = reinterpret_cast<const uint4*>(x + int64_t(tok0 + v) * k + c * kChunk +
                                                      g * kGs + tig * 16);
    xr[0] = src[0], xr[1] = src[1];
  }
  uint8_t* tile = prep + (int64_t(blockIdx.y) * gridDim.x + c) * kPrepTile;
  stage_group<T>(xr, g, nb, gid, tig, tile, reinterpret_cast<float*>(tile + kPrepX));
}

// One chunk of K for a warp's 16 rows (rbase .. rbase + 15 of the block's tile) from the stage
// at `st` (shared address st_addr), folded into `part`: per group four wgmma k steps chained in
// fp32 from zero into acc[j % D], then p = fma(bias', xs, fma(scale, acc, p)). D groups' wgmma
// in flight (1: each runs while the next group is dequantized; 2: the next group's is issued
// before a group is folded). Where an instruction waits moves no operation. Every wgmma has
// completed (its reads of the stage too) when it returns.
template <class T, class G, int NT, int D>
__device__ __forceinline__ void compute_chunk(const uint8_t* st, uint32_t st_addr, int rbase,
                                              int gid, int tig, float (&part)[NT * 4],
                                              float (&acc)[D][8]) {
  using namespace cu::qmv_invariant_detail;
  const uint64_t desc0 = (uint64_t(kDescHi) << 32) | b_desc_lo(st_addr + G::x);
  // This lane's rows' scales and biases of the chunk: two words (4 groups) each.
  uint2 sw[2], bw[2];
  uint32_t a[2][2][8];
  auto dequant = [&](int j, uint32_t (&aj)[2][8]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rbase + h * 8 + gid;
      const int at = G::swz ? (((2 * j + tig / 2) ^ (r & 7)) * 16 + (tig & 1) * 8) : j * 32 + tig * 8;
      uint2 wb = *reinterpret_cast<const uint2*>(st + G::w + r * G::wstride + at);
      dequant_ints<T, Q, 16>(reinterpret_cast<const uint8_t*>(&wb), aj[h]);
    }
  };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = rbase + h * 8 + gid;
    sw[h] = *reinterpret_cast<const uint2*>(st + G::s + r * kGroups * 2);
    bw[h] = *reinterpret_cast<const uint2*>(st + G::b + r * kGroups * 2);
  }
  // Group j's four k steps, one wgmma each, from A = a[j % 2] into acc[j % D].
  auto mma_group = [&](int j) {
    uint32_t(&aj)[2][8] = a[j % 2];
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t frag[4] = {aj[0][2 * i], aj[1][2 * i], aj[0][2 * i + 1],
                                aj[1][2 * i + 1]};
      wgmma_16<T>(acc[j % D], frag, desc0 + (j * 4 + i) * (kXStep >> 4), i == 0);
    }
    wgmma_commit();
#pragma unroll
    for (int e = 0; e < 8; ++e) keep(acc[j % D][e]);
  };
  dequant(0, a[0]);
  if constexpr (D == 2) mma_group(0);
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    // D = 1: group j's wgmma runs while group j + 1 is dequantized. D = 2: group j + 1's is
    // issued before group j is folded (two in flight).
    if constexpr (D == 1) mma_group(j);
    if (j + 1 < kGroups) dequant(j + 1, a[(j + 1) % 2]);
    if constexpr (D == 2) {
      if (j + 1 < kGroups) mma_group(j + 1);
    }
    float sc[2], bi[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t s16 = j / 2 ? sw[h].y : sw[h].x, b16 = j / 2 ? bw[h].y : bw[h].x;
      float bv;
      if constexpr (std::is_same_v<T, cutlass::half_t>) {
        sc[h] = __half2float(__ushort_as_half(uint16_t(j % 2 ? s16 >> 16 : s16)));
        bv = __half2float(__ushort_as_half(uint16_t(j % 2 ? b16 >> 16 : b16)));
      } else {
        sc[h] = __uint_as_float(j % 2 ? s16 & 0xffff0000u : s16 << 16);
        bv = __uint_as_float(j % 2 ? b16 & 0xffff0000u : b16 << 16);
      }
      bi[h] = __fmaf_rn(-kIntOffset<T, Q>, sc[h], bv);
    }
    const float* xs = reinterpret_cast<const float*>(st + G::xs) + j * 16 + tig * 2;
    float2 s2[NT];
#pragma unroll
    for (int v = 0; v < NT; ++v) s2[v] = *reinterpret_cast<const float2*>(xs + v * 8);
    if (D == 2 && j + 1 < kGroups) {
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    float(&acj)[8] = acc[j % D];
#pragma unroll
    for (int e = 0; e < 8; ++e) keep(acj[e]);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 8; ++e) keep(a[j % 2][h][e]);
#pragma unroll
    for (int v = 0; v < NT; ++v) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int h = e / 2;
        part[v * 4 + e] = __fmaf_rn(bi[h], e % 2 ? s2[v].y : s2[v].x,
                                    __fmaf_rn(sc[h], acj[v * 4 + e], part[v * 4 + e]));
      }
    }
  }
}

// The launcher's K parts (qmv_invariant_staged: KP = kWarps parts, part i chunks
// [i chunks / KP, (i + 1) chunks / KP)) and this block's: blockIdx.z of gridDim.z splits (1, 2,
// 4 or 8) takes parts p0 .. p1 - 1, chunks c0 .. c1 - 1.
constexpr int kParts = cu::qmv_invariant_detail::kWarps;
struct Span {
  int chunks, p0, p1, c0, c1;
  __device__ __forceinline__ explicit Span(int k)
      : chunks(k / kChunk), p0(int(blockIdx.z) * kParts / int(gridDim.z)),
        p1((int(blockIdx.z) + 1) * kParts / int(gridDim.z)), c0(end(p0 - 1)), c1(end(p1 - 1)) {}
  __device__ __forceinline__ Span(int chunks, int p0, int p1)
      : chunks(chunks), p0(p0), p1(p1), c0(end(p0 - 1)), c1(end(p1 - 1)) {}
  // The chunk after part p's last (part -1 ends at 0).
  __device__ __forceinline__ int end(int p) const { return (p + 1) * chunks / kParts; }
};

// kStripe's flags at the front of its hand-over buffer (stripe_buffer).
constexpr int kFlags = 1 << 16;

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// kStripe: a persistent grid of B blocks, each an equal share of the (tile, part) units in
// tile-major order (unit u: tile u / kParts, part u % kParts), balanced by chunks: block b
// starts at the first unit beginning at or past chunk b C / B of the C = tiles x chunks (a
// function of N, K and B alone). A block's units run over tiles t0 .. t1; it visits t1 first
// (a tile it starts, whose successor needs its running total), then t0 + 1 .. t1 - 1 (whole
// tiles), then t0 (a tile it ends, from its predecessor's total), so that no block waits for a
// tile its predecessor visits last. Every output's sum stays the launcher's: the parts folded
// from zero, added from part 0's in part order, the running total handed from block to block
// through `run` (fp32) under a flag per (16 vectors, tile) holding how many parts it covers.
struct Stripe {
  int chunks = 1, u0 = 0, u1 = 0, t0 = 0, t1 = 0, nt = 0;
  __device__ __forceinline__ Stripe() {}
  __device__ __forceinline__ int cum(int u) const {
    return (u / kParts) * chunks + (u % kParts) * chunks / kParts;
  }
  // The first unit beginning at or past chunk position `at`.
  __device__ __forceinline__ int first_at(int64_t at) const {
    const int t = int(at / chunks), r = int(at % chunks);
    int p = 0;
    while (p < kParts && p * chunks / kParts < r) ++p;
    return t * kParts + p;
  }
  __device__ __forceinline__ Stripe(int tiles, int k)
      : chunks(k / kChunk) {
    const int64_t all = int64_t(tiles) * chunks, b = blockIdx.x, g = gridDim.x;
    u0 = first_at(b * all / g);
    u1 = b + 1 == g ? tiles * kParts : first_at((b + 1) * all / g);
    t0 = u0 / kParts, t1 = (u1 - 1) / kParts;
    nt = u1 > u0 ? t1 - t0 + 1 : 0;
  }
  // Visit v's tile: t1 first, then t0 + 1 .. t1 - 1, then t0.
  __device__ __forceinline__ int tile(int v) const {
    return nt > 1 && v == 0 ? t1 : v == nt - 1 ? t0 : t0 + v;
  }
  __device__ __forceinline__ Span span(int v) const {
    const int t = tile(v);
    return Span(chunks, t == t0 ? u0 % kParts : 0, t == t1 ? (u1 - 1) % kParts + 1 : kParts);
  }
  __device__ __forceinline__ int steps() const { return u1 > u0 ? cum(u1) - cum(u0) : 0; }
};

// Where the outputs go: bf16 into `out`, or with splits each part's fp32 partials into `red`
// (part, vector, row), added up by qmv_wg_reduce_kernel.
template <class T>
struct Dst {
  T* out;
  float* red;
  int n, tokens, tok0, n_tok;
  int row_end;  // rows at or past it are another block's (kBal) or past N
  // kStripe: the running totals handed between blocks (vector, row) and the flags (16-vector
  // block, tile); `red` is null then.
  float* run = nullptr;
  int* flags = nullptr;
  int tiles = 0;
};

// A block's work: its 16 vectors (blockIdx.y), its span of K, where its outputs go, and how
// many steps (tile, chunk) it walks over its tiles of `rows`: `full` tiles row_first,
// + row_stride, ... (by default tiles blockIdx.x, + gridDim.x, ...), then rows [tail0,
// dst.row_end) of its own in tiles of `rows` from tail0, the last one shorter (a multiple of 16
// rows). Balanced (kBal): no full tiles, N's 16-row units split evenly over the gridDim.x
// blocks (b U / G .. (b + 1) U / G). Tail (kTail): the whole rounds of strided tiles, then the
// rows past them (the tiles left over for a last round) split so over the blocks. Which rows a
// block takes changes no bit (each output is its own row's sum).
template <class T>
struct Work {
  Span sp;
  Dst<T> dst;
  Stripe stripe;
  int total, row_first, row_stride, full, tail0;
  __device__ __forceinline__ Work(T* out, float* red, int tokens, int n, int k, int rows,
                                  int mode = 0)  // mode: 0 strided, 1 kBal, 2 kTail, 3 kStripe
      : sp(k),
        dst{out, red, n, tokens, int(blockIdx.y) * 16, min(16, tokens - int(blockIdx.y) * 16), n},
        stripe((n + rows - 1) / rows, k) {
    const int tiles = (n + rows - 1) / rows, b = blockIdx.x, g = gridDim.x;
    if (mode == 3) {
      // `red` holds the flags, then the running totals (stripe_buffer).
      dst.flags = reinterpret_cast<int*>(red), dst.run = red + kFlags;
      dst.red = nullptr, dst.tiles = tiles;
      row_first = stripe.tile(0) * rows, row_stride = 0, full = 0, tail0 = 0;
      total = stripe.steps();
      return;
    }
    row_first = b * rows, row_stride = g * rows, tail0 = 0;
    full = (tiles - b + g - 1) / g;
    int mine = full;
    const int whole = mode == 2 ? tiles / g : 0;  // kTail: rounds every block takes a tile of
    if (mode == 1 || (mode == 2 && tiles % g)) {
      const int base = whole * g * rows;
      const int64_t units = (n - base + 15) / 16;
      const int u0 = base / 16 + int(b * units / g), u1 = base / 16 + int((b + 1) * units / g);
      full = whole, tail0 = 16 * u0;
      dst.row_end = u1 > u0 ? min(16 * u1, n) : n;
      mine = whole + (16 * (u1 - u0) + rows - 1) / rows;
    }
    total = mine * (sp.c1 - sp.c0);
  }
};

// A lane's outputs summed as the launcher sums them: each part folded from zero into `part`;
// the tile's total is part 0's partial, then each later part's added in part order (an empty
// part adds +0); with splits the parts' partials go to `red` and qmv_wg_reduce_kernel adds
// them in the same order. So where the launcher and this kernel fold a group alike, their bits
// are equal, and how many splits there are changes no bit.
template <class T, int NT>
struct Sums {
  const Span& sp;
  const Dst<T>& d;
  int rbase, gid, tig;
  int rows_per_tile = 128, consumers = 256;  // kStripe: the tile's rows, the consumer threads
  float part[NT * 4] = {};
  float tot[NT * 4];
  int next, next_end;  // the next part to end, and the chunk it ends before (none: INT_MAX)
  __device__ __forceinline__ Sums(const Span& sp, const Dst<T>& d, int rbase, int gid, int tig)
      : sp(sp), d(d), rbase(rbase), gid(gid), tig(tig) {
    set_next(sp.p0);
  }
  __device__ __forceinline__ void set_next(int p) {
    next = p;
    next_end = p < sp.p1 ? sp.end(p) : INT_MAX;
  }
  __device__ __forceinline__ int row(int e, int row0) const {
    return row0 + rbase + ((e % 4) / 2) * 8 + gid;
  }
  __device__ __forceinline__ int vec(int e) const { return (e / 4) * 8 + tig * 2 + e % 2; }
  // Ends every part that ends at or before chunk `c` (before chunk c is folded; c = c1 at the
  // end of the tile at row0).
  __device__ __forceinline__ void end_through(int c, int row0) {
    while (next_end <= c) {
      // kStripe: a tile this block ends starts from its predecessor's total.
      if (d.run && next == sp.p0 && next > 0) take_over(row0);
#pragma unroll
      for (int e = 0; e < NT * 4; ++e) {
        if (d.red) {
          const int r = row(e, row0), v = vec(e);
          if (r < d.row_end && v < d.n_tok)
            d.red[(int64_t(next) * d.tokens + d.tok0 + v) * d.n + r] = part[e];
        } else {
          tot[e] = next == 0 ? part[e] : __fadd_rn(tot[e], part[e]);
        }
        part[e] = 0.f;
      }
      set_next(next + 1);
    }
  }
  // kStripe: the flag of the tile at row0 for this block's vectors.
  __device__ __forceinline__ int* flag(int row0) const {
    return d.flags + int64_t(blockIdx.y) * d.tiles + row0 / rows_per_tile;
  }
  // kStripe: wait until the predecessors' total covers parts 0 .. sp.p0 - 1, then take it.
  __device__ __forceinline__ void take_over(int row0) {
    const int* f = flag(row0);
    const long long t0 = clock64();
    while (ld_acquire(f) != sp.p0) {
      if (clock64() - t0 > (1ll << 34)) __trap();  // seconds: a lost hand-off, not a hang
    }
#pragma unroll
    for (int e = 0; e < NT * 4; ++e) {
      const int r = row(e, row0), v = vec(e);
      tot[e] = r < d.row_end && v < d.n_tok ? __ldcg(&d.run[int64_t(d.tok0 + v) * d.n + r]) : 0.f;
    }
  }
  // kStripe: hand the total over parts 0 .. sp.p1 - 1 to the successor, or (the tile's last
  // part) reset the flag for the next launch once every consumer warp has taken the total.
  __device__ __forceinline__ void hand_over(int row0) {
    const bool last = sp.p1 == kParts;
    if (!last) {
#pragma unroll
      for (int e = 0; e < NT * 4; ++e) {
        const int r = row(e, row0), v = vec(e);
        if (r < d.row_end && v < d.n_tok) __stcg(&d.run[int64_t(d.tok0 + v) * d.n + r], tot[e]);
      }
      __threadfence();
    }
    if (last && sp.p0 == 0) return;  // the whole tile here: no flag touched
    asm volatile("bar.sync 6, %0;\n" ::"r"(consumers) : "memory");
    if (threadIdx.x == 0) st_release(flag(row0), last ? 0 : sp.p1);
  }
  // The tile at row0 once its last chunk is folded: its outputs (rows past N and vectors past
  // the last left out; kStripe: handed over unless this block holds the tile's last part), then
  // the next tile starts from part p0.
  __device__ __forceinline__ void store(int row0) {
    end_through(sp.c1, row0);
    if (d.run) hand_over(row0);
    if (!d.red && (!d.run || sp.p1 == kParts)) {
#pragma unroll
      for (int e = 0; e < NT * 4; ++e) {
        const int r = row(e, row0), v = vec(e);
        if (r < d.row_end && v < d.n_tok) d.out[int64_t(d.tok0 + v) * d.n + r] = T(tot[e]);
      }
    }
    set_next(sp.p0);
  }
};

// With splits: each output the sum of its parts' partials, from part 0's, in part order.
template <class T>
__global__ void qmv_wg_reduce_kernel(const float* red, T* out, int tokens, int n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, all = int64_t(tokens) * n;
  if (i >= all) return;
  float s = red[i];
  for (int p = 1; p < kParts; ++p) s = __fadd_rn(s, red[p * all + i]);
  out[i] = T(s);
}

// Where a step of the ring is: its chunk of K, its stage, its tile's first row. Steps follow
// each other as a block walks its tiles (Work: row_first, + row_stride, ...), chunk by chunk
// through its span.
struct Pos {
  int c, slot, row0, stride, left, tail0;  // left: full tiles still to walk, this one included
  // kStripe: the block's stripe, the visit, its span (`sp` passed to next is not used).
  bool striped = false;
  Stripe st;
  int v = 0;
  Span vs{1, 0, 0};
  template <class T>
  __device__ __forceinline__ static Pos first(const Work<T>& wk, int rows, bool stripe = false) {
    if (stripe) {
      Pos p{0, 0, wk.row_first, 0, INT_MAX, 0, true, wk.stripe, 0, wk.stripe.span(0)};
      p.c = p.vs.c0;
      return p;
    }
    return wk.full > 0 ? Pos{wk.sp.c0, 0, wk.row_first, wk.row_stride, wk.full, wk.tail0}
                       : Pos{wk.sp.c0, 0, wk.tail0, rows, INT_MAX, wk.tail0};
  }
  // The span of the step's tile.
  __device__ __forceinline__ const Span& span(const Span& sp) const { return striped ? vs : sp; }
  template <int S, int rows>
  __device__ __forceinline__ void next(const Span& sp) {
    slot = slot + 1 == S ? 0 : slot + 1;
    if (striped) {
      if (++c == vs.c1 && ++v < st.nt) {
        vs = st.span(v), row0 = st.tile(v) * rows, c = vs.c0;
      }
      return;
    }
    if (++c == sp.c1) {
      c = sp.c0;
      if (--left == 0) {
        row0 = tail0, stride = rows, left = INT_MAX;
      } else {
        row0 += stride;
      }
    }
  }
};

// WGS warpgroups per block, S stages; NT: accumulator halves folded (1: M <= 8, 2: M = 9..16);
// D groups' wgmma in flight (1: each runs while the next group is dequantized; 2: the next
// group's is issued before a group is folded). Where an instruction waits moves no operation.
// XP: x comes prepared (qmv_wg_prep_kernel, in `prep`) and is copied with the weights.
template <class T, int WGS, int S, int NT, int D = 1, bool XP = false>
__global__ void __launch_bounds__(Geo<WGS, S>::threads, Geo<WGS, S>::blocks)
    qmv_wg_kernel(const T* x, const uint8_t* w, const T* scales, const T* biases, T* out,
                  int tokens, int n, int k, const uint8_t* prep, float* red) {
  using namespace cu::qmv_invariant_detail;
  using G = Geo<WGS, S>;
  constexpr int kRows = G::rows, kThreads = G::threads, kStage = G::stage;
  constexpr int kX = G::x, kW = G::w, kS = G::s, kB = G::b, kXs = G::xs;
  extern __shared__ __align__(128) uint8_t smem[];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int gid = lane / 4, tig = lane % 4;
  const Work<T> wk(out, red, tokens, n, k, kRows);
  const Span& sp = wk.sp;
  const Dst<T>& dst = wk.dst;
  const int total = wk.total, tok0 = dst.tok0, n_tok = dst.n_tok;
  const uint32_t smem0 = smem_addr(smem);

  // Every stage's x and xs zeroed once: the vectors past the last stay zeros.
  for (int i = t; i < S * kStage / 16; i += kThreads) {
    int off = (i * 16) % kStage;
    if (off < kW || off >= kXs) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  // Weights, scales and biases of the step at `p` into its stage (cp.async, one commit group):
  // thread t copies segments t % 2 + 2 q (16 bytes each, q = 0..3) of row t / 2 (two lanes
  // read a whole 32-byte sector of a row per instruction), and the 8 bytes of scales (t < rows)
  // or biases of row t % rows; rows past N repeat the last. Its rows are set once per tile; the
  // copies of a chunk are at constant offsets from one address.
  static_assert(kThreads / 2 == kRows);
  // The rows this thread copies in the tile being issued (set at its first chunk).
  int w_r = 0, sb_r = 0;
  const int w_row32 = k / 2, sb_row32 = k / kGs;
  const uint8_t* w_lane = w + (t % 2) * 16;
  const T* sb_base = t < kRows ? scales : biases;
  const uint32_t w_dst = kW + (t / 2) * kStride + (t % 2) * 16;
  const uint32_t sb_dst = (t < kRows ? kS : kB) + (t % kRows) * kGroups * 2;
  auto issue = [&](bool live, const Pos& p) {
    if (live) {
      if (p.c == sp.c0) {
        w_r = min(p.row0 + t / 2, n - 1);
        sb_r = min(p.row0 + t % kRows, n - 1);
      }
      uint8_t* st = smem + p.slot * kStage;
      const uint8_t* src = w_lane + uint64_t(uint32_t(w_r)) * uint32_t(w_row32) + p.c * kRowBytes;
#pragma unroll
      for (int q = 0; q < 4; ++q) cp_async<16>(st + w_dst + q * 32, src + q * 32);
      cp_async<8>(st + sb_dst, sb_base + uint64_t(uint32_t(sb_r)) * uint32_t(sb_row32) + p.c * kGroups);
      if constexpr (XP) {
        // The chunk's prepared x (M <= 8: the first 8 vectors' half of each step) and xs.
        const uint8_t* tile = prep + (int64_t(blockIdx.y) * sp.chunks + p.c) * kPrepTile;
        if (t < 256) {
#pragma unroll
          for (int q = 0; q < NT; ++q) {
            const int off = NT == 2 ? (q * 256 + t) * 16 : (t / 16) * kXStep + (t % 16) * 16;
            cp_async<16>(st + kX + off, tile + off);
          }
        }
        if (t < 16) cp_async<16>(st + kXs + t * 16, tile + kPrepX + t * 16);
      }
    }
    cp_async_commit();
  };
  // x of the step at `p`: warp (g, nb) = (warp / 2, warp % 2) of the first 8 stages group g
  // of vectors 8 nb .. 8 nb + 7 where any is live, as the launcher's warp takes a group: lane
  // (gid, tig) loads vector 8 nb + gid's 16 values at tig * 16 of the group, pairs them as the
  // weights, stores them where wgmma reads B (steps 4 g .. 4 g + 3, slots 2 tig, + 1 of core
  // rows 0 and 1) and sums them by the launcher's instructions: four mma.sync with A = 1, from
  // zero, in step order (the same xs bits as the launcher's).
  const int xg = warp / 2, xnb = warp % 2;
  const bool x_warp = !XP && warp < 8 && xnb * 8 < n_tok;
  const bool x_live = xnb * 8 + gid < n_tok;
  const T* x_at = x + int64_t(tok0 + min(xnb * 8 + gid, n_tok - 1)) * k + xg * kGs + tig * 16;
  uint4 xr[2];
  auto load_x = [&](bool live, const Pos& p) {
    if (!x_warp || !live) return;
    const uint4* src = reinterpret_cast<const uint4*>(x_at + p.c * kChunk);
    xr[0] = x_live ? src[0] : make_uint4(0, 0, 0, 0);
    xr[1] = x_live ? src[1] : make_uint4(0, 0, 0, 0);
  };
  auto store_x = [&](bool live, const Pos& p) {
    if (!x_warp || !live) return;
    uint8_t* st = smem + p.slot * kStage;
    stage_group<T>(xr, xg, xnb, gid, tig, st + kX, reinterpret_cast<float*>(st + kXs));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  };

  const int rbase = (warp / 4) * 64 + (warp % 4) * 16;
  Sums<T, NT> sums(sp, dst, rbase, gid, tig);
  float acc[D][8] = {};
  Pos in = Pos::first(wk, kRows);  // the next step to issue
  int s_in = 0;
#pragma unroll
  for (int i = 0; i < S - 1; ++i, ++s_in, in.next<S, kRows>(sp)) {
    issue(s_in < total, in);
    load_x(s_in < total, in);
    store_x(s_in < total, in);
  }
  // Step s computes stage s % S: the loop is unrolled S times so that every stage's address
  // (and so every wgmma descriptor) is a constant.
  Pos at = Pos::first(wk, kRows);  // the step computed
  for (int s0 = 0; s0 < total; s0 += S) {
#pragma unroll
    for (int u = 0; u < S; ++u) {
      if (s0 + u >= total) break;
      const bool live = s_in < total;
      load_x(live, in);
      cp_async_wait<S - 2>();
      // XP: x landed by cp.async (the generic proxy) and wgmma reads it (the async proxy).
      if constexpr (XP) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      issue(live, in);
      sums.end_through(at.c, at.row0);
      compute_chunk<T, G, NT, D>(smem + u * kStage, smem0 + u * kStage, rbase, gid, tig, sums.part,
                              acc);
      if (at.c == sp.c1 - 1) sums.store(at.row0);
      store_x(live, in);
      ++s_in, in.next<S, kRows>(sp), at.next<S, kRows>(sp);
    }
  }
  cp_async_wait<0>();
}

// The producer's side of a full mbarrier: lane 0 arrives and adds the bytes its bulk copies
// will complete; each lane's cp.async (not bulk) arrive when they land (noinc: counted in the
// barrier's expected arrivals); a bulk copy of `bytes` (a multiple of 16) completes its bytes on
// `bar`.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   cu::qmv_invariant_detail::smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   cu::qmv_invariant_detail::smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  using cu::qmv_invariant_detail::smem_addr;
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// The 2D box at (byte col, row) of the tensor `map` describes into dst (1024-byte aligned with
// the 128-byte swizzle), completing its bytes (rows past the tensor's are zeros) on `bar`.
__device__ __forceinline__ void tensor_copy_2d(void* dst, const CUtensorMap* map, int col,
                                               int row, uint64_t* bar) {
  using cu::qmv_invariant_detail::smem_addr;
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}

// The same copy with an L2 policy (kEvict: the weights, read once, evicted first).
__device__ __forceinline__ void tensor_copy_2d(void* dst, const CUtensorMap* map, int col,
                                               int row, uint64_t* bar, uint64_t policy) {
  using cu::qmv_invariant_detail::smem_addr;
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_addr(bar)),
      "l"(policy)
      : "memory");
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// How a warp-specialized arm is varied (bits of V): the suspects of kTma's race that session
// 29 built (kLag, kSplit, kPoison, kWgRelease; the cause was the missing proxy fence, kNoFence its
// control) and the savings tried since (kPdl, kPair, kEvict, kPrefetch).
// kLag: a stage is refilled only once the step after its last one is released too (at most
// S - 1 steps ahead: a released stage is not rewritten at once); kSplit: the tensor copy and x's
// bulk copies complete on a barrier of their own (`fullw`, one arrival and the bytes), the
// scales' and biases' cp.async on `full` (32 arrivals), and the warpgroups wait for both;
// kPoison: each consumer warp, done with a stage, overwrites its rows' weights (0xff) and
// scales and biases (bf16 NaN) before releasing it, so that a read of a stage before its copies
// land shows as a changed or NaN output; kWgRelease: a warpgroup releases a stage once, after
// a barrier of its four warps (as CUTLASS's consumers do), instead of each warp on its own.
// kPdl (kTma only; not a suspect, a saving): the kernel is launched with programmatic
// dependent launch, so it starts while x's preparation runs; the producer issues the first S
// steps' weights, waits for the preparation (griddepcontrol.wait), then copies their x.
// kNoFence (kBulk, kTma): the warps release a stage without the proxy fence, as session 28's
// failing kernels did: the negative control of that fence.
// kPair: the producer issues steps two at a time (waiting for both stages' release first), so a
// tile's rows are asked for 256 contiguous bytes at once (chunks c and c + 1) instead of 128:
// whether the DRAM pages' locality is what holds the tma feed's M = 1 below the launcher's.
// kEvict (kTma): the weights' tensor copies evict-first from L2 (x's preparation, the scales and
// biases stay); kPrefetch (kTma): the producer prefetches the tensor map before its first copy.
// kBal (kTma): each block takes rows of its own, N's 16-row units split evenly over the blocks
// (Work), its last tile shorter, copied by 16-row boxes (`map16`); a warpgroup with no row of
// a short tile skips its math: whether tiles left over in a last round (1188 tiles of
// 152064x3584 over 264 blocks: 4.5 each) are what holds the kernel's M = 1 behind the
// launcher's. kInX (kTma): no preparation launch; the consumer warps stage each step's x
// themselves (warp (g, nb) of the first 8, as qmv_wg_kernel's, loaded one step ahead), fence
// it for wgmma and meet at a named barrier before their math: whether that launch is the rest.
// kTail (kTma): the tiles as by default for every whole round of the grid, the rows left over
// for a last one split as kBal splits N (neighbouring blocks, neighbouring rows): the balance
// without kBal's far-apart ranges. kBox16 (kTma): every tile by 8 boxes of 16 rows, as kBal's
// and kTail's short tiles are copied: what the smaller copies cost alone. kS2 (host side only):
// at least two splits wherever K has as many chunks as parts, where splits_for gives one (18944
// x 3584: 148 tiles on 264 slots, so 116 slots idle): whether the idle slots are its M = 1 gap.
// kStripe (kTma): Marlin's partition in this kernel's order: as many blocks as fit at once
// (kStripeSm: one an SM), each an equal share of the (tile, part) units by chunks (Stripe), the
// running total of a tile split between blocks handed from block to block in part order (fp32,
// a flag per tile), no reduction launch: whether 18944x3584's 148 tiles on 132 SMs and
// 6144x4096's 192 split blocks are what hold those shapes above 1.15x.
enum Variant {
  kLag = 1,
  kSplit = 2,
  kPoison = 4,
  kWgRelease = 8,
  kPdl = 16,
  kNoFence = 32,
  kPair = 64,
  kEvict = 128,
  kPrefetch = 256,
  kBal = 512,
  kInX = 1024,
  kTail = 2048,
  kBox16 = 4096,
  kS2 = 8192,
  kStripe = 16384,
  kStripeSm = 32768
};

// x of a step (prepared: the chunk's B, then its xs) into its stage by the copy engine.
__device__ __forceinline__ void copy_x(uint8_t* st_x, uint8_t* st_xs, const uint8_t* tile,
                                       uint64_t* bar) {
  bulk_copy(st_x, tile, kPrepX, bar);
  bulk_copy(st_xs, tile + kPrepX, kGroups * 16 * 4, bar);
}

// The producer warp of a warp-specialized block: each step's weights, scales, biases and
// prepared x (`prep`: this block's vectors) into its stage once the warpgroups have released
// it (empty[slot], one arrival per consumer warp), announced on full[slot] (one arrival per
// lane, and lane 0's bulk bytes with kBulk and kTma; kSplit: the bulk bytes on fullw[slot]).
// Rows past N repeat the last (kTma: zeros); their outputs are not stored.
template <class T, class G, int S, int NT, Feed F, int V>
__device__ __forceinline__ void produce(uint8_t* smem, uint64_t* full, uint64_t* fullw,
                                        uint64_t* empty,
                                        const uint8_t* w, const CUtensorMap* map,
                                        const T* scales, const T* biases, const uint8_t* prep,
                                        int n, int k, const Span& sp, int total, int lane,
                                        Pos first, int row_end, const CUtensorMap* map16) {
  using namespace cu::qmv_invariant_detail;
  constexpr int kRows = G::rows;
  constexpr int kXBytes = NT * kPrepX / 2;  // M <= 8: the first 8 vectors' half of each step
  // The barrier a stage's bulk bytes complete on (kSplit: a barrier of their own).
  auto tx_bar = [&](int slot) { return V & kSplit ? &fullw[slot] : &full[slot]; };
  // kPdl: the last step issued before the first that waits for a release (kPair: an even
  // step), whose x waits for the preparation; the later steps copy theirs as they go.
  constexpr int kFirstWait = V & kPair ? (S / 2) * 2 : S;
  uint64_t policy = 0;
  if constexpr (V & kEvict) policy = evict_first_policy();
  if constexpr (V & kPrefetch) {
    const uint64_t at = reinterpret_cast<uint64_t>(map);
    if (lane == 0) asm volatile("prefetch.tensormap [%0];\n" ::"l"(at) : "memory");
  }
  const int flush = min(kFirstWait, total) - 1;
  constexpr uint32_t kXTx = V & kInX ? 0 : kPrepTile;  // x's bytes in a step's barrier
  Pos in = first;
  for (int s = 0; s < total; ++s, in.next<S, kRows>(sp)) {
    constexpr int kLagBy = V & kLag ? 1 : 0;
    // kPair: an even step waits for its own stage and its successor's; an odd one has waited.
    const bool waits = !(V & kPair) || s % 2 == 0;
    for (int r = s - S + kLagBy; waits && r <= s - S + kLagBy + (V & kPair ? 1 : 0); ++r) {
      if (r >= 0 && r + S - kLagBy < total) mbar_wait(&empty[r % S], uint32_t(r / S) & 1);
    }
    uint8_t* st = smem + in.slot * G::stage;
    uint64_t* bar = &full[in.slot];
    uint64_t* wbar = tx_bar(in.slot);
    const uint8_t* tile = prep + in.c * kPrepTile;
    const uint8_t* wc = w + in.c * kRowBytes;
    if constexpr (F == kTma) {
      // kBal: a short last tile (h rows, a multiple of 16) by h / 16 boxes of 16 rows.
      const int h =
          V & (kBal | kTail) ? min(kRows, (row_end + 15) / 16 * 16 - in.row0) : kRows;
      if (lane == 0) {
        mbar_arrive_expect_tx(wbar, h * kRowBytes + kXTx);
        if (h < kRows || (V & kBox16)) {
          for (int j = 0; j < h / 16; ++j)
            tensor_copy_2d(st + G::w + j * 16 * kRowBytes, map16, in.c * kRowBytes,
                           in.row0 + 16 * j, wbar);
        } else if constexpr (V & kEvict) {
          tensor_copy_2d(st + G::w, map, in.c * kRowBytes, in.row0, wbar, policy);
        } else {
          tensor_copy_2d(st + G::w, map, in.c * kRowBytes, in.row0, wbar);
        }
        if (!(V & kInX) && (!(V & kPdl) || s > flush)) copy_x(st + G::x, st + G::xs, tile, wbar);
      }
    } else if constexpr (F == kBulk) {
      if (lane == 0) mbar_arrive_expect_tx(bar, kRows * kRowBytes + kXBytes + kGroups * 16 * 4);
      __syncwarp();
#pragma unroll
      for (int q = 0; q < kRows / 32; ++q) {
        const int r = lane + 32 * q;
        bulk_copy(st + G::w + r * kStride, wc + int64_t(min(in.row0 + r, n - 1)) * (k / 2),
                  kRowBytes, bar);
      }
      if (NT == 2 && lane == 0) bulk_copy(st + G::x, tile, kPrepX, bar);
      if (NT == 1 && lane < kSteps)
        bulk_copy(st + G::x + lane * kXStep, tile + lane * kXStep, kXStep / 2, bar);
      if (lane == 31) bulk_copy(st + G::xs, tile + kPrepX, kGroups * 16 * 4, bar);
    } else {
#pragma unroll
      for (int q = 0; q < kRows / 4; ++q) {
        const int i = lane + 32 * q, r = i / 8, seg = i % 8;
        cp_async<16>(st + G::w + r * kStride + seg * 16,
                     wc + int64_t(min(in.row0 + r, n - 1)) * (k / 2) + seg * 16);
      }
#pragma unroll
      for (int q = 0; q < kXBytes / 16 / 32; ++q) {
        const int i = lane + 32 * q;
        const int off = NT == 2 ? i * 16 : (i / 16) * kXStep + (i % 16) * 16;
        cp_async<16>(st + G::x + off, tile + off);
      }
      if (lane < 16) cp_async<16>(st + G::xs + lane * 16, tile + kPrepX + lane * 16);
    }
#pragma unroll
    for (int q = 0; q < kRows / 32; ++q) {
      const int r = lane + 32 * q;
      const int64_t at = int64_t(min(in.row0 + r, n - 1)) * (k / kGs) + in.c * kGroups;
      cp_async<8>(st + G::s + r * kGroups * 2, scales + at);
      cp_async<8>(st + G::b + r * kGroups * 2, biases + at);
    }
    cp_async_arrive_noinc(bar);
    // kPdl: the steps' x up to `flush` once the preparation launch has finished (their full
    // barriers expect x's bytes already, so none completes before its x lands).
    if constexpr (V & kPdl) {
      if (lane == 0 && s == flush) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        Pos p = first;
        for (int j = 0; j <= s; ++j, p.next<S, kRows>(sp)) {
          uint8_t* sj = smem + p.slot * G::stage;
          copy_x(sj + G::x, sj + G::xs, prep + p.c * kPrepTile, tx_bar(p.slot));
        }
      }
    }
  }
  // Leave once the warpgroups have released the last S steps: every copy has landed and been
  // read before the producer's thread exits.
  for (int s = max(total - S, 0); s < total; ++s) mbar_wait(&empty[s % S], uint32_t(s / S) & 1);
}

// A consumer warp's rows of a stage it is done with, overwritten (kPoison): weights 0xff,
// scales and biases 0xffff (NaN in bf16 and f16), by generic stores that the producer's next copies
// follow (the release's fence and arrive come after).
template <class G>
__device__ __forceinline__ void poison_rows(uint8_t* st, int rbase, int lane) {
  for (int i = lane; i < 16 * kRowBytes / 16; i += 32) {
    *reinterpret_cast<uint4*>(st + G::w + (rbase + i / 8) * G::wstride + (i % 8) * 16) =
        make_uint4(~0u, ~0u, ~0u, ~0u);
  }
  if (lane < 16) {
    *reinterpret_cast<uint2*>(st + G::s + (rbase + lane) * kGroups * 2) = make_uint2(~0u, ~0u);
    *reinterpret_cast<uint2*>(st + G::b + (rbase + lane) * kGroups * 2) = make_uint2(~0u, ~0u);
  }
}

// The warp-specialized kernel (F = kBulk, kCopy or kTma, with the weights' tensor map `map`;
// x prepared, as XP; V: the variant bits above): warps 0 .. 4 WGS - 1
// are the warpgroups of qmv_wg_kernel, each step waiting for its stage's full barrier instead
// of a block barrier and releasing it once its wgmma are done; warp 4 WGS is the producer. The
// same operations per output as qmv_wg_kernel's.
template <class T, int WGS, int S, int NT, int D, Feed F, int V>
__global__ void __launch_bounds__(Geo<WGS, S, F>::threads, Geo<WGS, S, F>::blocks)
    qmv_wg_ws_kernel(const T* x, const uint8_t* w, const T* scales, const T* biases, T* out,
                     int tokens, int n, int k, const uint8_t* prep, float* red,
                     const __grid_constant__ CUtensorMap map,
                     const __grid_constant__ CUtensorMap map16) {
  using namespace cu::qmv_invariant_detail;
  using G = Geo<WGS, S, F>;
  static_assert(!(V & kSplit) || F == kTma, "kSplit splits the tensor copy's barrier");
  static_assert(!(V & kPdl) || F == kTma, "kPdl defers the tensor feed's x copies");
  static_assert(!(V & kPdl) || !(V & kLag), "kLag waits for step 0 before kPdl copies its x");
  static_assert(!(V & (kBal | kInX | kTail | kBox16)) || F == kTma,
                "kBal, kInX, kTail and kBox16 vary the tensor feed");
  static_assert(!(V & kBal) || !(V & kTail), "kBal and kTail split rows each their own way");
  static_assert(!(V & kInX) || !(V & (kPdl | kPoison)), "kInX has no preparation to overlap");
  static_assert(!(V & kStripe) || (F == kTma && !(V & (kBal | kTail | kInX | kWgRelease | kS2))),
                "kStripe walks the tensor feed's tiles its own way");
  static_assert(!(V & kStripeSm) || (V & kStripe), "kStripeSm sizes kStripe's grid");
  constexpr int kRows = G::rows, kStage = G::stage;
  extern __shared__ __align__(1024) uint8_t smem_ws[];
  uint8_t* smem = smem_ws;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + G::bars);
  uint64_t* empty = full + S;
  uint64_t* fullw = empty + S;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const Work<T> wk(out, red, tokens, n, k, kRows,
                   V & kBal ? 1 : V & kTail ? 2 : V & kStripe ? 3 : 0);
  const Span& sp = wk.sp;
  const Dst<T>& dst = wk.dst;
  const int total = wk.total;
  const uint32_t smem0 = smem_addr(smem);

  // Every stage's x zeroed once (M <= 8 copies the first 8 vectors' half only; kInX: and xs,
  // whose dead vectors no warp writes), the barriers set up, before any copy.
  for (int i = t; i < S * kStage / 16; i += G::threads) {
    const int off = (i * 16) % kStage;
    if (off < G::w || ((V & kInX) && off >= G::xs && off < G::xs + kGroups * 16 * 4))
      reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  }
  if (t == 0) {
    for (int i = 0; i < S; ++i) {
      mbar_init(&full[i], F == kCopy || (V & kSplit) ? 32 : 33);
      mbar_init(&empty[i], V & kWgRelease ? WGS : 4 * WGS);
      mbar_init(&fullw[i], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (warp == 4 * WGS) {
    // The swizzle's pattern is that of 1024-byte aligned addresses.
    if (G::swz && smem0 % 1024) __trap();
    produce<T, G, S, NT, F, V>(smem, full, fullw, empty, w, &map, scales, biases,
                         prep + int64_t(blockIdx.y) * sp.chunks * kPrepTile, n, k, sp, total,
                         lane, Pos::first(wk, kRows, V & kStripe), dst.row_end, &map16);
    return;
  }
  const int gid = lane / 4, tig = lane % 4;
  const int rbase = (warp / 4) * 64 + (warp % 4) * 16;
  Pos at = Pos::first(wk, kRows, V & kStripe);
  // kStripe: the sums follow the visit's span (at.vs, moved by at.next).
  Sums<T, NT> sums(V & kStripe ? at.vs : sp, dst, rbase, gid, tig);
  sums.rows_per_tile = kRows, sums.consumers = WGS * 128;
  float acc[D][8] = {};
  // kInX: x of a step by warp (g, nb) = (warp / 2, warp % 2) of the first 8 where any of
  // vectors 8 nb .. 8 nb + 7 is live, loaded one step ahead (`xr`), staged once the step's
  // stage is full (its last readers have released it), fenced for wgmma; then all consumer
  // warps meet (named barrier 7) before any reads it.
  const int xg = warp / 2, xnb = warp % 2;
  const bool x_warp = (V & kInX) && warp < 8 && xnb * 8 < dst.n_tok;
  const bool x_live = xnb * 8 + gid < dst.n_tok;
  const T* x_at =
      x + int64_t(dst.tok0 + min(xnb * 8 + gid, dst.n_tok - 1)) * k + xg * kGs + tig * 16;
  uint4 xr[2];
  auto load_x = [&](int c) {
    if (!x_warp) return;
    const uint4* src = reinterpret_cast<const uint4*>(x_at + c * kChunk);
    xr[0] = x_live ? src[0] : make_uint4(0, 0, 0, 0);
    xr[1] = x_live ? src[1] : make_uint4(0, 0, 0, 0);
  };
  if constexpr (V & kInX) load_x(at.c);
  // Unrolled S times: every stage's address (and so every wgmma descriptor) is a constant.
  for (int s0 = 0; s0 < total; s0 += S) {
#pragma unroll
    for (int u = 0; u < S; ++u) {
      if (s0 + u >= total) break;
      mbar_wait(&full[u], uint32_t(s0 / S) & 1);
      if constexpr (V & kSplit) mbar_wait(&fullw[u], uint32_t(s0 / S) & 1);
      // kCopy: x landed by cp.async (the generic proxy) and wgmma reads it (the async proxy).
      if constexpr (F == kCopy) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      if constexpr (V & kInX) {
        uint8_t* st = smem + u * kStage;
        if (x_warp) {
          stage_group<T>(xr, xg, xnb, gid, tig, st + G::x, reinterpret_cast<float*>(st + G::xs));
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        asm volatile("bar.sync 7, %0;\n" ::"n"(WGS * 128) : "memory");
        Pos nx = at;
        nx.next<S, kRows>(sp);
        if (s0 + u + 1 < total) load_x(nx.c);
      }
      sums.end_through(at.c, at.row0);
      // kBal: a warpgroup with no row of a short tile skips its math (its warps all do).
      const bool idle = (V & (kBal | kTail)) && (warp / 4) * 64 >= dst.row_end - at.row0;
      if (!idle)
        compute_chunk<T, G, NT, D>(smem + u * kStage, smem0 + u * kStage, rbase, gid, tig,
                                   sums.part, acc);
      if constexpr (V & kPoison) poison_rows<G>(smem + u * kStage, rbase, lane);
      // kBulk, kTma: the copy engine (the async proxy) writes the stage next, after this warp's
      // generic reads of it.
      if constexpr (F != kCopy && !(V & kNoFence))
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      if constexpr (V & kWgRelease) {
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + warp / 4) : "memory");
        if (t % 128 == 0) mbar_arrive(&empty[u]);
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[u]);
      }
      const bool ends = at.c == at.span(sp).c1 - 1;
      if (ends) sums.store(at.row0);
      at.next<S, kRows>(sp);
      if ((V & kStripe) && ends) sums.set_next(at.vs.p0);
    }
  }
}

// Whether the prototype takes these arrays: K a multiple of its chunk, the weights and x
// 16-byte aligned, the scales and biases 8-byte aligned.
inline bool fits(const void* x, const void* w, const void* s, const void* b, int k) {
  auto al = [](const void* p, int a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  return k % kChunk == 0 && al(x, 16) && al(w, 16) && al(s, 8) && al(b, 8);
}

// Bytes of the XP path's prepared x for `tokens` vectors and K.
inline size_t prep_bytes(int tokens, int k) {
  return size_t((tokens + 15) / 16) * (k / kChunk) * kPrepTile;
}

// Bytes of the partials with splits: every part's, fp32.
inline size_t red_bytes(int tokens, int n) { return size_t(kParts) * tokens * n * 4; }

// How many splits the launcher's K parts take across blocks: the most (1, 2, 4 or 8) that
// still leaves every block that fits at once (`slots`) at most one tile and part span, and
// none where K has fewer chunks than parts. A function of (N, K, SM count) only; it changes no
// bit (Sums).
inline int splits_for(int tiles, int chunks, int slots) {
  int s = 1;
  while (s < kParts && chunks >= kParts && tiles * s * 2 <= slots) s *= 2;
  return s;
}

// kStripe's hand-over: a flag per (16-vector block, tile), kFlags of them first, then the
// running totals (tokens x n fp32). The flags start at zero (set when the buffer is made) and
// every launch leaves them so (each tile's last block resets its flag).
inline float* stripe_buffer(int tokens, int n, int tiles) {
  static float* p = nullptr;
  static size_t size = 0;
  if (size_t((tokens + 15) / 16) * tiles > size_t(kFlags)) {
    fprintf(stderr, "qmv_wgmma: %d tiles of %d vectors take more flags than kStripe has\n",
            tiles, tokens);
    exit(2);
  }
  const size_t bytes = (size_t(kFlags) + size_t(tokens) * n) * 4;
  if (bytes > size) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMemset(p, 0, size_t(kFlags) * 4));
    size = bytes;
  }
  return p;
}

// The weights as a 2D tensor of bytes (N rows of K / 2) for kTma's copies: boxes of 128 bytes
// x `rows`, 128-byte swizzled; the last map encoded is kept for the same arguments.
inline const CUtensorMap& weight_map(const uint8_t* w, int n, int k, int rows) {
  using Encode = decltype(&cuTensorMapEncodeTiled);  // from the driver, not linked
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                           cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) {
      fprintf(stderr, "qmv_wgmma: the driver has no cuTensorMapEncodeTiled\n");
      exit(2);
    }
    return reinterpret_cast<Encode>(fn);
  }();
  // One kept per box height (kBal copies short tiles by 16-row boxes).
  static CUtensorMap maps[2];
  static std::tuple<const uint8_t*, int, int, int> keys[2]{};
  CUtensorMap& map = maps[rows == 16];
  auto& key = keys[rows == 16];
  if (key == std::tuple{w, n, k, rows}) return map;
  cuuint64_t dims[2] = {cuuint64_t(k / 2), cuuint64_t(n)};
  cuuint64_t strides[1] = {cuuint64_t(k / 2)};
  cuuint32_t box[2] = {cuuint32_t(kRowBytes), cuuint32_t(rows)};
  cuuint32_t elem[2] = {1, 1};
  CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(w), dims,
                      strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "qmv_wgmma: cuTensorMapEncodeTiled failed (%d)\n", int(r));
    exit(2);
  }
  key = {w, n, k, rows};
  return map;
}

// The prototype on x (tokens vectors) and one weight matrix; `scratch`: prep_bytes (XP) then
// red_bytes, 256-byte aligned.
template <int WGS = 2, int S = 3, int D = 1, bool XP = false, Feed F = kStaged, int V = 0,
          class T>
void run(const T* x, const uint8_t* w, const T* scales, const T* biases, T* out, int tokens,
         int n, int k, int sms, uint8_t* scratch) {
  static_assert(F == kStaged || XP, "a producer warp copies x prepared");
  if constexpr ((V & kStripe) != 0) {
    // Parts of no chunk would have blocks hand over empty parts: the strided walk there.
    if (k / kChunk < kParts) {
      run<WGS, S, D, XP, F, V & ~(kStripe | kStripeSm)>(x, w, scales, biases, out, tokens, n, k,
                                                         sms, scratch);
      return;
    }
  }
  using G = Geo<WGS, S, F>;
  if (!fits(x, w, scales, biases, k)) {
    fprintf(stderr, "qmv_wgmma: K = %d or an array's alignment is not the prototype's\n", k);
    exit(2);
  }
  uint8_t* prep = scratch;
  float* red = reinterpret_cast<float*>(scratch + (XP ? (prep_bytes(tokens, k) + 255) / 256 * 256 : 0));
  if constexpr (XP && !(V & kInX)) {
    void* pargs[] = {&x, &prep, &tokens, &k};
    launch(reinterpret_cast<void*>(&qmv_wg_prep_kernel<T>), dim3(k / kChunk, (tokens + 15) / 16),
           dim3(256), pargs);
  }
  const int tiles = (n + G::rows - 1) / G::rows, slots = G::blocks * sms;
  int splits = splits_for(tiles, k / kChunk, slots);
  if ((V & kS2) && splits == 1 && k / kChunk >= kParts) splits = 2;
  // The split partials, which the reduction launch below adds up; none without splits.
  float* partials = splits > 1 && !(V & kStripe) ? red : nullptr;
  red = partials;
  // kBal: as many blocks as fit at once, each with rows of its own (at least 16).
  const int across = V & kBal ? (n + 15) / 16 : tiles;
  dim3 grid(std::min(across, std::max(1, slots / splits)), (tokens + 15) / 16, splits);
  if constexpr ((V & kStripe) != 0) {
    // As many blocks as fit at once (kStripeSm: one an SM), each a stripe; the kernel's `red`
    // is the hand-over buffer, and the kernel stores the outputs.
    grid = dim3(std::min(tiles * kParts, V & kStripeSm ? sms : slots), (tokens + 15) / 16, 1);
    red = stripe_buffer(tokens, n, tiles);
  }
  CUtensorMap map{}, map16{};
  if constexpr (F == kTma) map = weight_map(w, n, k, G::rows);
  if constexpr (F == kTma && (V & (kBal | kTail | kBox16))) map16 = weight_map(w, n, k, 16);
  void* args[] = {&x, &w, &scales, &biases, &out, &tokens, &n, &k, &prep, &red, &map, &map16};
  void* kern;
  if constexpr (F == kStaged) {
    kern = tokens > 8 ? reinterpret_cast<void*>(&qmv_wg_kernel<T, WGS, S, 2, D, XP>)
                      : reinterpret_cast<void*>(&qmv_wg_kernel<T, WGS, S, 1, D, XP>);
  } else {
    kern = tokens > 8 ? reinterpret_cast<void*>(&qmv_wg_ws_kernel<T, WGS, S, 2, D, F, V>)
                      : reinterpret_cast<void*>(&qmv_wg_ws_kernel<T, WGS, S, 1, D, F, V>);
  }
  if constexpr (F != kStaged && (V & kPdl)) {
    launch_smem_pdl(kern, grid, dim3(G::threads), args, G::smem);
  } else {
    launch_smem(kern, grid, dim3(G::threads), args, G::smem);
  }
  if (partials) {
    void* rargs[] = {&partials, &out, &tokens, &n};
    launch(reinterpret_cast<void*>(&qmv_wg_reduce_kernel<T>),
           dim3(unsigned((int64_t(tokens) * n + 255) / 256)), dim3(256), rargs);
  }
}

} // namespace wg

namespace wg_run {

// The checks and rounds run on bf16 (the benchmark's type) and, for `check`, f16 too.
using BF16 = cutlass::bfloat16_t;
using F16 = cutlass::half_t;
template <class T>
using B = Buffers<T, 4, 64>;
template <class T>
constexpr const char* kDtype = std::is_same_v<T, F16> ? "float16" : "bfloat16";

template <class T, int WGS = 2, int S = 3, int D = 1, bool XP = false,
          wg::Feed F = wg::kStaged, int V = 0>
void run_wg_as(const B<T>& b, Problem p, int c, const T* x, T* out, int sms) {
  const size_t bytes = (wg::prep_bytes(p.m, p.k) + 255) / 256 * 256 + wg::red_bytes(p.m, p.n);
  wg::run<WGS, S, D, XP, F, V>(x, b.w + b.w_bytes * c, b.scales + b.sb_elems * c,
                            b.biases + b.sb_elems * c, out, p.m, p.n, p.k, sms,
                            static_cast<uint8_t*>(scratch(bytes)));
}

template <class T>
void run_wg(const B<T>& b, Problem p, int c, const T* x, T* out, int sms) {
  run_wg_as<T>(b, p, c, x, out, sms);
}


// Where a comparison's differing outputs lie (outputs vector-major: i = vector * n + row): how
// many per vector, how many 8-row units (rows / 8) hold one, how many per unit of a 256-row
// span (row % 256 / 8: which rows of a block's tile), how many are NaN, the largest relative
// difference of the others (a rounding slip or another value altogether), and the first three
// as [vector, row, wanted bits, got bits].
template <class T>
std::string where_differ(int n, const std::vector<uint16_t>& want,
                         const std::vector<uint16_t>& got) {
  std::vector<long> per_vec(want.size() / n), per_unit(32);
  std::set<long> units;
  long nan = 0;
  double max_rel = 0;
  std::string first;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == got[i]) continue;
    const long row = long(i % n), vec = long(i / n);
    ++per_vec[vec], ++per_unit[row % 256 / 8], units.insert(row / 8);
    const double g = to_double<T>(got[i]), w = to_double<T>(want[i]);
    if (std::isnan(g)) {
      ++nan;
    } else {
      max_rel = std::max(max_rel, std::abs(g - w) / std::max(std::abs(w), 1e-3));
    }
    if (std::count(first.begin(), first.end(), '[') < 3)
      first += (first.empty() ? "" : ",") + std::string("[") + std::to_string(vec) + "," +
               std::to_string(row) + "," + std::to_string(want[i]) + "," +
               std::to_string(got[i]) + "]";
  }
  auto list = [](const std::vector<long>& v) {
    std::string o;
    for (long x : v) o += (o.empty() ? "" : ",") + std::to_string(x);
    return "[" + o + "]";
  };
  return "\"per_vector\":" + list(per_vec) + ",\"row_units\":" + std::to_string(units.size()) +
         ",\"per_unit_of_256\":" + list(per_unit) + ",\"nan\":" + std::to_string(nan) +
         ",\"max_rel\":" + std::to_string(std::isfinite(max_rel) ? max_rel : -1.0) +
         ",\"first\":[" + first + "]";
}

template <class T>
struct Tally {
  long checked = 0, differ = 0;
  void add(const char* what, int m, int n, int k, const std::vector<uint16_t>& want,
           const std::vector<uint16_t>& got) {
    long d = 0;
    for (size_t i = 0; i < want.size(); ++i) d += want[i] != got[i];
    checked += long(want.size());
    differ += d;
    if (d)
      printf("{\"kind\":\"wg_parity_fail\",\"dtype\":\"%s\",\"what\":\"%s\",\"m\":%d,"
             "\"n\":%d,\"k\":%d,\"differ\":%ld,%s}\n",
             kDtype<T>, what, m, n, k, d, where_differ<T>(n, want, got).c_str());
  }
};

// y[v, row] in double (the same as invariant.cu's reference, 4-bit gs 64).
template <class T>
__global__ void ref_f64(const T* x, const uint8_t* w, const T* s, const T* bias, double* y,
                        int n, int k) {
  int row = blockIdx.x * blockDim.x + threadIdx.x, v = blockIdx.y;
  if (row >= n) return;
  double acc = 0;
  for (int i = 0; i < k; ++i) {
    int q = (w[(int64_t(row) * k + i) / 2] >> (4 * (i % 2))) & 15;
    double sc = float(s[int64_t(row) * (k / 64) + i / 64]);
    double bb = float(bias[int64_t(row) * (k / 64) + i / 64]);
    acc += double(float(x[int64_t(v) * k + i])) * (sc * q + bb);
  }
  y[int64_t(v) * n + row] = acc;
}

// The prototype's arms by name: block shapes (warpgroups, stages), groups in flight, prepared x,
// feeds and their variants. Every arm is checked against wg2_s3's M = 1: none moves an
// operation of an output.
template <class T>
using Run = void (*)(const B<T>&, Problem, int, const T*, T*, int);
template <class T>
using Arms = std::vector<std::pair<const char*, Run<T>>>;
template <class T>
Arms<T> all_arms() {
  using namespace wg;
  return {{"wg2_s3", &run_wg_as<T, 2, 3>},
          {"wg2_s4", &run_wg_as<T, 2, 4>},
          {"wg4_s4", &run_wg_as<T, 4, 4>},
          {"wg4_s3", &run_wg_as<T, 4, 3>},
          {"wg2_s3_d2", &run_wg_as<T, 2, 3, 2>},
          {"wg2_s3_xp", &run_wg_as<T, 2, 3, 1, true>},
          {"wg4_s4_xp", &run_wg_as<T, 4, 4, 1, true>},
          {"wg2_s3_ws", &run_wg_as<T, 2, 3, 1, true, kBulk>},
          {"wg2_s3_wsc", &run_wg_as<T, 2, 3, 1, true, kCopy>},
          {"wg4_s4_ws", &run_wg_as<T, 4, 4, 1, true, kBulk>},
          {"wg2_s3_tma", &run_wg_as<T, 2, 3, 1, true, kTma>},
          {"wg4_s4_tma", &run_wg_as<T, 4, 4, 1, true, kTma>},
          {"wg2_s4_tma", &run_wg_as<T, 2, 4, 1, true, kTma>},
          {"wg2_s4_tma_lag", &run_wg_as<T, 2, 4, 1, true, kTma, kLag>},
          {"wg2_s3_tma_split", &run_wg_as<T, 2, 3, 1, true, kTma, kSplit>},
          {"wg2_s3_tma_poison", &run_wg_as<T, 2, 3, 1, true, kTma, kPoison>},
          {"wg2_s3_wsc_poison", &run_wg_as<T, 2, 3, 1, true, kCopy, kPoison>},
          {"wg2_s3_tma_wgrel", &run_wg_as<T, 2, 3, 1, true, kTma, kWgRelease>},
          {"wg2_s3_tma_pdl", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl>},
          {"wg2_s3_tma_nofence", &run_wg_as<T, 2, 3, 1, true, kTma, kNoFence>},
          {"wg4_s4_tma_nofence", &run_wg_as<T, 4, 4, 1, true, kTma, kNoFence>},
          {"wg2_s4_tma_pair", &run_wg_as<T, 2, 4, 1, true, kTma, kPair>},
          {"wg2_s3_tma_pair", &run_wg_as<T, 2, 3, 1, true, kTma, kPair>},
          {"wg4_s4_tma_pair", &run_wg_as<T, 4, 4, 1, true, kTma, kPair>},
          {"wg2_s3_tma_pair_pdl", &run_wg_as<T, 2, 3, 1, true, kTma, kPair | kPdl>},
          {"wg2_s3_tma_pdl_evict", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kEvict>},
          {"wg2_s3_tma_pdl_pf", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kPrefetch>},
          {"wg2_s3_tma_pdl_evict_pf",
           &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kEvict | kPrefetch>},
          {"wg2_s3_tma_bal", &run_wg_as<T, 2, 3, 1, true, kTma, kBal>},
          {"wg2_s3_tma_pdl_bal", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kBal>},
          {"wg2_s3_tma_inx", &run_wg_as<T, 2, 3, 1, true, kTma, kInX>},
          {"wg2_s3_tma_bal_inx", &run_wg_as<T, 2, 3, 1, true, kTma, kBal | kInX>},
          {"wg2_s4_tma_bal_inx", &run_wg_as<T, 2, 4, 1, true, kTma, kBal | kInX>},
          {"wg2_s3_tma_tail", &run_wg_as<T, 2, 3, 1, true, kTma, kTail>},
          {"wg2_s3_tma_pdl_tail", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kTail>},
          {"wg2_s3_tma_box16", &run_wg_as<T, 2, 3, 1, true, kTma, kBox16>},
          {"wg2_s4_tma_pdl", &run_wg_as<T, 2, 4, 1, true, kTma, kPdl>},
          {"wg2_s3_tma_pdl_s2", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kS2>},
          {"wg2_s3_tma_pdl_bal_s2", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kBal | kS2>},
          {"wg2_s3_tma_pdl_stripe", &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kStripe>},
          {"wg2_s3_tma_pdl_stripe1",
           &run_wg_as<T, 2, 3, 1, true, kTma, kPdl | kStripe | kStripeSm>},
          {"wg2_s4_tma_pdl_stripe1",
           &run_wg_as<T, 2, 4, 1, true, kTma, kPdl | kStripe | kStripeSm>}};
}

// The arms named (all when none is): an unknown name is an error.
template <class T>
Arms<T> pick_arms(int argc, char** argv, int first) {
  const Arms<T> all = all_arms<T>();
  Arms<T> out;
  for (int i = first; i < argc; ++i) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const auto& a) { return std::string(a.first) == argv[i]; });
    if (it == all.end()) {
      fprintf(stderr, "qmv_wgmma: no arm %s (qmv_wgmma arms lists them)\n", argv[i]);
      exit(2);
    }
    out.push_back(*it);
  }
  return out.empty() ? all : out;
}

template <class T>
void check_shape(int n, int k, const Arms<T>& arms, Tally<T>& tally, long& launcher_differ) {
  constexpr int M = 16;
  B<T> b({M, n, k, 1}, 1, 99 + n + k);
  int sms = sm_count();
  size_t all = size_t(M) * n;
  T *ref, *out, *rep;
  CHECK(cudaMalloc(&ref, all * 2));
  CHECK(cudaMalloc(&out, all * 2));
  CHECK(cudaMalloc(&rep, size_t(M) * k * 2));
  for (int v = 0; v < M; ++v)
    run_wg<T>(b, {1, n, k, 1}, 0, b.x + size_t(v) * k, ref + size_t(v) * n, sms);
  auto h_ref = fetch(ref, all);
  // Every block shape against the same references: how many warpgroups share a chunk of x and
  // how deep the ring is move no operation of an output.
  char what[64];
  for (auto [name, run] : arms) {
    for (int m = 1; m <= M; ++m) {
      for (int s : {sms, 1}) {
        CHECK(cudaMemset(out, 0xfe, all * 2));
        run(b, {m, n, k, 1}, 0, b.x, out, s);
        std::vector<uint16_t> want(h_ref.begin(), h_ref.begin() + size_t(m) * n);
        snprintf(what, sizeof what, "%s_%s", name, s == 1 ? "m_one_sm" : "m");
        tally.add(what, m, n, k, want, fetch(out, size_t(m) * n));
      }
    }
    // One vector in every column: each column its M = 1.
    for (int v = 0; v < M; ++v)
      CHECK(cudaMemcpy(rep + size_t(v) * k, b.x + size_t(5) * k, k * 2, cudaMemcpyDeviceToDevice));
    run(b, {M, n, k, 1}, 0, rep, out, sms);
    std::vector<uint16_t> want;
    for (int v = 0; v < M; ++v)
      want.insert(want.end(), h_ref.begin() + size_t(5) * n, h_ref.begin() + size_t(6) * n);
    snprintf(what, sizeof what, "%s_one_vector_all_columns", name);
    tally.add(what, M, n, k, want, fetch(out, all));
  }
  // Accuracy against float64, beside the launcher's, and how many outputs differ from the
  // launcher's (the same operations per output but for the instruction that sums a group).
  double* y;
  CHECK(cudaMalloc(&y, all * sizeof(double)));
  ref_f64<T><<<dim3((n + 127) / 128, M), 128>>>(b.x, b.w, b.scales, b.biases, y, n, k);
  std::vector<double> hy(all);
  CHECK(cudaMemcpy(hy.data(), y, all * sizeof(double), cudaMemcpyDeviceToHost));
  run_invariant(b, {M, n, k, 1}, 0, b.x, out, true, sms);
  auto h_inv = fetch(out, all);
  double wmax = 0, wsum = 0, imax = 0, isum = 0;
  long d = 0;
  for (size_t i = 0; i < all; ++i) {
    const double ew = std::abs(to_double<T>(h_ref[i]) - hy[i]);
    const double ei = std::abs(to_double<T>(h_inv[i]) - hy[i]);
    wmax = std::max(wmax, ew), wsum += ew, imax = std::max(imax, ei), isum += ei;
    d += h_ref[i] != h_inv[i];
  }
  launcher_differ += d;
  printf("{\"kind\":\"wg_accuracy\",\"dtype\":\"%s\",\"n\":%d,\"k\":%d,\"outputs\":%zu,"
         "\"wg_max\":%.6g,\"wg_mean\":%.6g,\"launcher_max\":%.6g,\"launcher_mean\":%.6g,"
         "\"differ_from_launcher\":%ld}\n",
         kDtype<T>, n, k, all, wmax, wsum / all, imax, isum / all, d);
  fflush(stdout);
  cudaFree(ref), cudaFree(out), cudaFree(rep), cudaFree(y);
}

// The negative control: the same sums with their groups folded in another order (groups 2i and
// 2i + 1 swapped in x, the weights, the scales and the biases: the same products, another
// order) must change some output bits, or the comparisons above could not see an order change.
template <class T>
long negative_control() {
  const Problem p{16, 4096, 4096, 1};
  return reordered_fold_control<T, 4, 64>(
      "wg_negative_control", p, [&](const B<T>& b) { run_wg<T>(b, p, 0, b.x, b.out, sm_count()); });
}

// Every check of the arms named on one type: one wg_parity line; whether all passed.
template <class T>
bool check_all(int argc, char** argv) {
  auto arms = pick_arms<T>(argc, argv, 2);
  Tally<T> tally;
  long launcher_differ = 0;
  for (auto [n, k] : {std::pair{453, 2048}, std::pair{1000, 256}, std::pair{4096, 4096},
                      std::pair{28672, 4096}, std::pair{2000, 3584}})
    check_shape<T>(n, k, arms, tally, launcher_differ);
  long control = negative_control<T>();
  CHECK(cudaGetLastError());
  std::string names;
  for (auto [name, run] : arms) names += std::string(names.empty() ? "" : " ") + name;
  printf("{\"kind\":\"wg_parity\",\"dtype\":\"%s\",\"arms\":\"%s\",\"checked\":%ld,"
         "\"differ\":%ld,\"negative_control_differ\":%ld,\"differ_from_launcher\":%ld}\n",
         kDtype<T>, names.c_str(), tally.checked, tally.differ, control, launcher_differ);
  fflush(stdout);
  return tally.differ == 0 && control > 0;
}

void ab_shape(int n, int k, int rounds, const Arms<BF16>& picked) {
  using T = BF16;
  constexpr int gs = 64;
  auto [w_bytes, copies] = footprint<T>(n, k, 4, gs);
  B<T> b({16, n, k, 1}, copies, 5 + n + k);
  int sms = sm_count();
  for (int m : {1, 8, 9, 16}) {
    Problem p{m, n, k, 1};
    std::vector<std::pair<const char*, std::function<void(int)>>> arms = {
        {"invariant", [&](int c) { run_invariant(b, p, c, b.x, b.out, true, sms); }}};
    for (auto [name, run] : picked)
      arms.push_back({name, [&, run](int c) { run(b, p, c, b.x, b.out, sms); }});
    ab_rounds<T>(4, gs, n, k, m, arms, rounds, copies, w_bytes);
    fflush(stdout);
  }
}

} // namespace wg_run

using namespace wg_run;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "arms") {
    for (auto [name, run] : all_arms<BF16>()) printf("%s\n", name);
    return 0;
  }
  if (mode == "check") {
    // bf16 first (the benchmark's type), then f16: one wg_parity line each.
    const bool bf16 = check_all<BF16>(argc, argv);
    const bool f16 = check_all<F16>(argc, argv);
    return bf16 && f16 ? 0 : 1;
  }
  if (mode == "ab") {
    char* end = nullptr;
    long rounds = argc > 2 ? strtol(argv[2], &end, 10) : 5;
    if (argc > 2 && (*argv[2] == '\0' || *end != '\0' || rounds < 1 || rounds > 1000)) {
      fprintf(stderr, "qmv_wgmma ab: %s is not a count of rounds (1 to 1000)\n", argv[2]);
      return 2;
    }
    auto arms = pick_arms<BF16>(argc, argv, 3);
    for (auto [n, k] : {std::pair{28672, 4096}, std::pair{128256, 4096}, std::pair{152064, 3584},
                        std::pair{3584, 3584}, std::pair{3584, 18944}, std::pair{18944, 3584},
                        std::pair{6144, 4096}, std::pair{4096, 14336}})
      ab_shape(n, k, int(rounds), arms);
    return 0;
  }
  if (mode == "one") {
    // One launch of each, for Nsight Compute: the launcher and the named arms (all by default)
    // at M = 1 and 16 on the 128256 x 4096 head.
    auto arms = pick_arms<BF16>(argc, argv, 2);
    int n = 128256, k = 4096;
    B<BF16> b({16, n, k, 1}, 1, 7);
    for (int m : {1, 16}) {
      run_invariant(b, {m, n, k, 1}, 0, b.x, b.out, true, sm_count());
      for (auto [name, run] : arms) run(b, {m, n, k, 1}, 0, b.x, b.out, sm_count());
    }
    CHECK(cudaDeviceSynchronize());
    return 0;
  }
  fprintf(stderr, "usage: qmv_wgmma arms | check [arm...] | ab [rounds] [arm...] | one [arm...]\n");
  return 2;
}
