// A target for Nsight Compute: one launch of upstream's qmv at M = 1, of a few streamed launch
// shapes, of the invariant kernel at M = 1, 8, 9 and 16 and of its staged kernel at 16 with four
// row tiles and with two row tiles in one K part, of the XP, TA and XP + TA paths at M = 1
// and 16, and of x in shared memory (XS) with 8 and 16 warps per block at M = 8 and 16 (bf16,
// 4-bit, gs 64) on one weight shape, so that `ncu -k regex:qmv` reports exactly these kernels
// (gpu-session.sh's profile phase).
//
//   qmv_profile [N K]   (default: the 128256 x 4096 head)
#include "harness.cuh"

int main(int argc, char** argv) {
  int n = argc > 2 ? atoi(argv[1]) : 128256;
  int k = argc > 2 ? atoi(argv[2]) : 4096;
  using T = cutlass::bfloat16_t;
  Buffers<T, 4, 64> b({16, n, k, 1}, 1, 7);
  auto run = [&]<typename Sh>(int m) {
    run_streamed<Sh>(b, Problem{m, n, k, 1}, 0, b.out);
  };
  run_upstream(b, Problem{1, n, k, 1}, 0, b.out);
  run.template operator()<LaunchShape<4, 2, 1, 8>>(1);
  run.template operator()<LaunchShape<4, 2, 4, 4>>(4);
  run.template operator()<LaunchShape<4, 2, 8, 4>>(8);
  run.template operator()<LaunchShape<4, 4, 8, 2, 4>>(8);
  run.template operator()<LaunchShape<4, 4, 16, 2, 4>>(16);
  // The invariant tensor-core kernel (overlay 0015, the launcher's choice) at M = 1, 8, 9 and 16:
  // where the second column tile starts to cost.
  for (int m : {1, 8, 9, 16}) {
    run_invariant(b, Problem{m, n, k, 1}, 0, b.x, b.out, true, sm_count());
  }
  // Its staged kernel at M = 16 with four row tiles, and with two row tiles and K in one part
  // (KP = 1: the 8 warps of a block on the same K, on their own rows).
  cu::qmv_invariant_staged<4, 64>(b.x, b.wq(0), b.scales, b.biases, b.out, 16, 1, n, k, true,
                                  sm_count(), launch_smem);
  cu::qmv_invariant_staged<2, 64, 1>(b.x, b.wq(0), b.scales, b.biases, b.out, 16, 1, n, k, true,
                                     sm_count(), launch_smem);
  // The launcher's other paths at M = 1 and 16: XP (x's preparation, its own kernel, and the
  // staged kernel that reads it), TA (copy addresses from one base per tile) and both.
  for (InvPath path : {InvPath::Xp, InvPath::Ta, InvPath::XpTa}) {
    for (int m : {1, 16}) {
      run_invariant_path(path, b, Problem{m, n, k, 1}, 0, b.x, b.out, true, sm_count());
    }
  }
  // x in shared memory (XS, one block per SM) with two row tiles of 8 warps and one of 16, at
  // M = 8 and 16: which pipe or stall the second column tile adds once x no longer comes through
  // L1 (docs/kernels/cuda-invariant-qmm.md, "Session 25").
  for (int m : {8, 16}) {
    cu::qmv_invariant_staged<2, 64, 8, 0, false, false, 0, true>(
        b.x, b.wq(0), b.scales, b.biases, b.out, m, 1, n, k, true, sm_count(), launch_smem);
    cu::qmv_invariant_staged<1, 64, 8, 0, false, false, 0, true, 16>(
        b.x, b.wq(0), b.scales, b.biases, b.out, m, 1, n, k, true, sm_count(), launch_smem);
  }
  CHECK(cudaDeviceSynchronize());
  printf("profile: %d x %d done\n", n, k);
  return 0;
}
