#!/usr/bin/env python3
"""Compile a CUDA source with NVRTC as MLX's JIT does and print a __device__ constant of it.

    nvrtc-params-size.py LIBNVRTC SOURCE NAME ARCH INCLUDE_DIR...

MLX compiles its JIT kernels with --device-as-default-execution-space for the device's
architecture (mlx/backend/cuda/jit_module.cpp). SOURCE defines `__device__ unsigned long long
NAME = ...;`: its value is read back from the PTX. Exit 2 with NVRTC's log when it does not
compile (a static_assert in the source included).
"""
import ctypes
import re
import sys


def main(lib_path, source_path, name, arch, *includes):
    lib = ctypes.CDLL(lib_path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    prog = ctypes.c_void_p()
    source = open(source_path, "rb").read()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"probe.cu", 0, None, None):
        sys.exit("nvrtc-params-size: nvrtcCreateProgram failed")
    opts = [b"--device-as-default-execution-space", f"--gpu-architecture={arch}".encode()]
    opts += [f"--include-path={i}".encode() for i in includes]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if rc:
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        errors = [l for l in log.value.decode(errors="replace").splitlines() if "error" in l]
        print(f"{source_path}: NVRTC: {lib.nvrtcGetErrorString(rc).decode()}", file=sys.stderr)
        print("\n".join(errors[:5]), file=sys.stderr)
        return 2
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    m = re.search(rf"\.u64 \w*{len(name)}{name}E = (\d+);", ptx.value.decode(errors="replace"))
    if not m:
        print(f"{source_path}: no __device__ constant {name} in the PTX", file=sys.stderr)
        return 2
    print(m.group(1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 5:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
