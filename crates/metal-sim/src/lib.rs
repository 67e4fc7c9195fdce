//! Runs the real Metal source of MLX's quantized mat-vec kernels on the CPU to
//! check bit-identity claims. See docs/kernels/metal-sim.md.

pub mod compile;
pub mod extract;
pub mod pinned;
