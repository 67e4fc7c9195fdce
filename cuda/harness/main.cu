// The harness's main translation unit: the negative control, the benchmark and
// the parity totals (parity itself lives in parity.cu, compiled once per dtype).
#include "harness.cuh"

#include <functional>
#include <tuple>

// A negative control: a streamed kernel whose reduction differs (the rows are
// summed in the opposite order) must be caught. Done by comparing upstream at
// gs 64 against itself with x perturbed by one ulp in one element: the harness
// must report a difference.
template <typename T>
bool negative_control() {
  Problem p{4, 37, 640, 1};
  Buffers<T, 4, 64> b(p, 1, 99);
  size_t outn = size_t(p.m) * p.n;
  T *a, *c;
  CHECK(cudaMalloc(&a, outn * sizeof(T)));
  CHECK(cudaMalloc(&c, outn * sizeof(T)));
  run_upstream(b, p, 0, a);
  // Perturb x[0] by one unit in the last place.
  T h;
  CHECK(cudaMemcpy(&h, b.x, sizeof(T), cudaMemcpyDeviceToHost));
  uint16_t bitsv;
  memcpy(&bitsv, &h, 2);
  bitsv ^= 1;
  memcpy(&h, &bitsv, 2);
  CHECK(cudaMemcpy(b.x, &h, sizeof(T), cudaMemcpyHostToDevice));
  run_upstream(b, p, 0, c);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> ha(outn), hc(outn);
  CHECK(cudaMemcpy(ha.data(), a, outn * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hc.data(), c, outn * 2, cudaMemcpyDeviceToHost));
  long differ = 0;
  for (size_t i = 0; i < outn; ++i) differ += ha[i] != hc[i];
  printf("{\"kind\":\"negative_control\",\"differ\":%ld,\"of\":%zu}\n", differ, outn);
  return differ > 0;
}

// ---------------------------------------------------------------- bench
template <typename T, int bits, typename... Shs>
void bench_shape(int n, int k, const std::vector<int>& ms) {
  constexpr int gs = 64;
  auto [w_bytes, copies] = footprint<T>(n, k, bits, gs);
  int mmax = *std::max_element(ms.begin(), ms.end());
  Buffers<T, bits, gs> b({mmax, n, k, 1}, copies, 7 + n + k);
  for (int m : ms) {
    Problem p{m, n, k, 1};
    float up = time_us([&](int c) { run_upstream(b, p, c, b.out); }, copies, w_bytes);
    print_bench<T>(bits, gs, n, k, m, "upstream_qmv", up, w_bytes);
    (
        [&] {
          float t = time_us([&](int c) { run_streamed<Shs>(b, p, c, b.out); }, copies, w_bytes);
          print_bench<T>(bits, gs, n, k, m, "streamed_" + shape_name<Shs>(), t, w_bytes);
        }(),
        ...);
    fflush(stdout);
  }
}

// ---------------------------------------------------------------- invariant (overlay 0015)
// The negative control of inv-parity: the same sum with its groups folded in another order
// (groups 2i and 2i + 1 swapped in x, the weights, the scales and the biases: the same products,
// another order) must change some output bits, or the comparisons could not see an order change.
// f16 outputs (3 more mantissa bits than bf16 show more of the fp32 order).
static long inv_negative_control() {
  using T = cutlass::half_t;
  const Problem p{16, 1024, 4096, 1};
  return reordered_fold_control<T, 4, 64>("inv_negative_control", p, [&](const Buffers<T, 4, 64>& b) {
    run_invariant(b, p, 0, b.x, b.out, true, sm_count());
  });
}

// The same control through the warpgroup-mma kernel (forced at every shape it fits): -1 where it
// does not fit this device or build.
static long inv_wgmma_negative_control() {
  using T = cutlass::half_t;
  const Problem p{16, 1024, 4096, 1};
  bool ran = true;
  long d = reordered_fold_control<T, 4, 64>("inv_wgmma_negative_control", p,
                                            [&](const Buffers<T, 4, 64>& b) {
    ran = run_wgmma(b, p, 0, b.x, b.out, true, sm_count()) && ran;
  });
  return ran ? d : -1;
}

