//! `cargo xtask build-ggml [--test]`: the patched ggml (pin + `overlays/ggml`), built with its CPU
//! backend and its tests (`GGML_METAL=OFF`, `GGML_BUILD_TESTS=ON`) as a `build_pipeline::Recipe`:
//! the same content keys as build-mlx (upstream, pin, options, compiler; the series hash for the
//! full key and the stamp), the same cache root, the same locked CMake configure and Ninja build. `--test` then runs ggml's own tests
//! with ctest (`test-quantize-fns` and every other test that needs no GPU; test-backend-ops with
//! only the CPU backend compares nothing and says so). Exit codes: 0 built (and tests passed),
//! 1 a test failed, 2 error.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result};
use build_pipeline::{KeyLines, Recipe, Tree};
use serde::Serialize;

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
    // std, not xshell: sudo/apt-get keep the caller's stdin, and a failed start its io::Error.
    let ok = Command::new("sh").args(["-c", &cmd]).status()?.success();
    if !ok {
        return Err(bm::user_err(format!("`{cmd}` failed")).into());
    }
    Ok(())
}

/// ggml as a recipe of the build pipeline: the project's tree of the `ggml` upstream.
struct GgmlRecipe<'a> {
    ctx: &'a Ctx,
    dir: DirKeyMaterial,
    series_hash: String,
}

impl<'a> GgmlRecipe<'a> {
    fn new(ctx: &'a Ctx, series_hash: String) -> Result<GgmlRecipe<'a>> {
        let up = ctx.upstream();
        let dir = DirKeyMaterial {
            upstream: up.name.clone(),
            pin: up.rev.clone(),
            backend: Backend::Cpu,
            profile: Profile::Release,
            cmake_options: cmake_options(),
            compiler: bm::compiler_identity()?,
        };
        Ok(GgmlRecipe {
            ctx,
            dir,
            series_hash,
        })
    }
}

impl Recipe for GgmlRecipe<'_> {
    fn task(&self) -> &str {
        "build-ggml"
    }

    fn what(&self) -> &str {
        "ggml"
    }

    fn source_name(&self) -> String {
        format!("{} @ {}", self.dir.upstream, &self.dir.pin[..12])
    }

    fn dir_material(&self) -> bm::Result<KeyLines> {
        Ok(self.dir.lines())
    }

    fn source_material(&self) -> KeyLines {
        let mut k = KeyLines::new();
        k.push("series", &self.series_hash);
        k
    }

    fn materialize(&mut self, src: &Path) -> bm::Result<()> {
        let written = materialize(self.ctx, src, false).map(|_| ());
        // The source is written; the build must not keep writers of the project waiting.
        self.ctx.unlock();
        written.map_err(crate::build_cmd::driver_error)
    }

    fn definitions(&self, _: &Tree) -> bm::Result<Vec<String>> {
        let mut defines = cmake_options();
        defines.extend(bm::launcher_defines(Backend::Cpu));
        Ok(defines)
    }
}

/// The tools the build needs, installed first with `--install-deps`.
fn check_tools(a: &BuildGgmlArgs) -> Result<()> {
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
    Ok(())
}

pub fn run(g: &Global, a: &BuildGgmlArgs) -> Result<ExitCode> {
    let started = Instant::now();
    check_tools(a)?;
    let mut g = g.clone();
    g.upstream.get_or_insert_with(|| "ggml".to_string());
    let ctx = Ctx::load(&g, overlay::lock::Mode::Shared, "build-ggml")?;
    let series = ctx.series()?;
    let mut recipe = GgmlRecipe::new(&ctx, series.content_hash())?;
    let builds = overlay::upstream::default_cache_root().join("ggml-builds");
    let mut progress = crate::progress::BuildProgress::default();
    let tree = Tree::open(&builds, Tree::keys(&recipe)?, "build-ggml", &mut progress)?;
    let status = if tree.is_fresh() {
        ctx.unlock();
        "up-to-date"
    } else {
        tree.build(&mut recipe, build_pipeline::jobs(a.jobs), &mut progress)?;
        tree.write_stamp(&recipe.dir)?;
        "built"
    };
    let build = tree.build_dir();
    let tests = if a.test { Some(ctest(&build)?) } else { None };
    let took = started.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "status": status, "key": tree.keys.key, "build": build, "seconds": took, "tests": tests,
    });
    if ctx.json {
        println!("{}", versioned(report));
    } else {
        print_report(&ctx, &series, status, took, &build, tests.as_ref());
    }
    let failed = tests.is_some_and(|t| !t.failed.is_empty() || t.total == 0);
    Ok(ExitCode::from(u8::from(failed)))
}

/// The human report: status, what was built, where, and the tests' outcome.
fn print_report(
    ctx: &Ctx,
    series: &overlay::series::Series,
    status: &str,
    took: f64,
    build: &Path,
    tests: Option<&Tests>,
) {
    let up = ctx.upstream();
    println!(
        "build-ggml: {status} ({}@{} + {} overlay(s), CPU backend) in {took:.1} s\n  build: {}",
        up.name,
        &up.rev[..12],
        series.overlays.len(),
        build.display()
    );
    if let Some(t) = tests {
        println!("  ctest: {}/{} passed", t.passed, t.total);
        for f in &t.failed {
            println!("  FAILED  {f}");
        }
    }
}

/// ggml's tests through ctest, one at a time, with a private TMPDIR; the summary parsed.
fn ctest(build: &Path) -> Result<Tests> {
    let tmp = tempfile::tempdir()?;
    let out = xshell::Shell::new()?
        .cmd("ctest")
        .arg("--test-dir")
        .arg(build)
        .args(["--output-on-failure", "--no-tests=error"])
        .env("TMPDIR", tmp.path())
        .ignore_status()
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
