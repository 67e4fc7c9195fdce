// Through MLX's public C++ API on the built library (the real dispatch runs):
//
//   qmv_lib parity   every accepted (dtype, bits, group size), M = 1..16, K with and
//                    without a residue, odd N, N < 8, batch 2: under the streamed and the
//                    invariant policies each output row must be bit-identical to the same row
//                    computed at M = 1 under that policy; negative control: under the upstream
//                    policy the harness must find rows that differ (qmm_sm80 from M * B = 8 on);
//                    and 3584x18944 4-bit gs 64 f16/bf16, batch 1 and 2, under the invariant
//                    policy as it is by default (where sm_90a takes the warpgroup-mma kernel
//                    from M * B = 9 on) and with MLX_CUDA_QMV_WGMMA=0 (the launcher)
//   qmv_lib bench    time quantized_matmul per call (many calls per eval, weights rotated past
//                    L2) under the three policies for the benchmark shapes, and at 4-bit
//                    M = 9..16 the invariant policy with MLX_CUDA_QMV_WGMMA=0
//                    (lib_invariant_launcher). With CUDA graphs on (MLX's default) the calls,
//                    independent of each other, run concurrently where the graph lets them:
//                    throughput.
//   qmv_lib serial   the same arms at M = 1, 2, 4, 8, 9, 12, 16 with CUDA graphs off
//                    (MLX_USE_CUDA_GRAPHS=0, set before MLX starts): each call's kernels go to
//                    MLX's one stream in order, so a call starts when the one before it ended,
//                    as in a decoder's forward. Arms `<arm>_serial`.
// Every bench row also has `host_us`: per call, until async_eval returned (building and
// submitting the work). MLX's eval also waits there once more than 10 command batches are in
// flight, so it bounds the host's share from above: well below `us`, the row measured the GPU;
// near it, the row cannot tell.
//
// One JSON object per line; exit 1 on a parity failure or a control that catches nothing.
#include <mlx/backend/cuda/quantized/qmv_policy.h>
#include <mlx/mlx.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <climits>
#include <sys/stat.h>
#include <unistd.h>

namespace mx = mlx::core;
using mx::array;

static const char* dname(mx::Dtype t) {
  return t == mx::float32 ? "float32" : t == mx::float16 ? "float16" : "bfloat16";
}

static const char* pname(mx::cu::QmvBatchPolicy p) {
  return p == mx::cu::QmvBatchPolicy::Streamed    ? "streamed"
      : p == mx::cu::QmvBatchPolicy::Invariant ? "invariant"
                                                : "upstream";
}

struct Quantized {
  array w, scales, biases;
};

static Quantized make_weights(int n, int k, int gs, int bits, mx::Dtype dt, int batch = 0) {
  mx::Shape shape = batch ? mx::Shape{batch, n, k} : mx::Shape{n, k};
  auto w = mx::astype(mx::random::normal(shape), dt);
  auto q = mx::quantize(w, gs, bits);
  mx::eval(q);
  return {q[0], q[1], q[2]};
}

static std::vector<uint8_t> bytes_of(const array& a) {
  array c = mx::contiguous(a);
  mx::eval(c);
  const uint8_t* p = c.data<uint8_t>();
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// Rows of out ([batch, m, n]) compared with the rows computed one at a time (M = 1).
static long count_row_diffs(const array& x, const Quantized& q, int gs, int bits, int m,
                            const std::vector<std::vector<uint8_t>>& ref_rows, size_t row_bytes) {
  auto xm = mx::slice(x, {0, 0, 0}, {x.shape(0), m, x.shape(2)});
  auto out = mx::quantized_matmul(xm, q.w, q.scales, q.biases, true, gs, bits);
  auto got = bytes_of(out);
  long differ = 0;
  int batch = x.shape(0);
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < m; ++r) {
      const uint8_t* g = got.data() + (size_t(b) * m + r) * row_bytes;
      const auto& ref = ref_rows[size_t(b) * 16 + r];
      size_t elem = row_bytes / out.shape(-1);
      for (size_t i = 0; i < row_bytes; i += elem) differ += std::memcmp(g + i, ref.data() + i, elem) != 0;
    }
  }
  return differ;
}

