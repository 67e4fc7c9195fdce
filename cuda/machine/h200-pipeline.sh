#!/usr/bin/env bash
# Particular to this project's GPU machine (one H200, commands cut at 10 minutes, a machine held
# while calls follow each other within its idle release): the whole measured session as one
# process that outlives the calls, and the calls that watch it.
#
#   h200-pipeline.sh start CARRY   launch `run CARRY` in its own session (setsid), unless one is
#                                  running or done; CARRY is the carried folder (bundle.tar.gz,
#                                  debs/ for h200-blas.sh, overlays-mlx/ for control.sh,
#                                  ptx-cache.tar.xz to seed MLX's NVRTC cache, if any)
#   h200-pipeline.sh wait SECONDS  wait until the run is done or SECONDS passed, print its log's
#                                  end, and pack what it has so far into $OUT (results.tar.gz,
#                                  ptx-cache.tar.xz.0, .1... once kept: pieces of 15 MiB, at
#                                  most 16 come back; env.txt)
#   h200-pipeline.sh run CARRY     the steps, in order, each skipped once done (state in
#                                  /tmp/run/steps): env, blas, build (Ninja's log and its
#                                  longest units, ninja_times.py, in res/), probe, sdpa (in the
#                                  background of the suites), suite streamed:gpu, suite
#                                  upstream:gpu (whole suite), the timeouts and failures of both
#                                  again on the cache they filled (retry), streamed:cpu beside
#                                  them, link-scope.sh after the SDPA cases,
#                                  control (the pin, control.sh; PTX entries whose headers the
#                                  series changes dropped: ptx_stale.py), sdpa at the pin, suite
#                                  pin:gpu and pin:cpu, its timeouts and failures again,
#                                  keep-ptx
#   env: DEADLINE (seconds the run may take from its start, default 1300), FORK_ONLY=1 (no
#   upstream, control or pin runs: streamed:gpu, the SDPA cases and keep-ptx alone), EXACTNESS=1
#   (after the build: the exactness probe's runs and the SDPA cases, no suites), QMV=1 (issue 27's
#   library call: the build with MLX's tests off, then gpu-session.sh's `build bench` from a copy of
#   the checkout's cuda/ with its results in res/qmv, then the 7b decoder's probe under the
#   invariant policy beside streamed, then with MLX_CUDA_QMV_WGMMA_PDL=0, with it again, with the
#   token ids built from host data (tokens=host), with CUDA graphs off, then with
#   MLX_CUDA_QMV_WGMMA=0 (the launcher), timed, then at prompt 1024 (without, then with the
#   negative control, then both policies, then the invariant policy in three processes, with cuDNN
#   attention and without), then attention's op table under both policies, then MLX's
#   test_fast_sdpa.py under both (QMV_PY=1: the build with the Python bindings, which that run
#   needs; the bundle made with --bundle-python);
#   PROBE_RESERVE: the seconds gpu-session.sh leaves to the probe, default 240; QMV_LIB=0: the
#   probe's runs alone, no gpu-session.sh; QMV_LIB=after: the probe's runs first, then
#   gpu-session.sh with what is left but LIB_RESERVE seconds (default 20, for `wait` to pack);
#   QMV_RUNS: which of the probe's runs, in that order, or none; unset or empty: all);
#   PIPELINE_DIR: the state folder (default /tmp/run)
# The GPU idles while MLX builds (about 600 s; 813 s on the H200 of session 41): a gpu-session.sh
# phase that needs no MLX build (wgmma, invariant, sdpa) may run in the foreground of the call
# that starts this, before `wait` (session 34: `wgmma` so, its rounds within a few percent of
# the same arms' rounds with nothing else running); with GPU_SESSION_DIR set to this folder
# (`start` unpacked the bundle) it shares the state, so `invariant`'s kernel harness is the one
# QMV_LIB's bench then finds built; with a folder of its own it builds its own.
set -uo pipefail
W=${PIPELINE_DIR:-/tmp/run}
B=$W/mlx-cuda-bundle
# This folder, in the checkout: the bundle does not carry cuda/machine/ (dev-only).
M=$(cd "$(dirname "$0")" && pwd)
R=$W/res
# QMV=1's probe runs (QMV_RUNS picks and orders them): a name it does not know stops here, exit
# 2, before anything is written.
qmv_runs="inv-7b-40 nopdl-7b-40 pdl-7b-40 hosttok-7b-40 nographs-7b-40 launcher-7b-40 inv-7b-1024 ctl-7b-1024 both-7b-1024 rep-7b-1024 rep-nocudnn-7b-1024 sdpa-ops sdpa-suite"
for r in ${QMV_RUNS:-}; do
  case " $qmv_runs none " in *" $r "*) ;; *)
    echo "h200-pipeline.sh: QMV_RUNS names no run '$r' (the runs: $qmv_runs; or none)" >&2; exit 2 ;;
  esac