// One row per path of the invariant launcher (harness.cuh's InvPath): "invariant" as the library
// runs it, then "invariant" + the path's suffix.
template <typename T, int bits, typename Row>
void inv_path_rows(const Buffers<T, bits, 64>& b, Problem p, int sms, int copies, size_t w_bytes,
                   Row&& row) {
  for (InvPath path : inv_paths()) {
    std::string arm = std::string("invariant") + inv_path_name(path);
    row(arm.c_str(), time_us([&](int c) {
          run_invariant_path(path, b, p, c, b.x, b.out, true, sms);
        }, copies, w_bytes));
  }
}

// Upstream's qmv (grid.y = M), the streamed kernel by M and the invariant kernel, one shape.
template <typename T, int bits>
void inv_bench_shape(int n, int k, const std::vector<int>& ms) {
  constexpr int gs = 64;
  auto [w_bytes, copies] = footprint<T>(n, k, bits, gs);
  int mmax = *std::max_element(ms.begin(), ms.end());
  Buffers<T, bits, gs> b({mmax, n, k, 1}, copies, 11 + n + k);
  int sms = sm_count();
  for (int m : ms) {
    Problem p{m, n, k, 1};
    auto row = [&](const char* arm, float us) {
      print_bench<T>(bits, gs, n, k, m, arm, us, w_bytes);
    };
    row("upstream_qmv", time_us([&](int c) { run_upstream(b, p, c, b.out); }, copies, w_bytes));
    row("streamed_by_m",
        time_us([&](int c) { run_streamed<ByM>(b, p, c, b.out); }, copies, w_bytes));
    inv_path_rows(b, p, sms, copies, w_bytes, row);
    // Where the library's dispatch takes the warpgroup-mma kernel (unless MLX_CUDA_QMV_WGMMA=0),
    // the launcher it replaces (elsewhere "invariant" is the launcher already: 8-bit, or a
    // device or build without sm_90a).
    if (cu::qmv_wgmma_wins(m, n, k, 1, true) && wgmma_fits(b, p, 0, b.x, true)) {
      row("invariant_launcher", time_us([&](int c) {
            run_launcher(b, p, c, b.x, b.out, true, sms);
          }, copies, w_bytes));
    }
    fflush(stdout);
  }
}

// Launch shapes of the invariant kernels beside the launcher's choice, gs 64 bf16, 4-bit then
// 8-bit (the tuning loop, `inv-tune`): the staged kernel with one, two or four row tiles
// (`inv_s1`, `inv_s2`, `inv_s4`) and, with INV_TUNE_REGISTER set, the register kernel with RT
// row tiles, P groups in flight and an L2 fetch of PF bytes around each weight load
// (`inv_r<RT>_p<P>_l<PF>`).
template <int RT, int P, int PF, typename T, int bits>
void inv_launch_shape(const Buffers<T, bits, 64>& b, Problem p, int c) {
  using Q = typename QOf<bits>::type;
  auto go = [&]<int NT>() {
    const T* x = b.x;
    const Q* w = b.wq(c);
    const T* sc = b.scales + b.sb_elems * c;
    const T* bi = b.biases + b.sb_elems * c;
    T* out = b.out;
    int tokens = p.m, n = p.n, k = p.k;
    bool bw = true;
    void* args[] = {&x, &w, &sc, &bi, &out, &tokens, &n, &k, &bw};
    launch(reinterpret_cast<void*>(&cu::qmv_invariant_kernel<RT, NT, P, 64, T, Q, T, PF>),
           dim3((n + 16 * RT - 1) / (16 * RT), (tokens + 8 * NT - 1) / (8 * NT), 1), dim3(256),
           args);
  };
  if (p.m > 8) go.template operator()<2>();
  else go.template operator()<1>();
}

// XP: x prepared by its own launch first (no programmatic dependent launch); BPS blocks per SM
// (qmv_invariant_staged's); XS: x in shared memory where it fits; WB warps per block; DR: each
// tile's partials added up after the next tile, not at a block barrier; XF: each group's x
// loaded one group ahead.
template <int RT, typename T, int bits, int KP = 8, int GU = 0, bool XP = false, int BPS = 0,
          bool XS = false, int WB = 8, bool DR = false, bool XF = false>
