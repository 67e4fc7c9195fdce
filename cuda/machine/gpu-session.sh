#!/usr/bin/env bash
# The measured runs on the GPU machine, from a bundle carried in .devcarry/bundle.tar.gz, in
# phases that a warm machine keeps between calls (state under /tmp/run):
#   build   unpack, build and install the patched MLX (with its Python extension when the bundle
#           has one), then the library harness (cuda/lib) and the kernel harness (cuda/harness)
#   invariant  the invariant tensor-core kernel in the kernel harness (parity, accuracy, benchmark;
#           INV_MARLIN=1: Marlin after it, on the same shapes)
#   tune    the kernel harness alone (unpack, build it, parity, candidate shapes, benchmark) on
#           GPU TUNE_GPU (default: the second when there are two): the fast loop for launch shapes
#   tests   MLX's python/tests/test_quantized.py under both policies (test-python.sh); with two
#           GPUs each policy runs on its own GPU, at the same time
#   bench   the library's runs of LIB_RUNS in order (default: one call at a time with CUDA graphs
#           off, `qmv_lib serial`; parity under the three policies; throughput with graphs on,
#           `qmv_lib bench`), peers (PyTorch), Marlin
#           (IST-DASLab's, from the bundle's deps/marlin, built here: cuda/bench/marlin_bench.cu),
#           kernel harness benchmark (inv-bench), all on one GPU, then collect.py -> $OUT/results.json
#   both    tests (both policies at once) on the second GPU while bench runs on the first
#   profile Nsight Compute on cuda/harness/profile.cu (no MLX build): ncu.csv
#   wgmma   the warpgroup-mma prototype (cuda/harness/wgmma.cu, no MLX build): each arm's (WG_ARMS,
#           default every arm it lists) invariance, accuracy and negative control in its own
#           process (wgmma-check.jsonl), WG_CHECK_REPEAT times (default 1; more: each record
#           names its "repeat", and an arm passes only if every repeat does),
#           then WG_AB_ROUNDS rotated rounds of the arms that passed (but the diagnostic
#           *_poison ones) against the launcher (wgmma-ab.jsonl); the *_nofence arms are negative
#           controls, never timed, and the phase fails if one passes every check;
#           WG_NCU=1: then Nsight Compute on one launch of the launcher and of
#           the arms WG_NCU_ARMS (default wg2_s3) at M = 1 and 16, stalls per launch and per
#           SASS line (wgmma-ncu-raw.csv, wgmma-ncu-source.csv.gz, read by ncu_stalls.py)
#   sdpa    attention's pass 1 several query rows a block (overlay 0013's
#           kernel_sdpav_2pass_1_rows) in cuda/harness/sdpa_rows.cu, no MLX build: each row
#           against decode's, upstream's kernel and float64, then timed; then the invariant
#           policy's tensor-core kernels (overlay 0018's sdpa_mma.cuh) the same way
#           (sdpa-rows.jsonl; SDPA_KL keys, default 1040; SDPA_DIM the head dim, default 128)
#   keep-ptx  MLX's PTX caches of this machine packed into $OUT/ptx-cache.tar.xz (carry it back in
#           as .devcarry/ptx-cache.tar.xz: every later session's tests start warm)
#   smoke   quantized_matmul on the shapes upstream sends to qmm_sm90 (sm90_smoke.py), on SMOKE_GPU
#   control the built tree taken back to the unpatched pin (cuda/bundle/control.sh), rebuilt, and
#           MLX's qmm/qmv tests run on it (test-python.sh pin), with the upstream policy's PTX cache;
#           the next phase that unpacks applies the series again (and `build` rebuilds)
# Results land in $OUT (logs packed into logs.tar.gz when there are more than 8 files, the most
# that comes back). env: GPU_SESSION_DIR (the state kept between calls, default /tmp/run),
# DEADLINE (seconds this call may use, default 570), BENCH_SHAPES (indices into the nine shapes;
# default all), LIB_RUNS (bench's library runs in order, default "serial parity bench"), LIB_KEEP
# (seconds serial leaves to what follows, default 70),
# SKIP_PEERS, SKIP_MARLIN, SKIP_HARNESS (build and bench without the kernel
# harness: the library's runs alone), TEST_SELECT and TEST_TIMEOUT (test-python.sh), TUNE_GPU,
# PROFILE_SHAPE ("N K"), PROFILE_SOURCE (a kernel regex: stalls per SASS line) and
# PROFILE_METRICS (more metrics for it) for profile,
# CONTROL_SELECT, INV_MODES, INV_TUNE, INV_SHAPES and INV_MARLIN (invariant; 1: Marlin built
# beside the harness and run after its modes on INV_SHAPES, then inv-bench and Marlin in
# $OUT/results.json: the kernel and Marlin timed alike, one process after the other, no MLX
# build). Two invocations may run at
# once (say `tune` in the background of `build`): unpacking is locked, and
# the last one to leave packs $OUT. A call without .devcarry/bundle.tar.gz stops at unpack and
# leaves the state as it is.
set -uo pipefail
W=${GPU_SESSION_DIR:-/tmp/run}; mkdir -p $W
B=$W/mlx-cuda-bundle
H=$B/cuda/harness
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - t0) )); }
# Seconds for a step that leaves N of the budget to what follows: at least 1, since `timeout`
# takes no negative (and 0 would mean none): a step with no time left stops at once with 124.
keep() { local s=$(( $(left) - $1 )); echo $(( s > 0 ? s : 1 )); }
ngpu=$(nvidia-smi -L | wc -l)
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])')
export LD_LIBRARY_PATH=$cudnn/lib:${LD_LIBRARY_PATH:-}

