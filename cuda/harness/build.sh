#!/usr/bin/env bash
# Build the kernel-level qmv harness straight from a materialized MLX tree (no MLX
# build): extract the device half of qmv.cu (everything up to "} // namespace cu")
# into qmv_kernels.cuh and compile main.cu, parity.cu once per dtype and once for the
# candidate launch shapes, and invariant.cu once per dtype and bits, in parallel.
#
#   build.sh TREE CUTLASS_DIR CCCL_INCLUDE FMT_DIR OUT_DIR [extra nvcc flags...]
#
# NVCC (default: nvcc on PATH), ARCH (default: sm_90a) and CUDA_LIBDIR (extra -L for
# cudart, e.g. the pip wheel's lib folder) may be set; PROFILE_ONLY=1 builds only
# profile.cu (qmv_profile, the target of gpu-session.sh's profile phase), WGMMA_ONLY=1 only
# wgmma.cu (qmv_wgmma, the warpgroup-mma prototype of gpu-session.sh's wgmma phase), SDPA_ONLY=1
# only sdpa_rows.cu (sdpa_rows: attention's pass 1 by rows, gpu-session.sh's sdpa phase), from
# the device half of scaled_dot_product_attention.cu (sdpa_kernels.cuh) the same way; SDPA_DIM
# (64, 96; default 128) its head dim.
set -euo pipefail
tree=$1 cutlass=$2 cccl=$3 fmt=$4 out=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# A unit's device half (up to "} // namespace cu", the namespace closed) as a header in $out.
kernels_header() {
  local src=$tree/mlx/backend/cuda/$1
  grep -q '^} // namespace cu$' "$src" || { echo "build.sh: $src has no '} // namespace cu' line" >&2; exit 2; }
  { sed -n '1,/^} \/\/ namespace cu$/p' "$src"; echo '} // namespace mlx::core'; } > "$out/$2"
}
kernels_header quantized/qmm/qmv.cu qmv_kernels.cuh
. "$here/../bundle/nvcc-flags.sh"
arch=${ARCH:-sm_90a}
code=${arch#sm_}
mlx_nvcc_flags "$arch"
flags=("${NVCC_FLAGS[@]}" -DMLX_USE_CUDA -I "$out" -I "$here" -I "$tree" -isystem "$cccl"
  -isystem "$cutlass/include" -isystem "$fmt/include" -DFMT_HEADER_ONLY "$@")
nvcc=${NVCC:-nvcc}
if [ "${PROFILE_ONLY:-0}" = 1 ]; then
  # Only the Nsight Compute target (profile.cu): seconds, for a short GPU call.
  "$nvcc" "${flags[@]}" -lineinfo ${CUDA_LIBDIR:+-L "$CUDA_LIBDIR"} -o "$out/qmv_profile" "$here/profile.cu"
  exit
fi
if [ "${SDPA_ONLY:-0}" = 1 ]; then
  kernels_header scaled_dot_product_attention.cu sdpa_kernels.cuh
  "$nvcc" "${flags[@]}" ${SDPA_DIM:+-DSDPA_DIM=$SDPA_DIM} ${CUDA_LIBDIR:+-L "$CUDA_LIBDIR"} \
    -o "$out/sdpa_rows" "$here/sdpa_rows.cu"
  exit
fi
if [ "${WGMMA_ONLY:-0}" = 1 ]; then
  "$nvcc" "${flags[@]}" ${CUDA_LIBDIR:+-L "$CUDA_LIBDIR"} -o "$out/qmv_wgmma" "$here/wgmma.cu"
  exit
fi
pids=()
"$nvcc" "${flags[@]}" -c -o "$out/main.o" "$here/main.cu" & pids+=($!)
"$nvcc" "${flags[@]}" -c -o "$out/peak.o" "$here/peak.cu" & pids+=($!)
for unit in float32 float16 bfloat16 candidates; do
  "$nvcc" "${flags[@]}" -DHARNESS_DTYPE_$unit -c -o "$out/parity_$unit.o" "$here/parity.cu" &
  pids+=($!)
done
# The invariant kernel's parity and accuracy (invariant.cu): one unit per dtype and bits.
for d in bfloat16 float16; do
  for b in 2 3 4 5 6 8; do
    "$nvcc" "${flags[@]}" -DHARNESS_INV_DTYPE_$d -DHARNESS_INV_BITS=$b -c -o "$out/inv_${d}_$b.o" \
      "$here/invariant.cu" &
    pids+=($!)
  done
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ $rc = 0 ] || { echo "build.sh: compile failed" >&2; exit 1; }
"$nvcc" -gencode=arch=compute_${code},code=sm_${code} ${CUDA_LIBDIR:+-L "$CUDA_LIBDIR"} \
  -o "$out/qmv_harness" "$out"/main.o "$out"/peak.o "$out"/parity_*.o "$out"/inv_*.o
