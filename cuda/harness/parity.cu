// One parity translation unit: HARNESS_DTYPE (float32, float16, bfloat16) or
// HARNESS_CANDIDATES (the launch shapes under test, bf16 4/8-bit gs 64).
#include "harness.cuh"

namespace {
static long g_failures = 0;
static long g_checked = 0;

template <typename Sh, typename T, int bits, int gs>
void parity_one(Problem p) {
  // One weight matrix per batch element (broadcast_w false when l > 1).
  Buffers<T, bits, gs> b(p, p.l, 1234 + p.n * 7 + p.k + p.m * 131 + bits);
  size_t outn = size_t(p.l) * p.m * p.n;
  T* ref;
  CHECK(cudaMalloc(&ref, outn * sizeof(T)));
  // Poison both outputs: every element must be written.
  CHECK(cudaMemset(ref, 0xff, outn * sizeof(T)));
  CHECK(cudaMemset(b.out, 0xfe, outn * sizeof(T)));
  // Reference: upstream's qmv, one launch per vector (M = 1), as decode runs.
  for (int li = 0; li < p.l; ++li) {
    for (int mi = 0; mi < p.m; ++mi) {
      size_t off = (size_t(li) * p.m + mi);
      cu::qmv<gs, true>(b.x + off * p.k, b.wq(li), b.scales + b.sb_elems * li,
                        b.biases + b.sb_elems * li, (const float*)nullptr,
                        ref + off * p.n, 1, p.n, p.k, 1, true, launch);
    }
  }
  run_streamed<Sh>(b, p, 0, b.out);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> h_ref(outn * sizeof(T) / 2), h_out(outn * sizeof(T) / 2);
  CHECK(cudaMemcpy(h_ref.data(), ref, outn * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h_out.data(), b.out, outn * sizeof(T), cudaMemcpyDeviceToHost));
  long differ = 0;
  for (size_t i = 0; i < h_ref.size(); ++i) differ += h_ref[i] != h_out[i];
  g_checked += outn;
  if (differ) {
    g_failures += differ;
    printf("{\"kind\":\"parity_fail\",\"shape\":\"%s\",\"dtype\":\"%s\",\"bits\":%d,"
           "\"gs\":%d,\"m\":%d,\"n\":%d,\"k\":%d,\"l\":%d,\"differ\":%ld}\n",
           shape_name<Sh>().c_str(), tname<T>(), bits, gs, p.m, p.n, p.k, p.l, differ);
  }
  cudaFree(ref);
}

template <typename Sh, typename T, int bits, int gs>
void parity_all_shapes() {
  // K: 512 multiples (no residue for E = 16), 640/4160 (residue), N: odd and
  // N < 8 and N not a multiple of the rows per block; batch 2 with its own
  // weights (w_batch) is covered by parity_batch below.
  const int ks[] = {512, 640, 4160};
  const int ns[] = {5, 37, 130};
  for (int k : ks) {
    if (k % gs) continue;
    for (int n : ns) {
      for (int m = 1; m <= 16; ++m) {
        parity_one<Sh, T, bits, gs>({m, n, k, 1});
      }
      parity_one<Sh, T, bits, gs>({3, n, k, 2});
      parity_one<Sh, T, bits, gs>({11, n, k, 2});
    }
  }
}

template <typename Sh, typename T>
void parity_dtype() {
  auto per_bits = [&]<int bits>() {
    parity_all_shapes<Sh, T, bits, 32>();
    parity_all_shapes<Sh, T, bits, 64>();
    parity_all_shapes<Sh, T, bits, 128>();
  };
  per_bits.template operator()<2>();
  per_bits.template operator()<3>();
  per_bits.template operator()<4>();
  per_bits.template operator()<5>();
  per_bits.template operator()<6>();
  per_bits.template operator()<8>();
}

} // namespace

#if defined(HARNESS_DTYPE_float32)
ParityTotals parity_float32() {
  parity_dtype<HARNESS_PARITY_SHAPE, float>();
  return {g_checked, g_failures};
}
#elif defined(HARNESS_DTYPE_float16)
ParityTotals parity_float16() {
  parity_dtype<HARNESS_PARITY_SHAPE, cutlass::half_t>();
  return {g_checked, g_failures};
}
#elif defined(HARNESS_DTYPE_bfloat16)
ParityTotals parity_bfloat16() {
  parity_dtype<HARNESS_PARITY_SHAPE, cutlass::bfloat16_t>();
  return {g_checked, g_failures};
}
#else
ParityTotals parity_candidates() {
  auto one = [&]<typename Sh>() {
    parity_all_shapes<Sh, cutlass::bfloat16_t, 4, 64>();
    parity_all_shapes<Sh, cutlass::bfloat16_t, 8, 64>();
  };
  [&]<typename... S>(std::tuple<S...>*) { (one.template operator()<S>(), ...); }(
      (std::tuple<HARNESS_SHAPES>*)nullptr);
  return {g_checked, g_failures};
}
#endif