void inv_staged_shape(const Buffers<T, bits, 64>& b, Problem p, int c, int sms) {
  using Q = typename QOf<bits>::type;
  void* s = XP ? scratch(cu::qmv_invariant_prep_bytes<64, T, Q>(p.m, 1, p.k, true)) : nullptr;
  cu::qmv_invariant_staged<RT, 64, KP, GU, XP, false, BPS, XS, WB, DR, XF>(
      b.x, b.wq(c), b.scales + b.sb_elems * c, b.biases + b.sb_elems * c, b.out, p.m, 1, p.n,
      p.k, true, sms, launch_smem, s);
}

// The tuning modes' buffers for one shape (16 vectors, gs 64, the weights in as many copies as
// timing from DRAM takes) and their M = 1, 8, 9 and 16: body(b, p, sms, copies, w_bytes).
template <typename T, int bits, typename F>
void for_tune_ms(int n, int k, F&& body) {
  constexpr int gs = 64;
  auto [w_bytes, copies] = footprint<T>(n, k, bits, gs);
  Buffers<T, bits, gs> b({16, n, k, 1}, copies, 5 + n + k);
  int sms = sm_count();
  for (int m : {1, 8, 9, 16}) body(b, Problem{m, n, k, 1}, sms, copies, w_bytes);
}

