//! One integration-test binary (as ripgrep does): every test runs the real `cargo xtask` binary
//! against synthetic upstream repositories built with real git, and compares with `git am`.

mod agree;
mod apply;
mod audit;
mod build_mlx;
mod bump;
mod bump_pr;
mod bundle;
mod concurrency;
mod cuda_check;
mod cuda_scripts;
mod diffgit;
mod drift;
mod errors;
mod exactness;
mod export;
mod fixture;
mod forecast;
mod hostile;
mod import;
mod interdiff;
mod interrupt;
mod messages;
mod profile_scripts;
mod refresh;
mod render;
mod reports;
mod safety;
mod test_upstream;
mod tidy;
mod upstream_ggml;
mod upstream_mlx;
mod workflow;