// Each row of x ([batch, 16, k]) alone (M = 1), under the policy set: the references of
// count_row_diffs.
static std::vector<std::vector<uint8_t>> decode_rows(const array& x, const Quantized& q, int gs,
                                                     int bits) {
  int batch = x.shape(0), k = x.shape(2);
  std::vector<std::vector<uint8_t>> ref(size_t(batch) * 16);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < 16; ++r) {
      auto xr = mx::slice(x, {b, r, 0}, {b + 1, r + 1, k});
      ref[size_t(b) * 16 + r] =
          bytes_of(mx::quantized_matmul(xr, q.w, q.scales, q.biases, true, gs, bits));
    }
  return ref;
}

static void print_fail(mx::cu::QmvBatchPolicy policy, mx::Dtype dt, int bits, int gs, int n,
                       int k, int batch, int m, long d) {
  printf("{\"kind\":\"lib_parity_fail\",\"policy\":\"%s\",\"dtype\":\"%s\",\"bits\":%d,"
         "\"gs\":%d,\"n\":%d,\"k\":%d,\"batch\":%d,\"m\":%d,\"differ\":%ld}\n",
         pname(policy), dname(dt), bits, gs, n, k, batch, m, d);
}

// 3584x18944 4-bit gs 64 f16/bf16, batch 1 and 2, under the invariant policy: where sm_90a
// takes the warpgroup-mma kernel by default (M * B = 9..16, N x K >= 3 * 2^23, 6144 x 4096) or, with
// MLX_CUDA_QMV_WGMMA=0 (`launcher`), the launcher. Rows against M = 1's, which the launcher
// computes. Adds the outputs compared to `checked`; returns how many differ.
static long parity_large(bool launcher, long& checked) {
  const int n = 3584, k = 18944, gs = 64, bits = 4;
  long differ = 0;
  if (launcher) setenv("MLX_CUDA_QMV_WGMMA", "0", 1);
  mx::cu::set_qmv_batch_policy(mx::cu::QmvBatchPolicy::Invariant);
  for (auto dt : {mx::bfloat16, mx::float16})
    for (int batch : {1, 2}) {
      auto q = make_weights(n, k, gs, bits, dt);
      auto x = mx::astype(mx::random::normal({batch, 16, k}), dt);
      mx::eval(x);
      auto ref = decode_rows(x, q, gs, bits);
      for (int m = 2; m <= 16; ++m) {
        long d = count_row_diffs(x, q, gs, bits, m, ref, size_t(n) * mx::size_of(dt));
        differ += d;
        checked += long(batch) * m * n;
        if (d) print_fail(mx::cu::QmvBatchPolicy::Invariant, dt, bits, gs, n, k, batch, m, d);
      }
    }
  if (launcher) unsetenv("MLX_CUDA_QMV_WGMMA");
  return differ;
}

