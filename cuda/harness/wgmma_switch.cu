// MLX_CUDA_QMV_WGMMA, as qmv_wgmma_wins (overlay 0015's qmv_wgmma.cuh) reads it at each call:
// unset or 1 lets the warpgroup-mma kernel take M * B = 9..16 of N x K >= 2^26, 0 leaves every
// call to the launcher, anything else throws std::invalid_argument naming the variable and its
// value. Host code only (no GPU needed); `cargo xtask cuda-check compile` builds and runs it.
// Exit 0 when every case holds, 1 naming the first that does not.
#include "mlx/backend/cuda/quantized/qmm/qmv_wgmma.cuh"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace cu = mlx::core::cu;

namespace {

// One call as the library makes it for the shape (one matrix for every vector).
bool wins(int m, int n, int k) { return cu::qmv_wgmma_wins(m, n, k, 1, true); }

void set(const char* value) {
  if (value) {
    setenv("MLX_CUDA_QMV_WGMMA", value, 1);
  } else {
    unsetenv("MLX_CUDA_QMV_WGMMA");
  }
}

int fail(const char* what, const char* value) {
  std::printf("wgmma switch: FAIL %s (MLX_CUDA_QMV_WGMMA=%s)\n", what, value ? value : "unset");
  return 1;
}

} // namespace

int main() {
  const int n = 3584, k = 18944;
  // Taken: unset and 1, at M = 9 and 16; never at M = 8 or 17, nor under 2^26 weights.
  for (const char* v : {static_cast<const char*>(nullptr), "1"}) {
    set(v);
    if (!wins(9, n, k) || !wins(16, n, k)) return fail("M = 9 and 16 not taken", v);
    if (wins(8, n, k) || wins(17, n, k)) return fail("M = 8 or 17 taken", v);
    if (wins(16, 3584, 3584)) return fail("3584 x 3584 taken", v);
  }
  // Off: 0 leaves M = 16 to the launcher.
  set("0");
  if (wins(16, n, k)) return fail("taken", "0");
  // Anything else: an error that names the variable and the value, at any M.
  for (const char* v : {"2", "", "yes", "1 "}) {
    set(v);
    for (int m : {1, 16}) {
      try {
        wins(m, n, k);
        return fail("no error", v);
      } catch (const std::invalid_argument& e) {
        std::string msg = e.what();
        if (msg.find("MLX_CUDA_QMV_WGMMA") == std::string::npos ||
            msg.find(std::string("'") + v + "'") == std::string::npos) {
          return fail(("the error does not name it: " + msg).c_str(), v);
        }
      }
    }
  }
  std::printf("wgmma switch: unset/1 take M = 9..16 of large weights, 0 none, 4 bad values throw\n");
  return 0;
}
