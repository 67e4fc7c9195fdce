// The batch-invariant tensor-core qmv (cu::qmv_invariant, overlay 0015) in the kernel harness.
// One translation unit per (dtype, bits) for parity and accuracy (HARNESS_INV_DTYPE_<dtype> and
// HARNESS_INV_BITS=<bits>); the benchmark and the negative control are main.cu's.
//
//   parity    every gs 32/64/128, K of 2..130 groups (fewer groups than warps too) for the
//             register kernel and of 1..37 chunks for the staged one, N odd and < 16 and 453,
//             M = 1..16 each against M = 1 per vector, batch 2 with its own weights, batch 3
//             broadcast, one vector in all 16 columns, the SM count forced to 1 (the row
//             tiles to their most, every block walking several tiles), and the staged kernel
//             with two and four row tiles per warp forced; every launcher case also through the
//             XP path (x paired and summed by a launch before the staged kernel), without and
//             with programmatic dependent launch, the TA path (copy addresses from one base per
//             tile) and both, against the same references (the same bits)
//   accuracy  the same outputs against a float64 reference (dequantized in double), beside
//             upstream's qmv on the same vectors: max and mean absolute error
#include "harness.cuh"

// y[v, row] in double: x and the dequantized weights (scale * q + bias) taken exactly.
template <typename T, typename Q, int gs>
__global__ void inv_reference_f64(const T* x, const Q* w, const T* scales, const T* biases,
                              double* y, int m, int n, int k) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  int v = blockIdx.y;
  if (row >= n) return;
  constexpr int bits = cute::sizeof_bits_v<Q>;
  const uint8_t* wr = reinterpret_cast<const uint8_t*>(w) + int64_t(row) * k * bits / 8;
  double acc = 0;
  for (int i = 0; i < k; i += 8) {
    alignas(16) uint8_t buf[16] = {};
    for (int j = 0; j < bits; ++j) buf[j] = wr[i / 8 * bits + j];
    cutlass::NumericArrayConverter<float, Q, 8> conv;
    auto q = conv(*reinterpret_cast<const cutlass::Array<Q, 8>*>(buf));
    double s = double(float(scales[int64_t(row) * (k / gs) + i / gs]));
    double bb = double(float(biases[int64_t(row) * (k / gs) + i / gs]));
    for (int j = 0; j < 8; ++j) {
      acc += double(float(x[int64_t(v) * k + i + j])) * (s * double(q[j]) + bb);
    }
  }
  y[int64_t(v) * n + row] = acc;
}

namespace {

struct Err {
  double max = 0, sum = 0;
  long count = 0;
  void add(double e) { max = std::max(max, e); sum += e; ++count; }
};

template <typename T, int bits, int gs>
struct Case {
  ParityTotals& tot;
  Err& inv_err;
  Err& qmv_err;

  void compare(const char* what, Problem p, const std::vector<uint16_t>& ref,
               const std::vector<uint16_t>& got, size_t n) {
    long d = 0;
    for (size_t i = 0; i < n; ++i) d += ref[i] != got[i];
    tot.checked += n;
    tot.differ += d;
    if (d) {
      printf("{\"kind\":\"inv_parity_fail\",\"what\":\"%s\",\"dtype\":\"%s\",\"bits\":%d,"
             "\"gs\":%d,\"m\":%d,\"n\":%d,\"k\":%d,\"l\":%d,\"differ\":%ld}\n",
             what, tname<T>(), bits, gs, p.m, p.n, p.k, p.l, d);
    }
  }

