//! `cargo xtask build-ggml [--test]`: the patched ggml (pin + `overlays/ggml`), built with its CPU
//! backend and its tests (`GGML_METAL=OFF`, `GGML_BUILD_TESTS=ON`) through build-mlx's machinery:
//! the same content key (upstream, pin, options, compiler; the series hash for the stamp), the same
//! cache root, the same locked CMake configure and Ninja build. `--test` then runs ggml's own tests
//! with ctest (`test-quantize-fns` and every other test that needs no GPU; test-backend-ops with
//! only the CPU backend compares nothing and says so). Exit codes: 0 built (and tests passed),
//! 1 a test failed, 2 error.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::Global;
use crate::build_mlx::{self as bm, Backend, DirKeyMaterial, Platform, Profile};
use crate::commands::{Ctx, materialize, versioned};

#[derive(clap::Args, Clone, Debug)]
pub struct BuildGgmlArgs {
    /// Run ggml's CPU tests (ctest) after the build
    #[arg(long)]
    pub test: bool,
    /// Install what the build needs (cmake, ninja, a C++ compiler, ccache) when missing
    #[arg(long)]
    pub install_deps: bool,
    /// Parallel compile jobs [default: the number of CPUs]
    #[arg(long, short)]
    pub jobs: Option<usize>,
}

/// CMake options that shape the build (part of the dir key).
fn cmake_options() -> Vec<String> {
    [
        "CMAKE_BUILD_TYPE=Release",
        "BUILD_SHARED_LIBS=OFF",
        "GGML_METAL=OFF",
        "GGML_BUILD_TESTS=ON",
        "GGML_BUILD_EXAMPLES=OFF",
        // The launcher is ours (ccache or sccache, as for MLX), not ggml's own probe.
        "GGML_CCACHE=OFF",
    ]
    .map(String::from)
    .to_vec()
}

#[derive(Serialize, Deserialize, PartialEq, Eq)]
struct Stamp {
    key: String,
}

#[derive(Serialize)]
struct Tests {
    passed: usize,
    total: usize,
    failed: Vec<String>,
}

/// Debian/macOS packages for ggml's CPU build.
const APT: &str = "cmake ninja-build g++ ccache";
const BREW: &str = "cmake ninja ccache";

fn missing_tools() -> Vec<&'static str> {
    [
        ("cmake", "--version"),
        ("ninja", "--version"),
        ("c++", "--version"),
    ]
    .into_iter()
    .filter(|(p, a)| !bm::runs(p, &[a]))
    .map(|(p, _)| p)
    .collect()
}

fn install_deps() -> Result<()> {
    let missing = missing_tools();
    if missing.is_empty() && bm::runs("ccache", &["--version"]) {
        return Ok(());
    }
    let cmd = match Platform::detect() {
        Platform::Debian if bm::is_root() => {
            format!("apt-get update -q && apt-get install -y -q --no-install-recommends {APT}")
        }
        Platform::Debian => format!(
            "sudo apt-get update -q && sudo apt-get install -y -q --no-install-recommends {APT}"
        ),
        Platform::MacOs => format!("brew install {BREW}"),
        Platform::Other => {
            return Err(bm::user_err(format!(
                "--install-deps knows apt-get and brew only; install {} yourself",
                missing.join(", ")
            ))
            .into());
        }
    };
    eprintln!("installing: {cmd}");
    let ok = Command::new("sh").args(["-c", &cmd]).status()?.success();
    if !ok {
        return Err(bm::user_err(format!("`{cmd}` failed")).into());
    }
    Ok(())
}

