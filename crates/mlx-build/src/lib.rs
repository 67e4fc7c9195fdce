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
//! pub fn run(args, source, materialize, progress) -> mlx_build::Result<Report>
//! ```
//!
//! The steps (configure, Ninja build, install-deps, the cache keys) are public too, for other
//! builds of the same tree (`test-upstream`) and of other pinned projects.
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
//! The `.lock` is an flock that the build's own processes inherit (`in_build`), so a killed
//! build-mlx leaves its tree locked until its Ninja and compilers are gone; Ninja runs with
//! ccache's `base_dir` at `builds/` (`ccache_env`), so trees of different pins share objects.
//!
//! Failures the user can act on (missing dependencies, configure/build/install failures, bad
//! input) are [`Error::User`] (a [`UserError`]; the CLI exits 2 on them, as on any error);
//! unexpected I/O failures come back with the context of the step (`Error::Context`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod error;

pub use error::{Context, Error, Result, UserError, user_err};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use mlx_build_info::{Backend, BuildInfo, Profile};

/// Oldest CMake the pinned MLX accepts (`cmake_minimum_required` at the pin).
const MIN_CMAKE: (u32, u32) = (3, 25);

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

/// What a build step reports while it runs; the CLI prints it (a bar on a terminal).
pub trait Progress {
    /// One line of news ("configuring: cmake ...", "waiting for another build-mlx ...").
    fn message(&mut self, msg: &str);
    /// Ninja's status: `done` of `total` edges, the last one described by `desc`.
    fn ninja(&mut self, done: u64, total: u64, desc: &str);
    /// Ninja has exited (a bar is cleared).
    fn ninja_done(&mut self) {}
}

/// A [`Progress`] that drops everything (tests, callers that want silence).
pub struct Quiet;

impl Progress for Quiet {
    fn message(&mut self, _: &str) {}
    fn ninja(&mut self, _: u64, _: u64, _: &str) {}
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
    run_inner(args, source, materialize, progress)
}

/// Everything that decides the build directory's content except the overlay series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirKeyMaterial {
    pub upstream: String,
    pub pin: String,
    pub backend: Backend,
    pub profile: Profile,
    pub cmake_options: Vec<String>,
    pub compiler: String,
}

impl DirKeyMaterial {
    fn canonical(&self) -> String {
        let mut s = String::new();
        // Line-oriented with explicit labels so two fields can never blend into one another.
        let _ = writeln!(s, "upstream={}", self.upstream);
        let _ = writeln!(s, "pin={}", self.pin);
        let _ = writeln!(s, "backend={}", self.backend.as_str());
        let _ = writeln!(s, "profile={}", self.profile.as_str());
        for o in &self.cmake_options {
            let _ = writeln!(s, "cmake={o}");
        }
        for l in self.compiler.lines() {
            let _ = writeln!(s, "compiler={l}");
        }
        s
    }

    pub fn dir_key(&self) -> String {
        short_hash(&self.canonical())
    }
}

/// The stamp: what the Ninja tree was last built from, written after a successful install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    dir: DirKeyMaterial,
    series_hash: String,
    fetchcontent: BTreeMap<String, String>,
}

impl Stamp {
    fn key(&self) -> String {
        let mut s = self.dir.canonical();
        let _ = writeln!(s, "series={}", self.series_hash);
        for (k, v) in &self.fetchcontent {
            let _ = writeln!(s, "fetchcontent={k}={v}");
        }
        short_hash(&s)
    }
}

/// The first 20 hex digits of `s`'s SHA-256: the build cache's keys.
pub fn short_hash(s: &str) -> String {
    sha256_hex(s.as_bytes(), 20)
}

/// The first `digits` lowercase hex digits of `bytes`' SHA-256 (sha2's `LowerHex`), the one
/// digest-to-name helper of the build driver and the MLX tasks.
pub fn sha256_hex(bytes: &[u8], digits: usize) -> String {
    let mut hex = format!("{:x}", Sha256::digest(bytes));
    hex.truncate(digits);
    hex
}

/// CMake options that shape the compiled objects (part of the dir key). Paths are left out:
/// they are either derived from the build dir or recorded in the stamp.
pub fn cmake_options(backend: Backend, profile: Profile, gguf: bool) -> Vec<String> {
    let on = |b: bool| if b { "ON" } else { "OFF" };
    vec![
        format!("CMAKE_BUILD_TYPE={}", profile.cmake_build_type()),
        "BUILD_SHARED_LIBS=OFF".into(),
        "MLX_BUILD_TESTS=OFF".into(),
        "MLX_BUILD_EXAMPLES=OFF".into(),
        "MLX_BUILD_BENCHMARKS=OFF".into(),
        "MLX_BUILD_PYTHON_BINDINGS=OFF".into(),
        "MLX_BUILD_PYTHON_STUBS=OFF".into(),
        "MLX_BUILD_CPU=ON".into(),
        format!("MLX_BUILD_METAL={}", on(backend == Backend::Metal)),
        format!("MLX_BUILD_CUDA={}", on(backend == Backend::Cuda)),
        // gguflib has no system package; it is only built when pins.toml points at a checkout.
        format!("MLX_BUILD_GGUF={}", on(gguf)),
        "USE_SYSTEM_FMT=ON".into(),
        // We pick the launcher ourselves (ccache or sccache) instead of MLX's ccache-only probe.
        "MLX_USE_CCACHE=OFF".into(),
    ]
}

/// Maps pins.toml FetchContent overrides to `FETCHCONTENT_SOURCE_DIR_<NAME>` definitions.
/// CMake can only redirect a FetchContent declaration to a local directory, so URLs (other than
/// `file://` directories) are rejected with a message saying what to do instead.
pub fn fetchcontent_defines(fc: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (name, value) in fc {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
        {
            return Err(user_err(format!(
                "fetchcontent name `{name}` is not a valid FetchContent name"
            )));
        }
        let dir = if let Some(p) = value.strip_prefix("file://") {
            PathBuf::from(p)
        } else if value.contains("://") {
            return Err(user_err(format!(
                "fetchcontent `{name}` is a URL ({value}); CMake can only override FetchContent \
                 with a local directory (FETCHCONTENT_SOURCE_DIR_{}). Download and unpack it, then \
                 set `{name} = \"<dir>\"` in pins.toml",
                name.to_ascii_uppercase()
            )));
        } else {
            PathBuf::from(value)
        };
        if !dir.is_absolute() {
            return Err(user_err(format!(
                "fetchcontent `{name}` = `{value}` must be an absolute directory"
            )));
        }
        out.push(format!(
            "FETCHCONTENT_SOURCE_DIR_{}={}",
            name.to_ascii_uppercase(),
            dir.display()
        ));
    }
    Ok(out)
}

