#!/usr/bin/env python3
"""quantized_matmul on the shapes MLX's CUDA backend sends to qmm_sm90 (per-channel groups:
group_size == K), checked against the dequantized weights as test_qmm checks them.

    sm90_smoke.py [BITS ...]        (default: 4)

Run with test-python.sh's environment (PYTHONPATH at the bundle's mlx/python, MLX_PTX_CACHE_DIR).
One line per shape: M, N, K, bits, the largest error and whether it is within test_qmm's
tolerance; exit 1 when any is not.
"""
import sys

import mlx.core as mx


def main(bits_list):
    bad = 0
    k1, k2 = mx.random.split(mx.random.key(0))
    for bits in bits_list:
        for m, n, k in [(32, 256, 128), (64, 128, 128)]:
            x = (mx.random.normal(shape=(m, k), key=k1) / k**0.5).astype(mx.float16)
            w = (mx.random.normal(shape=(n, k), key=k2) / k**0.5).astype(mx.float16)
            wq, scales, biases = mx.quantize(w, k, bits)
            w_hat = mx.dequantize(wq, scales, biases, k, bits)
            y = mx.quantized_matmul(x, wq, scales, biases, True, k, bits)
            err = (y - x @ w_hat.T).abs().max().item()
            ok = err < 1.5e-3
            bad += not ok
            print(f"M={m} N={n} K={k} group_size={k} bits={bits}: max error {err:.3g}"
                  f" {'ok' if ok else 'FAILS'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main([int(b) for b in sys.argv[1:]] or [4]))
