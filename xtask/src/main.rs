//! `cargo xtask`: thin glue over the `overlay` engine (argument parsing, progress, printing).
//! Exit codes: 0 clean, 1 findings, 2 error.

mod bench;
mod bench_build_bump;
mod bench_qmm;
mod bench_qmv_cuda;
mod build_ggml;
mod build_mlx;
mod commands;
mod cuda_bundle;
mod diffgit;
mod fuzz;
mod ggml_check;
mod import_cmd;
mod metal_sim;
mod progress;
mod sources;
mod test_upstream;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

#[derive(clap::Args, Clone)]
pub struct Global {
    /// Folder holding pins.toml and the overlays [default: this workspace]
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Which upstream of pins.toml [default: pins.toml's `default`, or its only upstream]
    #[arg(long, global = true, value_name = "NAME")]
    pub upstream: Option<String>,
    /// Machine-readable output on stdout
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the pin and the overlays in order
    Status,
    /// Materialize the pinned upstream plus the overlays into a directory
    Apply(commands::ApplyArgs),
    /// Verify every overlay applies exactly at the pin and is canonical (`canonicalize` fixes OFFSET and NONCANON)
    Check,
    /// Rewrite overlays that apply off their recorded lines or are not canonical, in place (same tree, verified)
    Canonicalize(commands::CanonicalizeArgs),
    /// Turn edits in a materialized tree back into overlays
    Refresh(commands::RefreshArgs),
    /// Start a new overlay from the edits in a materialized tree that no overlay owns
    NewOverlay(commands::NewOverlayArgs),
    /// Move the pin to another upstream commit, carrying every overlay with a 3-way merge (all or nothing)
    BumpPin(commands::BumpArgs),
    /// Turn upstreamable overlays into a clean git format-patch series (and PR.md) for upstream
    ExportUpstream(commands::ExportArgs),
    /// Benchmarks (each prints a ratio against a baseline measured in the same run)
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Build the patched upstream (CMake + Ninja), cached by content outside the checkout
    BuildMlx(build_mlx::BuildMlxArgs),
    /// Run the upstream's own test suites (C++ via ctest, Python via pytest) on the patched tree under each policy
    TestUpstream(test_upstream::TestUpstreamArgs),
    /// Run MLX's quantized mat-vec kernels on the CPU emulator and check identity claims
    MetalSim(metal_sim::MetalSimArgs),
    /// Turn a folder of whole-file copies (laid out like upstream) into overlays, each against its closest upstream base
    Import(import_cmd::ImportArgs),
    /// Classify every overlay against another upstream commit (clean, moved, context-drift, upstreamed, conflict)
    Drift(commands::DriftArgs),
    /// Run the engine's libFuzzer targets for a time budget each and report their stats
    Fuzz(fuzz::FuzzArgs),
    /// Differential test on real history: bump-pin against git cherry-pick, drift against bump-pin
    Diffgit(diffgit::DiffgitArgs),
    /// Build the patched ggml (CPU backend, tests on) through build-mlx's cache; --test runs its CPU tests
    BuildGgml(build_ggml::BuildGgmlArgs),
    /// ggml: every kernel the Metal host can request for a type supports_op admits is instantiated
    GgmlCheck(ggml_check::GgmlCheckArgs),
}

/// A reader that stops early (`| head`) ends us quietly, as it ends git or grep: Rust ignores
/// SIGPIPE, so the next write would fail and `println!` would panic (exit 101).
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default action of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Status => commands::status(&cli.global),
        Cmd::Apply(a) => commands::apply(&cli.global, a),
        Cmd::Check => commands::check(&cli.global),
        Cmd::Canonicalize(a) => commands::canonicalize(&cli.global, a),
        Cmd::Refresh(a) => commands::refresh(&cli.global, a),
        Cmd::NewOverlay(a) => commands::new_overlay(&cli.global, a),
        Cmd::Drift(a) => commands::drift(&cli.global, a),
        Cmd::Import(a) => import_cmd::run(&cli.global, a),
        Cmd::BumpPin(a) => commands::bump_pin(&cli.global, a),
        Cmd::Bench(b) => bench::run(&cli.global, b),
        Cmd::ExportUpstream(a) => commands::export_upstream(&cli.global, a),
        Cmd::BuildMlx(a) => commands::build_mlx(&cli.global, a),
        Cmd::TestUpstream(a) => test_upstream::run(&cli.global, a),
        Cmd::MetalSim(a) => metal_sim::run(a, &cli.global),
        Cmd::Fuzz(a) => fuzz::run(&cli.global, a),
        Cmd::Diffgit(a) => diffgit::run(&cli.global, a),
        Cmd::BuildGgml(a) => build_ggml::run(&cli.global, a),
        Cmd::GgmlCheck(a) => ggml_check::run(&cli.global, a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Commands suggested in the message carry this run's --root/--upstream, so they can
            // be pasted as they are.
            let text = commands::with_globals(&cli.global, &format!("{e:#}"));
            if cli.global.json {
                // The one error shape of every command (docs/json.md).
                let msg = serde_json::json!({ "schema": commands::JSON_SCHEMA, "error": text });
                println!("{msg}");
            }
            eprintln!("{} {text}", commands::colour_stderr("error:", "31;1"));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