/// Compiler identity for the dir key: the `CXX`/`CC` choice and `--version` output.
pub fn compiler_identity() -> Result<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx).arg("--version").output().map_err(|e| {
        user_err(format!(
            "C++ compiler `{cxx}` not runnable ({e}); install one or set CXX"
        ))
    })?;
    let mut id = format!(
        "CXX={cxx}\nCC={}\n",
        std::env::var("CC").unwrap_or_default()
    );
    id.push_str(String::from_utf8_lossy(&out.stdout).trim());
    Ok(id)
}

fn run_inner(
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

    let gguf = source.fetchcontent.contains_key("gguflib");
    let fc_defines = fetchcontent_defines(&source.fetchcontent)?;
    let stamp = Stamp {
        dir: DirKeyMaterial {
            upstream: source.upstream.clone(),
            pin: source.pin.clone(),
            backend,
            profile: args.profile,
            cmake_options: cmake_options(backend, args.profile, gguf),
            compiler: compiler_identity()?,
        },
        series_hash: source.series_hash.clone(),
        fetchcontent: source.fetchcontent.clone(),
    };
    let dir_key = stamp.dir.dir_key();
    let key = stamp.key();
    let builds = source.cache_root.join("builds");
    let root = builds.join(&dir_key);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;

    // Two build-mlx runs on one tree would corrupt each other's Ninja state. The build's own
    // processes hold this lock too (see `in_build`), so it outlives a killed build-mlx until its
    // Ninja and compilers have exited.
    let lock = lock_build_dir(&builds.join(format!("{dir_key}.lock")), || {
        progress.message(&format!(
            "waiting for another build-mlx using {} (or the build processes of an \
             interrupted one) ...",
            root.display()
        ))
    })?;

    let stamp_path = root.join("stamp.json");
    let install = root.join("install");
    // Installed results are immutable and addressed by the full key: checkouts with different
    // series share one Ninja tree (incremental rebuilds) but never each other's libraries, and
    // switching back to a series built before is a no-op.
    let keyed = builds.join("installs").join(&key);
    if let Some(lib_dir) = find_lib_dir(&keyed) {
        let info = build_info(&stamp, &key, &dir_key, &keyed, &lib_dir)?;
        let info_path = write_build_info(&source.workspace_target, &info)?;
        return Ok(Report {
            status: Status::UpToDate,
            info,
            info_path,
            took: started.elapsed(),
        });
    }

    let missing = check_deps(&platform, backend);
    if !missing.is_empty() {
        return Err(user_err(missing_deps_message(&platform, backend, &missing)));
    }

    // The stamp goes first: an interrupted build must not claim what the Ninja tree holds.
    match std::fs::remove_file(&stamp_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", stamp_path.display())),
    }

    let src = root.join("src");
    let build = root.join("build");
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(&build)?;
    progress.message(&format!(
        "materializing {} @ {} into {}",
        source.upstream,
        short(&source.pin),
        src.display()
    ));
    materialize(&src).context("materializing the patched source tree")?;

    let mut defines = stamp.dir.cmake_options.clone();
    defines.push(format!("CMAKE_INSTALL_PREFIX={}", install.display()));
    defines.extend(launcher_defines(backend));
    defines.extend(fc_defines.iter().cloned());
    if !source.fetchcontent.contains_key("json") {
        let dir = system_json_source_dir(&root.join("deps"))?;
        defines.push(format!("FETCHCONTENT_SOURCE_DIR_JSON={}", dir.display()));
    }
    configure(&src, &build, &defines, &lock, progress)?;

    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    ninja_build(&build, jobs, &lock, progress)?;
    cmake_install(&build, &lock)?;

    if find_lib_dir(&install).is_none() {
        return Err(user_err(format!(
            "install finished but no libmlx under {}",
            install.display()
        )));
    }
    publish_install(&install, &keyed)?;
    prune_installs(&builds.join("installs"), &key, KEEP_INSTALLS)?;
    let lib_dir = find_lib_dir(&keyed).context("the published install has no libmlx")?;
    let info = build_info(&stamp, &key, &dir_key, &keyed, &lib_dir)?;
    write_atomic(
        &stamp_path,
        serde_json::to_string_pretty(&stamp)?.as_bytes(),
    )?;
    let info_path = write_build_info(&source.workspace_target, &info)?;
    Ok(Report {
        status: Status::Built,
        info,
        info_path,
        took: started.elapsed(),
    })
}

/// How many keyed installs to keep; older ones are removed (a checkout still pointing at one
/// rebuilds it on its next build-mlx).
const KEEP_INSTALLS: usize = 6;

/// Copies the staging install to `installs/<key>` whole: a temp dir, then one rename.
fn publish_install(from: &Path, to: &Path) -> Result<()> {
    fn copy(from: &Path, to: &Path) -> Result<()> {
        std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
        for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
            let e = e?;
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ft = e.file_type()?;
            if ft.is_dir() {
                copy(&src, &dst)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&src)?;
                #[cfg(unix)]
                std::os::unix::fs::symlink(target, &dst)?;
                #[cfg(not(unix))]
                std::fs::copy(&src, &dst)
                    .map(|_| ())
                    .map_err(|e| Error::Message(format!("{e}: {}", target.display())))?;
            } else {
                std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
            }
        }
        Ok(())
    }
    let tmp = to.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy(from, &tmp)?;
    let _ = std::fs::remove_dir_all(to);
    std::fs::rename(&tmp, to).with_context(|| format!("publishing {}", to.display()))
}

/// Keeps the `keep` most recently published installs (and always `current`).
fn prune_installs(dir: &Path, current: &str, keep: usize) -> Result<()> {
    let mut all: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy() != current
                && !e.file_name().to_string_lossy().contains(".tmp")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    all.sort();
    let excess = (all.len() + 1).saturating_sub(keep);
    for (_, p) in all.into_iter().take(excess) {
        let _ = std::fs::remove_dir_all(p);
    }
    Ok(())
}