done
# QMV_RUNS=none: no probe run (the library's alone, where QMV_LIB runs it); unset or empty: all.
case " $(echo ${QMV_RUNS:-}) " in *" none "*)
  [ "$(echo $QMV_RUNS)" = none ] || {
    echo "h200-pipeline.sh: QMV_RUNS=none stands alone, not with other runs ('$QMV_RUNS')" >&2; exit 2; } ;;
esac
case ${QMV_LIB:-1} in 0|1|after) ;; *)
  echo "h200-pipeline.sh: QMV_LIB is 1 (the library's runs, then the probe's), after (the probe's, then the library's) or 0 (the probe's alone), not '$QMV_LIB'" >&2; exit 2 ;;
esac
mkdir -p $W $R $W/steps

case "${1:-}" in
  start)
    if [ -f $W/pid ] && kill -0 "$(cat $W/pid)" 2>/dev/null; then echo "pipeline: running"; exit 0; fi
    [ -f $W/done ] && { echo "pipeline: done"; exit 0; }
    # A copy of its own: each call sends the carried folder again.
    rm -rf $W/carry && cp -r "${2:?carried folder}" $W/carry || exit 1
    # The bundle unpacked before this returns and kept as the one unpacked: a gpu-session.sh
    # phase started beside the build in the same call with GPU_SESSION_DIR set to this folder
    # (its checkout carrying the same bundle) takes the tree for its own and shares the state:
    # the kernel harness it builds is the one QMV_LIB's `build bench` finds built.
    if [ ! -d $B ]; then
      tar -xzf $W/carry/bundle.tar.gz -C $W && cp $W/carry/bundle.tar.gz $W/bundle.tar.gz || exit 1
    fi
    setsid nohup bash "$0" run $W/carry > $W/pipeline.log 2>&1 < /dev/null &
    echo $! > $W/pid
    echo "pipeline: started"
    exit 0 ;;
  wait)
    end=$(( $(date +%s) + ${2:?seconds} ))
    while [ ! -f $W/done ] && [ "$(date +%s)" -lt "$end" ]; do
      kill -0 "$(cat $W/pid 2>/dev/null)" 2>/dev/null || { echo "pipeline: not running"; break; }
      sleep 5
    done
    tail -40 $W/pipeline.log
    [ -f $W/done ] && echo "pipeline: done" || echo "pipeline: still running"
    if [ -n "${OUT:-}" ]; then
      tar -czf "$OUT/results.tar.gz" -C $W res pipeline.log 2>/dev/null
      for p in $W/ptx-cache.tar.xz.[0-3]; do [ -f "$p" ] && cp "$p" "$OUT/"; done
      [ -f $R/env.txt ] && cp $R/env.txt "$OUT/"
    fi
    exit 0 ;;
  run) carry=${2:?carried folder} ;;
  *) echo "usage: h200-pipeline.sh start CARRY | wait SECONDS | run CARRY" >&2; exit 2 ;;
esac

t0=$(date +%s)
left() { echo $(( ${DEADLINE:-1300} - ($(date +%s) - t0) )); }
say() { echo "[$(( $(date +%s) - t0 )) s, $(left) left] $*"; }
step() { [ -f $W/steps/$1 ]; }
done_step() { touch $W/steps/$1; }
trap 'touch $W/done; say "pipeline ends"' EXIT

cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])')
export LD_LIBRARY_PATH=$cudnn/lib:${LD_LIBRARY_PATH:-}

if ! step env; then
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem \
      --format=csv
    nvcc --version | tail -2; cmake --version | head -1; ninja --version; python3 --version
    python3 -m pytest --version; nproc
    python3 -m pip show nvidia-cudnn-cu13 2>/dev/null | grep -m1 '^Version' | sed 's/^/cudnn-wheel /'
    command -v compute-sanitizer cuda-gdb; } > $R/env.txt 2>&1
  # The results' header: GPU, driver, clocks (read before any test ran), nvcc, cuDNN, CMake.
  python3 - $R/env.txt > $R/header.json <<'PY'
import csv, json, re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = list(csv.reader([l for l in lines if l.count(",") >= 6][:2], skipinitialspace=True))
gpu = dict(zip(rows[0], rows[1])) if len(rows) == 2 else {}
find = lambda pat: next((m.group(0) for l in lines for m in [re.search(pat, l)] if m), None)
print(json.dumps({
    "gpu": gpu.get("name"), "driver": gpu.get("driver_version"),
    "clocks": {k: v for k, v in gpu.items() if k.startswith("clocks")},
    "nvcc": find(r"Cuda compilation tools.*"), "cmake": find(r"cmake version .*"),
    "python": find(r"Python 3\S*"), "pytest": find(r"pytest \S+"),
    "cudnn": find(r"(?<=cudnn-wheel Version: )\S+"), "cores": next((l for l in lines if l.isdigit()), None),
}, indent=1))
PY
  done_step env
fi

[ -d $B ] || tar -xzf "$carry/bundle.tar.gz" -C $W || { say "unpack failed"; exit 1; }
blas_env=$(bash $M/h200-blas.sh "$carry/debs" $W/blas) || { say "blas failed"; exit 1; }
eval "$blas_env"
if [ -f "$carry/ptx-cache.tar.xz" ] && ! step seed; then
  mkdir -p $W/ptx-carried && tar -xJf "$carry/ptx-cache.tar.xz" -C $W/ptx-carried && done_step seed
  say "ptx cache carried: $(ls $W/ptx-carried | wc -l) files"
