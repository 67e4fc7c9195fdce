//! The MLX build driver behind `cargo xtask build-mlx`: builds the patched MLX tree into a
//! per-user cache and publishes `<workspace>/target/mlx/build-info.json` for
//! `crates/mlx-sys/build.rs`. It prints nothing: progress goes to a [`Progress`] the caller
//! supplies, and [`run`] returns a [`Report`] (the caller prints it, human or `--json`).
//!
//! Public API (the CLI glue supplies the source):
//!
//! ```text
//! pub enum Backend { Cpu, Metal, Cuda }                      // clap::ValueEnum
//! pub enum Profile { Release, Debug, RelWithDebInfo }        // clap::ValueEnum
//! pub struct SourceInfo { upstream, pin, series_hash, fetchcontent, cache_root, workspace_target }
//! pub struct BuildMlxArgs { backend, profile, jobs, install_deps, bundle }   // clap::Args
//! pub struct BuildInfo { .. }                                // serde, the build-info.json contract
//! pub fn run(args, source, materialize, progress) -> mlx_build::Result<Report>  // build_pipeline::Result
//! ```
//!
//! The generic machinery (keys and stamp, the locked tree, configure, Ninja, ccache, dependency
//! checks, install publishing) is the `build-pipeline` crate's; this crate is MLX's recipe for it
//! ([`recipe::MlxRecipe`]): its key material ([`key`]), CMake definitions ([`options`]),
//! dependencies ([`deps`]) and build info ([`info`]). The pipeline's steps are re-exported here
//! for the other builds of this repository (`test-upstream`, `build-ggml`).
//!
//! Cache layout: `<cache_root>/builds/<dir_key>/{src,build,install,deps}` plus `stamp.json`
//! and a `.lock` file next to the directory, and `<cache_root>/builds/installs/<key>/`.
//! `dir_key` hashes everything that decides what the compiled objects look like except the
//! overlay series (upstream, pin, backend, profile, CMake options, compiler identity): editing one
//! overlay then reuses the same Ninja tree and only the touched translation units recompile. The
//! full key adds the series hash and FetchContent overrides; each successful build is published,
//! immutable, under `installs/<key>`, and `run` is a no-op when that exists. The stamp records
//! what the Ninja tree holds now (for people looking at the cache).
//!
//! The `.lock` is an flock that the build's own processes inherit
//! (`build_pipeline::lock::in_build`), so a killed build-mlx leaves its tree locked until its
//! Ninja and compilers are gone; Ninja runs with ccache's `base_dir` at `builds/`
//! (`build_pipeline::ninja::ccache_env`), so trees of different pins share objects.
//!
//! Failures the user can act on (missing dependencies, configure/build/install failures, bad
//! input) are [`Error::User`] (a [`UserError`]; the CLI exits 2 on them, as on any error);
//! unexpected I/O failures come back with the context of the step (`Error::Context`).

pub mod deps;
pub mod info;
pub mod key;
pub mod options;
pub mod recipe;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use build_pipeline::cmake::{compiler_identity, configure, runs, tail_lines};
pub use build_pipeline::deps::{Platform, find_header, is_root};
pub use build_pipeline::lock::lock_build_dir;
pub use build_pipeline::{
    Context, Error, Progress, Quiet, Result, UserError, sha256_hex, short_hash, user_err,
};
pub use deps::{Dep, check_deps, install_deps, missing_deps_message};
pub use key::DirKeyMaterial;
pub use mlx_build_info::{Backend, BuildInfo, Profile};
pub use options::{cmake_options, fetchcontent_defines, launcher_defines, system_json_source_dir};
use serde::Serialize;

use build_pipeline::Tree;
use build_pipeline::install::{prune_installs, publish_install};
use info::{build_info, find_lib_dir, static_lib_file, write_build_info};
use recipe::MlxRecipe;

/// What the caller knows about the source: the pinned upstream and the overlay series.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    /// Upstream name, e.g. "mlx".
    pub upstream: String,
    /// 40-hex upstream commit.
    pub pin: String,
    /// Hash of the overlay series content (computed by the caller).
    pub series_hash: String,
    /// pins.toml `[upstream.mlx.fetchcontent]`: FetchContent name -> local directory (or URL,
    /// which is rejected, see [`fetchcontent_defines`]).
    pub fetchcontent: BTreeMap<String, String>,
    /// User cache dir for this tool.
    pub cache_root: PathBuf,
    /// `<workspace>/target`, where `mlx/build-info.json` goes.
    pub workspace_target: PathBuf,
}

#[derive(clap::Args, Debug, Clone)]
pub struct BuildMlxArgs {
    /// MLX backend [default: metal on macOS, cpu elsewhere]
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// CMake build type
    #[arg(long, value_enum, default_value = "release")]
    pub profile: Profile,
    /// Parallel compile jobs [default: number of CPUs]
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Install missing build dependencies (apt-get as root on Debian/Ubuntu, brew on macOS)
    #[arg(long)]
    pub install_deps: bool,
    /// Instead of building, write a self-contained offline build (materialized tree, pinned
    /// sources, CMake definitions, scripts) to FILE (.tar.gz); `--backend cuda` only
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// With `--bundle`: also MLX's Python bindings (pinned nanobind) and what
    /// `cuda/bundle/test-python.sh` needs to run MLX's Python tests on the GPU machine
    #[arg(long, requires = "bundle")]
    pub bundle_python: bool,
}

