// A prototype beside overlay 0013's rows kernels (sdpa_rows.cu's `mma` arm): decode attention
// for every query row of a KV head at once on tensor cores, each row's bits independent of
// how many rows run with it, so decode (one row a head) and a verify block (16 rows a head) may
// share it. Not MLX's arithmetic: upstream's sdpa_vector sums a key's score over a warp; here
// mma.sync.m16n8k16 does (what decode would run too).
//
// Order argument. Rows are the A operand's rows (Q for the scores, P for the values): an mma's
// output element depends on its own A row and B column alone, so which other rows share the
// tile changes no bit. Keys come in blocks of kBk by absolute index (block b: keys
// [b kBk, (b + 1) kBk)), block b to split b % kSplits whatever the key count; a split walks its
// blocks in increasing order, each folded into its rows' online state (m, l, o): the block's
// row max (exact), p = exp2(s - m') with masked keys -inf (p = 0), the block's row sum in a
// fixed lane order, l = l f + sum, o = o f + P V. A block a row sees none of (past its causal
// bound, or past the call's keys, zero-filled) leaves that row's state as it was (f = 1, p = 0,
// o + 0): so a verify row, whose blocks past its bound are walked for other rows, ends each
// split with the state of decode's row, which stops at its own keys. The splits are combined
// per row and head dim in split order (sdpa_mma_combine).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace sdpa_mma {

constexpr int kBk = 64;        // keys a block
constexpr int kSplits = 32;    // splits (fixed: independent of the key and row counts)
constexpr int kWarps = 8;      // 16 rows a warp: 128 rows a CTA
constexpr int kPad = 8;        // elements of padding a smem row (ldmatrix without conflicts)

struct Params {
  int heads, kv_heads, q_len, k_len, dim;
  float scale;  // softmax scale (the kernel works in base 2)
  int64_t q_head, q_row;  // strides of Q and O (elements): head, row; batch 1
  int64_t k_head, k_row;  // of K and V
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <class T>
__device__ __forceinline__ uint32_t pack(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack<__half>(float a, float b) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}

// 16 bytes from global into shared, or zeros where `valid` is false.
__device__ __forceinline__ void cp16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Split blockIdx.y of KV head blockIdx.x, rows [blockIdx.z * 128, + 128) of the head's
// heads / kv_heads * q_len (row r: head kv * gqa + r / q_len, query row r % q_len): each row's
// (m, l, o) over the split's blocks into part_m, part_l [row][split] and part_o
// [row][split][D] (fp32; row = (kv * gqa) * q_len + r, the row's place in [heads][q_len]).
template <class T, bool causal, int D>
__global__ void __launch_bounds__(kWarps * 32)
    sdpa_mma_split(const T* Q, const T* K, const T* V, float* part_m, float* part_l,
                   float* part_o, Params p) {
  constexpr int kStride = D + kPad;
  __shared__ __align__(16) T ks[kBk * kStride];
  __shared__ __align__(16) T vs[kBk * kStride];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
  const int kv = blockIdx.x, split = blockIdx.y;
  const int gqa = p.heads / p.kv_heads, rows = gqa * p.q_len;
  const int row0 = blockIdx.z * kWarps * 16;
  const int wrow = row0 + warp * 16;  // this warp's first row

  // The CTA's keys: as far as its farthest-seeing row (the largest query row among its rows,
  // which run over heads: r % q_len) sees.
  const int last = min(row0 + kWarps * 16, rows) - 1;
  const int far = last - row0 + 1 >= p.q_len || row0 % p.q_len > last % p.q_len
      ? p.q_len - 1
      : last % p.q_len;
  const int key_end = causal ? p.k_len - p.q_len + far + 1 : p.k_len;

  // This lane's two rows (gid, gid + 8 of the warp's 16): head, query row, bound, live.
  int qrow[2], bound[2];
  bool live[2];
  const T* qp[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wrow + gid + 8 * h;
    live[h] = r < rows;
    const int rr = live[h] ? r : rows - 1;
    const int head = kv * gqa + rr / p.q_len;
    qrow[h] = rr % p.q_len;
    bound[h] = causal ? p.k_len - p.q_len + qrow[h] : p.k_len - 1;
    qp[h] = Q + head * p.q_head + qrow[h] * p.q_row;
  }
  // Q as A, k-steps of 16 over D: a0 (row gid, k 2 tig), a1 (row gid + 8), a2 (gid, k + 8), a3.
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int s = 0; s < D / 16; ++s) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(qp[h] + s * 16 + 2 * tig);
      qa[s][h] = live[h] ? src[0] : 0u;
      qa[s][2 + h] = live[h] ? src[4] : 0u;  // + 8 elements
    }
  }

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  const float scale_log2 = p.scale * 1.44269504089f;
  const T* kb = K + kv * p.k_head;
  const T* vb = V + kv * p.k_head;

  for (int b = split; b * kBk < key_end; b += kSplits) {
    // The block's keys and values into shared memory (zeros past the call's keys).
    __syncthreads();
    for (int c = threadIdx.x; c < kBk * (D / 8); c += kWarps * 32) {
      const int key = c / (D / 8), part = c % (D / 8), j = b * kBk + key;
      const bool ok = j < p.k_len;
      const int64_t off = int64_t(ok ? j : 0) * p.k_row + part * 8;
      cp16(ks + key * kStride + part * 8, kb + off, ok);
      cp16(vs + key * kStride + part * 8, vb + off, ok);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    if (wrow >= rows) continue;

    // Scores: 8 n-tiles of 8 keys; B from K's rows (key gid, d 2 tig and 8 + 2 tig).
    float s[kBk / 8][4];
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        uint32_t b0, b1;
        const int key = n * 8 + (lane % 8), half = (lane / 8) % 2;
        ldsm_x2(b0, b1, smem_u32(ks + key * kStride + k * 16 + half * 8));
        mma<T>(s[n], qa[k], b0, b1);
      }
    }
    // Scale, mask, the block's row max (each lane's 16, then its quad's: exact in any order).
    float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, j = b * kBk + n * 8 + 2 * tig + e % 2;
        const bool use = live[h] && j <= bound[h] && j < p.k_len;
        s[n][e] = use ? s[n][e] * scale_log2 : -INFINITY;
        bmax[h] = fmaxf(bmax[h], s[n][e]);
      }
    }
    float f[2], bsum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bmax[h] = fmaxf(bmax[h], __shfl_xor_sync(0xffffffffu, bmax[h], 1));
      bmax[h] = fmaxf(bmax[h], __shfl_xor_sync(0xffffffffu, bmax[h], 2));
      const float mn = fmaxf(m[h], bmax[h]);
      // No key of this block nor before it for this row: the state stays as it is.
      const bool none = mn == -INFINITY;
      f[h] = none ? 1.f : exp2f(m[h] - mn);
      m[h] = mn;
      bsum[h] = 0.f;
