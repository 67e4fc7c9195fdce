#!/usr/bin/env bash
# Which input of the link puts libstdc++'s std::call_once pieces (std::__once_call, __once_proxy)
# into MLX's Python extension, and what exporting them does in a plain Python process (the
# extension opened RTLD_LOCAL): the cuDNN fault's mechanism (cuda/scope/repro.sh) says a module
# that defines the slot ahead of libstdc++ in its scope makes every std::call_once of a library
# outside that scope (cuDNN's graph library, NCCL, torch's) jump to a slot nothing wrote.
#
#   link-scope.sh BUNDLE OUTDIR
#     BUNDLE: a bundle built with PYTHON_BINDINGS=1 (build.sh; build/ and the extension in
#     mlx/python/mlx); its module as built ("built": with -Wl,--exclude-libs,ALL where the
#     series has overlay 0012) and linked again with that command minus the flag ("bare"), the
#     linker tracing both symbols (-Wl,--trace-symbol: the archive member that defines each) and
#     writing a map. Then, for each module, in plain Python processes: what it exports of libstdc++, mx.distributed.init(), MLX then torch, torch then
#     MLX with a C++ exception caught, and one causal cuDNN SDPA case (sdpa_repro.py case 1).
#   writes OUTDIR/toolchain.txt (the compiler's configuration, where libstdc++ comes from),
#   OUTDIR/link.txt (the module's link command), OUTDIR/trace.txt (the linker's trace),
#   OUTDIR/map.txt (the map's lines about those symbols and libstdc++), OUTDIR/exports.txt,
#   OUTDIR/probes.txt ("MODULE PROBE: rc=N last line"), OUTDIR/bare/ (the bare module's package:
#   hundreds of MiB for a static libmlx; h200-pipeline.sh deletes it before packing results)
set -uo pipefail
bundle=$(cd "${1:?bundle folder}" && pwd)
out=${2:?output folder}
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=${BUILD_DIR:-$bundle/build}
pkg=$bundle/mlx/python/mlx
[ -d "$build" ] || { echo "link-scope.sh: no build folder $build" >&2; exit 2; }

target=$(ninja -C "$build" -t targets all | sed -n 's/^\([^ ]*core\.[^ ]*\.so\): .*/\1/p' | head -1)
[ -n "$target" ] || { echo "link-scope.sh: no core*.so target in $build" >&2; exit 1; }
ninja -C "$build" -t commands "$target" | tail -1 > "$out/link.txt"
# The compiler that linked it (the link command's first word after ": &&"), and where its
# libstdc++ comes from.
cxx=$(sed -E 's/^: && //' "$out/link.txt" | cut -d' ' -f1)
{ echo "linker driver: $cxx"; "$cxx" -v 2>&1 | tail -3
  for f in libstdc++.so libstdc++.a; do echo "$f: $("$cxx" -print-file-name=$f)"; done
  so=$("$cxx" -print-file-name=libstdc++.so)
  file -L "$so" 2>/dev/null
  # A linker script (devtoolset's libstdc++.so names a static archive beside the shared one).
  grep -a -m3 -E 'INPUT|GROUP' "$so" 2>/dev/null
  "$cxx" -dumpspecs 2>/dev/null | grep -n -E 'static-libstdc|static-libgcc' | head -5
} > "$out/toolchain.txt" 2>&1
built=$(ls "$pkg"/core*.so | head -1)
mkdir -p "$out/bare/mlx"
cp -r "$pkg"/. "$out/bare/mlx/"
ln -sfn "$bundle/install/include" "$out/bare/include"
bare=$out/bare/mlx/$(basename "$built")
# The same command, the flag out, the output moved, the two symbols traced.
python3 - "$out/link.txt" "$target" "$bare" "$out/full.map" > "$out/relink.sh" <<'PY'
import sys
cmd, target, bare, mapf = open(sys.argv[1]).read().strip(), sys.argv[2], sys.argv[3], sys.argv[4]
cmd = cmd.replace("-Wl,--exclude-libs,ALL", "")
trace = "-Wl,--trace-symbol=__once_proxy -Wl,--trace-symbol=_ZSt11__once_call -Wl,-Map=" + mapf
cmd = cmd.replace("-o " + target, trace + " -o " + bare, 1).replace(target, bare)
print(cmd)
PY
(cd "$build" && bash "$out/relink.sh") > "$out/trace.txt" 2>&1
echo "relink rc=$?" >> "$out/trace.txt"
grep -n -E 'once_call|once_proxy|libstdc\+\+|stdc\+\+_nonshared' "$out/full.map" 2>/dev/null | head -200 > "$out/map.txt"
rm -f "$out/full.map"

for m in built bare; do
  f=$built; [ $m = bare ] && f=$bare
  echo "$m: $(nm -D --defined-only "$f" 2>/dev/null | grep -cE ' _ZNSt| _ZSt| _ZNKSt') std symbols exported;" \
    "$(nm -D --defined-only "$f" 2>/dev/null | grep -E '_ZSt11__once_call|__once_proxy' | tr '\n' ' ')"
done > "$out/exports.txt"

probe() {  # MODULE NAME CODE...
  local m=$1 name=$2 pp=$bundle/mlx/python
  [ "$m" = bare ] && pp=$out/bare
  shift 2
  PYTHONPATH=$pp:$bundle/cuda/bundle MLX_PTX_CACHE_DIR=$out/ptx timeout 180 python3 -X faulthandler "$@" \
    > "$out/$m-$name.log" 2>&1
  echo "$m $name: rc=$? $(tail -1 "$out/$m-$name.log" | cut -c1-140)"
}
for m in built bare; do
  probe $m distributed -c "import mlx.core as mx; g = mx.distributed.init(); print('distributed', g.rank(), g.size())"
  probe $m mlx-torch -c "import mlx.core as mx; import torch; print(mx.add(mx.array([1.0]), 1).item(), torch.__version__)"
  probe $m torch-mlx-throw -c "import torch
import mlx.core as mx
try:
    mx.reshape(mx.array([1, 2, 3]), (2, 2))
except ValueError as e:
    print('caught:', str(e)[:60])"
  probe $m sdpa "$bundle/cuda/bundle/sdpa_repro.py" 1
done > "$out/probes.txt"
cat "$out/exports.txt" "$out/probes.txt"
grep -E 'definition of|reference to' "$out/trace.txt" | sort -u | head -20
