#!/usr/bin/env bash
# MLX's whole Python suite (python/tests/test_*.py) and its C++ tests against a bundle built with
# PYTHON_BINDINGS=1 (build.sh; the C++ tests need a bundle whose cmake-defines turn
# MLX_BUILD_TESTS on), as MLX's CI runs them (DEVICE=gpu or cpu), one process per file so a crash
# or a hang ends that file alone. suite_json.py turns what this writes into the results JSON.
#
#   suite.sh POLICY DEVICE OUTDIR
#     POLICY: upstream | streamed (both switches of the overlays: MLX_CUDA_QMV_BATCH_POLICY and
#       MLX_CPU_QMM_T_POLICY), invariant (CUDA's third policy, overlays 0015 and 0018; the CPU
#       switch, which has two, streamed), or pin (control.sh's unpatched build: neither is set)
#     DEVICE: gpu | cpu (MLX's tests read DEVICE; MLX's CI sets it the same way)
#     writes OUTDIR/FILE.jsonl (outcomes.py: each test's result as it happens), OUTDIR/FILE.log
#     (pytest's output), OUTDIR/FILE.rc ("RC SECONDS"; 124 when the file ran out of time) for
#     every test file, and OUTDIR/cpp.xml, OUTDIR/cpp.rc for the C++ tests (doctest's XML
#     reporter, written line by line: a crash leaves the case it was in open)
#   env: SUITE_FILES (test files, default every python/tests/test_*.py; "none": the C++ tests
#   alone), SUITE_JOBS (files at a
#   time, default 8), SUITE_FILE_TIMEOUT (seconds a file may run, default 480), TEST_TIMEOUT
#   (pytest-timeout's seconds per test, default 300), SUITE_CPP (0: no C++ tests), PTX_ROOT (MLX's
#   NVRTC cache, one folder per file so no two processes write one cache: default
#   OUTDIR/../ptx), SUITE_TORCH (plain: tests import the image's torch as they are; first: torch
#   is imported before MLX in every process; block: `import torch` raises ImportError, so the
#   tests take their no-torch branches; global: extension modules are opened RTLD_GLOBAL, so
#   MLX's libraries are in the global scope as an executable's are; default plain)
set -uo pipefail
bundle=$(cd "$(dirname "$0")/../.." && pwd)
here=$bundle/cuda/bundle
policy=${1:?policy: upstream, streamed, invariant or pin}
device=${2:?device: gpu or cpu}
out=${3:?output folder}
case "$policy" in upstream|streamed|invariant|pin) ;; *) echo "suite.sh: policy upstream, streamed, invariant or pin, not $policy" >&2; exit 2;; esac
case "$device" in gpu|cpu) ;; *) echo "suite.sh: device gpu or cpu, not $device" >&2; exit 2;; esac
torch=${SUITE_TORCH:-plain}
case "$torch" in plain|first|block|global) ;; *) echo "suite.sh: SUITE_TORCH plain, first, block or global, not $torch" >&2; exit 2;; esac
jobs=${SUITE_JOBS:-8}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "suite.sh: SUITE_JOBS: a count, not $jobs" >&2; exit 2; }
tests=$bundle/mlx/python/tests
[ -d "$tests" ] || { echo "suite.sh: no $tests" >&2; exit 2; }
ls "$bundle"/mlx/python/mlx/core*.so > /dev/null 2>&1 || {
  echo "suite.sh: no mlx.core extension in $bundle/mlx/python/mlx: build with PYTHON_BINDINGS=1" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
ptx=${PTX_ROOT:-$(dirname "$out")/ptx}
mkdir -p "$ptx"
# MLX's NVRTC JIT looks for its headers in <folder of the binary holding MLX>/../include.
[ -e "$bundle/mlx/python/include" ] || ln -s ../../install/include "$bundle/mlx/python/include"
build=${BUILD_DIR:-$bundle/build}
[ ! -d "$build" ] || [ -e "$build/include" ] || ln -s "${INSTALL_DIR:-$bundle/install}/include" "$build/include"
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH=${cudnn:+$cudnn/lib:}${LD_LIBRARY_PATH:-}
if [ "$policy" = pin ]; then
  unset MLX_CUDA_QMV_BATCH_POLICY MLX_CPU_QMM_T_POLICY
else
  cpu=$policy
  [ "$policy" = invariant ] && cpu=streamed
  export MLX_CUDA_QMV_BATCH_POLICY=$policy MLX_CPU_QMM_T_POLICY=$cpu
fi
export DEVICE=$device
pypath=$bundle/mlx/python:$here
[ "$torch" = plain ] || pypath=$here/torch_$torch:$pypath
export PYTHONPATH=$pypath PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 COLUMNS=200
# Several files at a time share the cores: OpenBLAS takes two threads each.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
# Every test from the same random state under each policy and at the pin (mlx_seed.py;
# MLX_TEST_SEED, default 0).
# One of the GPU image's pytest plugins makes every C++ exception MLX throws a segmentation
# fault (test-python.sh): only the plugins named here load.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
if [ "${SUITE_FILES:-}" = none ]; then
  files=()
  [ "${SUITE_CPP:-1}" != 0 ] || { echo "suite.sh: SUITE_FILES=none and SUITE_CPP=0: nothing to run" >&2; exit 2; }
elif [ -n "${SUITE_FILES:-}" ]; then
  read -r -a files <<< "$SUITE_FILES"
  [ ${#files[@]} -gt 0 ] || { echo "suite.sh: SUITE_FILES names no test file" >&2; exit 2; }
else
  mapfile -t files < <(cd "$tests" && ls test_*.py)
  [ ${#files[@]} -gt 0 ] || { echo "suite.sh: no test files in $tests" >&2; exit 2; }
fi

run_file() {
  local f=$1 t0 rc
  local name=${f%.py}
  rm -f "$out/$name.jsonl"
  t0=$(date +%s)
  (cd "$tests" && OUTCOMES_FILE=$out/$name.jsonl MLX_PTX_CACHE_DIR=$ptx/$name \
    timeout -k 10 "${SUITE_FILE_TIMEOUT:-480}" python3 -X faulthandler -m pytest -v \
      -p no:cacheprovider -p timeout -p outcomes -p mlx_seed --timeout "${TEST_TIMEOUT:-300}" "$f" \
      > "$out/$name.log" 2>&1)
  rc=$?
  echo "$rc $(( $(date +%s) - t0 ))" > "$out/$name.rc"
  echo "$policy/$device $f: rc=$rc $(( $(date +%s) - t0 )) s $(tail -1 "$out/$name.log" | cut -c1-120)"
}
export -f run_file
export out ptx tests policy device
cpp_pid=
if [ "${SUITE_CPP:-1}" != 0 ] && [ -x "$build/tests/tests" ]; then
  (
    t0=$(date +%s)
    skip=(); [ "$device" = gpu ] && skip=(-sfe="*linalg_tests.cpp")
    cd "$build/tests" && MLX_PTX_CACHE_DIR=$ptx/cpp timeout -k 10 "${SUITE_FILE_TIMEOUT:-480}" \
      stdbuf -oL ./tests -r=xml "${skip[@]}" > "$out/cpp.xml" 2> "$out/cpp.err"
    rc=$?
    echo "$rc $(( $(date +%s) - t0 ))" > "$out/cpp.rc"
    echo "$policy/$device C++ tests: rc=$rc $(( $(date +%s) - t0 )) s"
  ) &
  cpp_pid=$!
fi
[ ${#files[@]} -eq 0 ] || printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} bash -c 'run_file "$@"' _ {}
[ -z "$cpp_pid" ] || wait "$cpp_pid"
exit 0