fi

if ! step build; then
  say "build"
  py=1; [ "${EXACTNESS:-0}" = 1 ] || [ "${QMV:-0}" = 1 ] && py=0
  [ "${QMV_PY:-0}" = 1 ] && py=1
  [ "${QMV:-0}" = 1 ] && export BUNDLE_CMAKE_ARGS="${BUNDLE_CMAKE_ARGS:-} -DMLX_BUILD_TESTS=OFF"
  PYTHON_BINDINGS=$py JOBS=$(nproc) bash $B/cuda/bundle/build.sh > $R/build.log 2>&1 \
    || { tail -40 $R/build.log; say "build failed"; exit 1; }
  grep -E "Lapack|Blas" $R/build.log | head -4
  # Where the build's time went (the longest units, the last to end): Ninja's log kept beside.
  cp $B/build/.ninja_log $R/ninja-log.txt 2>/dev/null \
    && python3 $M/ninja_times.py $R/ninja-log.txt 12 | tee $R/ninja-times.txt
  # Whether the built install could travel back and be carried in (64 MiB a call, the bundle and
  # debs/ included) instead of building again: its size, and xz's in the background.
  du -sb $B/install $B/install/lib/* 2>/dev/null | tee $R/install-bytes.txt
  (tar -cf - -C $B install | xz -T4 -1 | wc -c > $R/install-xz-bytes.txt) 2>/dev/null &
  done_step build
  say "build done"
fi

[ -e $B/mlx/python/include ] || ln -s ../../install/include $B/mlx/python/include
export PYTHONPATH=$B/mlx/python

# Which way MLX's tests can import the image's torch: as they are, torch first, or not at all.
if [ "${EXACTNESS:-0}" != 1 ] && [ "${QMV:-0}" != 1 ] && ! step probe; then
  n=0
  for order in "import mlx.core as mx; import torch" "import torch; import mlx.core as mx"; do
    n=$((n + 1))
    timeout 120 python3 -X faulthandler -c "$order; print(mx.add(mx.array([1.0]), 1).item(), torch.__version__)" \
      > $R/probe-$n.log 2>&1
    echo "probe [$order]: rc=$? $(tail -1 $R/probe-$n.log)"
  done | tee $R/probe.txt
  # The abort of MLX first, torch second: without cuDNN's folder on LD_LIBRARY_PATH (torch's
  # libraries use RUNPATH, which LD_LIBRARY_PATH overrides), and with MLX in the global scope.
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH//$cudnn\/lib:/} timeout 120 python3 -X faulthandler -c \
    "import mlx.core as mx; import torch; print(mx.add(mx.array([1.0]), 1).item(), torch.__version__)" \
    > $R/probe-3.log 2>&1
  echo "probe [mlx, torch; no cudnn dir]: rc=$? $(tail -1 $R/probe-3.log)" | tee -a $R/probe.txt
  timeout 120 python3 -X faulthandler -c "import os, sys; sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)
import mlx.core as mx; import torch; print(mx.add(mx.array([1.0]), 1).item(), torch.__version__)" \
    > $R/probe-4.log 2>&1
  echo "probe [mlx, torch; RTLD_GLOBAL]: rc=$? $(tail -1 $R/probe-4.log)" | tee -a $R/probe.txt
  # What suite.sh's SUITE_TORCH=global gives the tests: MLX, then torch, a C++ exception caught,
  # an array through torch and back.
  PYTHONPATH=$B/cuda/bundle/torch_global:$PYTHONPATH timeout 120 python3 -X faulthandler -c "import mlx.core as mx
import numpy as np, torch
try:
    mx.reshape(mx.array([1, 2, 3]), (2, 2))
except ValueError:
    pass
t = torch.tensor(np.array(mx.arange(4.0)))
print('global ok', mx.array(t.numpy()).sum().item(), torch.__version__)" > $R/probe-5.log 2>&1
  echo "probe [global]: rc=$? $(tail -1 $R/probe-5.log)" | tee -a $R/probe.txt
  # test_nn's sharded layers call mx.distributed.init(), which segfaulted at the pin and on the
  # fork (session 9): as Python loads MLX, and with MLX's libraries global.
  for g in plain global; do
    pp=$PYTHONPATH; [ $g = global ] && pp=$B/cuda/bundle/torch_global:$PYTHONPATH
    PYTHONPATH=$pp timeout 120 python3 -X faulthandler -c \
      "import mlx.core as mx; g = mx.distributed.init(); print('distributed', g.rank(), g.size())" \
      > $R/probe-dist-$g.log 2>&1
    echo "probe [distributed $g]: rc=$? $(tail -1 $R/probe-dist-$g.log)" | tee -a $R/probe.txt
  done
  # Whether a C++ exception MLX throws and nanobind turns into a Python one survives in this
  # image's Python without torch (the SDPA crash's suspect).
  timeout 120 python3 -X faulthandler -c "import mlx.core as mx
try:
    mx.reshape(mx.array([1, 2, 3]), (2, 2))
except ValueError as e:
    print('caught:', str(e)[:60])" > $R/probe-throw.log 2>&1
  echo "probe [throw]: rc=$? $(tail -1 $R/probe-throw.log)" | tee -a $R/probe.txt
  done_step probe
fi
# Session 7: MLX first aborts at `import torch`; torch first segfaults every C++ exception MLX
# throws (docs/testing.md). Session 9: with extension modules opened RTLD_GLOBAL, MLX first and
# torch second imports. So the tests import torch as they are where that works (plain), else
# with MLX's libraries global (global), else not at all (block); SUITE_TORCH=first stays for a
# run that wants torch first anyway.
torch=block
grep -qs '^probe \[global\]: rc=0' $R/probe.txt && torch=global
grep -qs '^probe \[import mlx.core as mx; import torch\]: rc=0' $R/probe.txt && torch=plain
torch=${SUITE_TORCH:-$torch}
say "torch in the tests: $torch"

# The cuDNN SDPA crash: every case in its own process, then the first crashing case under
# cuda-gdb (backtrace) and compute-sanitizer, with cuDNN's and the frontend's logs.
sdpa() {
  local d=$R/sdpa-$1; mkdir -p $d
  cd $d || return
  MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 300 python3 $B/cuda/bundle/sdpa_repro.py > cases.txt 2>&1
  MLX_CUDA_USE_CUDNN_SDPA=0 MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 200 python3 $B/cuda/bundle/sdpa_repro.py \
    > cases-nocudnn.txt 2>&1
  local c; c=$(grep -m1 -E '^[0-9]+ .*: rc=-' cases.txt | cut -d' ' -f1)
  [ -n "$c" ] || c=$(grep -m1 -E '^[0-9]+ .*: rc=[1-9]' cases.txt | cut -d' ' -f1)
  [ -n "$c" ] || return 0
  # What changes the outcome: the extension's libraries in the global scope (Python loads
  # extensions RTLD_LOCAL, an executable's libraries are global), cuDNN's libraries preloaded,
  # every symbol bound at load (an unresolved one named instead of a call to 0).
  local v
  for v in "SDPA_RTLD_GLOBAL=1" "LD_PRELOAD=$cudnn/lib/libcudnn_graph.so.9:$cudnn/lib/libcudnn.so.9" \
           "LD_BIND_NOW=1" "SDPA_PROMOTE=1"; do
    env "$v" MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 120 python3 -X faulthandler \
      $B/cuda/bundle/sdpa_repro.py "$c" > variant.txt 2>&1
    echo "${v%%=*}: rc=$? $(grep -m1 -E '^case |symbol|undefined' variant.txt)" >> variants.txt
  done
  rm -f variant.txt
  # Which of the extension's libraries define libstdc++'s std::call_once slot ahead of libstdc++
  # (cuda/scope/repro.sh: the fault's mechanism), in the order the extension's scope has them.
  ldd $B/mlx/python/mlx/core*.so | awk '/=> \//{print $3}' | while read -r lib; do
    nm -D --defined-only "$lib" 2>/dev/null | grep -qE ' _ZSt11__once_call(@|$)' && echo "defines std::__once_call: $lib"
  done > once-call.txt
  nm -D --defined-only $B/mlx/python/mlx/core*.so 2>/dev/null | grep -E '_ZSt11__once_call|__once_proxy' >> once-call.txt
  # At the pin the crash and its cause are known (session 9): the variants above say it is still
  # the global-scope fault; the deep look is for a case that still crashes on the fork.
  [ "$1" = pin ] && return 0
  MLX_USE_CUDA_GRAPHS=0 MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 120 python3 -X faulthandler \
    $B/cuda/bundle/sdpa_repro.py "$c" > graphs-off.txt 2>&1
  echo "rc=$?" >> graphs-off.txt
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=cudnn.log CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=frontend.log \
    MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 120 python3 -X faulthandler $B/cuda/bundle/sdpa_repro.py "$c" > logged.txt 2>&1
  echo "rc=$?" >> logged.txt
  MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 180 cuda-gdb -q -batch -ex "set pagination off" -ex "set confirm off" \
    -ex run -ex "bt 60" -ex "info registers rip" -ex "x/6i \$pc" -ex "x/24a \$sp" \
    -ex "info symbol *(void **)\$sp" -ex "info sharedlibrary" \
    --args python3 $B/cuda/bundle/sdpa_repro.py "$c" > gdb.txt 2>&1
  echo "rc=$?" >> gdb.txt
  # A call to address 0 leaves no frames: the return address on the stack names the caller
  # (x/24a above); every C++ exception thrown before the fault, with its backtrace.
  MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 180 cuda-gdb -q -batch -ex "set pagination off" -ex "set confirm off" \
    -ex "catch throw" -ex run -ex "bt 40" -ex continue -ex "bt 40" -ex continue -ex "bt 40" \
    -ex continue -ex "bt 40" -ex "x/24a \$sp" \
    --args python3 $B/cuda/bundle/sdpa_repro.py "$c" > gdb-throw.txt 2>&1
  echo "rc=$?" >> gdb-throw.txt
  ldd $B/mlx/python/mlx/core*.so > ldd.txt 2>&1
  MLX_PTX_CACHE_DIR=$W/ptx-sdpa timeout 180 compute-sanitizer --tool memcheck --print-limit 30 \
    python3 $B/cuda/bundle/sdpa_repro.py "$c" > sanitizer.txt 2>&1
  echo "rc=$?" >> sanitizer.txt
  for f in cudnn.log frontend.log; do [ -f $f ] && tail -c 400000 $f > $f.tail && mv $f.tail $f; done
}

# Seeds a policy's per-file PTX folders from the carried cache (each file's folder gets all of it).
# MLX keys its PTX cache by module name alone (cuda/bundle/ptx_stale.py): a carried entry whose
# JIT-visible headers changed since it was written goes (the sums it was written against travel
# with it as jit.sums; a cache without them cannot be judged and is not used).
jit_roots=$B/mlx/mlx/backend/cuda/device:$B/install/include
seed_ptx() {
  judge_ptx || return 0
  for f in $B/mlx/python/tests/test_*.py cpp; do
    local n; n=$(basename "$f" .py); mkdir -p $W/ptx/$n; cp -rn $W/ptx-carried/. $W/ptx/$n/
  done
}
judge_ptx() {
  [ -d $W/ptx-carried ] || return 1
  if ! step seed-judged; then
    python3 $B/cuda/bundle/ptx_stale.py sums $jit_roots > $W/jit-fork.sums
    if [ -f $W/ptx-carried/jit.sums ]; then
      mv $W/ptx-carried/jit.sums $W/jit-carried.sums
      python3 $B/cuda/bundle/ptx_stale.py drop $W/jit-carried.sums $W/jit-fork.sums $jit_roots \
        $W/ptx-carried
    else
      say "ptx cache carried without jit.sums: not used"; rm -rf $W/ptx-carried; return 1
    fi
    done_step seed-judged
  fi
}

# Every test file, the slowest first (first-use NVRTC compiles: test_quantized), so that no long
# file starts last.
all_files="test_quantized.py $(cd $B/mlx/python/tests && ls test_*.py | grep -v '^test_quantized.py$' | tr '\n' ' ')"

suite() {  # POLICY DEVICE BUDGET [FILES]
  local name=$1-$2 budget=$3
  step suite-$name && return 0
  [ "$budget" -gt 60 ] || { say "suite $name: no time left ($budget s)"; return 1; }
  say "suite $name (files cut at $budget s)"
  SUITE_FILES=${4:-$all_files} SUITE_TORCH=$torch SUITE_JOBS=${SUITE_JOBS:-8} SUITE_FILE_TIMEOUT=$budget \
    TEST_TIMEOUT=$(( budget - 20 )) PTX_ROOT=${PTX:-$W/ptx} bash $B/cuda/bundle/suite.sh $1 $2 $R/$name \
    > $R/$name.txt 2>&1
  sort -t: -k1,1 $R/$name.txt | cut -c1-160
  done_step suite-$name
}

# Runs again, once, the files of a run that ran out of time or had failures, on the cache their first attempt
# filled (session 9: the fork's runs came first, on a cold NVRTC cache, and ran out of time
# where the pin's, warm, did not). The first attempt's files go to NAME/first/: suite_json.py
# keeps them in the files entry and judges the second.
retry() {  # POLICY DEVICE BUDGET
  local name=$1-$2 d=$R/$1-$2 files=() cpp=0 f n rc
  step retry-$name && return 0
  [ -d $d ] || return 0
  for f in $d/*.rc; do
    [ -f "$f" ] || continue
    read -r rc _ < "$f"
    n=$(basename "$f" .rc)
    # Out of time, or (a Python file) tests failed, pytest's 1: a failure the file's second run
    # does not repeat is named flaky by suite_json.py, not hidden.
    case "$rc" in 124|137) ;; 1) [ "$n" = cpp ] && continue ;; *) continue ;; esac
    if [ "$n" = cpp ]; then cpp=1; else files+=("$n.py"); fi
  done
  if [ ${#files[@]} -eq 0 ] && [ $cpp = 0 ]; then done_step retry-$name; return 0; fi
  [ "$3" -gt 60 ] || { say "retry $name: no time left ($3 s)"; return 1; }
  mkdir -p $d/first
  for f in "${files[@]}"; do mv $d/"${f%.py}".{jsonl,log,rc} $d/first/ 2>/dev/null; done
  [ $cpp = 0 ] || mv $d/cpp.* $d/first/
  local list="${files[*]}"
  say "retry $name: ${list:-} $([ $cpp = 1 ] && echo C++) (files cut at $3 s)"
  SUITE_FILES=${list:-none} SUITE_CPP=$cpp SUITE_TORCH=$torch SUITE_JOBS=${SUITE_JOBS:-8} \
    SUITE_FILE_TIMEOUT=$3 TEST_TIMEOUT=$(( $3 - 20 )) PTX_ROOT=$W/ptx \
    bash $B/cuda/bundle/suite.sh $1 $2 $d > $R/$name-retry.txt 2>&1
  sort $R/$name-retry.txt | cut -c1-160
  done_step retry-$name
}

# The cache that comes back: every folder's entries, less those of kernels whose headers differ
# between the fork and the pin (either tree's would be wrong for the other), with the fork's
# header sums as jit.sums for the next run's seed_ptx.
keep_ptx() {
  rm -rf $W/ptx-all && mkdir -p $W/ptx-all
  for d in $W/ptx/*/ $W/ptx-sdpa/ $W/ptx-exactness/; do [ -d "$d" ] && cp -rn "$d". $W/ptx-all/; done
  [ -f $W/jit-fork.sums ] || python3 $B/cuda/bundle/ptx_stale.py sums $jit_roots > $W/jit-fork.sums
  [ -f $W/jit-pin.sums ] && python3 $B/cuda/bundle/ptx_stale.py drop $W/jit-fork.sums $W/jit-pin.sums \
    $jit_roots $W/ptx-all
  cp $W/jit-fork.sums $W/ptx-all/jit.sums
  tar -cJf $W/ptx-cache.tar.xz -C $W/ptx-all . && \
    say "ptx cache: $(ls $W/ptx-all | wc -l) files, $(( $(stat -c %s $W/ptx-cache.tar.xz) >> 20 )) MiB packed"
  # A file that comes back from $OUT is at most 16 MiB: larger packs come back in pieces
  # (cat ptx-cache.tar.xz.* > ptx-cache.tar.xz).
  rm -f $W/ptx-cache.tar.xz.[0-9]*
  split -b 15M -d -a 1 $W/ptx-cache.tar.xz $W/ptx-cache.tar.xz.
}

