//! `cargo xtask test-upstream`: the upstream's own test suites (MLX's C++ doctest suite, run by
//! ctest, and its Python unittest files, run by pytest) on the patched tree, under each policy
//! the overlays offer.
//!
//! The tests are built from the same materialized tree as `build-mlx`, in the same cache layout
//! (`<cache>/builds/<dir_key>/{src,build,deps}` + `<dir_key>.lock`), under a dir key of its own:
//! the configuration differs only by `MLX_BUILD_TESTS=ON` and `MLX_BUILD_PYTHON_BINDINGS=ON`.
//! doctest and nanobind (with robin-map in its `ext/robin_map`) come from the pinned sources of
//! pins.toml marked `tests = true`, exported once per commit under `<cache>/sources/`; numpy and
//! pytest come from the package registry into a venv under `<cache>/`. Nothing is fetched by CMake.
//!
//! Policies are chosen per process through the overlays' environment switches
//! (`MLX_CPU_QMM_T_POLICY`, `MLX_METAL_QMV_BATCH_POLICY`, `MLX_CUDA_QMV_BATCH_POLICY`), so one build
//! serves both. Exit codes: 0 every test passed, 1 some failed, 2 error (bad input, missing
//! dependency, build failure, a runner that reported nothing).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::settings::{BuildSettings, Source};
use anyhow::{Context, Result};
use overlay::upstream::default_cache_root;
use serde::Serialize;

use crate::Global;
use crate::build_mlx::{self as bm, Backend, Profile};
use crate::commands::Ctx;
use crate::progress::BuildProgress;
use build_pipeline::Tree;
use overlay::lock::Mode as LockMode;

pub mod compare;
mod ctest;
mod from_file;
mod pytest;
mod python;
mod recipe;
mod report;

pub use ctest::{Features, parse_ctest, parse_ctest_list};
pub use pytest::parse_pytest;

pub(crate) use ctest::has_gguf;
use ctest::run_ctest;
use pytest::{python_files, run_pytest};
use python::{install_python_deps, python_venv};
use report::{as_runs, print_report, render_from};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyArg {
    Upstream,
    Streamed,
    Both,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteArg {
    Cpp,
    Python,
    All,
}

#[derive(clap::Args, Debug, Clone)]
pub struct TestUpstreamArgs {
    /// MLX backend [default: metal on macOS, cpu elsewhere]
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Which policy of the overlays' switches to run the suites under
    #[arg(long, value_enum, default_value = "both")]
    pub policy: PolicyArg,
    /// Which suites: MLX's C++ tests (ctest), its Python tests (pytest), or both
    #[arg(long, value_enum, default_value = "all")]
    pub suite: SuiteArg,
    /// Python test files of python/tests to run (repeatable; `all`: every test_*.py there)
    #[arg(
        long = "python-test",
        value_name = "FILE",
        default_value = "test_quantized.py"
    )]
    pub python_tests: Vec<String>,
    /// Parallel compile jobs [default: number of CPUs]; the tests run one at a time
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Install missing build and test dependencies (apt-get as root on Debian/Ubuntu)
    #[arg(long)]
    pub install_deps: bool,
    /// Also build the upstream at its pin with no overlay and run the same suites there (policy
    /// `pin`): then only a test that fails on the patched build and passes at the pin fails the run
    #[arg(long)]
    pub control: bool,
    /// Read a results file a GPU machine wrote (cuda/bundle/suite_json.py) and judge it here, as
    /// --control judges the runs it makes; nothing is built
    #[arg(long, value_name = "FILE", conflicts_with_all = ["control", "install_deps"])]
    pub from: Option<PathBuf>,
}

/// One suite run under one policy (`--json`: `suites[]`).
#[derive(Debug, Serialize)]
pub struct SuiteResult {
    pub suite: String,
    pub backend: &'static str,
    pub policy: &'static str,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub seconds: f64,
    /// Names of the failed tests.
    pub failures: Vec<String>,
    /// Each skipped test with the reason its runner gave.
    pub skips: Vec<Skip>,
    /// Names of the passed tests (for the comparison with the pin).
    #[serde(skip)]
    pub passes: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Skip {
    pub name: String,
    pub reason: String,
}

/// What a runner reported, parsed from its output.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub passed: Vec<String>,
    pub failed: Vec<String>,
    pub skips: Vec<Skip>,
}

