#!/usr/bin/env bash
# On the GPU machine: unpack the carried harness deps, build the kernel harness, run
# parity (default shape), parity of the candidate shapes, the benchmark and the peers.
# Everything lands in $OUT (harness.jsonl, peers.jsonl, logs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
W=/tmp/h; mkdir -p $W; tar -xzf .devcarry/harness-deps.tar.gz -C $W
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; nvcc --version | tail -2; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
t0=$(date +%s)
bash $here/build.sh $W/patched $W/NVIDIA+cutlass $W/cccl/include $W/fmtlib+fmt $W/hb -Xptxas=-v > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "harness build: $(( $(date +%s) - t0 )) s"
grep -A1 "qmv_streamed_kernel" $OUT/build.log | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | sort | uniq -c | sort -rn | head -8
$W/hb/qmv_harness parity > $OUT/harness.jsonl; echo "parity rc=$?"; tail -1 $OUT/harness.jsonl
$W/hb/qmv_harness parity-shapes >> $OUT/harness.jsonl; echo "parity-shapes rc=$?"; tail -1 $OUT/harness.jsonl
$W/hb/qmv_harness bench ${BENCH_SHAPES:-} >> $OUT/harness.jsonl; echo "bench rc=$?"
[ -n "${SKIP_PEERS:-}" ] || python3 $here/../bench/peers.py > $OUT/peers.jsonl 2> $OUT/peers.err; echo "peers rc=$?"; tail -3 $OUT/peers.err
echo "total: $(( $(date +%s) - t0 )) s"
python3 $here/summarize.py $OUT/harness.jsonl $OUT/peers.jsonl | cut -c1-250