  // The staged kernel with RT row tiles per warp and K in KP parts whatever the launcher would
  // pick, where it takes these weights, against the launcher's M = 1 when KP is the launcher's
  // (8: the K order is the same) and else against its own M = 1 (`ref_kp`: another K split is
  // another order, the same for every M). XP: x prepared by its own launch first; TA: copy
  // addresses from one base per tile; either against the plain kernel's M = 1. BPS: blocks per
  // SM (qmv_invariant_staged's: one gives each warp a deeper ring). XS: x in shared memory
  // (where it fits K; else the kernel without, which the larger K here check). WB: warps per
  // block (16: two groups of 8 on their own rows). DR: each tile's partials added up after the
  // next tile (mbarriers, two reduction buffers), where two buffers fit. XF: each group's x
  // loaded one group ahead.
  template <int RT, int KP, bool XP = false, bool TA = false, int BPS = 0, bool XS = false,
            int WB = 8, bool DR = false, bool XF = false>
  void rows_forced(const Buffers<T, bits, gs>& b, int m, int n, int k,
                   const std::vector<uint16_t>& h_ref, T* out) {
    using Q = typename QOf<bits>::type;
    using namespace cu::qmv_invariant_detail;
    if constexpr (Plan<RT, 1, gs, Q, 0, false, 8, DR>::fits &&
                  Plan<RT, 2, gs, Q, 0, false, 8, DR>::fits) {
      if (!cu::qmv_invariant_staged_fits<gs>(b.wq(0), b.scales, b.biases, k)) return;
      size_t row_n = size_t(m) * n;
      std::vector<uint16_t> want = h_ref;
      if (KP != kWarps) {
        // Each vector alone through the same forced kernel (XP and TA off): its M = 1.
        for (int v = 0; v < m; ++v) {
          cu::qmv_invariant_staged<RT, gs, KP>(b.x + size_t(v) * k, b.wq(0), b.scales, b.biases,
                                               out + size_t(v) * n, 1, 1, n, k, true, 1,
                                               launch_smem);
        }
        want = fetch(out, row_n * sizeof(T) / 2);
      }
      CHECK(cudaMemset(out, 0xfe, row_n * sizeof(T)));
      void* s = XP ? scratch(cu::qmv_invariant_prep_bytes<gs, T, Q>(m, 1, k, true)) : nullptr;
      cu::qmv_invariant_staged<RT, gs, KP, 0, XP, TA, BPS, XS, WB, DR, XF>(
          b.x, b.wq(0), b.scales, b.biases, out, m, 1, n, k, true, 1, launch_smem, s);
      char what[48];
      snprintf(what, sizeof what, "m_rt%d_kp%d%s%s%s%s%s%s%s", RT, KP, XP ? "_xp" : "",
               TA ? "_ta" : "", BPS == 1 ? "_b1" : BPS < 0 ? "_bm" : "", XS ? "_xs" : "",
               WB == 16 ? "_w16" : "", DR ? "_dr" : "", XF ? "_xf" : "");
      compare(what, {m, n, k, 1}, want, fetch(out, row_n * sizeof(T) / 2), row_n);
    }
  }

