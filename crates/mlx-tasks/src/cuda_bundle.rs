//! `cargo xtask build-mlx --backend cuda --bundle FILE`: a self-contained, offline build of the
//! patched MLX for a machine that has nvcc, CMake and Ninja but no Rust (the GPU machine).
//!
//! The bundle is one `.tar.gz` holding `mlx-cuda-bundle/`:
//! - `mlx/`: the materialized tree (pinned upstream + overlays), exactly what `apply` writes;
//! - `deps/<name>/`: every `[upstream.<up>.sources.<name>]` of pins.toml for the CUDA backend,
//!   exported from the pinned commit (only its `paths`, in its `layout`); `bench = true` sources
//!   too (e.g. Marlin, which `cuda/machine/gpu-session.sh` builds for the qmv benchmark);
//! - `cmake-defines.txt`: the CMake definitions, one per line (`@BUNDLE@` is the bundle folder);
//!   no `bench` source is named there: MLX's build does not use them;
//! - `bundle.json`: what went in (schema 1: pin, series hash, overlays, sources with commits);
//! - `cuda/`: this project's `cuda/` folder (the build script, harnesses and benchmarks), less
//!   `cuda/machine/` ([`DEV_ONLY`]: what is particular to the GPU machine this project measures
//!   on, run from the checkout there, never shipped to a fork's users);
//! - `probe/`: the exactness probe's C++ (`crates/mlx-sys/probe`), for `cuda/bundle/exactness.sh`.
//!
//! `cuda/bundle/build.sh` in it runs the configure, Ninja build and install; nothing is fetched.
//! The archive is written beside FILE and renamed into place, so FILE is whole or absent.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::settings::Source;
use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::build_mlx::{Backend, BuildMlxArgs};
use crate::commands::{Ctx, materialize};

/// Where the exactness probe's sources live in the project; `probe/` in the bundle.
pub const PROBE_SRC: &str = "crates/mlx-sys/probe";

/// The folder of `cuda/` the bundle leaves out: the scripts particular to the GPU machine this
/// project measures on (`gpu-session.sh`, `h200-*.sh`), which run from the checkout.
pub const DEV_ONLY: &str = "machine";

/// The folder every bundle unpacks to.
pub const BUNDLE_DIR: &str = "mlx-cuda-bundle";

/// The test-only sources `--bundle-python` adds (nanobind's `ext/robin_map` submodule is filled
/// from the robin_map source, as for every submodule).
const PYTHON_SOURCES: &[&str] = &["nanobind"];

/// The `tests = true` sources every bundle carries when pins.toml pins them, because a user's CUDA
/// build of MLX has what they build: MLX's C++ tests (doctest, `MLX_BUILD_TESTS=ON`) and GGUF
/// loading (gguflib, `MLX_BUILD_GGUF=ON`), as MLX's own CUDA CI and the `mlx[cuda]` wheel do.
const USER_SOURCES: &[(&str, &str)] = &[
    ("doctest", "MLX_BUILD_TESTS"),
    ("gguflib", "MLX_BUILD_GGUF"),
];

/// `cmake-defines-python.txt`, which `build.sh` adds when `PYTHON_BINDINGS=1`: the bindings on
/// (as `test-upstream` builds them), no stubs (stubgen would import the module at build time), the
/// extension beside MLX's Python package, and `no-lto.cmake`: the GPU image's GCC has no
/// `lto-wrapper`, and nanobind links its module with LTO in Release builds.
const PYTHON_DEFINES: &[&str] = &[
    "MLX_BUILD_PYTHON_BINDINGS=ON",
    "MLX_BUILD_PYTHON_STUBS=OFF",
    "FETCHCONTENT_SOURCE_DIR_NANOBIND=@BUNDLE@/deps/nanobind",
    "MLX_PYTHON_BINDINGS_OUTPUT_DIRECTORY=@BUNDLE@/mlx/python/mlx",
    "CMAKE_PROJECT_mlx_INCLUDE=@BUNDLE@/cuda/bundle/no-lto.cmake",
];

/// `bundle.json`.
#[derive(Debug, Serialize)]
pub struct Manifest {
    pub schema: u32,
    pub upstream: String,
    pub pin: String,
    pub series_hash: String,
    pub overlays: Vec<String>,
    pub sources: Vec<SourceEntry>,
    pub cmake_defines: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SourceEntry {
    pub name: String,
    pub url: String,
    pub rev: String,
    pub tag: Option<String>,
    pub files: usize,
}

/// What `write` produced.
#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub bytes: u64,
    pub manifest: Manifest,
}