#pragma unroll
      for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * h + e];
          x = none ? 0.f : exp2f(x - mn);
          bsum[h] += x;
        }
      }
      bsum[h] += __shfl_xor_sync(0xffffffffu, bsum[h], 1);
      bsum[h] += __shfl_xor_sync(0xffffffffu, bsum[h], 2);
      l[h] = l[h] * f[h] + bsum[h];
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= f[0], o[n][1] *= f[0], o[n][2] *= f[1], o[n][3] *= f[1];
    }
    // o += P V: P (16 rows x 64 keys) as A in 4 k-steps, V as B (ldmatrix.trans of its rows).
#pragma unroll
    for (int k = 0; k < kBk / 16; ++k) {
      const uint32_t pa[4] = {pack<T>(s[2 * k][0], s[2 * k][1]), pack<T>(s[2 * k][2], s[2 * k][3]),
                              pack<T>(s[2 * k + 1][0], s[2 * k + 1][1]),
                              pack<T>(s[2 * k + 1][2], s[2 * k + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        uint32_t b0, b1;
        const int key = k * 16 + (lane % 16);
        ldsm_x2_t(b0, b1, smem_u32(vs + key * kStride + n * 8));
        mma<T>(o[n], pa, b0, b1);
      }
    }
  }
  if (wrow >= rows) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!live[h]) continue;
    const int r = wrow + gid + 8 * h;
    const int64_t at = (int64_t(kv * gqa) * p.q_len + r) * kSplits + split;
    if (tig == 0) part_m[at] = m[h], part_l[at] = l[h];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(part_o + at * D + n * 8 + 2 * tig) =
          make_float2(o[n][2 * h], o[n][2 * h + 1]);
    }
  }
}

// Row blockIdx.x of [heads][q_len], head dim threadIdx.x: the splits in split order.
template <class T, int D>
__global__ void sdpa_mma_combine(const float* part_m, const float* part_l, const float* part_o,
                                 T* O, Params p) {
  const int r = blockIdx.x, d = threadIdx.x;
  const int head = r / p.q_len, i = r % p.q_len;
  float mx = -INFINITY;
  for (int s = 0; s < kSplits; ++s) mx = fmaxf(mx, part_m[int64_t(r) * kSplits + s]);
  float l = 0.f, o = 0.f;
  for (int s = 0; s < kSplits; ++s) {
    const int64_t at = int64_t(r) * kSplits + s;
    const float f = part_m[at] == -INFINITY ? 0.f : exp2f(part_m[at] - mx);
    l += part_l[at] * f;
    o += part_o[at * D + d] * f;
  }
  O[head * p.q_head + i * p.q_row + d] = T(o / l);
}

}  // namespace sdpa_mma