  void run(int n, int k) {
    constexpr int M = 16;
    Buffers<T, bits, gs> b({M, n, k, 3}, 3, 4321 + n * 7 + k + bits);
    int sms = sm_count();
    size_t row_n = size_t(M) * n;
    T *ref, *out;
    CHECK(cudaMalloc(&ref, 3 * row_n * sizeof(T)));
    CHECK(cudaMalloc(&out, 3 * row_n * sizeof(T)));
    CHECK(cudaMemset(ref, 0xff, 3 * row_n * sizeof(T)));
    // Decode: each vector alone (M = 1), on each of the three weight copies.
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < M; ++v) {
        size_t off = size_t(c) * M + v;
        run_invariant(b, {1, n, k, 1}, c, b.x + off * k, ref + off * n, true, sms);
      }
    }
    auto h_ref = fetch(ref, 3 * row_n * sizeof(T) / 2);
    // Verify: M vectors at once, M = 1..16, and the row tiles forced to their most, by every
    // path of the launcher.
    char what[48];
    for (int m = 1; m <= M; ++m) {
      for (int s : {sms, 1}) {
        for (InvPath path : inv_paths()) {
          CHECK(cudaMemset(out, 0xfe, row_n * sizeof(T)));
          run_invariant_path(path, b, {m, n, k, 1}, 0, b.x, out, true, s);
          snprintf(what, sizeof what, "%s%s", s == 1 ? "m_rows_forced" : "m",
                   inv_path_name(path));
          compare(what, {m, n, k, 1}, h_ref, fetch(out, size_t(m) * n * sizeof(T) / 2),
                  size_t(m) * n);
        }
      }
      rows_forced<1, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<4, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<4, 8, false, true>(b, m, n, k, h_ref, out);
      // TA where a block's later warps start past N (their offsets from the tile's first row
      // are negative).
      rows_forced<2, 1, false, true>(b, m, n, k, h_ref, out);
      rows_forced<1, 4, false, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, 1>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, -1>(b, m, n, k, h_ref, out);
      rows_forced<1, 8, false, false, 0, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, 0, true>(b, m, n, k, h_ref, out);
      rows_forced<4, 8, false, false, 0, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, true, 0, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 2, false, false, 0, true>(b, m, n, k, h_ref, out);
      rows_forced<1, 8, false, false, 0, true, 16>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, 0, true, 16>(b, m, n, k, h_ref, out);
      rows_forced<1, 8, false, false, 0, false, 16>(b, m, n, k, h_ref, out);
      rows_forced<1, 4, false, false, 0, true, 16>(b, m, n, k, h_ref, out);
      rows_forced<4, 8>(b, m, n, k, h_ref, out);
      rows_forced<1, 1>(b, m, n, k, h_ref, out);
      rows_forced<2, 1>(b, m, n, k, h_ref, out);
      rows_forced<1, 4>(b, m, n, k, h_ref, out);
      rows_forced<2, 2>(b, m, n, k, h_ref, out);
      // Session 26: the deferred reduction with one, two and four row tiles, K in 8 and 2
      // parts, with XS and with 16 warps (the SM count forced to 1: many tiles per block).
      rows_forced<1, 8, false, false, 0, false, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, 0, false, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<4, 8, false, false, 0, false, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 2, false, false, 0, false, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, true, 0, true, 8, true>(b, m, n, k, h_ref, out);
      rows_forced<1, 8, false, false, 0, false, 16, true>(b, m, n, k, h_ref, out);
      // x loaded one group ahead, with one, two and four row tiles, K in 8, 2 and 1 parts (the
      // next group of the last is the part's first again), with XP and with TA.
      rows_forced<1, 8, false, false, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, false, false, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
      rows_forced<4, 8, false, false, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 2, false, false, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 1, false, false, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
      rows_forced<2, 8, true, true, 0, false, 8, false, true>(b, m, n, k, h_ref, out);
    }
    // Batch 2 with its own weights (M = 3 and 11), batch 3 sharing one (M = 5).
    for (int m : {3, 11}) for (InvPath path : inv_paths()) {
      CHECK(cudaMemset(out, 0xfe, 3 * row_n * sizeof(T)));
      // x of batch c starts at vector c * m: copy the decode references' vectors into place.
      T* xb;
      CHECK(cudaMalloc(&xb, size_t(2) * m * k * sizeof(T)));
      for (int c = 0; c < 2; ++c) {
        CHECK(cudaMemcpy(xb + size_t(c) * m * k, b.x + size_t(c) * M * k,
                         size_t(m) * k * sizeof(T), cudaMemcpyDeviceToDevice));
      }
      run_invariant_path(path, b, {m, n, k, 2}, 0, xb, out, false, sms);
      auto got = fetch(out, 2 * size_t(m) * n * sizeof(T) / 2);
      std::vector<uint16_t> want;
      for (int c = 0; c < 2; ++c) {
        want.insert(want.end(), h_ref.begin() + size_t(c) * row_n * sizeof(T) / 2,
                    h_ref.begin() + (size_t(c) * row_n + size_t(m) * n) * sizeof(T) / 2);
      }
      snprintf(what, sizeof what, "batch_own_weights%s", inv_path_name(path));
      compare(what, {m, n, k, 2}, want, got, want.size());
      cudaFree(xb);
    }
    for (InvPath path : inv_paths()) {
      CHECK(cudaMemset(out, 0xfe, row_n * sizeof(T)));
      run_invariant_path(path, b, {5, n, k, 3}, 0, b.x, out, true, sms);
      snprintf(what, sizeof what, "batch_broadcast%s", inv_path_name(path));
      compare(what, {5, n, k, 3}, h_ref, fetch(out, 15 * size_t(n) * sizeof(T) / 2),
              15 * size_t(n));
    }
    // One vector in every column: all 16 equal to its decode output.
    {
      T* xs;
      CHECK(cudaMalloc(&xs, size_t(M) * k * sizeof(T)));
      for (int v = 0; v < M; ++v) {
        CHECK(cudaMemcpy(xs + size_t(v) * k, b.x + size_t(7) * k, size_t(k) * sizeof(T),
                         cudaMemcpyDeviceToDevice));
      }
      std::vector<uint16_t> want;
      for (int v = 0; v < M; ++v) {
        want.insert(want.end(), h_ref.begin() + size_t(7) * n * sizeof(T) / 2,
                    h_ref.begin() + size_t(8) * n * sizeof(T) / 2);
      }
      for (InvPath path : inv_paths()) {
        CHECK(cudaMemset(out, 0xfe, row_n * sizeof(T)));
        run_invariant_path(path, b, {M, n, k, 1}, 0, xs, out, true, sms);
        snprintf(what, sizeof what, "same_vector_every_column%s", inv_path_name(path));
        compare(what, {M, n, k, 1}, want, fetch(out, row_n * sizeof(T) / 2), row_n);
      }
      cudaFree(xs);
    }
    // Accuracy against float64, beside upstream's qmv on the same vectors.
    {
      double* y;
      CHECK(cudaMalloc(&y, row_n * sizeof(double)));
      inv_reference_f64<T, typename QOf<bits>::type, gs><<<dim3((n + 127) / 128, M), 128>>>(
          b.x, b.wq(0), b.scales, b.biases, y, M, n, k);
      CHECK(cudaGetLastError());
      std::vector<double> hy(row_n);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(hy.data(), y, row_n * sizeof(double), cudaMemcpyDeviceToHost));
      for (int v = 0; v < M; ++v) {
        cu::qmv<gs, true>(b.x + size_t(v) * k, b.wq(0), b.scales, b.biases,
                          (const float*)nullptr, out + size_t(v) * n, 1, n, k, 1, true, launch);
      }
      auto hq = fetch(out, row_n * sizeof(T) / 2);
      for (size_t i = 0; i < row_n; ++i) {
        inv_err.add(std::abs(to_double<T>(h_ref[i]) - hy[i]));
        qmv_err.add(std::abs(to_double<T>(hq[i]) - hy[i]));
      }
      cudaFree(y);
    }
    cudaFree(ref);
    cudaFree(out);
  }
};