env_txt() {
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem \
      --format=csv
    nvcc --version | tail -2; cmake --version | head -1; python3 --version; nproc; } > $OUT/env.txt 2>&1
  cat $OUT/env.txt
}

# Unpack the carried bundle unless it is the one already unpacked (a new one starts over), and
# copy this checkout's cuda/ over the bundle's every time (its harness sources iterate faster than
# the tree). A tree left at the pin by `control` gets its series back first. Under a lock: two
# invocations may run at once (one in the background of the other).
unpack() {
  (
    flock 8
    # A call whose checkout lacks the bundle is not a new bundle: say so and keep what the machine
    # has (a half-built tree resumes only while it is there).
    [ -f .devcarry/bundle.tar.gz ] || {
      echo "unpack: no .devcarry/bundle.tar.gz in $(pwd): copy the bundle in first (every call: the"
      echo "  checkout is sent anew); $W is left as it is"; exit 1; } >&2
    if ! { cmp -s .devcarry/bundle.tar.gz $W/bundle.tar.gz && [ -d $B ]; }; then
      rm -rf $B $W/built $W/control $W/hb $W/hp && tar -xzf .devcarry/bundle.tar.gz -C $W \
        && cp .devcarry/bundle.tar.gz $W/ || exit 1
    fi
    sync_cuda || exit 1
    if [ -f $W/control ]; then
      NO_BUILD=1 bash $B/cuda/bundle/control.sh overlays/mlx --forward || exit 1
      rm -f $W/control $W/built
    fi
  ) 8> $W/unpack.lock
}

# The checkout's cuda/lib, harness, bench and bundle over the bundle's: a file that differs is
# replaced by a rename, so a script running from the bundle's tree (build.sh under
# h200-pipeline.sh, when this call shares its folder) reads on from the file it opened; a file
# that is the same is left as it is.
sync_cuda() {
  local f d=$B/cuda
  while read -r f; do
    cmp -s "cuda/$f" "$d/$f" && continue
    mkdir -p "$(dirname "$d/$f")" && cp "cuda/$f" "$d/$f.sync" && mv "$d/$f.sync" "$d/$f" || return 1
  done < <(cd cuda && find lib harness bench bundle -type f)
}