template <typename T, int bits>
void inv_tune_shape(int n, int k) {
  constexpr int gs = 64;
  for_tune_ms<T, bits>(n, k, [&](const Buffers<T, bits, gs>& b, Problem p, int sms, int copies,
                                 size_t w_bytes) {
    int m = p.m;
    auto row = [&](const char* arm, float us) {
      print_bench<T>(bits, gs, n, k, m, arm, us, w_bytes);
    };
    inv_path_rows(b, p, sms, copies, w_bytes, row);
    row("inv_s1", time_us([&](int c) { inv_staged_shape<1>(b, p, c, sms); }, copies, w_bytes));
    if (getenv("INV_TUNE_REGISTER")) {
#define INV_TUNE(RT, P, PF) \
      row("inv_r" #RT "_p" #P "_l" #PF, time_us([&](int c) { inv_launch_shape<RT, P, PF>(b, p, c); }, copies, w_bytes));
      INV_TUNE(1, 2, 128) INV_TUNE(4, 1, 0)
#undef INV_TUNE
    }
    // Two and four row tiles of the staged kernel (x shared over 32 and 64 rows); four faulted
    // while cp.async carried an L2 cache hint: last, so a fault ends the run here.
    row("inv_s2", time_us([&](int c) { inv_staged_shape<2>(b, p, c, sms); }, copies, w_bytes));
    // K in fewer parts (KP) than warps: 8 / KP warps on the same part of K, on their own rows,
    // read the same x at about the same time.
#define INV_KP(RT, KP) \
    row("inv_s" #RT "k" #KP, \
        time_us([&](int c) { inv_staged_shape<RT, T, bits, KP>(b, p, c, sms); }, copies, w_bytes));
    INV_KP(1, 1) INV_KP(1, 2) INV_KP(1, 4) INV_KP(2, 1) INV_KP(2, 2) INV_KP(2, 4)
#undef INV_KP
    // The groups of a chunk unrolled GU at a time (`inv_s<RT>u<GU>`; the kernel's rule, GU = 0:
    // all with one column tile, two at a time with two): u4 is every group at once, as before
    // session 22 (it spilled registers with two column tiles).
#define INV_GU(RT, GU) \
    row("inv_s" #RT "u" #GU, \
        time_us([&](int c) { inv_staged_shape<RT, T, bits, 8, GU>(b, p, c, sms); }, copies, w_bytes));
    INV_GU(1, 4) INV_GU(1, 1) INV_GU(2, 4) INV_GU(2, 1)
#undef INV_GU
    // The XP path (x paired and summed by a launch before the staged kernel) with one and two
    // row tiles, by the kernel's unroll rule (`inv_s<RT>x`) and by GU forced (`inv_s2u<GU>x`:
    // with XP the rule's two groups at a time spill 12 bytes at M = 9..16, ptxas).
#define INV_XP(RT, GU, name) \
    row(name, time_us([&](int c) { inv_staged_shape<RT, T, bits, 8, GU, true>(b, p, c, sms); }, \
                      copies, w_bytes));
    INV_XP(1, 0, "inv_s1x") INV_XP(2, 0, "inv_s2x") INV_XP(2, 1, "inv_s2u1x")
    INV_XP(2, 4, "inv_s2u4x")
#undef INV_XP
    // One block per SM (`inv_s2b1`): each warp's ring twice as deep (four stages), half the
    // warps; `inv_s2bm`: that with one column tile (M <= 8), the rule with two.
#define INV_BPS(RT, BPS, name) \
    row(name, time_us([&](int c) { inv_staged_shape<RT, T, bits, 8, 0, false, BPS>(b, p, c, sms); }, \
                      copies, w_bytes));
    INV_BPS(2, 1, "inv_s2b1") INV_BPS(2, -1, "inv_s2bm")
#undef INV_BPS
    // x in shared memory (`inv_s<RT>xs`, one block per SM, every group of a chunk unrolled;
    // `inv_s2xsu2` two at a time), where it fits K (else the kernel without: `inv_s<RT>`).
#define INV_XS(RT, GU, name) \
    row(name, time_us([&](int c) { inv_staged_shape<RT, T, bits, 8, GU, false, 0, true>(b, p, c, sms); }, \
                      copies, w_bytes));
    INV_XS(1, 0, "inv_s1xs") INV_XS(2, 0, "inv_s2xs") INV_XS(2, 2, "inv_s2xsu2")
#undef INV_XS
    // Blocks of 16 warps (two groups of 8 on their own rows, K in 8 parts as always): with x in
    // shared memory (`inv_s1xs16`: one copy of x for 16 warps, one block per SM, where it fits)
    // and without (`inv_s1w16`: one block per SM).
    row("inv_s1xs16", time_us([&](int c) { inv_staged_shape<1, T, bits, 8, 0, false, 0, true, 16>(b, p, c, sms); },
                              copies, w_bytes));
    row("inv_s1w16", time_us([&](int c) { inv_staged_shape<1, T, bits, 8, 0, false, 0, false, 16>(b, p, c, sms); },
                             copies, w_bytes));
    // Session 26: the deferred reduction (`inv_s<RT>dr`) and x one group ahead (`inv_s2xf`, by
    // the kernel's unroll rule; `inv_s2u2xf` two groups at a time), as `inv-ab` timed them.
#define INV_DR_XF(RT, GU, DR, XF, name) \
    row(name, time_us([&](int c) { inv_staged_shape<RT, T, bits, 8, GU, false, 0, false, 8, DR, XF>(b, p, c, sms); }, \
                      copies, w_bytes));
    INV_DR_XF(1, 0, true, false, "inv_s1dr") INV_DR_XF(2, 0, true, false, "inv_s2dr")
    INV_DR_XF(2, 0, false, true, "inv_s2xf") INV_DR_XF(2, 2, false, true, "inv_s2u2xf")
#undef INV_DR_XF
    row("inv_s4", time_us([&](int c) { inv_staged_shape<4>(b, p, c, sms); }, copies, w_bytes));
    fflush(stdout);
  });
}

// Candidates against the launcher in rounds (`inv-ab`): each round times every arm once, the
// order rotated by one arm per round, so a drift over the run (clocks, heat) falls on every arm
// alike; each arm's row is the median of its rounds, and every round is printed (`ab`).
// `inv_s2` is the launcher's own kernel under another name: how far it lands from `invariant`
// is what two identical kernels differ by in this run (the check that the method can tell).
template <typename T, int bits>
void inv_ab_shape(int n, int k, int rounds) {
  constexpr int gs = 64;
  for_tune_ms<T, bits>(n, k, [&](const Buffers<T, bits, gs>& b, Problem p, int sms, int copies,
                                 size_t w_bytes) {
    int m = p.m;
    // Session 26: x loaded one group ahead (`inv_s2xf`: the kernel's unroll rule, which with XF
    // and two column tiles is one group at a time: it spilled nothing in session 22 but lost
    // the overlap of the next group's loads, which XF gives back; `inv_s2u2xf`: two at a time;
    // `inv_s2u1`: one at a time without XF). The deferred reduction (`inv_s<RT>dr`, a
    // tile's partials added up after the next tile) was slower with two row tiles on the H100
    // (docs/kernels/cuda-invariant-qmm.md, "Session 26").
    std::vector<std::pair<const char*, std::function<void(int)>>> arms = {
        {"invariant", [&](int c) { run_invariant(b, p, c, b.x, b.out, true, sms); }},
        {"inv_s2", [&](int c) { inv_staged_shape<2>(b, p, c, sms); }},
        {"inv_s2xf", [&](int c) {
           inv_staged_shape<2, T, bits, 8, 0, false, 0, false, 8, false, true>(b, p, c, sms);
         }},
        {"inv_s2u2xf", [&](int c) {
           inv_staged_shape<2, T, bits, 8, 2, false, 0, false, 8, false, true>(b, p, c, sms);
         }},
        {"inv_s2u1", [&](int c) { inv_staged_shape<2, T, bits, 8, 1>(b, p, c, sms); }},
    };
    ab_rounds<T>(bits, gs, n, k, m, arms, rounds, copies, w_bytes);
    fflush(stdout);
  });
}

static void copy_ceiling() {
  size_t bytes = size_t(2) << 30;
  void *a, *c;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&c, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  float us = time_us([&](int) { CHECK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); }, 1, bytes);
  printf("{\"kind\":\"copy_ceiling\",\"gbps\":%.1f}\n", 2.0 * bytes / (us * 1e3));
  cudaFree(a);
  cudaFree(c);
}