# The SDPA runs use no NVRTC kernel of the series' files: the control may go on beside them.
wait_upto() { local i; for (( i=0; i<$2; i+=5 )); do kill -0 "$1" 2>/dev/null || return 0; sleep 5; done; }

# The block-vs-chain exactness probe (cuda/bundle/exactness.sh, docs/kernels/exactness.md):
# each run's lines in $R/exactness-NAME.jsonl, rendered at home with
# `cargo xtask exactness --backend cuda --from FILE`.
exactness() {  # NAME SPEC [VAR=VALUE...]
  step exactness-$1 && return 0
  say "exactness $1"
  [ -d $W/ptx-exactness ] || { judge_ptx && cp -r $W/ptx-carried $W/ptx-exactness; }
  env "${@:3}" MLX_PTX_CACHE_DIR=$W/ptx-exactness PROBE_BUILD=$W/build-probe timeout 480 \
    bash $B/cuda/bundle/exactness.sh $R/exactness-$1.jsonl "$2" > $R/exactness-$1.log 2>&1
  echo "exactness $1: rc=$? $(tail -1 $R/exactness-$1.log | cut -c1-120)" | tee -a $R/exactness.txt
  done_step exactness-$1
}
if [ "${QMV:-0}" = 1 ]; then
  # gpu-session.sh runs from a checkout with .devcarry/bundle.tar.gz: a copy of this one's cuda/
  # (a later call may send the checkout again) and the bundle this run unpacked (the same file as
  # $W/bundle.tar.gz, so its unpack keeps the built tree); its build step finds MLX built and
  # installed, and builds cuda/lib and the kernel harness. qmv_lib RESERVE: its build and bench
  # with all but RESERVE seconds of what is left (QMV_LIB=1: before the probe's runs, which get
  # PROBE_RESERVE; after: once they are done, LIB_RESERVE kept for `wait` to pack).
  qmv_lib() {
    step qmv && return 0
    say "qmv: gpu-session.sh build bench"
    rm -rf $W/ck && mkdir -p $W/ck/.devcarry $R/qmv && cp -r $M/.. $W/ck/cuda \
      && cp "$carry/bundle.tar.gz" $W/ck/.devcarry/ && cp "$carry/bundle.tar.gz" $W/bundle.tar.gz \
      || { say "qmv: copy failed"; exit 1; }
    # The probe's build and the 7b runs below took about 100 s (session 32, H100);
    # gpu-session.sh's own build (the kernel harness, cuda/lib) took 321 s there.
    (cd $W/ck && OUT=$R/qmv DEADLINE=$(( $(left) - $1 )) bash $M/gpu-session.sh build bench) \
      > $R/qmv.txt 2>&1
    echo "qmv: rc=$?"; tail -30 $R/qmv.txt
    done_step qmv
  }
  # MLX's own attention tests (test_fast_sdpa.py: overlay 0018's kernels under the invariant
  # policy, compared with tolerances), then under streamed beside them; their results JSON.
  # Needs the Python bindings: QMV_PY=1 and a bundle made with --bundle-python.
  sdpa_suite() {
    ls $B/mlx/python/mlx/core*.so > /dev/null 2>&1 \
      || { say "sdpa-suite: no Python bindings (QMV_PY=1, a bundle made with --bundle-python)"; return 1; }
    local p b
    for p in invariant streamed; do
      b=$(( $(left) - 60 )); [ $b -gt 300 ] && b=300
      SUITE_CPP=0 suite $p gpu $b test_fast_sdpa.py
    done
    python3 $B/cuda/bundle/suite_json.py $R/sdpa-suite.json $R/header.json \
      invariant:gpu:$R/invariant-gpu streamed:gpu:$R/streamed-gpu
  }
  [ "${QMV_LIB:-1}" = 1 ] && qmv_lib ${PROBE_RESERVE:-240}
  # The probe's runs, in QMV_RUNS's order (default: as listed).
  t5='preset=7b;ops=0;prompt=40;cache=step;timing=5'
  t31='preset=7b;ops=0;prompt=40;cache=step;timing=31'
  t1024='preset=7b;ops=0;prompt=1024;cache=step;timing=5'
  for r in ${QMV_RUNS:-$qmv_runs}; do
    case $r in
      # Both policies, with the negative control.
      inv-7b-40) exactness $r "$t5" POLICIES="invariant streamed" ;;
      # The warpgroup-mma kernel's launches without programmatic dependent launch, then with it
      # (the same build and GPU, minutes apart); then with it and CUDA graphs off (its stream
      # launches: the same rows must come out).
      nopdl-7b-40) exactness $r "$t31" POLICIES=invariant CONTROL=0 MLX_CUDA_QMV_WGMMA_PDL=0 ;;
      pdl-7b-40) exactness $r "$t31" POLICIES=invariant CONTROL=0 ;;
      # The token ids built from host data in every forward, as probes before session 36 did
      # (managed memory the GPU faults in at k >= 3): what that costs the verify.
      hosttok-7b-40) exactness $r "$t31;tokens=host" POLICIES=invariant CONTROL=0 ;;
      nographs-7b-40) exactness $r "$t5" POLICIES=invariant CONTROL=0 MLX_USE_CUDA_GRAPHS=0 ;;
      # The invariant policy without the warpgroup-mma kernel (the launcher at every M).
      launcher-7b-40) exactness $r "$t5" POLICIES=invariant CONTROL=0 MLX_CUDA_QMV_WGMMA=0 ;;
      inv-7b-1024)
        [ "$(left)" -gt 240 ] && exactness $r "$t1024" POLICIES=invariant CONTROL=0 ;;
      # Prompt 1024 with the negative control (two-pass attention rows, several a block).
      ctl-7b-1024) exactness $r "$t1024" POLICIES=invariant ;;
      # Prompt 1024 under both policies in one process: the invariant policy's attention on
      # overlay 0018's tensor-core kernels, the streamed policy's on overlay 0013's rows.
      both-7b-1024) exactness $r "$t1024" POLICIES="invariant streamed" CONTROL=0 ;;
      # The same invariant run in three processes: session 41 saw one of three decode other
      # tokens at prompt 1024; the probe's digests of every op's output (taps=1) place where
      # they part, to the op (`exactness --from` compares them), and each process runs the
      # prompt's forward and decode step 1 four more times (repeat=4), compared with its own
      # first; with the negative control (which repeats too). Then the same with the prompt's
      # attention off cuDNN (render the two files together: one control).
      rep-7b-1024) exactness $r "$t1024;taps=1;repeat=4" POLICIES="invariant invariant invariant" ;;
      rep-nocudnn-7b-1024) exactness $r "$t1024;taps=1;repeat=4" POLICIES="invariant invariant invariant" \
        CONTROL=0 MLX_CUDA_USE_CUDNN_SDPA=0 ;;
      # Attention alone through MLX's API, block against chain (f32, f16, bf16; 8 heads over 2,
      # head dim 128) at both sides of the one-pass threshold and past it, under both policies.
      sdpa-ops) exactness $r 'preset=small;decoder=0;only=sdpa_causal;kv_lens=64,512,1020,4096' \
        POLICIES="invariant streamed" CONTROL=0 ;;
      sdpa-suite) sdpa_suite ;;
      none) ;;
      *) say "QMV_RUNS: no run $r ($qmv_runs)" ;;
    esac
  done
  [ "${QMV_LIB:-1}" = after ] && qmv_lib ${LIB_RESERVE:-20}
  say "qmv steps done"
  exit 0