# The hash of what a harness binary is built from (its sources and the tree's qmv.cu).
harness_hash() {
  cat $H/*.cu $H/*.cuh $H/build.sh $B/mlx/mlx/backend/cuda/quantized/qmm/qmv.cu | sha256sum | cut -c1-16
}

# Under a lock: `invariant` in the background of `build` builds it once for both.
harness_build() {
  (
    flock 7
    [ -x $W/hb/qmv_harness ] && [ "$(cat $W/hb/.hash 2>/dev/null)" = "$(harness_hash)" ] && exit 0
    rm -rf $W/hb
    bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hb -Xptxas=-v \
      > $OUT/harness-build.log 2>&1 || { tail -30 $OUT/harness-build.log; exit 1; }
    harness_hash > $W/hb/.hash
  ) 7> $W/harness.lock
}

build() {
  unpack || return 1
  if [ -f $W/built ]; then echo "build: reused (same bundle)"; return 0; fi
  local py=0; [ -f $B/cmake-defines-python.txt ] && py=1
  PYTHON_BINDINGS=$py bash $B/cuda/bundle/build.sh > $OUT/build.log 2>&1 \
    || { tail -60 $OUT/build.log; return 1; }
  echo "mlx build (python=$py): $(( $(date +%s) - t0 )) s"
  local hb=
  [ -n "${SKIP_HARNESS:-}" ] || { harness_build & hb=$!; }
  cmake -S $B/cuda/lib -B $W/lib -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$B/install \
    -DCMAKE_MODULE_PATH=$B/install/share/cmake/MLX -DCUDNN_INCLUDE_PATH=$cudnn/include \
    -DCUDNN_LIBRARY_PATH=$cudnn/lib > $OUT/lib-build.log 2>&1 && ninja -C $W/lib >> $OUT/lib-build.log 2>&1 \
    || { tail -30 $OUT/lib-build.log; return 1; }
  [ -z "$hb" ] || wait $hb || return 1
  touch $W/built
  echo "build done: $(( $(date +%s) - t0 )) s"
}

# The kernel harness alone (seconds to build, no MLX build): parity of the by-M choice for every
# dtype/bits/gs, parity of every candidate launch shape, and the benchmark of all of them.
tune() {
  unpack && harness_build || return 1
  echo "harness build: $(( $(date +%s) - t0 )) s"
  [ -f $OUT/harness-build.log ] && grep -A3 "Compiling entry.*qmv_s" $OUT/harness-build.log \
    | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | sort | uniq -c | sort -rn | head -12
  export CUDA_VISIBLE_DEVICES=$1
  $W/hb/qmv_harness parity > $OUT/tune.jsonl; echo "parity rc=$?"; tail -1 $OUT/tune.jsonl
  $W/hb/qmv_harness parity-shapes >> $OUT/tune.jsonl; echo "parity-shapes rc=$?"; tail -1 $OUT/tune.jsonl
  timeout $(keep 10) $W/hb/qmv_harness bench ${BENCH_SHAPES:-} >> $OUT/tune.jsonl
  echo "tune bench rc=$? ($(left) s left)"
}

# The invariant tensor-core kernel (overlay 0015) in the kernel harness: parity and accuracy
# (inv-parity), then its benchmarks INV_MODES (default inv-bench: beside upstream's qmv and the
# streamed kernel; INV_TUNE=1: inv-tune, the launch shapes, instead; "inv-bench inv-tune": both,
# in that order; inv-ab: candidates against the launcher in rotated rounds, INV_AB_ROUNDS of them)
# on the shapes INV_SHAPES (indices into each mode's list; default all).
invariant() {
  case ${INV_MARLIN:-0} in 0|1) ;; *)
    echo "gpu-session.sh: INV_MARLIN is 1 (Marlin after the modes) or 0, not '$INV_MARLIN'" >&2; return 2 ;;
  esac
  unpack || return 1
  local mb= why=
  [ "${INV_MARLIN:-0}" = 1 ] && marlin_start
  harness_build || return 1
  echo "harness build: $(( $(date +%s) - t0 )) s"
  grep -A2 "Compiling entry.*qmv_invariant" $OUT/harness-build.log \
    | grep -oE "[0-9]+ bytes spill stores" | sort | uniq -c | sort -rn | head -5
  export CUDA_VISIBLE_DEVICES=$1
  $W/hb/qmv_harness inv-parity > $OUT/inv-parity.jsonl; echo "inv-parity rc=$?"
  grep -v '"inv_accuracy"' $OUT/inv-parity.jsonl | tail -5
  local modes=${INV_MODES:-inv-bench}; [ "${INV_TUNE:-0}" = 1 ] && modes=inv-tune
  for what in $modes; do
    timeout $(keep 10) $W/hb/qmv_harness $what ${INV_SHAPES:-} > $OUT/$what.jsonl
    echo "$what rc=$? ($(left) s left)"
    python3 $H/summarize.py $OUT/$what.jsonl | cut -c1-250
  done
  # INV_MARLIN=1: Marlin on the same shapes, right after, and the two in one results.json.
  [ "${INV_MARLIN:-0}" = 1 ] || return 0
  marlin_run ${INV_SHAPES:-}
  python3 $B/cuda/bench/collect.py $OUT/results.json $OUT/env.txt $OUT/inv-bench.jsonl $OUT/marlin.jsonl
}

# tests GPU...: one policy per GPU given (streamed first); one GPU runs both in turn.
tests() {
  local gpus=("$@") pids=() i=0
  for policy in streamed upstream; do
    local g=${gpus[$(( i % ${#gpus[@]} ))]}
    if [ ${#gpus[@]} -gt 1 ]; then
      (CUDA_VISIBLE_DEVICES=$g MLX_PTX_CACHE_DIR=$W/ptx-$policy timeout $(keep 10) \
         bash $B/cuda/bundle/test-python.sh $policy $OUT;
       echo "tests $policy (GPU $g) rc=$?") &
      pids+=($!)
    else
      CUDA_VISIBLE_DEVICES=$g MLX_PTX_CACHE_DIR=$W/ptx-$policy timeout $(keep 10) \
        bash $B/cuda/bundle/test-python.sh $policy $OUT
      echo "tests $policy (GPU $g) rc=$?"
    fi
    i=$(( i + 1 ))
  done
  for p in "${pids[@]}"; do wait $p; done
}

# Marlin (pins.toml's bench source; a fork may not pin it) built in the background: nvcc 13.0 on
# PATH, sm_90a as the H200 is (compute capability 9.0; build.sh's CUDA_ARCH and
# cuda/harness/build.sh default to it too), with the flags torch gives Marlin's own setup.py
# (cuda/bundle/nvcc-flags.sh). Sets the caller's mb (the build's pid) or why (why not).
marlin_start() {
  local mk=$B/deps/marlin/marlin
  mb= why="SKIP_MARLIN is set"
  [ -n "${SKIP_MARLIN:-}" ] && return 0
  why="the bundle has no deps/marlin"
  [ -f $mk/marlin_cuda_kernel.cu ] || return 0
  . $B/cuda/bundle/nvcc-flags.sh && marlin_nvcc_flags sm_90a
  nvcc "${NVCC_FLAGS[@]}" -I $mk -o $W/marlin_bench $B/cuda/bench/marlin_bench.cu \
    > $OUT/marlin-build.log 2>&1 & mb=$!
}

# Marlin's bench on the shape indices given ($OUT/marlin.jsonl) once marlin_start's build is
# done, or why not.
marlin_run() {
  [ -z "$mb" ] || wait $mb || { why="its build failed"; tail -20 $OUT/marlin-build.log; mb=; }
  if [ -n "$mb" ]; then
    timeout 50 $W/marlin_bench "$@" > $OUT/marlin.jsonl; echo "marlin rc=$? ($(left) s left)"
    grep -v '"bench"' $OUT/marlin.jsonl | head -12
  else
    echo "marlin: skipped ($why)"
  fi
}

bench() {
  local r
  for r in ${LIB_RUNS:-serial parity bench}; do
    case $r in serial|parity|bench) ;; *) echo "LIB_RUNS: serial, parity or bench, not '$r'" >&2; return 2 ;; esac
  done
  export CUDA_VISIBLE_DEVICES=$1 MLX_PTX_CACHE_DIR=$W/ptx-bench
  local mb= why=
  marlin_start  # built while the library runs
  # MLX's NVRTC JIT finds its headers in <folder of the executable>/../include, and dladdr names
  # the executable as it was started: so from <install>/bin, by its absolute path.
  mkdir -p $B/install/bin && cp $W/lib/qmv_lib $B/install/bin/
  local q=$B/install/bin/qmv_lib
  # LIB_RUNS in order (default: all three): serial, one call at a time (graphs off: a call starts
  # when the one before it ended, as in a decoder's forward); parity; bench, throughput (graphs
  # on, MLX's default: independent calls overlap).
  : > $OUT/lib.jsonl
  local rc
  for r in ${LIB_RUNS:-serial parity bench}; do
    case $r in
      serial) timeout $(keep ${LIB_KEEP:-70}) $q serial ${BENCH_SHAPES:-} >> $OUT/lib.jsonl; rc=$? ;;
      parity) timeout 150 $q parity >> $OUT/lib.jsonl; rc=$?; tail -1 $OUT/lib.jsonl ;;
      bench) timeout $(keep 70) $q bench ${BENCH_SHAPES:-} >> $OUT/lib.jsonl; rc=$? ;;
    esac
    echo "lib $r rc=$rc ($(left) s left)"
  done
  [ -n "${SKIP_PEERS:-}" ] || { timeout 80 python3 $B/cuda/bench/peers.py ${BENCH_SHAPES:-} > $OUT/peers.jsonl 2> $OUT/peers.err; echo "peers rc=$? ($(left) s left)"; }
  marlin_run ${BENCH_SHAPES:-}
  # The kernels launched directly: upstream's qmv, the streamed kernel by M, the invariant kernel.
  if [ -n "${SKIP_HARNESS:-}" ]; then
    echo "kernel bench: skipped (SKIP_HARNESS is set)"
  else
    harness_build || return 1
    timeout $(keep 15) $W/hb/qmv_harness inv-bench ${BENCH_SHAPES:-} > $OUT/harness.jsonl; echo "kernel bench rc=$?"
  fi
  python3 $H/summarize.py $OUT/lib.jsonl $OUT/harness.jsonl $OUT/peers.jsonl $OUT/marlin.jsonl | cut -c1-220
  python3 $B/cuda/bench/collect.py $OUT/results.json $OUT/env.txt $OUT/lib.jsonl $OUT/harness.jsonl \
    $OUT/peers.jsonl $OUT/marlin.jsonl
}

# MLX's NVRTC output is cached per module name (MLX_PTX_CACHE_DIR): first-use compiles of CUTLASS
# kernels are what makes test_qmm and the gather/qvm tests run past a command's limit. A cache
# carried in as .devcarry/ptx-cache.tar.xz (made by the keep-ptx phase) seeds every policy's
# folder once; keep-ptx packs the union of this machine's folders into $OUT.
# MLX caches a module as several files (its PTX, its kernel names, its source): count the names.
modules() { ls "$1" | sed 's/\.[^.]*$//' | sort -u | wc -l; }

seed_ptx() {
  (
    flock 8
    [ -f .devcarry/ptx-cache.tar.xz ] && [ ! -f $W/ptx-seeded ] || exit 0
    mkdir -p $W/ptx-carried && tar -xJf .devcarry/ptx-cache.tar.xz -C $W/ptx-carried
    for d in streamed upstream bench; do mkdir -p $W/ptx-$d && cp -rn $W/ptx-carried/. $W/ptx-$d/; done
    touch $W/ptx-seeded; echo "ptx cache seeded: $(modules $W/ptx-carried) modules"
  ) 8> $W/unpack.lock
}

keep_ptx() {
  rm -rf $W/ptx-all && mkdir -p $W/ptx-all
  for d in $W/ptx-*/; do [ "$d" = $W/ptx-all/ ] || cp -rn "$d". $W/ptx-all/; done
  # xz: PTX is text and the pack must stay under the 16 MiB a file that comes back from $OUT.
  tar -cJf $OUT/ptx-cache.tar.xz -C $W/ptx-all .
  local mib=$(( $(stat -c %s $OUT/ptx-cache.tar.xz) >> 20 ))
  echo "ptx cache: $(modules $W/ptx-all) modules ($(ls $W/ptx-all | wc -l) files), $(du -sm $W/ptx-all | cut -f1) MiB, $mib MiB packed"
  [ $mib -lt 16 ] || { rm $OUT/ptx-cache.tar.xz; echo "ptx cache too large to come back"; }
}