static int parity() {
  long checked = 0, streamed_differ = 0, invariant_differ = 0, upstream_differ = 0;
  const mx::Dtype dts[] = {mx::bfloat16, mx::float16, mx::float32};
  const int bitss[] = {2, 3, 4, 5, 6, 8};
  const int gss[] = {32, 64, 128};
  const int shapes[][2] = {{37, 640}, {5, 512}, {130, 4160}};
  mx::random::seed(3);
  // The shape the invariant policy gives the warpgroup-mma kernel on sm_90a, by default and
  // with it off.
  invariant_differ += parity_large(false, checked) + parity_large(true, checked);
  for (auto dt : dts)
    for (int bits : bitss)
      for (int gs : gss)
        for (auto& s : shapes) {
          int n = s[0], k = s[1];
          if (k % gs) continue;
          for (int batch : {1, 2}) {
            auto q = make_weights(n, k, gs, bits, dt);
            auto x = mx::astype(mx::random::normal({batch, 16, k}), dt);
            mx::eval(x);
            size_t row_bytes = size_t(n) * mx::size_of(dt);
            // The negative control runs upstream's dispatch on one combination only: its qmm_sm80
            // from M * B = 8 on is compiled by NVRTC at first use, per combination.
            bool control = dt == mx::bfloat16 && bits == 4 && gs == 64 && n != 5;
            std::vector<mx::cu::QmvBatchPolicy> policies = {mx::cu::QmvBatchPolicy::Streamed,
                                                            mx::cu::QmvBatchPolicy::Invariant};
            if (control) policies.push_back(mx::cu::QmvBatchPolicy::Upstream);
            for (auto policy : policies) {
              mx::cu::set_qmv_batch_policy(policy);
              // References: each row alone (M = 1), under the same policy.
              auto ref = decode_rows(x, q, gs, bits);
              for (int m = 2; m <= 16; ++m) {
                long d = count_row_diffs(x, q, gs, bits, m, ref, row_bytes);
                if (policy != mx::cu::QmvBatchPolicy::Upstream) {
                  (policy == mx::cu::QmvBatchPolicy::Streamed ? streamed_differ
                                                              : invariant_differ) += d;
                  checked += long(batch) * m * n;
                  if (d) print_fail(policy, dt, bits, gs, n, k, batch, m, d);
                } else {
                  upstream_differ += d;
                }
              }
            }
          }
        }
  // `checked` counts the outputs of both policies that must not differ.
  printf("{\"kind\":\"lib_parity\",\"checked\":%ld,\"streamed_differ\":%ld,"
         "\"invariant_differ\":%ld,\"upstream_differ\":%ld}\n",
         checked, streamed_differ, invariant_differ, upstream_differ);
  return (streamed_differ == 0 && invariant_differ == 0 && upstream_differ > 0) ? 0 : 1;
}

struct Timed {
  double us;       // per call, until the GPU finished
  double host_us;  // per call, until async_eval returned (at most the host's share)
};

using Clock = std::chrono::steady_clock;

static double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Per-call time of quantized_matmul: `calls` calls per eval, weights rotated over `copies`;
// the median of five repetitions (the host's share: of the same repetition).
static Timed time_us(const array& x, const std::vector<Quantized>& qs, int gs, int bits) {
  int copies = qs.size();
  auto run = [&](int calls) {
    std::vector<array> outs;
    for (int i = 0; i < calls; ++i) {
      auto& q = qs[i % copies];
      outs.push_back(mx::quantized_matmul(x, q.w, q.scales, q.biases, true, gs, bits));
    }
    auto t0 = Clock::now();
    mx::async_eval(outs);
    auto t1 = Clock::now();
    mx::synchronize();
    return Timed{micros(t0, Clock::now()) / calls, micros(t0, t1) / calls};
  };
  run(copies);  // warm-up: JIT compiles, allocations
  double first = run(copies).us * copies;
  int calls = std::max(copies, std::min(4000, int(copies * 20000.0 / std::max(first, 1.0))));
  std::vector<Timed> reps;
  for (int r = 0; r < 5; ++r) reps.push_back(run(calls));
  std::sort(reps.begin(), reps.end(), [](const Timed& a, const Timed& b) { return a.us < b.us; });
  return reps[reps.size() / 2];
}

static void print_bench(int bits, int gs, int n, int k, int m, const std::string& arm,
                        const Timed& t, size_t wbytes, bool graphs) {
  printf("{\"kind\":\"bench\",\"dtype\":\"bfloat16\",\"bits\":%d,\"gs\":%d,\"n\":%d,"
         "\"k\":%d,\"m\":%d,\"arm\":\"%s\",\"us\":%.3f,\"host_us\":%.3f,\"bytes\":%zu,"
         "\"graphs\":%s}\n",
         bits, gs, n, k, m, arm.c_str(), t.us, t.host_us, wbytes, graphs ? "true" : "false");
  fflush(stdout);
}