fn short(pin: &str) -> &str {
    pin.get(..12).unwrap_or(pin)
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

fn static_lib_file(name: &str) -> String {
    if cfg!(windows) {
        format!("{name}.lib")
    } else {
        format!("lib{name}.a")
    }
}

/// GNUInstallDirs picks `lib` or `lib64` depending on the distribution.
fn find_lib_dir(install: &Path) -> Option<PathBuf> {
    ["lib", "lib64"]
        .iter()
        .map(|d| install.join(d))
        .find(|d| d.join(static_lib_file("mlx")).is_file())
}

/// Writes `bytes` to `path` via a temp file + rename (the engine's `fsx`) so readers never see
/// a partial file; creates the parent folder first.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("path without parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    overlay::fsx::write_atomic(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes build-info.json only when its content changes: mlx-sys reruns its build script on
/// the file's mtime, so a no-op build-mlx must not touch it.
fn write_build_info(workspace_target: &Path, info: &BuildInfo) -> Result<PathBuf> {
    let path = workspace_target.join("mlx").join("build-info.json");
    let mut bytes = serde_json::to_vec_pretty(info)?;
    bytes.push(b'\n');
    if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
        write_atomic(&path, &bytes)?;
    }
    Ok(path)
}

fn build_info(
    stamp: &Stamp,
    key: &str,
    dir_key: &str,
    install: &Path,
    lib_dir: &Path,
) -> Result<BuildInfo> {
    let targets = install.join("share/cmake/MLX/MLXTargets.cmake");
    let text = std::fs::read_to_string(&targets)
        .with_context(|| format!("reading {} (written by cmake --install)", targets.display()))?;
    let (link_items, defines) = parse_mlx_targets(&text);
    let mut libs = vec!["static=mlx".to_string()];
    let mut link_search = vec![lib_dir.to_path_buf()];
    for item in &link_items {
        let (lib, dir) = link_lib_for(item);
        if let Some(dir) = dir
            && !link_search.contains(&dir)
        {
            link_search.push(dir);
        }
        if let Some(lib) = lib
            && !libs.contains(&lib)
        {
            libs.push(lib);
        }
    }
    Ok(BuildInfo {
        key: key.to_string(),
        dir_key: dir_key.to_string(),
        upstream: stamp.dir.upstream.clone(),
        pin: stamp.dir.pin.clone(),
        series_hash: stamp.series_hash.clone(),
        backend: stamp.dir.backend,
        profile: stamp.dir.profile,
        include_dir: install.join("include"),
        lib_dir: lib_dir.to_path_buf(),
        libs,
        link_search,
        defines,
        cxx_std: "c++20".into(),
    })
}

/// Pulls the `mlx` target's interface link items and compile definitions out of the
/// installed `MLXTargets.cmake`: CMake already resolved BLAS/LAPACK/frameworks there, so
/// build.rs links exactly what MLX's own CMake consumers would.
fn parse_mlx_targets(text: &str) -> (Vec<String>, Vec<String>) {
    let mut in_mlx = false;
    let mut links = Vec::new();
    let mut defines = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("set_target_properties(") {
            in_mlx = t.contains("mlx PROPERTIES") || t.ends_with("mlx PROPERTIES");
            continue;
        }
        if !in_mlx {
            continue;
        }
        if t == ")" {
            in_mlx = false;
            continue;
        }
        let value = |prefix: &str| -> Option<Vec<String>> {
            let rest = t.strip_prefix(prefix)?.trim();
            let rest = rest.strip_prefix('"')?.strip_suffix('"')?;
            Some(split_cmake_list(rest))
        };
        if let Some(v) = value("INTERFACE_LINK_LIBRARIES") {
            links = v;
        } else if let Some(v) = value("INTERFACE_COMPILE_DEFINITIONS") {
            defines = v;
        }
    }
    (links, defines)
}

/// Splits a CMake list, keeping `;` inside generator expressions, and strips `$<LINK_ONLY:..>`.
fn split_cmake_list(s: &str) -> Vec<String> {
    let s = s.replace("\\$", "$");
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '<' if cur.ends_with('$') => {
                depth += 1;
                cur.push(c);
            }
            '>' if depth > 0 => {
                depth -= 1;
                cur.push(c);
            }
            ';' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .filter(|x| !x.is_empty())
        .filter_map(|x| {
            if let Some(inner) = x
                .strip_prefix("$<LINK_ONLY:")
                .and_then(|r| r.strip_suffix('>'))
            {
                // LINK_ONLY may wrap another expression, e.g. $<BUILD_INTERFACE:fmt::..>.
                (!inner.is_empty() && !inner.starts_with("$<")).then(|| inner.to_string())
            } else if x.starts_with("$<") {
                None // BUILD_INTERFACE and friends do not apply to an installed library
            } else {
                Some(x)
            }
        })
        .collect()
}

/// Translates one CMake link item into a cargo `rustc-link-lib` value and search dir.
fn link_lib_for(item: &str) -> (Option<String>, Option<PathBuf>) {
    let p = Path::new(item);
    if let Some(name) = item.strip_prefix("-l") {
        return (Some(format!("dylib={name}")), None);
    }
    if item.starts_with('-') {
        return (None, None); // linker flags such as -fsanitize: not expressible as a lib
    }
    if let Some(name) = item.strip_prefix("CUDA::") {
        return (Some(format!("dylib={name}")), None);
    }
    if item == "Threads::Threads" {
        return (Some("dylib=pthread".into()), None);
    }
    if p.is_absolute() {
        let dir = p.parent().map(Path::to_path_buf);
        let file = p
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(fw) = file.strip_suffix(".framework") {
            return (Some(format!("framework={fw}")), None);
        }
        if let Some(stem) = file.strip_suffix(".tbd") {
            return (
                Some(format!("dylib={}", stem.trim_start_matches("lib"))),
                dir,
            );
        }
        let base = file.strip_prefix("lib").unwrap_or(&file);
        for (ext, kind) in [
            (".a", "static"),
            (".so", "dylib"),
            (".dylib", "dylib"),
            (".lib", "dylib"),
        ] {
            if let Some(idx) = base.find(ext)
                && (base.len() == idx + ext.len() || base[idx + ext.len()..].starts_with('.'))
            {
                return (Some(format!("{kind}={}", &base[..idx])), dir);
            }
        }
        return (None, None);
    }
    if item.contains("::") {
        return (None, None); // an imported target we cannot resolve outside CMake
    }
    (Some(format!("dylib={item}")), None)
}

