// MLX_CUDA_QMV_WGMMA, as qmv_wgmma_wins (overlay 0015's qmv_wgmma.cuh) reads it at each call:
// unset or 1 lets the warpgroup-mma kernel take M * B = 9..16 of N x K >= 3 * 2^23, 0 leaves every
// call to the launcher, anything else throws std::invalid_argument naming the variable and its
// value. MLX_CUDA_QMV_WGMMA_PDL, as qmv_wgmma_pdl reads it: unset or 1 launches the kernel's
// three launches with programmatic dependent launch, 0 without, anything else throws the same
// way. Host code only (no GPU needed); `cargo xtask cuda-check compile` builds and runs it.
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

void set_var(const char* name, const char* value) {
  if (value) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

void set(const char* value) { set_var("MLX_CUDA_QMV_WGMMA", value); }

int fail_var(const char* name, const char* what, const char* value) {
  std::printf("wgmma switch: FAIL %s (%s=%s)\n", what, name, value ? value : "unset");
  return 1;
}

int fail(const char* what, const char* value) {
  return fail_var("MLX_CUDA_QMV_WGMMA", what, value);
}

// Whether a call that reads `name` throws std::invalid_argument naming it and `value`; an empty
// string when it does, else what went wrong.
template <typename F>
std::string throws_naming(F&& call, const char* name, const char* value) {
  try {
    call();
    return "no error";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    if (msg.find(std::string(name) + " must") == std::string::npos ||
        msg.find(std::string("'") + value + "'") == std::string::npos) {
      return "the error does not name it: " + msg;
    }
  }
  return "";
}

// MLX_CUDA_QMV_WGMMA_PDL: unset and 1 on, 0 off, anything else an error naming it; it leaves
// MLX_CUDA_QMV_WGMMA's routing alone.
int pdl_switch() {
  const char* name = "MLX_CUDA_QMV_WGMMA_PDL";
  for (const char* v : {static_cast<const char*>(nullptr), "1"}) {
    set_var(name, v);
    if (!cu::qmv_wgmma_pdl()) return fail_var(name, "off", v);
  }
  set_var(name, "0");
  if (cu::qmv_wgmma_pdl()) return fail_var(name, "on", "0");
  set(nullptr);
  if (!wins(16, 3584, 18944)) return fail_var(name, "M = 16 not taken", "0");
  for (const char* v : {"2", "", "yes", "1 "}) {
    set_var(name, v);
    std::string e = throws_naming([] { cu::qmv_wgmma_pdl(); }, name, v);
    if (!e.empty()) return fail_var(name, e.c_str(), v);
  }
  set_var(name, nullptr);
  return 0;
}

} // namespace

int main() {
  const int n = 3584, k = 18944;
  // Taken: unset and 1, at M = 9 and 16; never at M = 8 or 17, nor under 6144 x 4096's
  // weights (3 * 2^23: taken there, not on 4096 x 4096 nor one row fewer).
  for (const char* v : {static_cast<const char*>(nullptr), "1"}) {
    set(v);
    if (!wins(9, n, k) || !wins(16, n, k)) return fail("M = 9 and 16 not taken", v);
    if (wins(8, n, k) || wins(17, n, k)) return fail("M = 8 or 17 taken", v);
    if (!wins(16, 6144, 4096) || !wins(9, 4096, 14336)) return fail("6144 x 4096 or 4096 x 14336 not taken", v);
    if (wins(16, 6143, 4096)) return fail("6143 x 4096 taken", v);
    if (wins(16, 4096, 4096) || wins(16, 3584, 3584)) return fail("4096 x 4096 or 3584 x 3584 taken", v);
  }
  // Off: 0 leaves M = 16 to the launcher.
  set("0");
  if (wins(16, n, k)) return fail("taken", "0");
  // Anything else: an error that names the variable and the value, at any M.
  for (const char* v : {"2", "", "yes", "1 "}) {
    set(v);
    for (int m : {1, 16}) {
      std::string e = throws_naming([&] { wins(m, n, k); }, "MLX_CUDA_QMV_WGMMA", v);
      if (!e.empty()) return fail(e.c_str(), v);
    }
  }
  set(nullptr);
  if (int rc = pdl_switch()) return rc;
  std::printf(
      "wgmma switch: unset/1 take M = 9..16 of large weights, 0 none, 4 bad values throw; "
      "MLX_CUDA_QMV_WGMMA_PDL unset/1 on, 0 off, 4 bad values throw\n");
  return 0;
}