// `serial`: CUDA graphs off (the caller set MLX_USE_CUDA_GRAPHS=0 before MLX started) and
// fewer M; arms named `<arm>_serial`.
static int bench(int argc, char** argv, bool serial) {
  // The harness's five shapes, then Qwen2.5-7B's four.
  const int shapes[][2] = {{4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096},
                           {3584, 3584}, {18944, 3584}, {3584, 18944}, {152064, 3584}};
  std::vector<int> which;
  for (int a = 2; a < argc; ++a) which.push_back(atoi(argv[a]));
  const std::vector<int> ms = serial ? std::vector<int>{1, 2, 4, 8, 9, 12, 16}
                                     : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};
  const std::string suffix = serial ? "_serial" : "";
  const int gs = 64;
  for (int si = 0; si < 9; ++si) {
    if (!which.empty() && std::find(which.begin(), which.end(), si) == which.end()) continue;
    int n = shapes[si][0], k = shapes[si][1];
    for (int bits : {4, 8}) {
      size_t wbytes = size_t(n) * k * bits / 8 + size_t(n) * (k / gs) * 4;
      int copies = int(std::max<size_t>(2, (size_t(640) << 20) / wbytes + 1));
      std::vector<Quantized> qs;
      for (int c = 0; c < copies; ++c) qs.push_back(make_weights(n, k, gs, bits, mx::bfloat16));
      auto xall = mx::astype(mx::random::normal({16, k}), mx::bfloat16);
      mx::eval(xall);
      for (int m : ms) {
        auto x = mx::slice(xall, {0, 0}, {m, k});
        mx::eval(x);
        for (auto policy : {mx::cu::QmvBatchPolicy::Upstream, mx::cu::QmvBatchPolicy::Streamed,
                            mx::cu::QmvBatchPolicy::Invariant}) {
          mx::cu::set_qmv_batch_policy(policy);
          print_bench(bits, gs, n, k, m, std::string("lib_") + pname(policy) + suffix,
                      time_us(x, qs, gs, bits), wbytes, !serial);
        }
        // Where the invariant policy may take the warpgroup-mma kernel (lib_invariant, by
        // default): the launcher (MLX_CUDA_QMV_WGMMA=0) beside it in the same run.
        if (bits == 4 && m >= 9) {
          setenv("MLX_CUDA_QMV_WGMMA", "0", 1);
          Timed t = time_us(x, qs, gs, bits);
          unsetenv("MLX_CUDA_QMV_WGMMA");
          print_bench(bits, gs, n, k, m, "lib_invariant_launcher" + suffix, t, wbytes, !serial);
        }
      }
    }
  }
  return 0;
}

// MLX's NVRTC compiles find their headers in <the executable's folder>/../include, the folder
// taken from the name the executable was started by (dladdr gives argv[0] for a statically linked
// MLX): started as `./qmv_lib` that is "." whose parent is "", and upstream's qmm_sm80 compile
// fails ("cannot open source file cute/..."; session 37 lost a call to it). So: stop with exit 2
// where the executable's folder has no ../include/mlx, and otherwise run again by its absolute
// path when started by another name.
static void run_by_absolute_path(char** argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;  // no /proc: leave it to MLX
  self[n] = 0;
  std::string dir(self, std::string(self).rfind('/'));
  struct stat st;
  if (stat((dir + "/../include/mlx").c_str(), &st) != 0) {
    fprintf(stderr,
            "qmv_lib: %s/../include has no MLX headers: copy qmv_lib into the bin/ folder of the "
            "MLX install it was built against and run it from there\n",
            dir.c_str());
    exit(2);
  }
  if (strcmp(argv[0], self) != 0) {
    argv[0] = self;
    execv(self, argv);
    perror("qmv_lib: execv");
    exit(2);
  }
}

int main(int argc, char** argv) {
  run_by_absolute_path(argv);
  std::string mode = argc > 1 ? argv[1] : "parity";
  if (mode == "parity") return parity();
  if (mode == "bench") return bench(argc, argv, false);
  if (mode == "serial") {
    // Read once, when MLX's CUDA device first starts: set before any MLX call.
    setenv("MLX_USE_CUDA_GRAPHS", "0", 1);
    return bench(argc, argv, true);
  }
  fprintf(stderr, "usage: qmv_lib parity|bench|serial [shape-index...]\n");
  return 2;
}