/// The CMake definitions of a bundle build: build-mlx's own for the CUDA backend (the CPU
/// backend on, as in every user's CUDA build: its BLAS and LAPACK come from the machine, or from
/// what `cuda/bundle/build.sh` is given in `BUNDLE_CMAKE_ARGS`), with fmt from its pinned source,
/// not the system, and the C++ tests and GGUF on when their sources (`USER_SOURCES`) are among
/// `sources`. A `bench` source among them is not MLX's: it gets no `FETCHCONTENT_SOURCE_DIR_`.
pub fn cmake_defines(args: &BuildMlxArgs, sources: &[&Source]) -> Vec<String> {
    let has = |name: &str| sources.iter().any(|s| s.name == name);
    let mut defines: Vec<String> =
        crate::build_mlx::cmake_options(Backend::Cuda, args.profile, false)
            .into_iter()
            .map(|d| match d.split_once('=') {
                Some(("USE_SYSTEM_FMT", _)) => "USE_SYSTEM_FMT=OFF".into(),
                Some((k, _)) if USER_SOURCES.iter().any(|(n, o)| *o == k && has(n)) => {
                    format!("{k}=ON")
                }
                _ => d,
            })
            .collect();
    defines.push("MLX_CUDA_ARCHITECTURES=@CUDA_ARCH@".into());
    defines.push("FETCHCONTENT_FULLY_DISCONNECTED=ON".into());
    for s in sources.iter().filter(|s| !s.bench) {
        defines.push(format!(
            "FETCHCONTENT_SOURCE_DIR_{}=@BUNDLE@/deps/{}",
            s.name.to_ascii_uppercase(),
            s.name
        ));
    }
    defines
}

/// Writes the bundle to `out`.
pub fn write(ctx: &Ctx, args: &BuildMlxArgs, out: &Path) -> Result<Report> {
    let up = ctx.upstream().clone();
    let series = ctx.series()?;
    let all = crate::settings::of(&ctx.project.pins, &up)?.sources;
    let sources: Vec<&Source> = all
        .iter()
        .filter(|s| {
            let for_cuda = s.backends.is_empty() || s.backends.iter().any(|b| b == "cuda");
            for_cuda
                && (s.bench
                    || !s.tests
                    || USER_SOURCES.iter().any(|(n, _)| *n == s.name)
                    || (args.bundle_python && PYTHON_SOURCES.contains(&&*s.name)))
        })
        .collect();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        bail!("{}: no such folder for the bundle", parent.display());
    }
    let stage = tempfile::Builder::new()
        .prefix(".bundle-")
        .tempdir_in(&parent)
        .with_context(|| format!("{}: cannot create a staging folder", parent.display()))?;
    let root = stage.path().join(BUNDLE_DIR);
    materialize(ctx, &root.join("mlx"), false)?;
    let mut entries = Vec::new();
    for s in &sources {
        let files = crate::sources::export_source(s, &all, &root.join("deps").join(&s.name))?;
        entries.push(SourceEntry {
            name: s.name.clone(),
            url: s.url.clone(),
            rev: s.rev.clone(),
            tag: s.tag.clone(),
            files,
        });
    }
    // The project's scripts and harnesses, where it has them (a downstream fork may not).
    let scripts = ctx.project.root.join("cuda");
    if scripts.is_dir() {
        copy_dir(&scripts, &root.join("cuda"), &[scripts.join(DEV_ONLY)])?;
    }
    // The exactness probe's C++ (cuda/bundle/exactness.sh builds it against the install).
    let probe = ctx.project.root.join(PROBE_SRC);
    if probe.is_dir() {
        copy_dir(&probe, &root.join("probe"), &[])?;
    }
    let manifest = Manifest {
        schema: 1,
        upstream: up.name.clone(),
        pin: up.rev.clone(),
        series_hash: series.content_hash(),
        overlays: series.overlays.iter().map(|o| o.name.clone()).collect(),
        sources: entries,
        // The Python sources' definitions are in cmake-defines-python.txt; the bench sources
        // have none (cmake_defines leaves them out).
        cmake_defines: cmake_defines(
            args,
            &sources
                .iter()
                .copied()
                .filter(|s| !s.tests || USER_SOURCES.iter().any(|(n, _)| *n == s.name))
                .collect::<Vec<_>>(),
        ),
    };
    std::fs::write(
        root.join("cmake-defines.txt"),
        manifest.cmake_defines.join("\n") + "\n",
    )?;
    if args.bundle_python {
        std::fs::write(
            root.join("cmake-defines-python.txt"),
            PYTHON_DEFINES.join("\n") + "\n",
        )?;
    }
    std::fs::write(
        root.join("bundle.json"),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    let bytes = archive(&root, &stage.path().join("bundle.tar.gz"), out)?;
    Ok(Report {
        path: out.to_path_buf(),
        bytes,
        manifest,
    })
}

/// Every file under `from` into `to`, those under a folder of `except` left out.
fn copy_dir(from: &Path, to: &Path, except: &[PathBuf]) -> Result<()> {
    for entry in walkdir(from)? {
        if except.iter().any(|x| entry.starts_with(x)) {
            continue;
        }
        let rel = entry.strip_prefix(from).expect("under from");
        let dest = to.join(rel);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(&entry, &dest).with_context(|| format!("copying {}", entry.display()))?;
    }
    Ok(())
}

fn walkdir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Packs `root` into `tmp` (gzip'd tar, deterministic order) and renames it to `out`.
fn archive(root: &Path, tmp: &Path, out: &Path) -> Result<u64> {
    let file = std::fs::File::create(tmp)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    tar.append_dir_all(BUNDLE_DIR, root)?;
    let mut file = tar.into_inner()?.finish()?;
    file.flush()?;
    file.sync_all()?;
    std::fs::rename(tmp, out).with_context(|| format!("{}: cannot write", out.display()))?;
    Ok(std::fs::metadata(out)?.len())
}
