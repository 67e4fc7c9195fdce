//! One integration-test binary (as ripgrep does): every test runs the real `cargo xtask` binary
//! against synthetic upstream repositories built with real git, and compares with `git am`.

mod apply;
mod build_mlx;
mod bump;
mod concurrency;
mod drift;
mod export;
mod fixture;
mod hostile;
mod interrupt;
mod refresh;
mod render;
mod reports;
mod upstream_mlx;