/// Compiler launcher: sccache wins when `RUSTC_WRAPPER`/`SCCACHE_*` shows the user set it up
/// (remote cache for teams), else ccache, else none.
pub fn launcher_defines(backend: Backend) -> Vec<String> {
    let want_sccache = std::env::vars()
        .any(|(k, v)| k.starts_with("SCCACHE_") || (k == "RUSTC_WRAPPER" && v.contains("sccache")));
    let launcher = if want_sccache && runs("sccache", &["--version"]) {
        Some("sccache")
    } else if runs("ccache", &["--version"]) {
        Some("ccache")
    } else if runs("sccache", &["--version"]) {
        Some("sccache")
    } else {
        None
    };
    let Some(l) = launcher else { return Vec::new() };
    if l == "sccache" {
        // Start sccache's server from here, where the build lock is close-on-exec: a server
        // started by the first compile would inherit the lock (see `in_build`) and hold it
        // until it idles out. An already running server makes this fail, which is fine.
        runs("sccache", &["--start-server"]);
    }
    let mut v = vec![
        format!("CMAKE_C_COMPILER_LAUNCHER={l}"),
        format!("CMAKE_CXX_COMPILER_LAUNCHER={l}"),
    ];
    if backend == Backend::Cuda {
        v.push(format!("CMAKE_CUDA_COMPILER_LAUNCHER={l}"));
    }
    v
}

pub fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// MLX declares `json` as a release tarball and only uses `${json_SOURCE_DIR}/single_include/nlohmann`
/// as an include dir (sources say `#include <json.hpp>`). With no network we hand FetchContent a
/// directory holding just that header, forwarding to the system nlohmann-json. It has no
/// CMakeLists.txt, so FetchContent_MakeAvailable only populates it.
pub fn system_json_source_dir(deps: &Path) -> Result<PathBuf> {
    let header = find_header("nlohmann/json.hpp")
        .ok_or_else(|| user_err("nlohmann/json.hpp not found (install nlohmann-json)"))?;
    let dir = deps.join("json");
    let inc = dir.join("single_include/nlohmann");
    std::fs::create_dir_all(&inc)?;
    for name in ["json.hpp", "json_fwd.hpp"] {
        let target = header.with_file_name(name);
        if !target.is_file() {
            continue;
        }
        let content = format!(
            "// Generated by cargo xtask build-mlx: forwards to the system nlohmann-json.\n#include \"{}\"\n",
            target.display()
        );
        let path = inc.join(name);
        // Unchanged content keeps the mtime, so Ninja does not recompile its users.
        if std::fs::read_to_string(&path).ok().as_deref() != Some(&content) {
            std::fs::write(&path, content)?;
        }
    }
    Ok(dir)
}

/// Opens (creating) the build tree's lock file `path` and takes its exclusive `flock`, calling
/// `on_wait` first when another build (or the processes of a killed one, which inherit it through
/// [`in_build`]) holds it. The one lock routine of build-mlx, build-ggml and test-upstream.
pub fn lock_build_dir(path: &Path, on_wait: impl FnOnce()) -> Result<std::fs::File> {
    let lock =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            on_wait();
            lock.lock().context("locking the build directory")?;
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).context("locking the build directory");
        }
    }
    Ok(lock)
}

/// Makes `cmd` a process of the build that `lock` (the tree's `.lock`, flock'ed) guards:
///
/// - it inherits the lock's open file description (close-on-exec is cleared in the child only),
///   and so do Ninja's compilers and everything else it starts. An flock belongs to the open
///   file description, and the kernel releases it when the last descriptor referring to it is
///   closed: the tree stays locked until build-mlx *and* every process of its build have exited,
///   however build-mlx ended (SIGKILL included), and the next build-mlx waits for them.
/// - on Linux it gets SIGTERM when build-mlx dies (`PR_SET_PDEATHSIG`): an orphaned Ninja stops
///   its jobs and exits instead of building on for minutes while the next build-mlx waits.
///   (The signal follows the spawning *thread*: build-mlx spawns from the thread running `run`,
///   which outlives its children.)
fn in_build(cmd: &mut Command, lock: &std::fs::File) {
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = lock.as_raw_fd();
        #[cfg(target_os = "linux")]
        let parent = std::process::id();
        // SAFETY: between fork and exec the closure only makes async-signal-safe calls (fcntl,
        // prctl, getppid) and allocates nothing on its success path.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                #[cfg(target_os = "linux")]
                {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // build-mlx died before the prctl: nobody would signal this process.
                    if libc::getppid() as u32 != parent {
                        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (cmd, lock);
}

pub fn configure(
    src: &Path,
    build: &Path,
    defines: &[String],
    lock: &std::fs::File,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut cmd = Command::new("cmake");
    cmd.arg("-S")
        .arg(src)
        .arg("-B")
        .arg(build)
        .args(["-G", "Ninja"]);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    // Reconfigure only when the command line changed: CMake re-runs itself from Ninja when
    // the CMakeLists change, so an unchanged command line needs nothing from us.
    let args_text = defines.join("\n");
    let args_file = build.join(".build-mlx-configure");
    let configured = build.join("build.ninja").is_file()
        && build.join("CMakeCache.txt").is_file()
        && std::fs::read_to_string(&args_file).ok().as_deref() == Some(&args_text);
    if configured {
        return Ok(());
    }
    progress.message(&format!("configuring: {}", render_command(&cmd)));
    in_build(&mut cmd, lock);
    let out = cmd.output().context("running cmake")?;
    if !out.status.success() {
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        // A failed configure leaves a cache that may be half-right: force the next run to redo it.
        let _ = std::fs::remove_file(&args_file);
        return Err(user_err(format!(
            "cmake configure failed:\n{}",
            tail_lines(&log, 60)
        )));
    }
    std::fs::write(&args_file, args_text)?;
    Ok(())
}

/// `cmd` as a line a POSIX shell would run as it is (shlex quotes each word that needs it).
fn render_command(cmd: &Command) -> String {
    let words: Vec<_> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|w| w.to_string_lossy())
        .collect();
    // A NUL cannot be in an argument (Command refuses it), so quoting cannot fail.
    shlex::try_join(words.iter().map(|w| w.as_ref())).unwrap_or_else(|_| words.join(" "))
}

pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Parses Ninja's default status prefix `[n/m] description`.
fn parse_ninja_status(line: &str) -> Option<(u64, u64, &str)> {
    let rest = line.strip_prefix('[')?;
    let (nums, desc) = rest.split_once(']')?;
    let (n, m) = nums.split_once('/')?;
    let n = n.trim().parse().ok()?;
    let m = m.trim().parse().ok()?;
    Some((n, m, desc.trim_start()))
}

/// The part of Ninja's output that explains a failure: from the first `FAILED:` on, capped;
/// without one, the last lines.
fn failure_excerpt(lines: &[String]) -> String {
    const MAX: usize = 150;
    match lines.iter().position(|l| l.starts_with("FAILED:")) {
        Some(i) => {
            let end = (i + MAX).min(lines.len());
            let mut s = lines[i..end].join("\n");
            if end < lines.len() {
                let _ = write!(s, "\n... ({} more lines)", lines.len() - end);
            }
            s
        }
        None => lines[lines.len().saturating_sub(40)..].join("\n"),
    }
}

/// ccache settings that let a translation unit compiled in one build tree hit in another (a new
/// pin's tree, another cache root's): `base_dir` rewrites absolute paths under the cache's
/// `builds/` directory into paths relative to the compiler's working directory
/// (`<tree>/build`), so `/…/builds/<k1>/src/mlx/ops.cpp` and `/…/builds/<k2>/src/mlx/ops.cpp`
/// both reach the compiler, and the hash, as `../src/mlx/ops.cpp`. `hash_dir=false` leaves that
/// working directory out of the hash of compilations with debug info (Debug, RelWithDebInfo);
/// their objects may then name another tree as their compilation directory.
fn ccache_env(build: &Path) -> Vec<(&'static str, std::ffi::OsString)> {
    // `<cache>/builds/<dir_key>/build` -> `<cache>/builds`, the parent of every tree.
    let builds = build.parent().and_then(Path::parent).unwrap_or(build);
    vec![
        ("CCACHE_BASEDIR", builds.as_os_str().to_owned()),
        ("CCACHE_NOHASHDIR", "1".into()),
    ]
}

/// The Ninja CMake configured the tree with (`CMAKE_MAKE_PROGRAM`), else `ninja`.
fn ninja_program(build: &Path) -> PathBuf {
    std::fs::read_to_string(build.join("CMakeCache.txt"))
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("CMAKE_MAKE_PROGRAM:FILEPATH="))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("ninja"))
}