/// The environment switches of the overlays; each takes `upstream` or `streamed`.
const POLICY_ENV: &[&str] = &[
    "MLX_CPU_QMM_T_POLICY",
    "MLX_METAL_QMV_BATCH_POLICY",
    "MLX_CUDA_QMV_BATCH_POLICY",
];

/// A failure the user can act on (`mlx_build::UserError`: the CLI's error kind `build`).
fn user_err(msg: impl Into<String>) -> anyhow::Error {
    bm::user_err(msg).into()
}

/// Errors (a [`bm::UserError`] among them) go to the CLI's one error type (exit 2, one JSON shape).
pub fn run(g: &Global, a: &TestUpstreamArgs) -> Result<ExitCode> {
    run_inner(g, a)
}

fn run_inner(g: &Global, a: &TestUpstreamArgs) -> Result<ExitCode> {
    if let Some(path) = &a.from {
        return render_from(g, path);
    }
    let backend = a.backend.unwrap_or_else(Backend::host_default);
    if backend == Backend::Metal && !cfg!(target_os = "macos") {
        return Err(user_err("--backend metal needs macOS"));
    }
    for f in a.python_tests.iter().filter(|f| *f != "all") {
        if f.contains('/') || !f.ends_with(".py") {
            return Err(user_err(format!(
                "--python-test {f:?}: expected a file name of MLX's python/tests, e.g. test_quantized.py"
            )));
        }
    }
    let ctx = Ctx::load(g, LockMode::Shared, "test-upstream")?;
    let deps = test_sources(&ctx)?;
    let platform = bm::Platform::detect();
    if a.install_deps {
        bm::install_deps(&platform, backend, &mut BuildProgress::default())?;
        install_python_deps(&platform)?;
    }
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let python = python_venv()?;
    let build = build_tests(&ctx, a, backend, &deps, &python, jobs, false)?;
    let features = Features {
        gguf: has_gguf(&deps.settings),
    };
    let policies: &[&'static str] = match a.policy {
        PolicyArg::Upstream => &["upstream"],
        PolicyArg::Streamed => &["streamed"],
        PolicyArg::Both => &["upstream", "streamed"],
    };
    let mut results = Vec::new();
    for &policy in policies {
        results.extend(run_suites(a, &build, &python, &features, backend, policy)?);
    }
    if !a.control {
        print_report(g.json, &results, None);
        let failed = results.iter().any(|r| r.failed > 0);
        return Ok(ExitCode::from(u8::from(failed)));
    }
    eprintln!(
        "the control: {} at its pin, no overlay",
        ctx.upstream().name
    );
    let pin = build_tests(&ctx, a, backend, &deps, &python, jobs, true)?;
    results.extend(run_suites(a, &pin, &python, &features, backend, "pin")?);
    let comparisons = compare::compare(&as_runs(&results));
    print_report(g.json, &results, Some(&comparisons));
    let regressed = comparisons.iter().any(|c| !c.regressions.is_empty());
    Ok(ExitCode::from(u8::from(regressed)))
}

/// The chosen suites of one build under one policy (`pin`: no switch set).
fn run_suites(
    a: &TestUpstreamArgs,
    build: &TestBuild,
    python: &Path,
    features: &Features,
    backend: Backend,
    policy: &'static str,
) -> Result<Vec<SuiteResult>> {
    let mut results = Vec::new();
    if a.suite != SuiteArg::Python {
        results.push(run_ctest(&build.build, features, backend, policy)?);
    }
    if a.suite != SuiteArg::Cpp {
        for file in python_files(&build.src, &a.python_tests)? {
            results.push(run_pytest(&build.src, python, &file, backend, policy)?);
        }
    }
    Ok(results)
}

/// The pinned sources the test build needs, exported (cached) for FetchContent.
pub(crate) struct TestDeps {
    doctest: PathBuf,
    nanobind: PathBuf,
    /// pins.toml's build settings of the upstream.
    settings: BuildSettings,
}

