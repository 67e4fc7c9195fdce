// The timing of the kernel harness (harness.cuh's time_us) and of the Marlin benchmark
// (cuda/bench/marlin_bench.cu), as cuda/bench/peers.py's time_us: three warm-up calls, one timed
// call to size the repetitions (about 3 ms each, 8 to 2000 calls), seven repetitions rotating
// over `copies`, the median in µs (CUDA events). The includer defines CHECK(cudaError_t).
#pragma once

#include <algorithm>
#include <vector>

template <typename F>
inline float median_time_us(F&& f, int copies) {
  for (int i = 0; i < 3; ++i) f(i % copies);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventRecord(e0));
  f(0);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float first;
  CHECK(cudaEventElapsedTime(&first, e0, e1));
  int iters = std::max(8, std::min(2000, int(3.0f / std::max(first, 1e-3f))));
  std::vector<float> reps;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) f((i + r) % copies);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    reps.push_back(ms * 1000.f / iters);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  std::sort(reps.begin(), reps.end());
  return reps[reps.size() / 2];
}