# At most 8 files come back from $OUT: keep the results (JSON, CSV, env.txt), pack the logs. Every
# invocation holds $W/session.lock shared while it runs; the last one to leave packs.
pack_out() {
  flock -u 9
  flock -xn 9 || return 0
  local n; n=$(find $OUT -maxdepth 1 -type f | wc -l)
  [ "$n" -gt 8 ] || return 0
  local logs; logs=$(cd $OUT && ls | grep -vE '\.(json|jsonl|csv)$|^env\.txt$|\.tar\.(gz|xz)$')
  (cd $OUT && tar -czf logs.tar.gz $logs && rm -f $logs)
  echo "\$OUT: $n files, logs packed into logs.tar.gz"
}

# Nsight Compute on the profile target (cuda/harness/profile.cu): speed of light, occupancy,
# warp stall reasons, memory and scheduler statistics of each qmv kernel it launches.
# Nsight Compute: on PATH, else the image's install.
ncu_bin() { command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1; }

profile() {
  unpack || return 1
  rm -rf $W/hp
  PROFILE_ONLY=1 bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hp \
    > $OUT/profile-build.log 2>&1 || { tail -30 $OUT/profile-build.log; return 1; }
  echo "profile build: $(( $(date +%s) - t0 )) s"
  local ncu; ncu=$(ncu_bin)
  CUDA_VISIBLE_DEVICES=$1 timeout $(keep 5) $ncu --clock-control none -k regex:qmv \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
    --csv --page details $W/hp/qmv_profile ${PROFILE_SHAPE:-} > $OUT/ncu.csv 2> $OUT/ncu.err
  echo "ncu rc=$? ($(wc -l < $OUT/ncu.csv) lines)"; tail -3 $OUT/ncu.err
  python3 $H/ncu_summary.py $OUT/ncu.csv qmv_invariant | cut -c1-900
  [ -n "${PROFILE_SOURCE:-}" ] && profile_source $1
  return 0
}