fn test_sources(ctx: &Ctx) -> Result<TestDeps> {
    let up = ctx.upstream();
    let settings = crate::settings::of(&ctx.project.pins, up)?;
    let all = &settings.sources;
    let find = |name: &str| -> Result<&Source> {
        all.iter().find(|s| s.name == name).ok_or_else(|| {
            user_err(format!(
                "{}: no [upstream.{}.sources.{name}]: the upstream's test suites need it pinned \
                 (see docs/testing.md for the tables to add)",
                ctx.project.root.join("pins.toml").display(),
                up.name
            ))
        })
    };
    let doctest = find("doctest")?;
    let nanobind = find("nanobind")?;
    Ok(TestDeps {
        doctest: crate::sources::cached_source(doctest, all)?,
        nanobind: crate::sources::cached_source(nanobind, all)?,
        settings: settings.clone(),
    })
}

/// The CMake options of the test configuration: build-mlx's, with the tests and bindings on.
pub(crate) fn test_cmake_options(backend: Backend, profile: Profile, gguf: bool) -> Vec<String> {
    bm::cmake_options(backend, profile, gguf)
        .into_iter()
        .map(|d| match d.split_once('=') {
            Some(("MLX_BUILD_TESTS", _)) => "MLX_BUILD_TESTS=ON".into(),
            Some(("MLX_BUILD_PYTHON_BINDINGS", _)) => "MLX_BUILD_PYTHON_BINDINGS=ON".into(),
            _ => d,
        })
        .collect()
}

struct TestBuild {
    src: PathBuf,
    build: PathBuf,
}

/// Materializes the patched tree (or, `unpatched`, the pin alone: the control) and builds the
/// targets the chosen suites need, under the build-mlx cache's layout and lock. Both trees share
/// one build folder (the series is not part of the dir key), so switching between them rebuilds
/// only the files the overlays touch.
fn build_tests(
    ctx: &Ctx,
    a: &TestUpstreamArgs,
    backend: Backend,
    deps: &TestDeps,
    python: &Path,
    jobs: usize,
    unpatched: bool,
) -> Result<TestBuild> {
    let mut recipe = recipe::TestsRecipe::new(ctx, a.suite, backend, deps, python, unpatched)?;
    let builds = default_cache_root().join("builds");
    let mut progress = BuildProgress::default();
    let tree = Tree::open(
        &builds,
        Tree::keys(&recipe)?,
        "test-upstream",
        &mut progress,
    )?;
    let platform = bm::Platform::detect();
    let missing = bm::check_deps(&platform, backend);
    if !missing.is_empty() {
        return Err(user_err(bm::missing_deps_message(
            &platform, backend, &missing,
        )));
    }
    tree.build(&mut recipe, jobs, &mut progress)?;
    Ok(TestBuild {
        src: tree.src(),
        build: tree.build_dir(),
    })
}