fi
if [ "${EXACTNESS:-0}" = 1 ]; then
  # MLX's defaults (cuDNN SDPA on): the 7b decoder with mlx-lm's KV cache at the issue's prompt
  # lengths (one pass, two passes, cuDNN decode at 256 keys and more), timed; the negative
  # control with the first only (CONTROL=0 after). Then the op table without the quantized
  # cases (their first-use NVRTC compiles outlast a call; KV 1020 puts a block across the
  # 1-pass / 2-pass threshold) and the small decoder with both caches.
  exactness 7b-40 'preset=7b;ops=0;prompt=40;cache=step;timing=5'
  exactness 7b-1024 'preset=7b;ops=0;prompt=1024;cache=step;timing=5' CONTROL=0
  exactness 7b-8192 'preset=7b;ops=0;prompt=8192;cache=step;timing=5' CONTROL=0
  exactness ops 'preset=small;only=sdpa_causal,matmul,rms_norm,softmax,argmax_ties,rope,kv_concat;kv_lens=64,512,1020,4096,16384' CONTROL=0
  exactness small-step 'preset=small;ops=0;cache=step;prompt=300' CONTROL=0
  exactness 7b-1024-nocudnn 'preset=7b;ops=0;prompt=1024;cache=step;timing=5' CONTROL=0 MLX_CUDA_USE_CUDNN_SDPA=0
  keep_ptx
  say "exactness steps done"
  exit 0
