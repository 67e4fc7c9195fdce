#!/usr/bin/env bash
# The cuDNN fault of issue 25 without a GPU: the lookup-scope mismatch behind the call to address 0
# in cudnnCreate (docs/testing.md; overlay 0012 fixes its cause), built from the sources beside this script and
# run under each load mode and fix.
#
#   repro.sh OUTDIR [CUDNN_LIB]
#     builds into OUTDIR and prints one line per case, "MODE FIX: passed|crashed (rc N)": MODE
#     local (as Python opens an extension) or global; FIX none, front or self (core.cpp); and
#     "local none, no interposer" (the control: the same module without it); and the cause the
#     H200 showed, "local none, static libstdc++ exported" and "... hidden" (overlay 0012). With
#     CUDNN_LIB (the lib folder of the nvidia-cudnn-cu13 wheel, headers not needed), the front is
#     cuDNN itself: cudnnCreate runs its std::call_once setup before it looks for a GPU.
#   Exit 2 when a build fails; otherwise 0 (the lines are the result).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?output folder}
cudnn=${2:-}
mkdir -p "$out" && out=$(cd "$out" && pwd)
CC=${CC:-cc} CXX=${CXX:-c++}
build() { "$@" || { echo "repro.sh: build failed: $*" >&2; exit 2; }; }
build $CC -shared -fPIC "$here/interposer.c" -Wl,--version-script="$here/interposer.map" \
  -o "$out/libscope_interposer.so"
if [ -n "$cudnn" ]; then
  [ -f "$cudnn/libcudnn.so.9" ] || { echo "repro.sh: no libcudnn.so.9 in $cudnn" >&2; exit 2; }
  front=("$cudnn/libcudnn.so.9") defs=(-DSCOPE_CUDNN) rpath=$out:$cudnn
else
  build $CXX -shared -fPIC -O1 "$here/graph.cpp" -o "$out/libscope_graph.so"
  build $CC -shared -fPIC "$here/shim.c" -ldl -o "$out/libscope_shim.so"
  front=("$out/libscope_shim.so") defs=() rpath=$out
fi
# The dependencies in this order: the interposer before libstdc++ in the module's scope.
build $CXX -shared -fPIC -O1 "${defs[@]}" "$here/core.cpp" -o "$out/core.so" -Wl,--no-as-needed \
  "$out/libscope_interposer.so" "${front[@]}" -ldl -Wl,-rpath,"$rpath"
# The control: the same module without the interposer.
build $CXX -shared -fPIC -O1 "${defs[@]}" "$here/core.cpp" -o "$out/core-plain.so" -Wl,--no-as-needed \
  "${front[@]}" -ldl -Wl,-rpath,"$rpath"
# The cause the H200 showed (overlay 0012): the module itself defines the slot, libstdc++.a linked
# into it by a toolchain that links libstdc++ statically, libstdc++.so in its scope through the
# front (cuDNN needs it; the stand-in's front is linked against it to be the same), and no
# interposer. Once with the archive's symbols exported, once hidden.
if [ -n "$cudnn" ]; then
  front_cxx=("${front[@]}")
else
  build $CC -shared -fPIC "$here/shim.c" -ldl -Wl,--no-as-needed -lstdc++ -o "$out/libscope_shim_cxx.so"
  front_cxx=("$out/libscope_shim_cxx.so")
fi
for v in exported hidden; do
  hide=(); [ $v = hidden ] && hide=(-Wl,--exclude-libs,ALL)
  build $CXX -shared -fPIC -O1 "${defs[@]}" "$here/core.cpp" "$here/once.cpp" -o "$out/core-static-$v.so" \
    -static-libstdc++ ${hide[@]+"${hide[@]}"} -Wl,--no-as-needed "${front_cxx[@]}" -ldl -Wl,-rpath,"$rpath"
done
build $CC "$here/loader.c" -ldl -o "$out/loader"
case_() {  # MODULE MODE FIX LABEL
  # The shell that waits reports a fault on its stderr: that of an inner one, thrown away.
  local rc
  rc=$(bash -c 'log=$1; shift; "$@" > "$log" 2>&1; echo $?' _ "$out/$2-$3-$1.txt" \
    "$out/loader" "$out/$1" "$2" "$3" 2>/dev/null)
  if [ $rc = 0 ]; then echo "$4: passed (rc $rc)"; else echo "$4: crashed (rc $rc)"; fi
}
for mode in local global; do
  for fix in none front self; do case_ core.so $mode $fix "$mode $fix"; done
done
case_ core-plain.so local none "local none, no interposer"
case_ core-static-exported.so local none "local none, static libstdc++ exported"
case_ core-static-hidden.so local none "local none, static libstdc++ hidden"
exit 0