template <typename T, int bits>
ParityTotals parity_bits() {
  ParityTotals tot;
  auto per_gs = [&]<int gs>() {
    constexpr int ck = cu::qmv_invariant_detail::Chunk<gs, typename QOf<bits>::type>::k;
    Err inv, qmv;
    Case<T, bits, gs> c{tot, inv, qmv};
    // K the staged kernel does not take (the register kernel's)...
    for (int k : {2 * gs, 5 * gs, 512, 4160, 130 * gs}) {
      if (k % gs || k % ck == 0) continue;
      for (int n : {5, 37, 130}) c.run(n, k);
    }
    // ... and K it takes: fewer chunks than warps, 8, uneven splits; 453 rows give four row
    // tiles when the SM count is forced to 1.
    for (int chunks : {1, 3, 8, 9, 37}) {
      for (int n : {5, 130, 453}) c.run(n, chunks * ck);
    }
    printf("{\"kind\":\"inv_accuracy\",\"dtype\":\"%s\",\"bits\":%d,\"gs\":%d,\"outputs\":%ld,"
           "\"invariant_max_abs\":%.6g,\"invariant_mean_abs\":%.6g,\"qmv_max_abs\":%.6g,"
           "\"qmv_mean_abs\":%.6g}\n",
           tname<T>(), bits, gs, inv.count, inv.max, inv.sum / std::max(1L, inv.count), qmv.max,
           qmv.sum / std::max(1L, qmv.count));
    fflush(stdout);
  };
  per_gs.template operator()<32>();
  per_gs.template operator()<64>();
  per_gs.template operator()<128>();
  return tot;
}

} // namespace

#if defined(HARNESS_INV_BITS)
#if defined(HARNESS_INV_DTYPE_float16)
using InvT = cutlass::half_t;
#define INV_FN(b) inv_parity_float16_##b
#else
using InvT = cutlass::bfloat16_t;
#define INV_FN(b) inv_parity_bfloat16_##b
#endif
#define INV_FN2(b) INV_FN(b)
ParityTotals INV_FN2(HARNESS_INV_BITS)() {
  return parity_bits<InvT, HARNESS_INV_BITS>();
}
#endif