fn ninja_build(
    build: &Path,
    jobs: usize,
    lock: &std::fs::File,
    progress: &mut dyn Progress,
) -> Result<()> {
    ninja_build_targets(build, jobs, &[], lock, progress)
}

/// Builds `targets` (all when empty), reporting Ninja's status to `progress`; a failure shows
/// Ninja's excerpt.
pub fn ninja_build_targets(
    build: &Path,
    jobs: usize,
    targets: &[&str],
    lock: &std::fs::File,
    progress: &mut dyn Progress,
) -> Result<()> {
    // Ninja itself rather than `cmake --build`, which only runs it (`ninja -j N` in the tree):
    // the process that owns the tree's state is then the one that gets SIGTERM if build-mlx
    // dies, and it stops its jobs (see `in_build`).
    let mut cmd = Command::new(ninja_program(build));
    cmd.arg("-C")
        .arg(build)
        .args(targets)
        .arg("-j")
        .arg(jobs.to_string())
        .envs(ccache_env(build))
        // Ninja's default status format, set explicitly because parsing depends on it.
        .env("NINJA_STATUS", "[%f/%t] ")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    in_build(&mut cmd, lock);
    let mut child = cmd.spawn().context("running ninja")?;
    let mut stderr = child.stderr.take().context("no stderr pipe")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let stdout = child.stdout.take().context("no stdout pipe")?;

    let mut other = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading build output")?;
        match parse_ninja_status(&line) {
            Some((n, m, desc)) => progress.ninja(n, m, desc),
            None => other.push(line),
        }
    }
    let status = child.wait().context("waiting for ninja")?;
    progress.ninja_done();
    let err_text = err_thread.join().unwrap_or_default();
    other.extend(err_text.lines().map(str::to_string));
    if !status.success() {
        return Err(user_err(format!(
            "MLX build failed:\n{}",
            failure_excerpt(&other)
        )));
    }
    Ok(())
}

fn cmake_install(build: &Path, lock: &std::fs::File) -> Result<()> {
    let mut cmd = Command::new("cmake");
    cmd.arg("--install").arg(build);
    in_build(&mut cmd, lock);
    let out = cmd.output().context("running cmake --install")?;
    if !out.status.success() {
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(user_err(format!(
            "cmake --install failed:\n{}",
            tail_lines(&log, 40)
        )));
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------
// Dependencies

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Debian,
    MacOs,
    Other,
}

impl Platform {
    pub fn detect() -> Self {
        if cfg!(target_os = "macos") {
            return Platform::MacOs;
        }
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        if is_debian_like(&os_release) {
            Platform::Debian
        } else {
            Platform::Other
        }
    }
}

fn is_debian_like(os_release: &str) -> bool {
    os_release.lines().any(|l| {
        let Some((k, v)) = l.split_once('=') else {
            return false;
        };
        (k == "ID" || k == "ID_LIKE")
            && v.trim_matches('"')
                .split_whitespace()
                .any(|id| id == "debian" || id == "ubuntu")
    })
}

/// A missing build dependency, named as the user would look for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dep {
    Cmake,
    Ninja,
    Cxx,
    Blas,
    Lapack,
    Fmt,
    Json,
    Metal,
    Nvcc,
    Cudnn,
}

impl Dep {
    fn describe(self) -> &'static str {
        match self {
            Dep::Cmake => "cmake >= 3.25",
            Dep::Ninja => "ninja",
            Dep::Cxx => "a C++20 compiler (c++ or $CXX)",
            Dep::Blas => "BLAS (OpenBLAS: cblas.h + libopenblas/libblas)",
            Dep::Lapack => "LAPACK with lapack.h (LAPACKE headers)",
            Dep::Fmt => "fmt (headers + CMake package)",
            Dep::Json => "nlohmann-json (nlohmann/json.hpp)",
            Dep::Metal => "Metal toolchain (`xcrun -sdk macosx metal`)",
            Dep::Nvcc => "CUDA toolkit (nvcc)",
            Dep::Cudnn => "cuDNN (cudnn.h)",
        }
    }
}