// The parity units' totals added up.
static ParityTotals total(std::initializer_list<ParityTotals> parts) {
  ParityTotals t;
  for (auto& p : parts) {
    t.checked += p.checked;
    t.differ += p.differ;
  }
  return t;
}

// The shapes a benchmark mode runs: the indices after the mode into its list of shapes (none:
// all of them).
struct Picked {
  std::vector<int> which;
  Picked(int argc, char** argv) {
    for (int a = 2; a < argc; ++a) which.push_back(atoi(argv[a]));
  }
  bool operator()(int s) const {
    return which.empty() || std::find(which.begin(), which.end(), s) != which.end();
  }
};

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "parity";
  if (mode == "parity") {
    bool neg = negative_control<cutlass::bfloat16_t>();
    auto [checked, differ] = total({parity_bfloat16(), parity_float16(), parity_float32()});
    printf("{\"kind\":\"parity\",\"shape\":\"default\",\"checked\":%ld,\"differ\":%ld,"
           "\"negative_control_caught\":%s}\n",
           checked, differ, neg ? "true" : "false");
    return (differ == 0 && neg) ? 0 : 1;
  }
  if (mode == "parity-shapes") {
    ParityTotals t = parity_candidates();
    printf("{\"kind\":\"parity\",\"shape\":\"candidates\",\"checked\":%ld,\"differ\":%ld}\n",
           t.checked, t.differ);
    return t.differ == 0 ? 0 : 1;
  }
  if (mode == "inv-parity") {
    long control = inv_negative_control();
#define INV_CALL(d, b) inv_parity_##d##_##b(),
    auto [checked, differ] = total({
        INV_CALL(bfloat16, 2) INV_CALL(bfloat16, 3) INV_CALL(bfloat16, 4) INV_CALL(bfloat16, 5)
        INV_CALL(bfloat16, 6) INV_CALL(bfloat16, 8) INV_CALL(float16, 2) INV_CALL(float16, 3)
        INV_CALL(float16, 4) INV_CALL(float16, 5) INV_CALL(float16, 6) INV_CALL(float16, 8)});
#undef INV_CALL
    // On compute capability 9.0 the warpgroup-mma path must have run (the harness is built for
    // sm_90a): else its cases fell back to the launcher and checked nothing of it.
    int major = 0, minor = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id()));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id()));
    long wg_control = inv_wgmma_negative_control();
    bool wgmma_missing = major == 9 && minor == 0 && (wgmma_runs() == 0 || wg_control <= 0);
    printf("{\"kind\":\"inv_parity\",\"checked\":%ld,\"differ\":%ld,"
           "\"negative_control_differ\":%ld,\"wgmma_runs\":%ld,"
           "\"wgmma_negative_control_differ\":%ld}\n",
           checked, differ, control, wgmma_runs(), wg_control);
    return (differ == 0 && control > 0 && !wgmma_missing) ? 0 : 1;
  }
  if (mode == "inv-tune") {
    copy_ceiling();
    int shapes[][2] = {{4096, 4096}, {28672, 4096}, {128256, 4096}, {3584, 18944}, {18944, 3584}, {152064, 3584}};
    Picked picked(argc, argv);
    for (int s = 0; s < 6; ++s)
      if (picked(s)) inv_tune_shape<cutlass::bfloat16_t, 4>(shapes[s][0], shapes[s][1]);
    for (int s = 0; s < 6; ++s)
      if (picked(s)) inv_tune_shape<cutlass::bfloat16_t, 8>(shapes[s][0], shapes[s][1]);
    return 0;
  }
  if (mode == "inv-ab") {
    int shapes[][2] = {{4096, 4096}, {28672, 4096}, {128256, 4096}, {3584, 18944}, {18944, 3584}, {152064, 3584}};
    const char* r = getenv("INV_AB_ROUNDS");
    char* end = nullptr;
    long rounds = r ? strtol(r, &end, 10) : 5;
    if (r && (*r == '\0' || *end != '\0' || rounds < 1 || rounds > 1000)) {
      fprintf(stderr, "qmv_harness inv-ab: INV_AB_ROUNDS=%s is not a count of rounds (1 to 1000)\n",
              r);
      return 2;
    }
    copy_ceiling();
    Picked picked(argc, argv);
    for (int s = 0; s < 6; ++s)
      if (picked(s)) inv_ab_shape<cutlass::bfloat16_t, 4>(shapes[s][0], shapes[s][1], int(rounds));
    for (int s = 0; s < 6; ++s)
      if (picked(s)) inv_ab_shape<cutlass::bfloat16_t, 8>(shapes[s][0], shapes[s][1], int(rounds));
    return 0;
  }
  if (mode == "mma-peak") {
    mma_peak();
    return 0;
  }
  if (mode == "inv-bench") {
    copy_ceiling();
    std::vector<int> ms = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
    // The five shapes of `bench`, then Qwen2.5-7B's four.
    int shapes[][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096},
                       {3584, 3584}, {18944, 3584}, {3584, 18944}, {152064, 3584}};
    Picked picked(argc, argv);
    for (int s = 0; s < 9; ++s) {
      if (!picked(s)) continue;
      inv_bench_shape<cutlass::bfloat16_t, 4>(shapes[s][0], shapes[s][1], ms);
      inv_bench_shape<cutlass::bfloat16_t, 8>(shapes[s][0], shapes[s][1], ms);
    }
    return 0;
  }
  if (mode == "bench") {
    copy_ceiling();
    std::vector<int> ms = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
    int shapes[][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
    Picked picked(argc, argv);
    for (int s = 0; s < 5; ++s) {
      if (!picked(s)) continue;
      bench_shape<cutlass::bfloat16_t, 4, HARNESS_SHAPES>(shapes[s][0], shapes[s][1], ms);
      bench_shape<cutlass::bfloat16_t, 8, HARNESS_SHAPES>(shapes[s][0], shapes[s][1], ms);
    }
    return 0;
  }
  fprintf(stderr, "usage: qmv_harness parity|parity-shapes|inv-parity|mma-peak|"
                  "bench|inv-bench|inv-tune|inv-ab [shape-index...]\n");
  return 2;
}