fi

# The module's link, as built and without the flag above, and what each does in plain processes
# (cuda/machine/link-scope.sh); in the background of the suites, as the SDPA cases.
scope() {
  step scope-$1 && return 0
  bash $M/link-scope.sh $B $R/scope-$1 > $R/scope-$1.txt 2>&1
  rm -rf $R/scope-$1/bare $R/scope-$1/ptx
  touch $W/steps/scope-$1
}
seed_ptx
step sdpa-fork || { (sdpa fork; touch $W/steps/sdpa-fork; scope fork) & }
sdpa_pid=$!
clamp() { local v=$1; [ "$v" -lt "$2" ] && v=$2; [ "$v" -gt "$3" ] && v=$3; echo "$v"; }
# Budgets: what is left after the build shared so that the pin's run still fits.
if [ "${FORK_ONLY:-0}" = 1 ]; then
  # Too little time left for the control: the fork's streamed run, the SDPA cases, the cache.
  suite streamed gpu "$(clamp $(( $(left) - 60 )) 0 300)"
  wait_upto $sdpa_pid 120
  keep_ptx
  python3 $B/cuda/bundle/suite_json.py $R/cuda-tests-h200.json $R/header.json streamed:gpu:$R/streamed-gpu
  say "fork-only steps done"
  exit 0