/// Whether `run` found the keyed install already there or built it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    UpToDate,
    Built,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::UpToDate => "up-to-date",
            Status::Built => "built",
        }
    }
}

/// What a finished `run` did: the build info it published, where, and how long it took.
#[derive(Debug, Clone)]
pub struct Report {
    pub status: Status,
    pub info: BuildInfo,
    pub info_path: PathBuf,
    pub took: Duration,
}

/// Runs the whole job. `materialize(dir)` writes the patched source tree into `dir`, writing
/// only files whose content differs so unchanged files keep their mtimes.
pub fn run(
    args: &BuildMlxArgs,
    source: &SourceInfo,
    materialize: &mut dyn FnMut(&Path) -> Result<()>,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let started = Instant::now();
    let backend = args.backend.unwrap_or_else(Backend::host_default);
    let platform = Platform::detect();
    if args.install_deps {
        install_deps(&platform, backend, progress)?;
    }
    let mut recipe = MlxRecipe::new(args, backend, source, materialize)?;
    let keys = Tree::keys(&recipe)?;
    // The build's own processes hold the tree's lock too (`build_pipeline::lock::in_build`), so
    // it outlives a killed build-mlx until its Ninja and compilers have exited.
    let tree = Tree::open(
        &source.cache_root.join("builds"),
        keys,
        "build-mlx",
        progress,
    )?;
    // Installed results are immutable and addressed by the full key: checkouts with different
    // series share one Ninja tree (incremental rebuilds) but never each other's libraries, and
    // switching back to a series built before is a no-op.
    let keyed = tree.builds.join("installs").join(&tree.keys.key);
    if let Some(lib_dir) = find_lib_dir(&keyed) {
        let info = build_info(&recipe.stamp, &tree.keys, &keyed, &lib_dir)?;
        return report(Status::UpToDate, info, source, started);
    }
    let missing = check_deps(&platform, backend);
    if !missing.is_empty() {
        return Err(user_err(missing_deps_message(&platform, backend, &missing)));
    }
    tree.build(&mut recipe, build_pipeline::jobs(args.jobs), progress)?;
    let info = install(&tree, &recipe, &keyed)?;
    report(Status::Built, info, source, started)
}

/// How many keyed installs to keep; older ones are removed (a checkout still pointing at one
/// rebuilds it on its next build-mlx).
const KEEP_INSTALLS: usize = 6;

/// Installs the built tree, publishes it under `keyed` (pruning old installs) and stamps the
/// tree; returns the build info of the published install.
fn install(tree: &Tree, recipe: &MlxRecipe<'_>, keyed: &Path) -> Result<BuildInfo> {
    tree.install()?;
    let install = tree.install_dir();
    if find_lib_dir(&install).is_none() {
        return Err(user_err(format!(
            "install finished but no libmlx under {}",
            install.display()
        )));
    }
    publish_install(&install, keyed)?;
    prune_installs(&tree.builds.join("installs"), &tree.keys.key, KEEP_INSTALLS)?;
    let lib_dir = find_lib_dir(keyed).context("the published install has no libmlx")?;
    let info = build_info(&recipe.stamp, &tree.keys, keyed, &lib_dir)?;
    tree.write_stamp(&recipe.stamp)?;
    Ok(info)
}

/// Publishes `info` for mlx-sys and reports.
fn report(
    status: Status,
    info: BuildInfo,
    source: &SourceInfo,
    started: Instant,
) -> Result<Report> {
    let info_path = write_build_info(&source.workspace_target, &info)?;
    Ok(Report {
        status,
        info,
        info_path,
        took: started.elapsed(),
    })
}

impl Report {
    /// The `--json` report's fields (the CLI adds `"schema"`).
    pub fn json(&self) -> serde_json::Value {
        let (status, info, info_path, took) =
            (self.status.as_str(), &self.info, &self.info_path, self.took);
        let library = info.lib_dir.join(static_lib_file("mlx"));
        serde_json::json!({
            "status": status,
            "key": info.key,
            "dir_key": info.dir_key,
            "backend": info.backend,
            "profile": info.profile,
            "library": library,
            "lib_dir": info.lib_dir,
            "include_dir": info.include_dir,
            "build_info": info_path,
            "seconds": took.as_secs_f64(),
        })
    }

    /// The human report (without its final newline).
    pub fn human(&self) -> String {
        let (status, info, info_path, took) =
            (self.status.as_str(), &self.info, &self.info_path, self.took);
        let library = info.lib_dir.join(static_lib_file("mlx"));
        format!(
            "mlx {status} ({}, {}) in {:.2}s\n  library:    {}\n  headers:    {}\n  key:        {}\n  build-info: {}",
            info.backend.as_str(),
            info.profile.as_str(),
            took.as_secs_f64(),
            library.display(),
            info.include_dir.display(),
            info.key,
            info_path.display()
        )
    }
}

/// Builds `targets` (all when empty) of a configured tree, a failure named as MLX's
/// (`build_pipeline::ninja::ninja_build_targets`).
pub fn ninja_build_targets(
    build: &Path,
    jobs: usize,
    targets: &[&str],
    lock: &std::fs::File,
    progress: &mut dyn Progress,
) -> Result<()> {
    build_pipeline::ninja::ninja_build_targets(build, jobs, targets, lock, "MLX", progress)
}
