# Sourced by `cargo xtask cuda-check` (crates/mlx-tasks/src/cuda_check/mod.rs): NVIDIA's CUDA 13.0
# wheels from PyPI (the GPU machine's release), installed once into the tool's cache in a folder
# keyed by their versions.
#   cuda_wheels VERSION...   prints the folder (pip's --target), installing it when missing
NVCC_WHEELS="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88"
NVRTC_WHEELS="nvidia-cuda-nvrtc==13.0.88"
# cuobjdump and nvdisasm (no 13.0 on PyPI; 13.2 reads 13.0's sm_90a code): SASS without a GPU
# (cuda/harness/sass_mix.py, docs/kernels/cuda-invariant-qmm.md).
SASS_WHEELS="nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86"
cuda_wheels() {
  local root=${OVERLAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/overlay}
  local name; name=$(echo "$@" | sha256sum | cut -c1-12)
  case "$1" in nvidia-cuda-nvrtc*) name=nvrtc-$name ;; *) name=nvcc-$name ;; esac
  local dir=$root/$name
  # Called as $(cuda_wheels ...), where set -e does not reach: every failure returns.
  if [ ! -d "$dir" ]; then
    rm -rf "$dir.tmp"
    python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" "$@" >&2 \
      || { echo "cuda-wheels: pip could not install $*" >&2; return 1; }
    mv "$dir.tmp" "$dir" || return 1
  fi
  echo "$dir"
}