# PROFILE_SOURCE (a kernel-name regex): the launches it matches again, with the warp stall
# reasons per SASS instruction (SourceCounters) into a report, then every metric of each launch
# ($OUT/ncu-raw.csv: the stall reasons as numbers) and the SASS with its samples
# ($OUT/ncu-source.csv.gz); cuda/harness/ncu_stalls.py reads both. PROFILE_METRICS (a comma list)
# adds those metrics to the report, so to the raw page.
profile_source() {
  local ncu; ncu=$(ncu_bin)
  rm -f $W/deep.ncu-rep
  CUDA_VISIBLE_DEVICES=$1 timeout $(keep 5) $ncu --clock-control none \
    -k "regex:$PROFILE_SOURCE" --section WarpStateStats --section SourceCounters \
    --section SchedulerStats ${PROFILE_METRICS:+--metrics "$PROFILE_METRICS"} -o $W/deep \
    $W/hp/qmv_profile ${PROFILE_SHAPE:-} > $OUT/ncu-deep.log 2>&1
  echo "ncu deep rc=$?"; tail -3 $OUT/ncu-deep.log
  [ -f $W/deep.ncu-rep ] || return 0
  $ncu -i $W/deep.ncu-rep --page raw --csv > $OUT/ncu-raw.csv 2>> $OUT/ncu-deep.log
  echo "ncu raw rc=$? ($(wc -l < $OUT/ncu-raw.csv) lines)"
  $ncu -i $W/deep.ncu-rep --page source --print-source sass --csv 2>> $OUT/ncu-deep.log \
    | gzip > $OUT/ncu-source.csv.gz
  echo "ncu source rc=${PIPESTATUS[0]} ($(stat -c %s $OUT/ncu-source.csv.gz) bytes)"
  python3 $H/ncu_stalls.py $OUT/ncu-raw.csv 2>&1 | cut -c1-400
}