fi
# Budgets, from what the build left: the fork's streamed run first, on the coldest cache, with
# the longest cut; upstream on the whole suite (its files that reach no quantized matmul are warm
# by then: the switches route nothing else); each run's timeouts again, warm; the control and
# the pin's run, its timeouts again. CPU-device runs only when time is left for the fork's and
# the pin's both (CI compares the whole CPU suite on the CPU build: docs/testing.md).
suite streamed gpu "$(clamp $(( $(left) - 640 )) 150 360)"
# DEVICE=cpu (MLX's CI runs its C++ tests so on a GPU machine too) beside the GPU-device runs that
# follow, on cores NVRTC leaves, with a PTX folder of its own; done before the control rebuilds.
cpu_suite() { SUITE_JOBS=4 PTX=$W/ptx-cpu suite $1 cpu "$2"; }
(cpu_suite streamed 150) &
cpu_pid=$!
suite upstream gpu "$(clamp $(( $(left) - 470 )) 90 200)"
retry streamed gpu "$(clamp $(( $(left) - 400 )) 0 200)"
retry upstream gpu "$(clamp $(( $(left) - 360 )) 0 150)"
# The control rebuilds the tree these read.
wait $cpu_pid
wait $sdpa_pid
if ! step control; then
  say "control: back to the pin"
  touch $W/control
  python3 $B/cuda/bundle/ptx_stale.py sums $jit_roots > $W/jit-fork.sums
  bash $B/cuda/bundle/control.sh "$carry/overlays-mlx" > $R/control-build.log 2>&1 \
    || { tail -20 $R/control-build.log; say "control failed"; keep_ptx; exit 1; }
  tail -3 $R/control-build.log
  # The pin's kernels must not come from the fork's entries of the same name.
  python3 $B/cuda/bundle/ptx_stale.py sums $jit_roots > $W/jit-pin.sums
  python3 $B/cuda/bundle/ptx_stale.py drop $W/jit-fork.sums $W/jit-pin.sums $jit_roots \
    $W/ptx/* $W/ptx-sdpa | tee -a $R/control-build.log
  done_step control
  say "control build done"
fi
step sdpa-pin || { (sdpa pin; touch $W/steps/sdpa-pin; scope pin) & }
sdpa_pid=$!
cpu_pid=
[ -d $R/streamed-cpu ] && { (cpu_suite pin 150) & cpu_pid=$!; }
suite pin gpu "$(clamp $(( $(left) - 130 )) 0 260)"
retry pin gpu "$(clamp $(( $(left) - 70 )) 0 150)"
[ -z "$cpu_pid" ] || wait_upto $cpu_pid 120
wait_upto $sdpa_pid 120
keep_ptx
runs=()
for d in streamed-gpu upstream-gpu pin-gpu streamed-cpu pin-cpu; do
  [ -d $R/$d ] && runs+=("${d%-*}:${d#*-}:$R/$d")
done
[ ${#runs[@]} -gt 0 ] && python3 $B/cuda/bundle/suite_json.py $R/cuda-tests-h200.json $R/header.json "${runs[@]}"
say "all steps done"
