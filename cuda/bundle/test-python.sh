#!/usr/bin/env bash
# MLX's own Python tests against the CUDA build of a bundle made with --bundle-python and built
# with PYTHON_BINDINGS=1 (build.sh), under one policy of overlay 0007.
#
#   test-python.sh POLICY OUTDIR [pytest args...]
#     POLICY: upstream | streamed (MLX_CUDA_QMV_BATCH_POLICY), or pin (the control build of
#     control.sh: no policy set)
#     writes OUTDIR/pytest-POLICY.log (pytest -v) and OUTDIR/pytest-POLICY.xml (JUnit)
#   env: TEST_FILE (default test_quantized.py), TEST_SELECT (pytest -k expression; default below),
#   TEST_WORKERS (xdist, default 4), TEST_TIMEOUT (seconds per test, default 300), MLX_PTX_CACHE_DIR (kept per policy
#   under OUTDIR's parent unless set), TEST_SHARD (a test's node id, e.g.
#   test_quantized.py::TestQuantized::test_qmm: taken out of the main run and its subtests split
#   over TEST_SHARDS processes, default 9, by shard_subtests.py, each with a copy of the PTX cache
#   merged back at the end; logs OUTDIR/pytest-POLICY-shardI.log)
set -uo pipefail
bundle=$(cd "$(dirname "$0")/../.." && pwd)
policy=${1:?policy: upstream or streamed}
out=${2:?output folder}
shift 2
case "$policy" in upstream|streamed|pin) ;; *) echo "policy: upstream, streamed or pin, not $policy" >&2; exit 2;; esac
shards=${TEST_SHARDS:-9}
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "TEST_SHARDS: a count of processes, not $shards" >&2; exit 2; }
ls "$bundle"/mlx/python/mlx/core*.so > /dev/null 2>&1 || {
  echo "no mlx.core extension in $bundle/mlx/python/mlx: build with PYTHON_BINDINGS=1" >&2; exit 2; }
mkdir -p "$out"
# MLX's NVRTC JIT looks for its headers in <folder of the binary holding MLX>/../include: with the
# static library linked into mlx/python/mlx/core*.so, that is mlx/python/include.
[ -e "$bundle/mlx/python/include" ] || ln -s ../../install/include "$bundle/mlx/python/include"
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH=${cudnn:+$cudnn/lib:}${LD_LIBRARY_PATH:-}
# pin: the unpatched build of control.sh, which has no policy to set.
if [ "$policy" = pin ]; then unset MLX_CUDA_QMV_BATCH_POLICY; else export MLX_CUDA_QMV_BATCH_POLICY=$policy; fi
export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$(dirname "$out")/ptx-$policy}
export PYTHONPATH=$bundle/mlx/python PYTHONDONTWRITEBYTECODE=1 COLUMNS=200
# gather_*, qmm_non_transposed and qvm: their first-use NVRTC compiles of CUTLASS kernels take
# longer than a GPU command may run (each over 300 s, measured on the H200).
DEFAULT_SELECT='not gather and not qmm_non_transposed and not (qvm and not splitk and not fp)'
cd "$bundle/mlx/python/tests"
# Four xdist workers: a test that crashes its process is reported as failed (the worker is replaced)
# instead of ending the run.
# No plugin autoloading: one of the GPU image's pytest plugins (not identified; plain unittest and
# pytest without them pass) makes every C++ exception MLX throws a segmentation fault.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
pytest=(python3 -m pytest -v -p no:cacheprovider -p timeout --timeout "${TEST_TIMEOUT:-300}")
shard_pids=()
if [ -n "${TEST_SHARD:-}" ]; then
  # The main run leaves the test out (SHARDED_TEST); each shard compiles into a cache of its own,
  # seeded from the policy's (MLX rewrites a cache file in place: a process reading it while
  # another writes could load half a module), merged back when all are done.
  export PYTHONPATH=$PYTHONPATH:$bundle/cuda/bundle SHARDED_TEST=$TEST_SHARD
  set -- "$@" -p shard_subtests
  mkdir -p "$MLX_PTX_CACHE_DIR"
  for (( i=0; i<shards; i++ )); do
    rm -rf "$MLX_PTX_CACHE_DIR-shard$i" && cp -r "$MLX_PTX_CACHE_DIR" "$MLX_PTX_CACHE_DIR-shard$i"
    SUBTEST_SHARD=$i/$shards SHARDED_TEST= MLX_PTX_CACHE_DIR=$MLX_PTX_CACHE_DIR-shard$i \
      "${pytest[@]}" -p shard_subtests "$TEST_SHARD" > "$out/pytest-$policy-shard$i.log" 2>&1 &
    shard_pids+=($!)
  done
fi
"${pytest[@]}" -p xdist -n "${TEST_WORKERS:-4}" -k "${TEST_SELECT:-$DEFAULT_SELECT}" --durations=0 \
  --junitxml "$out/pytest-$policy.xml" "${TEST_FILE:-test_quantized.py}" "$@" > "$out/pytest-$policy.log" 2>&1
rc=$?
tail -3 "$out/pytest-$policy.log"
for i in "${!shard_pids[@]}"; do
  wait "${shard_pids[$i]}" || rc=1
  cp -rn "$MLX_PTX_CACHE_DIR-shard$i/." "$MLX_PTX_CACHE_DIR/" && rm -rf "$MLX_PTX_CACHE_DIR-shard$i"
  echo "shard $i: $(tail -1 "$out/pytest-$policy-shard$i.log")"
done
exit $rc