/// Sets the policy switches, and a fresh TMPDIR (kept until the returned guard drops), so runs
/// of other checkouts never share MLX's fixed temporary file names.
fn with_policy(cmd: &mut Command, policy: &str) -> Result<tempfile::TempDir> {
    for var in POLICY_ENV {
        // The pin has no switch: none is set, and none leaks in from the caller.
        if policy == "pin" {
            cmd.env_remove(var);
        } else {
            cmd.env(var, policy);
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix("mlx-upstream-tests-")
        .tempdir()
        .context("creating a temporary folder for the tests")?;
    cmd.env("TMPDIR", tmp.path());
    Ok(tmp)
}

/// Runs a test command; its combined output, and whether it ran at all.
fn capture(cmd: &mut Command) -> Result<(String, Option<i32>)> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((text, out.status.code()))
}

/// A result, or an error when the runner failed without naming a failed test (a crash, a
/// collection error, a missing binary): that is never a pass.
fn finish(
    suite: &str,
    backend: Backend,
    policy: &'static str,
    started: Instant,
    o: Outcome,
    text: &str,
    code: Option<i32>,
) -> Result<SuiteResult> {
    let ran = o.passed.len() + o.failed.len() + o.skips.len();
    if ran == 0 || (code != Some(0) && o.failed.is_empty()) {
        return Err(user_err(format!(
            "{suite} ({policy}): the runner exited with {code:?} and reported {ran} test(s):\n{}",
            bm::tail_lines(text, 40)
        )));
    }
    Ok(SuiteResult {
        suite: suite.to_string(),
        backend: backend.as_str(),
        policy,
        passed: o.passed.len(),
        failed: o.failed.len(),
        skipped: o.skips.len(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        failures: o.failed,
        skips: o.skips,
        passes: o.passed,
    })
}

#[cfg(test)]
mod tests {
    use super::ctest::ctest_command;
    use super::*;

    #[test]
    fn ctest_lines_parse_into_outcomes() {
        let text = "\
Test project /b
      Start  1: array: test array basics
 1/4 Test  #1: array: test array basics .........   Passed    0.01 sec
 2/4 Test  #2: ops: test quantize ..............***Failed    0.20 sec
 3/4 Test  #3: gpu: test a.b ...................***Skipped   0.00 sec
 4/4 Test  #4: crash ...........................***Exception: SegFault  0.10 sec

75% tests passed, 1 tests failed out of 4
";
        let o = parse_ctest(text);
        assert_eq!(o.passed, ["array: test array basics"]);
        assert_eq!(o.failed, ["ops: test quantize", "crash"]);
        assert_eq!(o.skips.len(), 1);
        assert_eq!(o.skips[0].name, "gpu: test a.b");
    }

    /// MLX's C++ cases share temporary file names: ctest must run them one at a time, each run
    /// in a TMPDIR of its own (under -j2 the export cases failed at random; docs/testing.md).
    #[test]
    fn ctest_runs_serially_in_a_private_tmpdir() {
        let exclude = ["^tests$".to_string()];
        let (a, ta) = ctest_command(Path::new("/b"), &exclude, "upstream").unwrap();
        let (b, tb) = ctest_command(Path::new("/b"), &exclude, "upstream").unwrap();
        let args: Vec<_> = a
            .get_args()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert!(
            !args
                .iter()
                .any(|x| x.starts_with("-j") || x.starts_with("--parallel")),
            "{args:?}"
        );
        let tmpdir = |c: &Command| {
            c.get_envs()
                .find(|(k, _)| *k == "TMPDIR")
                .and_then(|(_, v)| v.map(Path::new).map(Path::to_path_buf))
        };
        assert_eq!(tmpdir(&a).as_deref(), Some(ta.path()));
        assert_eq!(tmpdir(&b).as_deref(), Some(tb.path()));
        assert_ne!(ta.path(), tb.path());
        assert!(
            a.get_envs()
                .any(|(k, v)| k == "MLX_CPU_QMM_T_POLICY" && v == Some("upstream".as_ref()))
        );
    }

    #[test]
    fn ctest_listing_parses_into_names() {
        let text = "Test project /b\n  Test  #9: test gguf\n  Test #10: test gguf metadata\n\nTotal Tests: 2\n";
        assert_eq!(parse_ctest_list(text), ["test gguf", "test gguf metadata"]);
    }

    #[test]
    fn pytest_lines_parse_into_outcomes() {
        let text = "\
test_quantized.py::TestQuantized::test_qmm PASSED                         [ 25%]
test_quantized.py::TestQuantized::test_qmv FAILED                         [ 50%]
test_quantized.py::TestQuantized::test_fp SKIPPED (Not implemented on CPU) [ 75%]
test_quantized.py::TestQuantized::test_x ERROR                            [100%]
FAILED test_quantized.py::TestQuantized::test_qmv - AssertionError
";
        let o = parse_pytest(text);
        assert_eq!(o.passed, ["test_quantized.py::TestQuantized::test_qmm"]);
        assert_eq!(
            o.failed,
            [
                "test_quantized.py::TestQuantized::test_qmv",
                "test_quantized.py::TestQuantized::test_x"
            ]
        );
        assert_eq!(
            o.skips,
            [Skip {
                name: "test_quantized.py::TestQuantized::test_fp".into(),
                reason: "Not implemented on CPU".into()
            }]
        );
    }

    #[test]
    fn test_configuration_turns_tests_and_bindings_on_and_keys_apart() {
        let opts = test_cmake_options(Backend::Cpu, Profile::Release, false);
        assert!(opts.contains(&"MLX_BUILD_TESTS=ON".to_string()));
        assert!(opts.contains(&"MLX_BUILD_PYTHON_BINDINGS=ON".to_string()));
        let plain = bm::cmake_options(Backend::Cpu, Profile::Release, false);
        assert_eq!(opts.len(), plain.len());
        assert_ne!(opts, plain);
    }
}