fn include_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .flat_map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .collect();
    for d in [
        "/usr/local/include",
        "/usr/include",
        "/opt/homebrew/include",
    ] {
        dirs.push(PathBuf::from(d));
    }
    // Debian puts OpenBLAS's cblas.h under a multiarch directory.
    if let Ok(rd) = std::fs::read_dir("/usr/include") {
        dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu"))
        }));
    }
    for d in [
        "/usr/include/openblas",
        "/opt/homebrew/opt/openblas/include",
        "/usr/local/opt/openblas/include",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

pub fn find_header(rel: &str) -> Option<PathBuf> {
    include_dirs()
        .into_iter()
        .map(|d| d.join(rel))
        .find(|p| p.is_file())
}

fn lib_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/lib",
        "/usr/lib",
        "/usr/lib64",
        "/lib",
        "/opt/homebrew/opt/openblas/lib",
        "/usr/local/opt/openblas/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    for base in ["/usr/lib", "/lib"] {
        if let Ok(rd) = std::fs::read_dir(base) {
            dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu"))
            }));
        }
    }
    dirs
}

fn has_lib(names: &[&str]) -> bool {
    lib_dirs().iter().any(|d| {
        names.iter().any(|n| {
            ["so", "a", "dylib"]
                .iter()
                .any(|ext| d.join(format!("lib{n}.{ext}")).is_file())
        })
    })
}

fn cmake_version_ok() -> bool {
    let Ok(out) = Command::new("cmake").arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    parse_cmake_version(&text).is_some_and(|v| v >= MIN_CMAKE)
}

