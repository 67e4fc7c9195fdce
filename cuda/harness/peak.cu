// The tensor-core ceiling the invariant kernel works under (`qmv_harness mma-peak`): how many
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate, the kernel's one instruction shape) an H200
// issues per second, with operands in registers and no memory traffic, at the invariant
// kernel's occupancy (2 blocks of 8 warps per SM) and at full occupancy, for 1 to 8
// independent accumulator chains per warp. A second column tile (M = 9..16) adds one such
// instruction per row tile and k step, so this rate bounds what M = 16 can cost over M = 1.
#include "harness.cuh"

namespace peak_detail {

template <int Chains>
__global__ void mma_loop(float* out, int iters, uint32_t seed) {
  uint32_t a[4], b0 = seed * 3u + threadIdx.x, b1 = seed ^ threadIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = 0x3f803f80u ^ (seed + i);
  float acc[Chains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < Chains; ++c) {
      cu::qmv_invariant_detail::mma_16816<cutlass::bfloat16_t>(acc[c], a, b0, b1);
    }
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < Chains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Instructions per second (as TFLOPS: 2 * 16 * 8 * 16 flops each) of one launch shape.
template <int Chains>
void peak_row(const char* occupancy, int blocks_per_sm, float* out, int sms) {
  int iters = 4096;
  dim3 grid(sms * blocks_per_sm), block(256);
  auto go = [&](int) { mma_loop<Chains><<<grid, block>>>(out, iters, 7u); };
  float us = time_us(go, 1, 0);
  double instrs = double(grid.x) * (block.x / 32) * iters * Chains;
  double tflops = instrs * 2.0 * 16 * 8 * 16 / (us * 1e-6) / 1e12;
  printf("{\"kind\":\"mma_peak\",\"occupancy\":\"%s\",\"blocks_per_sm\":%d,\"chains\":%d,"
         "\"us\":%.3f,\"tflops\":%.1f}\n",
         occupancy, blocks_per_sm, Chains, us, tflops);
}

} // namespace peak_detail

void mma_peak() {
  using namespace peak_detail;
  int sms = sm_count();
  float* out;
  CHECK(cudaMalloc(&out, size_t(sms) * 8 * 256 * sizeof(float)));
  for (auto [name, bps] : {std::pair{"kernel", 2}, std::pair{"full", 8}}) {
    peak_row<1>(name, bps, out, sms);
    peak_row<2>(name, bps, out, sms);
    peak_row<4>(name, bps, out, sms);
    peak_row<8>(name, bps, out, sms);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaFree(out));
}
