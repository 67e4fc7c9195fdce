#!/usr/bin/env python3
"""fast.scaled_dot_product_attention on the shapes that reach MLX's cuDNN path on CUDA, one case
per process so a crash names its case.

    sdpa_repro.py            every case, each in a child process: one line per case (rc, error)
    sdpa_repro.py CASE       that case alone, in this process (for a debugger or a sanitizer);
                             SDPA_RTLD_GLOBAL=1 imports MLX with RTLD_GLOBAL | RTLD_NOW;
                             SDPA_PROMOTE=1 imports it as Python does, then opens the extension
                             again with RTLD_GLOBAL | RTLD_NOLOAD (what the dropped overlay 0011 did in
                             MLX before cuDNN's first handle: its effect on an unpatched build)

A case: dtype, B, query heads, KV heads, q_len, kv_len, head dim, mask (causal, none, array).
MLX sends q_len > 1 with a causal mask (q_len <= kv_len), no mask or an additive array mask to
cuDNN on sm80+ when D is a multiple of 8 up to 128 and the dtype is f16/bf16; q_len = 1 takes
sdpa_vector unless the KV is a slice of a 256-step cache. The reference is the same attention
written as matmul + softmax in float32. The case process prints the shared libraries of cuDNN,
NVRTC, cuBLAS and the CUDA runtime it has loaded before the call (two versions of one would be a
cause), then the call's max abs error.
"""
import os
import subprocess
import sys

CASES = [
    # name, dtype, B, Hq, Hkv, qL, kvL, D, mask
    ("bf16-causal-q4-kv44-gqa", "bfloat16", 1, 28, 4, 4, 44, 128, "causal"),
    ("bf16-causal-q4-kv44", "bfloat16", 1, 4, 4, 4, 44, 128, "causal"),
    ("f16-causal-q4-kv44", "float16", 1, 4, 4, 4, 44, 128, "causal"),
    ("bf16-causal-q4-kv4", "bfloat16", 1, 4, 4, 4, 4, 128, "causal"),
    ("bf16-causal-q128-kv128", "bfloat16", 1, 4, 4, 128, 128, 128, "causal"),
    ("bf16-none-q4-kv44", "bfloat16", 1, 4, 4, 4, 44, 128, "none"),
    ("bf16-array-q4-kv44", "bfloat16", 1, 4, 4, 4, 44, 128, "array"),
    ("bf16-causal-q4-kv44-d64", "bfloat16", 1, 4, 4, 4, 44, 64, "causal"),
    ("f32-causal-q4-kv44", "float32", 1, 4, 4, 4, 44, 128, "causal"),
]


def loaded_libs():
    keys = ("cudnn", "nvrtc", "cublas", "cudart", "libcuda.so", "nvJitLink", "libstdc++", "libgcc_s")
    seen = []
    for line in open("/proc/self/maps"):
        p = line.split()[-1] if "/" in line else ""
        if any(k in p for k in keys) and p not in seen:
            seen.append(p)
    return seen


def run_case(i):
    if os.environ.get("SDPA_RTLD_GLOBAL") == "1":
        # The extension and its libraries in the global scope, as an executable's are (the C++
        # probe runs these cases without a fault).
        sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)
    import mlx.core as mx
    import numpy as np

    if os.environ.get("SDPA_PROMOTE") == "1":
        import ctypes
        ctypes.CDLL(mx.__file__, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD | os.RTLD_NOW)
    name, dt, B, Hq, Hkv, qL, kvL, D, mask = CASES[i]
    dtype = getattr(mx, dt)
    mx.random.seed(0)
    q = mx.random.normal((B, Hq, qL, D)).astype(dtype)
    k = mx.random.normal((B, Hkv, kvL, D)).astype(dtype)
    v = mx.random.normal((B, Hkv, kvL, D)).astype(dtype)
    scale = D ** -0.5
    mx.eval(q, k, v)
    arr = None
    if mask == "array":
        arr = (mx.random.normal((B, Hq, qL, kvL)) * 0.1).astype(dtype)
        mx.eval(arr)
    for p in loaded_libs():
        print("lib", p, flush=True)
    print("calling", name, "device", mx.default_device(), flush=True)
    m = "causal" if mask == "causal" else arr
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
    mx.eval(out)
    print("returned", flush=True)
    for p in loaded_libs():
        print("lib after", p, flush=True)
    # Reference: float32 matmul + softmax, KV heads repeated for GQA.
    rep = Hq // Hkv
    kf = mx.repeat(k.astype(mx.float32), rep, axis=1)
    vf = mx.repeat(v.astype(mx.float32), rep, axis=1)
    s = (q.astype(mx.float32) * scale) @ kf.swapaxes(-1, -2)
    if mask == "causal":
        qi = mx.arange(kvL - qL, kvL)[:, None]
        ki = mx.arange(kvL)[None, :]
        s = mx.where(qi >= ki, s, -float("inf"))
    elif arr is not None:
        s = s + arr.astype(mx.float32)
    ref = mx.softmax(s, axis=-1) @ vf
    err = float(mx.max(mx.abs(out.astype(mx.float32) - ref)))
    print(f"case {name}: max abs error {err:.3g}", flush=True)
    return 0 if np.isfinite(err) and err < 5e-2 else 1


def main(argv):
    if len(argv) > 1:
        return run_case(int(argv[1]))
    worst = 0
    for i, c in enumerate(CASES):
        p = subprocess.run([sys.executable, "-X", "faulthandler", __file__, str(i)],
                           capture_output=True, text=True, timeout=300)
        tail = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
        err = next((ln for ln in tail if ln.startswith("case ")), tail[-1] if tail else "")
        print(f"{i} {c[0]}: rc={p.returncode} {err}", flush=True)
        worst = max(worst, 0 if p.returncode == 0 else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
