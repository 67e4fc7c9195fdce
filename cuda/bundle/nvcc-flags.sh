# The nvcc flags of this project's CUDA compiles outside CMake, in one place (sourced by
# `cargo xtask cuda-check compile`, cuda/harness/build.sh and cuda/machine/gpu-session.sh). Each
# function sets the array NVCC_FLAGS for an architecture such as sm_90a:
#   mlx_nvcc_flags ARCH     MLX's flags for its CUDA units (mlx/backend/cuda/CMakeLists.txt): C++20,
#                           device lambdas, relaxed constexpr, no strict aliasing, the warnings
#                           MLX's own build silences
#   marlin_nvcc_flags ARCH  the flags torch gives IST-DASLab's Marlin in its setup.py (C++17,
#                           relaxed constexpr, no half operators); 39, 177, 179 are its kernel
#                           file's own warnings
mlx_nvcc_flags() {
  local code=${1#sm_}
  NVCC_FLAGS=(-std=c++20 -O3 -gencode=arch=compute_${code},code=sm_${code} --extended-lambda
    --expt-relaxed-constexpr -Xcompiler=-fno-strict-aliasing
    --diag-suppress=186,2908,2361,27,997,1394,20011,20208,177,550)
}

marlin_nvcc_flags() {
  NVCC_FLAGS=(-std=c++17 -O3 -arch=$1 --expt-relaxed-constexpr -D__CUDA_NO_HALF_OPERATORS__
    -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --diag-suppress=39,177,179)
}
