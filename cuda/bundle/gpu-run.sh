#!/usr/bin/env bash
# The measured run on the GPU machine, from a bundle carried in .devcarry/bundle.tar.gz:
# build the patched MLX, then the library parity harness (both policies), the library benchmark,
# and the kernel harness and peers for the same shapes. Results: $OUT/*.jsonl, logs, env.txt.
#   env: BENCH_SHAPES (indices into the five shapes; default all), SKIP_PEERS
set -uo pipefail
W=/tmp/run; mkdir -p $W
B=$W/mlx-cuda-bundle
# A warm machine that already built this bundle keeps its install: only the harnesses rebuild.
if cmp -s .devcarry/bundle.tar.gz $W/bundle.tar.gz && [ -f $B/install/lib/libmlx.a ]; then REUSE=1; else
  tar -xzf .devcarry/bundle.tar.gz -C $W && cp .devcarry/bundle.tar.gz $W/bundle.tar.gz; fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem --format=csv
  nvcc --version | tail -2; cmake --version | head -1; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
t0=$(date +%s)
[ -n "${REUSE:-}" ] || bash $B/cuda/bundle/build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
cp -r cuda/lib $B/cuda/ 2>/dev/null || true
echo "mlx build: $(( $(date +%s) - t0 )) s"
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])')
cmake -S $B/cuda/lib -B $W/lib -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$B/install \
  -DCMAKE_MODULE_PATH=$B/install/share/cmake/MLX -DCUDNN_INCLUDE_PATH=$cudnn/include \
  -DCUDNN_LIBRARY_PATH=$cudnn/lib > $OUT/lib-build.log 2>&1 && ninja -C $W/lib >> $OUT/lib-build.log 2>&1 \
  || { tail -30 $OUT/lib-build.log; exit 1; }
export LD_LIBRARY_PATH=$cudnn/lib:${LD_LIBRARY_PATH:-}
export MLX_PTX_CACHE_DIR=$W/ptx
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - t0) )); }
H=$B/cuda/harness
# Kernel harness built in the background while the library runs (other cores).
(bash $H/build.sh $B/mlx $B/deps/cutlass $B/deps/cccl/include $B/deps/fmt $W/hb > $OUT/harness-build.log 2>&1) &
hb=$!
timeout 100 $W/lib/qmv_lib parity > $OUT/lib.jsonl; echo "lib parity rc=$? ($(left) s left)"; tail -1 $OUT/lib.jsonl
timeout $(( $(left) - 110 )) $W/lib/qmv_lib bench ${BENCH_SHAPES:-} >> $OUT/lib.jsonl; echo "lib bench rc=$? ($(left) s left)"
[ -n "${SKIP_PEERS:-}" ] || { timeout 60 python3 $B/cuda/bench/peers.py ${BENCH_SHAPES:-} > $OUT/peers.jsonl 2> $OUT/peers.err; echo "peers rc=$? ($(left) s left)"; }
wait $hb && timeout $(( $(left) - 15 )) $W/hb/qmv_harness bench ${BENCH_SHAPES:-} > $OUT/harness.jsonl; echo "kernel bench rc=$?"
echo "total: $(( $(date +%s) - t0 )) s"
python3 $H/summarize.py $OUT/lib.jsonl $OUT/harness.jsonl $OUT/peers.jsonl | cut -c1-220
python3 $B/cuda/bench/collect.py $OUT/results.json $OUT/env.txt $OUT/lib.jsonl $OUT/harness.jsonl $OUT/peers.jsonl
