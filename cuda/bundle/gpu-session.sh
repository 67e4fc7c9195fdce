#!/usr/bin/env bash
# The measured runs on the GPU machine, from a bundle carried in .devcarry/bundle.tar.gz, in
# phases that a warm machine keeps between calls (state under /tmp/run):
#   build   unpack, build and install the patched MLX (with its Python extension when the bundle
#           has one), then the library harness (cuda/lib) and the kernel harness (cuda/harness)
#   tests   MLX's python/tests/test_quantized.py under both policies (test-python.sh); with two
#           GPUs each policy runs on its own GPU, at the same time
#   bench   library parity (both policies), library benchmark, peers (PyTorch), kernel harness
#           benchmark, all on one GPU, then collect.py -> $OUT/results.json
#   both    tests (both policies at once) on the second GPU while bench runs on the first
# Results land in $OUT. env: DEADLINE (seconds this call may use, default 570), BENCH_SHAPES
# (indices into the five shapes; default all), SKIP_PEERS, TEST_SELECT (test-python.sh).
set -uo pipefail
W=/tmp/run; mkdir -p $W
B=$W/mlx-cuda-bundle
H=$B/cuda/harness
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - t0) )); }
ngpu=$(nvidia-smi -L | wc -l)
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])')
export LD_LIBRARY_PATH=$cudnn/lib:${LD_LIBRARY_PATH:-}

env_txt() {
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem \
      --format=csv
    nvcc --version | tail -2; cmake --version | head -1; python3 --version; nproc; } > $OUT/env.txt 2>&1
  cat $OUT/env.txt
}

build() {
  if cmp -s .devcarry/bundle.tar.gz $W/bundle.tar.gz && [ -f $W/built ]; then
    echo "build: reused (same bundle)"; return 0; fi
  rm -rf $B $W/built && tar -xzf .devcarry/bundle.tar.gz -C $W && cp .devcarry/bundle.tar.gz $W/
  # This checkout's harness sources win over the bundle's (they iterate faster than the tree).
  cp -r cuda/lib cuda/harness cuda/bench cuda/bundle $B/cuda/
  local py=0; [ -f $B/cmake-defines-python.txt ] && py=1
  PYTHON_BINDINGS=$py bash $B/cuda/bundle/build.sh > $OUT/build.log 2>&1 \
    || { tail -60 $OUT/build.log; return 1; }
  echo "mlx build (python=$py): $(( $(date +%s) - t0 )) s"
  (bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hb > $OUT/harness-build.log 2>&1) &
  local hb=$!
  cmake -S $B/cuda/lib -B $W/lib -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$B/install \
    -DCMAKE_MODULE_PATH=$B/install/share/cmake/MLX -DCUDNN_INCLUDE_PATH=$cudnn/include \
    -DCUDNN_LIBRARY_PATH=$cudnn/lib > $OUT/lib-build.log 2>&1 && ninja -C $W/lib >> $OUT/lib-build.log 2>&1 \
    || { tail -30 $OUT/lib-build.log; return 1; }
  wait $hb || { tail -30 $OUT/harness-build.log; return 1; }
  touch $W/built
  echo "build done: $(( $(date +%s) - t0 )) s"
}

# tests GPU...: one policy per GPU given (streamed first); one GPU runs both in turn.
tests() {
  local gpus=("$@") pids=() i=0
  for policy in streamed upstream; do
    local g=${gpus[$(( i % ${#gpus[@]} ))]}
    if [ ${#gpus[@]} -gt 1 ]; then
      (CUDA_VISIBLE_DEVICES=$g timeout $(( $(left) - 10 )) bash $B/cuda/bundle/test-python.sh $policy $OUT;
       echo "tests $policy (GPU $g) rc=$?") &
      pids+=($!)
    else
      CUDA_VISIBLE_DEVICES=$g timeout $(( $(left) - 10 )) bash $B/cuda/bundle/test-python.sh $policy $OUT
      echo "tests $policy (GPU $g) rc=$?"
    fi
    i=$(( i + 1 ))
  done
  for p in "${pids[@]}"; do wait $p; done
}

bench() {
  export CUDA_VISIBLE_DEVICES=$1 MLX_PTX_CACHE_DIR=$W/ptx-bench
  # MLX's NVRTC JIT finds its headers in <folder of the executable>/../include, and dladdr names
  # the executable as it was started: so from <install>/bin, by its absolute path.
  mkdir -p $B/install/bin && cp $W/lib/qmv_lib $B/install/bin/
  local q=$B/install/bin/qmv_lib
  timeout 150 $q parity > $OUT/lib.jsonl; echo "lib parity rc=$? ($(left) s left)"; tail -1 $OUT/lib.jsonl
  timeout $(( $(left) - 150 )) $q bench ${BENCH_SHAPES:-} >> $OUT/lib.jsonl
  echo "lib bench rc=$? ($(left) s left)"
  [ -n "${SKIP_PEERS:-}" ] || { timeout 80 python3 $B/cuda/bench/peers.py ${BENCH_SHAPES:-} > $OUT/peers.jsonl 2> $OUT/peers.err; echo "peers rc=$? ($(left) s left)"; }
  timeout $(( $(left) - 15 )) $W/hb/qmv_harness bench ${BENCH_SHAPES:-} > $OUT/harness.jsonl; echo "kernel bench rc=$?"
  python3 $H/summarize.py $OUT/lib.jsonl $OUT/harness.jsonl $OUT/peers.jsonl | cut -c1-220
  python3 $B/cuda/bench/collect.py $OUT/results.json $OUT/env.txt $OUT/lib.jsonl $OUT/harness.jsonl $OUT/peers.jsonl
}

env_txt
for phase in "$@"; do
  case $phase in
    build) build || exit 1 ;;
    tests) [ -f $W/built ] || { echo "build first"; exit 2; }
           if [ $ngpu -gt 1 ]; then tests 0 1; else tests 0; fi ;;
    bench) [ -f $W/built ] || { echo "build first"; exit 2; }; bench 0 ;;
    both)  [ -f $W/built ] || { echo "build first"; exit 2; }
           [ $ngpu -gt 1 ] || { echo "both needs two GPUs"; exit 2; }
           (tests 1 1) & tp=$!; bench 0; wait $tp ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
  echo "after $phase: $(( $(date +%s) - t0 )) s"
done