fn parse_cmake_version(text: &str) -> Option<(u32, u32)> {
    let v = text.lines().next()?.strip_prefix("cmake version ")?;
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

pub fn check_deps(platform: &Platform, backend: Backend) -> Vec<Dep> {
    let mut missing = Vec::new();
    if !cmake_version_ok() {
        missing.push(Dep::Cmake);
    }
    if !runs("ninja", &["--version"]) {
        missing.push(Dep::Ninja);
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !runs(&cxx, &["--version"]) {
        missing.push(Dep::Cxx);
    }
    // macOS uses Accelerate for BLAS/LAPACK, found by MLX itself.
    if *platform != Platform::MacOs {
        if find_header("cblas.h").is_none() || !has_lib(&["openblas", "blas"]) {
            missing.push(Dep::Blas);
        }
        if find_header("lapack.h").is_none() || !has_lib(&["openblas", "lapack"]) {
            missing.push(Dep::Lapack);
        }
    }
    if find_header("fmt/format.h").is_none() {
        missing.push(Dep::Fmt);
    }
    if find_header("nlohmann/json.hpp").is_none() {
        missing.push(Dep::Json);
    }
    match backend {
        Backend::Metal => {
            if !runs("xcrun", &["-sdk", "macosx", "metal", "--version"]) {
                missing.push(Dep::Metal);
            }
        }
        Backend::Cuda => {
            let nvcc = std::env::var("CUDACXX").unwrap_or_else(|_| "nvcc".into());
            if !runs(&nvcc, &["--version"]) && !runs("/usr/local/cuda/bin/nvcc", &["--version"]) {
                missing.push(Dep::Nvcc);
            }
            if find_header("cudnn.h").is_none()
                && !Path::new("/usr/local/cuda/include/cudnn.h").is_file()
            {
                missing.push(Dep::Cudnn);
            }
        }
        Backend::Cpu => {}
    }
    missing
}

const APT_PACKAGES: &[&str] = &[
    "cmake",
    "ninja-build",
    "libopenblas-dev",
    "liblapacke-dev",
    "libfmt-dev",
    "nlohmann-json3-dev",
    "ccache",
];
const BREW_PACKAGES: &[&str] = &["cmake", "ninja", "fmt", "nlohmann-json", "ccache"];

/// The command that installs the build dependencies on this platform, as the user should run it.
fn install_command(platform: &Platform, root: bool) -> Option<String> {
    match platform {
        Platform::Debian => {
            let sudo = if root { "" } else { "sudo " };
            Some(format!(
                "{sudo}apt-get update && {sudo}apt-get install -y {}",
                APT_PACKAGES.join(" ")
            ))
        }
        Platform::MacOs => Some(format!("brew install {}", BREW_PACKAGES.join(" "))),
        Platform::Other => None,
    }
}

/// Whether this process runs as root (no `sudo` in the install command then).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[cfg(unix)]
    return unsafe { libc::geteuid() } == 0;
    #[cfg(not(unix))]
    false
}

pub fn missing_deps_message(platform: &Platform, backend: Backend, missing: &[Dep]) -> String {
    let mut s = String::from("missing build dependencies for MLX:\n");
    for d in missing {
        let _ = writeln!(s, "  - {}", d.describe());
    }
    let platform_fixable = missing
        .iter()
        .any(|d| !matches!(d, Dep::Metal | Dep::Nvcc | Dep::Cudnn));
    if platform_fixable {
        match install_command(platform, is_root()) {
            Some(cmd) => {
                let _ = writeln!(s, "install them with:\n  {cmd}");
                s.push_str("or rerun with --install-deps\n");
            }
            None => s.push_str(
                "install cmake, ninja, a C++20 compiler, OpenBLAS + LAPACKE headers, fmt and \
                 nlohmann-json with your package manager\n",
            ),
        }
    }
    if missing.contains(&Dep::Metal) {
        s.push_str(
            "the Metal compiler comes with Xcode: install Xcode, run `xcode-select -s \
             /Applications/Xcode.app`, and on Xcode 26+ `xcodebuild -downloadComponent MetalToolchain`\n",
        );
    }
    if backend == Backend::Cuda && (missing.contains(&Dep::Nvcc) || missing.contains(&Dep::Cudnn)) {
        s.push_str(
            "install the CUDA toolkit and cuDNN from NVIDIA's repositories (not automated)\n",
        );
    }
    s.trim_end().to_string()
}

pub fn install_deps(
    platform: &Platform,
    backend: Backend,
    progress: &mut dyn Progress,
) -> Result<()> {
    let missing = check_deps(platform, backend);
    if missing.is_empty() {
        progress.message("build dependencies already installed");
        return Ok(());
    }
    let steps: Vec<Vec<String>> = match platform {
        Platform::Debian => {
            if !is_root() {
                return Err(user_err(format!(
                    "--install-deps needs root on Debian/Ubuntu; run:\n  {}",
                    install_command(platform, false).unwrap_or_default()
                )));
            }
            let mut install = vec!["apt-get".to_string(), "install".into(), "-y".into()];
            install.extend(APT_PACKAGES.iter().map(|p| p.to_string()));
            vec![vec!["apt-get".into(), "update".into()], install]
        }
        Platform::MacOs => {
            let mut v = vec!["brew".to_string(), "install".into()];
            v.extend(BREW_PACKAGES.iter().map(|p| p.to_string()));
            vec![v]
        }
        Platform::Other => {
            return Err(user_err(format!(
                "--install-deps does not know this platform's package manager.\n{}",
                missing_deps_message(platform, backend, &missing)
            )));
        }
    };
    for step in steps {
        progress.message(&format!("running: {}", step.join(" ")));
        let status = Command::new(&step[0])
            .args(&step[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| user_err(format!("cannot run {}: {e}", step[0])))?;
        if !status.success() {
            return Err(user_err(format!("`{}` failed ({status})", step.join(" "))));
        }
    }
    let still = check_deps(platform, backend);
    if !still.is_empty() {
        return Err(user_err(missing_deps_message(platform, backend, &still)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_keep_the_names_they_had() {
        // sha256("abc") = ba7816bf8f01cfea414140de…: cache keys (20 digits) and fuzz seed names
        // (16) are what the hand-written `{:02x}` loops made, so existing caches stay valid.
        assert_eq!(short_hash("abc"), "ba7816bf8f01cfea4141");
        assert_eq!(sha256_hex(b"abc", 16), "ba7816bf8f01cfea");
    }

    #[test]
    fn the_shown_configure_command_survives_a_shell() {
        let mut cmd = Command::new("cmake");
        cmd.args(["-S", "/a b/src", "-DX=it's", "-DY=$HOME", "-GNinja"]);
        let shown = render_command(&cmd);
        // The hand-written quoting wrapped `it's` in '…' as it was: a shell read another word.
        assert_eq!(
            shlex::split(&shown).expect("a shell word list"),
            [
                "cmake",
                "-S",
                "/a b/src",
                "-DX=it's",
                "-DY=$HOME",
                "-GNinja"
            ],
            "{shown}"
        );
    }

    fn material() -> DirKeyMaterial {
        DirKeyMaterial {
            upstream: "mlx".into(),
            pin: "9a795735ad9a42664e08f42361b405ed570bcf1a".into(),
            backend: Backend::Cpu,
            profile: Profile::Release,
            cmake_options: cmake_options(Backend::Cpu, Profile::Release, false),
            compiler: "CXX=c++\nCC=\nc++ (Debian 12.2.0-14) 12.2.0".into(),
        }
    }

    fn stamp() -> Stamp {
        Stamp {
            dir: material(),
            series_hash: "abc".into(),
            fetchcontent: BTreeMap::new(),
        }
    }

    #[test]
    fn dir_key_is_stable_and_sensitive_to_each_input() {
        let base = material();
        assert_eq!(base.dir_key(), material().dir_key());
        assert_eq!(base.dir_key().len(), 20);
        let variants: Vec<DirKeyMaterial> = vec![
            DirKeyMaterial {
                upstream: "mlx2".into(),
                ..material()
            },
            DirKeyMaterial {
                pin: "0".repeat(40),
                ..material()
            },
            DirKeyMaterial {
                backend: Backend::Cuda,
                ..material()
            },
            DirKeyMaterial {
                profile: Profile::Debug,
                ..material()
            },
            DirKeyMaterial {
                cmake_options: cmake_options(Backend::Cpu, Profile::Release, true),
                ..material()
            },
            DirKeyMaterial {
                compiler: "clang version 17".into(),
                ..material()
            },
        ];
        let mut seen = std::collections::HashSet::new();
        seen.insert(base.dir_key());
        for v in variants {
            assert!(seen.insert(v.dir_key()), "collision for {v:?}");
        }
    }

    #[test]
    fn series_hash_changes_the_build_key_but_not_the_dir_key() {
        let a = stamp();
        let b = Stamp {
            series_hash: "def".into(),
            ..stamp()
        };
        assert_eq!(a.dir.dir_key(), b.dir.dir_key());
        assert_ne!(a.key(), b.key());
        let mut fc = BTreeMap::new();
        fc.insert("json".to_string(), "/x".to_string());
        let c = Stamp {
            fetchcontent: fc,
            ..stamp()
        };
        assert_ne!(a.key(), c.key());
        assert_eq!(a.key(), stamp().key());
    }

    #[test]
    fn stamp_round_trips_through_json() {
        let s = stamp();
        let back: Stamp = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(s, back);
    }

    #[test]
    fn ninja_status_lines_parse() {
        assert_eq!(
            parse_ninja_status("[12/84] Building CXX object mlx/ops.cpp.o"),
            Some((12, 84, "Building CXX object mlx/ops.cpp.o"))
        );
        assert_eq!(
            parse_ninja_status("[84/84] Linking CXX static library libmlx.a").map(|s| s.0),
            Some(84)
        );
        assert_eq!(parse_ninja_status("FAILED: mlx/ops.cpp.o"), None);
        assert_eq!(parse_ninja_status("[a/b] x"), None);
        assert_eq!(parse_ninja_status("[3/] x"), None);
        assert_eq!(parse_ninja_status("ops.cpp:1:1: error: [x/y]"), None);
    }

    #[test]
    fn failure_excerpt_starts_at_failed() {
        let lines: Vec<String> = [
            "noise",
            "FAILED: a.o",
            "a.cpp:3: error: boom",
            "ninja: build stopped",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let e = failure_excerpt(&lines);
        assert!(e.starts_with("FAILED: a.o"));
        assert!(e.contains("error: boom"));
        assert!(!e.contains("noise"));
        let no_failed: Vec<String> = vec!["x".into(), "y".into()];
        assert_eq!(failure_excerpt(&no_failed), "x\ny");
    }

    #[test]
    fn install_commands_render_per_platform() {
        assert_eq!(
            install_command(&Platform::Debian, true).unwrap(),
            "apt-get update && apt-get install -y cmake ninja-build libopenblas-dev liblapacke-dev \
             libfmt-dev nlohmann-json3-dev ccache"
        );
        assert!(
            install_command(&Platform::Debian, false)
                .unwrap()
                .starts_with("sudo apt-get update && sudo apt-get install -y cmake")
        );
        assert_eq!(
            install_command(&Platform::MacOs, false).unwrap(),
            "brew install cmake ninja fmt nlohmann-json ccache"
        );
        assert_eq!(install_command(&Platform::Other, true), None);
        let msg = missing_deps_message(&Platform::Debian, Backend::Cpu, &[Dep::Ninja, Dep::Fmt]);
        assert!(msg.contains("  - ninja\n"), "{msg}");
        assert!(msg.contains("apt-get install -y"), "{msg}");
        let cuda = missing_deps_message(&Platform::Debian, Backend::Cuda, &[Dep::Nvcc]);
        assert!(!cuda.contains("apt-get"), "{cuda}");
        assert!(cuda.contains("CUDA toolkit"), "{cuda}");
    }

    #[test]
    fn debian_detection_reads_id_and_id_like() {
        assert!(is_debian_like("ID=debian\n"));
        assert!(is_debian_like("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"));
        assert!(!is_debian_like("ID=fedora\nID_LIKE=\"rhel centos\"\n"));
    }

    #[test]
    fn fetchcontent_maps_dirs_and_rejects_urls() {
        let mut fc = BTreeMap::new();
        fc.insert("json".to_string(), "/opt/json".to_string());
        fc.insert("metal_cpp".to_string(), "file:///opt/metal-cpp".to_string());
        assert_eq!(
            fetchcontent_defines(&fc).unwrap(),
            vec![
                "FETCHCONTENT_SOURCE_DIR_JSON=/opt/json",
                "FETCHCONTENT_SOURCE_DIR_METAL_CPP=/opt/metal-cpp"
            ]
        );
        let mut url = BTreeMap::new();
        url.insert(
            "fmt".to_string(),
            "https://example.org/fmt.tar.gz".to_string(),
        );
        let e = fetchcontent_defines(&url).unwrap_err().to_string();
        assert!(e.contains("FETCHCONTENT_SOURCE_DIR_FMT"), "{e}");
        let mut rel = BTreeMap::new();
        rel.insert("json".to_string(), "relative/dir".to_string());
        assert!(fetchcontent_defines(&rel).is_err());
        let mut bad = BTreeMap::new();
        bad.insert("a b".to_string(), "/x".to_string());
        assert!(fetchcontent_defines(&bad).is_err());
    }

    #[test]
    fn cmake_options_follow_backend() {
        let cpu = cmake_options(Backend::Cpu, Profile::Release, false);
        assert!(cpu.contains(&"MLX_BUILD_METAL=OFF".to_string()));
        assert!(cpu.contains(&"MLX_BUILD_CUDA=OFF".to_string()));
        assert!(cpu.contains(&"CMAKE_BUILD_TYPE=Release".to_string()));
        let metal = cmake_options(Backend::Metal, Profile::Debug, false);
        assert!(metal.contains(&"MLX_BUILD_METAL=ON".to_string()));
        assert!(metal.contains(&"CMAKE_BUILD_TYPE=Debug".to_string()));
        let cuda = cmake_options(Backend::Cuda, Profile::Release, true);
        assert!(cuda.contains(&"MLX_BUILD_CUDA=ON".to_string()));
        assert!(cuda.contains(&"MLX_BUILD_GGUF=ON".to_string()));
    }

    #[test]
    fn mlx_targets_parse_into_cargo_link_lines() {
        let text = r#"
add_library(mlx STATIC IMPORTED)

set_target_properties(mlx PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "MLX_STATIC"
  INTERFACE_COMPILE_FEATURES "cxx_std_20"
  INTERFACE_INCLUDE_DIRECTORIES "${_IMPORT_PREFIX}/include"
  INTERFACE_LINK_LIBRARIES "\$<LINK_ONLY:dl>;\$<LINK_ONLY:pthread>;\$<LINK_ONLY:/usr/lib/x86_64-linux-gnu/libopenblas.so>;\$<LINK_ONLY:-lm>;\$<LINK_ONLY:-ldl>;\$<LINK_ONLY:\$<BUILD_INTERFACE:fmt::fmt-header-only>>;\$<LINK_ONLY:>"
)
"#;
        let (links, defines) = parse_mlx_targets(text);
        assert_eq!(defines, vec!["MLX_STATIC"]);
        let libs: Vec<_> = links.iter().map(|l| link_lib_for(l)).collect();
        assert_eq!(
            libs,
            vec![
                (Some("dylib=dl".into()), None),
                (Some("dylib=pthread".into()), None),
                (
                    Some("dylib=openblas".into()),
                    Some(PathBuf::from("/usr/lib/x86_64-linux-gnu"))
                ),
                (Some("dylib=m".into()), None),
                (Some("dylib=dl".into()), None),
            ]
        );
    }

    #[test]
    fn link_items_map_frameworks_static_and_versioned_libs() {
        assert_eq!(
            link_lib_for("/System/Library/Frameworks/Metal.framework")
                .0
                .as_deref(),
            Some("framework=Metal")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.a").0.as_deref(),
            Some("static=foo")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.so.3").0.as_deref(),
            Some("dylib=foo")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.dylib").0.as_deref(),
            Some("dylib=foo")
        );
        assert_eq!(
            link_lib_for("CUDA::cublas").0.as_deref(),
            Some("dylib=cublas")
        );
        assert_eq!(link_lib_for("Some::Target").0, None);
    }

    #[test]
    fn cmake_version_parses() {
        assert_eq!(
            parse_cmake_version("cmake version 3.25.1\n\nCMake suite"),
            Some((3, 25))
        );
        assert_eq!(parse_cmake_version("garbage"), None);
    }

    #[test]
    fn build_info_is_written_only_when_content_changes() {
        let dir = tempfile::tempdir().unwrap();
        let info = BuildInfo {
            key: "k".into(),
            dir_key: "d".into(),
            upstream: "mlx".into(),
            pin: "p".into(),
            series_hash: "s".into(),
            backend: Backend::Cpu,
            profile: Profile::Release,
            include_dir: "/i".into(),
            lib_dir: "/l".into(),
            libs: vec!["static=mlx".into()],
            link_search: vec![],
            defines: vec!["MLX_STATIC".into()],
            cxx_std: "c++20".into(),
        };
        let p = write_build_info(dir.path(), &info).unwrap();
        let m1 = std::fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        write_build_info(dir.path(), &info).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), m1);
        let back: BuildInfo = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(back, info);
        let changed = BuildInfo {
            key: "k2".into(),
            ..info
        };
        write_build_info(dir.path(), &changed).unwrap();
        let back: BuildInfo = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(back.key, "k2");
    }
}
