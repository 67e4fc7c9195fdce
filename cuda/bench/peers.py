"""Peers for the CUDA qmv benchmark, through the GPU machine's PyTorch.

tinygemm (torch._weight_int4pack_mm, 4-bit groupwise, gs 64, bf16 activations) and
dense bf16 F.linear (cuBLAS), timed with CUDA events, weights rotated past L2. One JSON
object per line, the same "bench" records as the kernel harness (arm = tinygemm|dense_bf16),
plus "row0_bit_identical" for tinygemm: row 0 at M equals row 0 at M = 1.
"""
import json
import sys

import torch
import torch.nn.functional as F

# The harness's five shapes, then Qwen2.5-7B's four (the same indices as qmv_lib and inv-bench).
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (128256, 4096),
          (3584, 3584), (18944, 3584), (3584, 18944), (152064, 3584)]
MS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16]
GS = 64
ROTATE_BYTES = 640 << 20


def time_us(fn, copies):
    for i in range(3):
        fn(i % copies)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn(0)
    e1.record()
    e1.synchronize()
    first = e0.elapsed_time(e1)
    iters = max(8, min(2000, int(3.0 / max(first, 1e-3))))
    reps = []
    for r in range(7):
        e0.record()
        for i in range(iters):
            fn((i + r) % copies)
        e1.record()
        e1.synchronize()
        reps.append(e0.elapsed_time(e1) * 1000.0 / iters)
    reps.sort()
    return reps[len(reps) // 2]


def emit(**kw):
    print(json.dumps({"kind": "bench", "dtype": "bfloat16", "gs": GS, **kw}), flush=True)


def tinygemm_weights(n, k, gen):
    w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda", generator=gen)
    packed = torch._convert_weight_to_int4pack(w, 8)
    sz = torch.empty(k // GS, n, 2, dtype=torch.bfloat16, device="cuda")
    sz[..., 0].uniform_(0.002, 0.02, generator=gen)
    sz[..., 1].uniform_(-0.1, 0.1, generator=gen)
    return packed, sz


def main():
    which = [int(a) for a in sys.argv[1:]]
    gen = torch.Generator(device="cuda").manual_seed(7)
    for s, (n, k) in enumerate(SHAPES):
        if which and s not in which:
            continue
        wbytes = n * k // 2 + n * (k // GS) * 4
        copies = max(2, ROTATE_BYTES // wbytes + 1)
        tg = [tinygemm_weights(n, k, gen) for _ in range(copies)]
        x = torch.empty(max(MS), k, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1, generator=gen)
        ref_row0 = torch._weight_int4pack_mm(x[:1], tg[0][0], GS, tg[0][1])
        for m in MS:
            xm = x[:m].contiguous()
            t = time_us(lambda c: torch._weight_int4pack_mm(xm, tg[c][0], GS, tg[c][1]), copies)
            same = bool(torch.equal(torch._weight_int4pack_mm(xm, tg[0][0], GS, tg[0][1])[:1], ref_row0))
            emit(bits=4, n=n, k=k, m=m, arm="tinygemm", us=round(t, 3), bytes=wbytes, row0_bit_identical=same)
        del tg
        dbytes = n * k * 2
        dcopies = max(2, ROTATE_BYTES // dbytes + 1)
        dense = [torch.empty(n, k, dtype=torch.bfloat16, device="cuda").uniform_(-0.05, 0.05, generator=gen) for _ in range(dcopies)]
        for m in MS:
            xm = x[:m].contiguous()
            t = time_us(lambda c: F.linear(xm, dense[c]), dcopies)
            emit(bits=16, n=n, k=k, m=m, arm="dense_bf16", us=round(t, 3), bytes=dbytes)
        del dense
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
