//! This repository's MLX tasks for `cargo xtask`, next to the overlay commands of `overlay-cli`:
//! `build-mlx` (the project's pinned tree handed to `mlx-build`, or the CUDA bundle; [`hooks`] gives
//! `export-upstream --build` the same build),
//! `test-upstream`, `exactness`, `metal-sim`, `bench`, `fuzz`, `diffgit`, `build-ggml`, `ggml-check`
//! and `cuda-check`. [`Task`] is flattened into
//! xtask's CLI; [`run`] runs one.

pub mod bench;
mod bench_build_bump;
mod bench_qmm;
mod bench_qmv_cuda;
pub mod build_cmd;
pub mod build_ggml;
pub mod cli_edge;
pub mod cuda_bundle;
pub mod cuda_check;
pub mod diffgit;
pub mod exactness;
pub mod fuzz;
pub mod ggml_check;
pub mod metal_sim;
pub mod settings;
pub mod sources;
pub mod test_upstream;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
pub(crate) use mlx_build as build_mlx;
pub(crate) use overlay_cli::{Global, commands};

/// The CLI's progress: its fetch progress as it is, its build progress as the driver's.
pub(crate) mod progress {
    pub(crate) use crate::cli_edge::BuildProgress;
    pub(crate) use overlay_cli::progress::Progress;
}

/// The workspace root: this crate lives two levels below it (`crates/mlx-tasks`).
pub fn workspace_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mlx-tasks has a workspace above it")
        .to_path_buf()
}

/// The cargo that runs us (`$CARGO`), for sub-builds with the same toolchain.
pub(crate) fn cargo() -> std::process::Command {
    // std, not xshell: callers set their own stdio and read the status or the io::Error.
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo run --release --quiet -p mlx-sys --example NAME --`: the arguments that run one of
/// mlx-sys's examples (xtask does not link mlx-sys; its build script needs a built MLX).
pub(crate) fn mlx_sys_example(name: &str) -> Vec<String> {
    [
        "run",
        "--release",
        "--quiet",
        "-p",
        "mlx-sys",
        "--example",
        name,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Brings the MLX that mlx-sys links up to date with `cargo xtask build-mlx`, for the tasks
/// that run mlx-sys's examples. Its report goes to stderr unless `quiet` (so `--json` keeps
/// stdout machine-readable); on failure it is printed whatever `quiet` says.
pub(crate) fn build_mlx_first(root: &std::path::Path, quiet: bool) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let out = cargo()
        .args(["xtask", "build-mlx"])
        .current_dir(root)
        .stdout(std::process::Stdio::piped())
        .output()
        .context("running `cargo xtask build-mlx`")?;
    if !quiet || !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
    }
    if !out.status.success() {
        anyhow::bail!("`cargo xtask build-mlx` failed");
    }
    Ok(())
}

/// The MLX tasks (flatten them into a CLI next to `overlay_cli::Command`).
#[derive(Subcommand)]
pub enum Task {
    /// Benchmarks (each prints a ratio against a baseline measured in the same run)
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Build the patched upstream (CMake + Ninja), cached by content outside the checkout
    BuildMlx(build_mlx::BuildMlxArgs),
    /// Run the upstream's own test suites (C++ via ctest, Python via pytest) on the patched tree under each policy
    TestUpstream(test_upstream::TestUpstreamArgs),
    /// Block vs chain, byte for byte: each op and a whole decoder, verify of k tokens against k decode steps
    Exactness(exactness::ExactnessArgs),
    /// Run MLX's quantized mat-vec and SDPA vector kernels on the CPU emulator and check identity claims
    MetalSim(metal_sim::MetalSimArgs),
    /// Run the engine's libFuzzer targets for a time budget each and report their stats
    Fuzz(fuzz::FuzzArgs),
    /// Differential test on real history: bump-pin against git cherry-pick, drift against bump-pin
    Diffgit(diffgit::DiffgitArgs),
    /// Build the patched ggml (CPU backend, tests on) through build-mlx's cache; --test runs its CPU tests
    BuildGgml(build_ggml::BuildGgmlArgs),
    /// ggml: every kernel the Metal host can request for a type supports_op admits is instantiated
    GgmlCheck(ggml_check::GgmlCheckArgs),
    /// CUDA checks without a GPU (nvcc 13.0 from PyPI): the overlays compile; the JIT kernel's Params agree
    #[command(subcommand)]
    CudaCheck(cuda_check::CudaCheck),
}

/// Runs one task; an error of the build driver's comes classified for the CLI
/// ([`cli_edge::classify`]).
pub fn run(g: &Global, task: &Task) -> anyhow::Result<ExitCode> {
    let g = &g.with_extensions(&extensions());
    let steps = overlay_cli::steps::Steps::new(g);
    run_task(g, task).map_err(|e| cli_edge::classify(&steps, e))
}

/// The hooks `overlay-cli`'s commands take from this repository: `export-upstream --build` builds
/// the exported tree with the MLX build driver (its errors' next steps written for `g`'s run).
pub fn hooks(g: &Global) -> overlay_cli::Hooks {
    let steps = overlay_cli::steps::Steps::new(g);
    overlay_cli::Hooks {
        export_build: Some(Box::new(move |b| {
            build_cmd::build_export(b).map_err(|e| cli_edge::classify(&steps, e))
        })),
        extensions: extensions(),
    }
}

/// What claims this repository's keys of pins.toml beyond the engine's: its build settings
/// (`fetchcontent`, `sources`: [`settings`]).
pub fn extensions() -> overlay_cli::Extensions {
    overlay_cli::Extensions(vec![std::sync::Arc::new(settings::BuildSettingsExt)])
}

fn run_task(g: &Global, task: &Task) -> anyhow::Result<ExitCode> {
    match task {
        Task::Bench(b) => bench::run(g, b),
        Task::BuildMlx(a) => build_cmd::build_mlx(g, a),
        Task::TestUpstream(a) => test_upstream::run(g, a),
        Task::MetalSim(a) => metal_sim::run(a, g),
        Task::Exactness(a) => exactness::run(g, a),
        Task::Fuzz(a) => fuzz::run(g, a),
        Task::Diffgit(a) => diffgit::run(g, a),
        Task::BuildGgml(a) => build_ggml::run(g, a),
        Task::GgmlCheck(a) => ggml_check::run(g, a),
        Task::CudaCheck(c) => cuda_check::run(g, c),
    }
}
