#!/usr/bin/env bash
# The block-vs-chain exactness probe (the project's crates/mlx-sys/probe, copied to probe/ in the
# bundle) against the bundle's installed MLX: built with CMake once, then run under each policy
# and once perturbed (the negative control), one JSON line per run appended to OUT. Render the
# file on a machine with the project: `cargo xtask exactness --backend cuda --from OUT`
# (docs/kernels/exactness.md).
#
#   exactness.sh OUT [SPEC]
#     SPEC: the probe's options, "key=value;..." (default preset=small)
#   env: INSTALL_DIR (MLX's install prefix, default BUNDLE/install), PROBE_SRC (default
#   BUNDLE/probe), PROBE_BUILD (default BUNDLE/build-probe), POLICIES (default "streamed
#   upstream"; also invariant, CUDA's third),
#   CONTROL=0 (no negative-control run: another run of the session has it)
set -euo pipefail
bundle=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: exactness.sh OUT [SPEC]}
spec=${2:-preset=small}
install=${INSTALL_DIR:-$bundle/install}
src=${PROBE_SRC:-$bundle/probe}
build=${PROBE_BUILD:-$bundle/build-probe}
# The same options as CONTROL_SPEC in crates/mlx-tasks/src/exactness/mod.rs (a test holds them equal).
control='preset=small;prompt=8;k_max=3;t_max=2;seeds=1;kv_lens=64;perturb=1;ops=1;decoder=1;repeat=1'
[ -f "$src/exactness.cc" ] || { echo "exactness.sh: no probe sources in $src" >&2; exit 2; }
[ -d "$install/share/cmake/MLX" ] || { echo "exactness.sh: no installed MLX in $install (build.sh first)" >&2; exit 2; }
for p in ${POLICIES:-streamed upstream}; do
  case "$p" in upstream|streamed|invariant) ;; *) echo "exactness.sh: policy upstream, streamed or invariant, not $p" >&2; exit 2;; esac
done
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
# CUPTI for the timing rows' GPU time: the nvidia-cuda-cupti wheel (PyTorch's) where the toolkit
# has none; without it the probe's timing is wall time only (its CMake says which).
cupti=$(python3 -c 'import glob, nvidia
print(next((d for p in nvidia.__path__ for d in glob.glob(p + "/cu*") if glob.glob(d + "/include/cupti.h")), ""))' 2>/dev/null || true)
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$install" \
  ${cudnn:+-DCUDNN_LIB_DIR=$cudnn/lib} ${cupti:+-DCUPTI_DIR=$cupti} >&2
cmake --build "$build" >&2
# MLX's NVRTC JIT looks for its headers in <folder of the binary>/../include.
[ -e "$build/include" ] || ln -s "$install/include" "$build/include"
export LD_LIBRARY_PATH=${cudnn:+$cudnn/lib:}${LD_LIBRARY_PATH:-}
tmp=$out.partial
: > "$tmp"
# `invariant` is CUDA's third qmv policy (overlays 0007, 0015); the CPU backend has two, and runs
# streamed beside it.
probe() {
  local cpu=$1; [ "$1" = invariant ] && cpu=streamed
  MLX_CUDA_QMV_BATCH_POLICY=$1 MLX_CPU_QMM_T_POLICY=$cpu "$build/bin/exactness" "$1" "$2" >> "$tmp"
}
for p in ${POLICIES:-streamed upstream}; do
  echo "exactness.sh: probing under the $p policy" >&2
  probe "$p" "$spec"
done
if [ "${CONTROL:-1}" != 0 ]; then
  echo "exactness.sh: the negative control" >&2
  probe streamed "$control"
fi
mv "$tmp" "$out"
