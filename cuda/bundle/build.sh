#!/usr/bin/env bash
# Configure, build and install the patched MLX from this bundle, offline: the CMake definitions in
# cmake-defines.txt (written by `cargo xtask build-mlx --backend cuda --bundle`), Ninja, install.
#
#   env: CUDA_ARCH (default 90a), JOBS (default: all cores), BUILD_DIR, INSTALL_DIR (default:
#   build/ and install/ in the bundle), CUDNN_ROOT (default: the Python venv's nvidia/cudnn),
#   PYTHON_BINDINGS=1 (a bundle made with --bundle-python: also MLX's Python extension, written
#   into mlx/python/mlx for cuda/bundle/test-python.sh; python3 is the interpreter it is built for),
#   BUNDLE_CMAKE_ARGS (more CMake arguments, split on whitespace: say where BLAS and LAPACK are on
#   a machine whose system lacks them, as cuda/machine/h200-blas.sh prints them)
set -euo pipefail
bundle=$(cd "$(dirname "$0")/../.." && pwd)
arch=${CUDA_ARCH:-90a}
build=${BUILD_DIR:-$bundle/build}
prefix=${INSTALL_DIR:-$bundle/install}
defs=()
while IFS= read -r d; do
  [ -n "$d" ] || continue
  d=${d//@BUNDLE@/$bundle}
  defs+=("-D${d//@CUDA_ARCH@/$arch}")
done < "$bundle/cmake-defines.txt"
if [ "${PYTHON_BINDINGS:-0}" = 1 ]; then
  [ -f "$bundle/cmake-defines-python.txt" ] || {
    echo "this bundle has no Python bindings: make it with --bundle-python" >&2; exit 2; }
  while IFS= read -r d; do
    [ -n "$d" ] && defs+=("-D${d//@BUNDLE@/$bundle}")
  done < "$bundle/cmake-defines-python.txt"
  defs+=("-DPython_EXECUTABLE=$(command -v python3)")
fi
cudnn=${CUDNN_ROOT:-$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)}
if [ -n "$cudnn" ]; then
  defs+=("-DCUDNN_INCLUDE_PATH=$cudnn/include" "-DCUDNN_LIBRARY_PATH=$cudnn/lib")
fi
# shellcheck disable=SC2206 # split on whitespace on purpose
extra=(${BUNDLE_CMAKE_ARGS:-})
cmake -S "$bundle/mlx" -B "$build" -G Ninja -DCMAKE_INSTALL_PREFIX="$prefix" "${defs[@]}" ${extra[@]+"${extra[@]}"}
ninja -C "$build" -j "${JOBS:-$(nproc)}"
cmake --install "$build" > /dev/null
echo "installed: $prefix"