pub fn run(g: &Global, a: &BuildGgmlArgs) -> Result<ExitCode> {
    let started = Instant::now();
    if a.install_deps {
        install_deps()?;
    }
    let missing = missing_tools();
    if !missing.is_empty() {
        return Err(overlay_cli::error::HintedError::of_kind(
            Some(overlay_cli::error::Kind::Build),
            format!("missing: {}", missing.join(", ")),
            format!(
                "{} (apt-get install {APT}; brew install {BREW})",
                overlay_cli::steps::Steps::program_only().line("build-ggml --install-deps")
            ),
        ));
    }
    let mut g = g.clone();
    g.upstream.get_or_insert_with(|| "ggml".to_string());
    let ctx = Ctx::load(&g, overlay::lock::Mode::Shared, "build-ggml")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let dir = DirKeyMaterial {
        upstream: up.name.clone(),
        pin: up.rev.clone(),
        backend: Backend::Cpu,
        profile: Profile::Release,
        cmake_options: cmake_options(),
        compiler: bm::compiler_identity()?,
    };
    let dir_key = dir.dir_key();
    let key = bm::short_hash(&format!("{dir_key}\nseries={}", series.content_hash()));
    let builds = overlay::upstream::default_cache_root().join("ggml-builds");
    let root = builds.join(&dir_key);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    // One build per tree at a time; the build's processes hold it too (build_mlx's `in_build`).
    let lock = bm::lock_build_dir(&builds.join(format!("{dir_key}.lock")), || {
        eprintln!(
            "waiting for another build-ggml using {} ...",
            root.display()
        )
    })?;
    let (src, build) = (root.join("src"), root.join("build"));
    let stamp_path = root.join("stamp.json");
    let fresh = std::fs::read(&stamp_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Stamp>(&b).ok())
        .is_some_and(|s| s.key == key)
        && build.join("build.ninja").is_file();
    let status = if fresh {
        ctx.unlock();
        "up-to-date"
    } else {
        let _ = std::fs::remove_file(&stamp_path);
        eprintln!(
            "materializing {} @ {} into {}",
            up.name,
            &up.rev[..12],
            src.display()
        );
        let written = materialize(&ctx, &src, false).map(|_| ());
        ctx.unlock();
        written.context("materializing the patched source tree")?;
        let mut defines = cmake_options();
        defines.extend(bm::launcher_defines(Backend::Cpu));
        bm::configure(
            &src,
            &build,
            &defines,
            &lock,
            &mut crate::progress::BuildProgress::default(),
        )?;
        let jobs = a
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
            .max(1);
        bm::ninja_build_targets(
            &build,
            jobs,
            &[],
            &lock,
            &mut crate::progress::BuildProgress::default(),
        )?;
        std::fs::write(
            &stamp_path,
            serde_json::to_vec(&Stamp { key: key.clone() })?,
        )?;
        "built"
    };
    let tests = if a.test { Some(ctest(&build)?) } else { None };
    let took = started.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "status": status, "key": key, "build": build, "seconds": took, "tests": tests,
    });
    if ctx.json {
        println!("{}", versioned(report));
    } else {
        println!(
            "build-ggml: {status} ({}@{} + {} overlay(s), CPU backend) in {took:.1} s\n  build: {}",
            up.name,
            &up.rev[..12],
            series.overlays.len(),
            build.display()
        );
        if let Some(t) = &tests {
            println!("  ctest: {}/{} passed", t.passed, t.total);
            for f in &t.failed {
                println!("  FAILED  {f}");
            }
        }
    }
    let failed = tests.is_some_and(|t| !t.failed.is_empty() || t.total == 0);
    Ok(ExitCode::from(u8::from(failed)))
}

/// ggml's tests through ctest, one at a time, with a private TMPDIR; the summary parsed.
fn ctest(build: &Path) -> Result<Tests> {
    let tmp = tempfile::tempdir()?;
    let out = Command::new("ctest")
        .arg("--test-dir")
        .arg(build)
        .args(["--output-on-failure", "--no-tests=error"])
        .env("TMPDIR", tmp.path())
        .output()
        .context("running ctest")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let tests = parse_ctest(&text);
    if tests.total == 0 {
        eprintln!("{}", bm::tail_lines(&text, 40));
    }
    for f in &tests.failed {
        eprintln!("ctest: {f} failed:\n{}", bm::tail_lines(&text, 60));
    }
    Ok(tests)
}

/// ctest's per-test lines (`1/9 Test #1: test-quantize-fns ....   Passed    1.23 sec`).
fn parse_ctest(text: &str) -> Tests {
    let mut t = Tests {
        passed: 0,
        total: 0,
        failed: Vec::new(),
    };
    let re = regex::Regex::new(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) ").unwrap();
    for line in text.lines() {
        let Some(c) = re.captures(line) else {
            continue;
        };
        t.total += 1;
        if line.contains(" Passed ") {
            t.passed += 1;
        } else {
            t.failed.push(c[1].to_string());
        }
    }
    t
}

#[cfg(test)]
mod tests {
    #[test]
    fn ctest_lines_are_counted_and_failures_named() {
        let text = "Test project /b\n      Start  1: test-quantize-fns\n 1/3 Test  #1: test-quantize-fns ........   Passed    1.20 sec\n 2/3 Test  #2: test-rel-pos ...***Failed    0.01 sec\n 3/3 Test  #3: test-conv1d .......   Passed    0.02 sec\n\n67% tests passed, 1 tests failed out of 3\n";
        let t = super::parse_ctest(text);
        assert_eq!((t.passed, t.total), (2, 3));
        assert_eq!(t.failed, ["test-rel-pos"]);
    }
}
