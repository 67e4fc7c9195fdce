//! Runs the real Metal source of MLX's quantized mat-vec and SDPA vector
//! kernels on the CPU to check bit-identity claims. See docs/kernels/metal-sim.md.
//!
//! Entry point: [`run`] on the files of a patched tree (and optionally a
//! pristine one), e.g. from [`pinned::load`] or [`TreeFiles::from_dir`].

pub mod compile;
pub mod error;
pub mod extract;
pub mod ggml;
pub mod pinned;
pub mod runner;
pub mod sdpa;
pub mod syntax;

pub use error::{Error, Result};
pub use extract::TreeFiles;
pub use runner::{
    Claim, Options, Report, Status, compare_hashes, run, run_sdpa, upstream_sdpa_rules,
};
