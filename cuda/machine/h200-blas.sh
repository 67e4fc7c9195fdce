#!/usr/bin/env bash
# Particular to this project's GPU machine, not to the bundle: its image has no BLAS/LAPACK
# development files, which MLX's CPU backend needs (a user's machine has them from its package
# manager: libopenblas-dev liblapacke-dev on Debian or Ubuntu). This unpacks Debian packages
# carried in (apt-get download libopenblas0-pthread libopenblas-pthread-dev liblapacke-dev
# libgfortran5 libquadmath0) into PREFIX with dpkg -x (never into /) and prints the environment
# for cuda/bundle/build.sh and for the programs it builds, to eval:
#
#   eval "$(h200-blas.sh DEBDIR PREFIX)"
#
# exports BUNDLE_CMAKE_ARGS (OpenBLAS as FindBLAS/FindLAPACK's vendor, searched in PREFIX; the
# header folders MLX's find_path would look for in /usr/include) and LD_LIBRARY_PATH (OpenBLAS
# and the libgfortran it needs, for the link and at run time). Exit 2 when a package is missing.
set -euo pipefail
debs=${1:?folder of the carried .deb files}
prefix=${2:?folder to unpack them into}
mkdir -p "$prefix"
for p in libopenblas0-pthread libopenblas-pthread-dev liblapacke-dev libgfortran5 libquadmath0; do
  f=$(ls "$debs"/"${p}"_*.deb 2>/dev/null | head -1 || true)
  [ -n "$f" ] || { echo "h200-blas.sh: no ${p}_*.deb in $debs" >&2; exit 2; }
  dpkg -x "$f" "$prefix"
done
lib=$prefix/usr/lib/x86_64-linux-gnu
ob=$lib/openblas-pthread
[ -e "$ob/libopenblas.so" ] && [ -f "$prefix/usr/include/lapack.h" ] \
  && [ -f "$prefix/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h" ] \
  || { echo "h200-blas.sh: the packages in $debs lack libopenblas.so, lapack.h or cblas.h" >&2; exit 2; }
echo "export BUNDLE_CMAKE_ARGS='-DBLA_VENDOR=OpenBLAS -DCMAKE_LIBRARY_PATH=$ob -DBLAS_INCLUDE_DIRS=$prefix/usr/include/x86_64-linux-gnu/openblas-pthread -DLAPACK_INCLUDE_DIRS=$prefix/usr/include'"
echo "export LD_LIBRARY_PATH=$ob:$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