# The warpgroup-mma prototype (cuda/harness/wgmma.cu): built alone in seconds, checked, timed.
wgmma() {
  case ${WG_CHECK_REPEAT:-1} in
    '' | *[!0-9]* | 0)
      echo "gpu-session.sh: WG_CHECK_REPEAT=$WG_CHECK_REPEAT: give how many times to check each arm (1 or more)" >&2
      exit 2 ;;
  esac
  unpack || return 1
  rm -rf $W/hw
  WGMMA_ONLY=1 bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hw \
    -Xptxas=-v > $OUT/wgmma-build.log 2>&1 || { tail -30 $OUT/wgmma-build.log; return 1; }
  echo "wgmma build: $(( $(date +%s) - t0 )) s"
  grep -A3 "Compiling entry.*qmv_wg" $OUT/wgmma-build.log \
    | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | paste - - | sort | uniq -c
  export CUDA_VISIBLE_DEVICES=$1
  # Each arm checked in its own process (a fault or a hang costs that arm only), WG_CHECK_REPEAT
  # times (a race may pass once; then each record says which repeat it came from); the rounds
  # time the arms that passed every time. The *_nofence arms are negative controls (the race
  # the proxy fence prevents): they must fail at least once, are never timed, and one that
  # passes every check fails the phase (the check did not see the race).
  local ok=() caught=() missed=() a i rc failed n=${WG_CHECK_REPEAT:-1}
  : > $OUT/wgmma-check.jsonl
  for a in ${WG_ARMS:-$($W/hw/qmv_wgmma arms)}; do
    failed=0
    for (( i = 1; i <= n; i++ )); do
      if [ "$n" = 1 ]; then
        timeout 90 $W/hw/qmv_wgmma check $a >> $OUT/wgmma-check.jsonl; rc=$?
      else
        timeout 90 $W/hw/qmv_wgmma check $a > $W/check.jsonl; rc=$?
        sed "s/^{/{\"repeat\":$i,/" $W/check.jsonl >> $OUT/wgmma-check.jsonl
      fi
      [ $rc = 0 ] || { failed=$(( failed + 1 )); echo "wgmma check $a rc=$rc"; }
    done
    [ $n = 1 ] || echo "wgmma check $a: $failed of $n failed"
    case $a in
      *_nofence) if [ $failed = 0 ]; then missed+=($a); else caught+=($a); fi ;;
      *) [ $failed = 0 ] && ok+=($a) ;;
    esac
  done
  echo "wgmma check passed: ${ok[*]:-none}"; grep '"wg_parity"' $OUT/wgmma-check.jsonl
  [ ${#caught[@]} = 0 ] || echo "wgmma controls caught (failed, as they must): ${caught[*]}"
  [ ${#missed[@]} = 0 ] || echo "wgmma controls NOT caught (passed every check): ${missed[*]}"
  [ ${#ok[@]} -gt 0 ] || [ ${#caught[@]} -gt 0 ] || return 1
  # The _poison arms are diagnostics (their stages overwritten after use): checked, not timed.
  local timed=()
  for a in "${ok[@]}"; do case $a in *_poison) ;; *) timed+=($a) ;; esac; done
  if [ ${#timed[@]} -gt 0 ]; then
    timeout $(keep 10) $W/hw/qmv_wgmma ab ${WG_AB_ROUNDS:-5} "${timed[@]}" > $OUT/wgmma-ab.jsonl
    echo "wgmma ab rc=$? ($(left) s left)"
    grep -v '"kind":"ab"' $OUT/wgmma-ab.jsonl | python3 $H/summarize.py /dev/stdin | cut -c1-250
  fi
  [ ${#missed[@]} = 0 ] || return 1
  [ ${#timed[@]} -gt 0 ] && [ "${WG_NCU:-0}" = 1 ] || return 0
  local ncu; ncu=$(ncu_bin)
  rm -f $W/wg.ncu-rep
  timeout $(keep 5) $ncu --clock-control none -k regex:qmv --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --metrics smsp__inst_executed.sum -o $W/wg $W/hw/qmv_wgmma one ${WG_NCU_ARMS:-wg2_s3} \
    > $OUT/wgmma-ncu.log 2>&1
  echo "wgmma ncu rc=$?"; tail -2 $OUT/wgmma-ncu.log
  [ -f $W/wg.ncu-rep ] || return 0
  $ncu -i $W/wg.ncu-rep --page raw --csv > $OUT/wgmma-ncu-raw.csv 2>> $OUT/wgmma-ncu.log
  $ncu -i $W/wg.ncu-rep --page source --print-source sass --csv 2>> $OUT/wgmma-ncu.log \
    | gzip > $OUT/wgmma-ncu-source.csv.gz
  python3 $H/ncu_stalls.py $OUT/wgmma-ncu-raw.csv --with smsp__inst_executed.sum 2>&1 | cut -c1-700
  python3 $H/ncu_stalls.py --source $OUT/wgmma-ncu-source.csv.gz 8 2>&1 | cut -c1-1500
}

# quantized_matmul on the per-channel shapes upstream sends to qmm_sm90 (sm90_smoke.py), with the
# upstream policy's PTX cache: a minute, where MLX's tests reach them after many minutes.
smoke() {
  [ "$(left)" -gt 30 ] || { echo "smoke: $(left) s left, not enough"; return 1; }
  [ -e $B/mlx/python/include ] || ln -s ../../install/include $B/mlx/python/include
  CUDA_VISIBLE_DEVICES=$1 MLX_PTX_CACHE_DIR=$W/ptx-upstream PYTHONPATH=$B/mlx/python \
    timeout $(keep 5) python3 $B/cuda/bundle/sm90_smoke.py 4 8 2>&1 | tee $OUT/sm90-smoke.log
  local rc=${PIPESTATUS[0]}
  echo "sm90 smoke rc=$rc"
  return $rc
}

# Attention's pass 1 by rows (sdpa_rows.cu against the bundle's scaled_dot_product_attention.cu).
sdpa() {
  unpack || return 1
  rm -rf $W/hs
  SDPA_ONLY=1 bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hs \
    -Xptxas=-v > $OUT/sdpa-build.log 2>&1 || { tail -30 $OUT/sdpa-build.log; return 1; }
  echo "sdpa build: $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=$1 timeout $(keep 10) $W/hs/sdpa_rows ${SDPA_KL:-} > $OUT/sdpa-rows.jsonl
  local rc=$?
  echo "sdpa_rows rc=$rc ($(left) s left)"; cat $OUT/sdpa-rows.jsonl
  return $rc
}

# The unpatched pin in the same build folder, and the tests that reach qmv/qmm on it.
control() {
  rm -f $W/built; touch $W/control
  if ! bash $B/cuda/bundle/control.sh overlays/mlx > $OUT/control-build.log 2>&1; then
    # A tree half reverted is neither: the next unpack starts from the bundle again.
    tail -30 $OUT/control-build.log; rm -f $W/bundle.tar.gz $W/control; return 1
  fi
  tail -3 $OUT/control-build.log; echo "control build: $(( $(date +%s) - t0 )) s"
  CUDA_VISIBLE_DEVICES=$1 MLX_PTX_CACHE_DIR=$W/ptx-upstream \
    TEST_SELECT=${CONTROL_SELECT:-'(qmm or qmv) and not gather and not qmm_non_transposed'} \
    timeout $(keep 10) bash $B/cuda/bundle/test-python.sh pin $OUT
  echo "tests pin rc=$?"
}

exec 9> $W/session.lock
flock -s 9
env_txt
trap pack_out EXIT
seed_ptx
for phase in "$@"; do
  case $phase in
    unpack) unpack || exit 1 ;;
    build) build || exit 1 ;;
    tune)  tune ${TUNE_GPU:-$(( ngpu > 1 ? 1 : 0 ))} || exit 1 ;;
    invariant) invariant 0 || exit $? ;;
    tests) [ -f $W/built ] || { echo "build first"; exit 2; }
           if [ $ngpu -gt 1 ]; then tests 0 1; else tests 0; fi ;;
    bench) [ -f $W/built ] || { echo "build first"; exit 2; }; bench 0 || exit $? ;;
    both)  [ -f $W/built ] || { echo "build first"; exit 2; }
           [ $ngpu -gt 1 ] || { echo "both needs two GPUs"; exit 2; }
           (tests 1 1) & tp=$!; bench 0; wait $tp ;;
    profile) profile 0 || exit 1 ;;
    wgmma) wgmma 0 || exit 1 ;;
    sdpa) sdpa 0 || exit 1 ;;
    keep-ptx) keep_ptx ;;
    control) [ -f $W/built ] || { echo "build first"; exit 2; }; control 0 || exit 1 ;;
    smoke) [ -f $W/built ] || { echo "build first"; exit 2; }; smoke ${SMOKE_GPU:-0} || exit 1 ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
  echo "after $phase: $(( $(date +%s) - t0 )) s"
done
