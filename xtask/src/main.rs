//! `cargo xtask`: the overlay commands of `overlay-cli` plus this repository's MLX tasks.
//! Exit codes: 0 clean, 1 findings, 2 error.

mod bench;
mod bench_build_bump;
mod bench_qmm;
mod bench_qmv_cuda;
mod build_cmd;
mod cuda_bundle;
mod diffgit;
mod fuzz;
mod metal_sim;
mod sources;
mod test_upstream;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
pub(crate) use mlx_build as build_mlx;
pub(crate) use overlay_cli::{Global, commands, progress};

/// The workspace root: xtask lives one level below it.
pub(crate) fn workspace_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}

/// The cargo that runs us (`$CARGO`), for sub-builds with the same toolchain.
pub(crate) fn cargo() -> std::process::Command {
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Keep a fork honest: pinned upstream + minimal overlays",
    version
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Overlay(overlay_cli::Command),
    /// Benchmarks (each prints a ratio against a baseline measured in the same run)
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Build the patched upstream (CMake + Ninja), cached by content outside the checkout
    BuildMlx(build_mlx::BuildMlxArgs),
    /// Run the upstream's own test suites (C++ via ctest, Python via pytest) on the patched tree under each policy
    TestUpstream(test_upstream::TestUpstreamArgs),
    /// Run MLX's quantized mat-vec kernels on the CPU emulator and check identity claims
    MetalSim(metal_sim::MetalSimArgs),
    /// Run the engine's libFuzzer targets for a time budget each and report their stats
    Fuzz(fuzz::FuzzArgs),
    /// Differential test on real history: bump-pin against git cherry-pick, drift against bump-pin
    Diffgit(diffgit::DiffgitArgs),
}

fn main() -> ExitCode {
    overlay_cli::default_sigpipe();
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Overlay(c) => overlay_cli::run(&cli.global, c),
        Cmd::Bench(b) => bench::run(&cli.global, b),
        Cmd::BuildMlx(a) => build_cmd::build_mlx(&cli.global, a),
        Cmd::TestUpstream(a) => test_upstream::run(&cli.global, a),
        Cmd::MetalSim(a) => metal_sim::run(a, &cli.global),
        Cmd::Fuzz(a) => fuzz::run(&cli.global, a),
        Cmd::Diffgit(a) => diffgit::run(&cli.global, a),
    };
    overlay_cli::exit(&cli.global, result)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
