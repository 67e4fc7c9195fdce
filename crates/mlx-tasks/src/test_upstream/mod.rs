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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use overlay::manifest::Source;
use overlay::upstream::default_cache_root;
use serde::Serialize;

use crate::Global;
use crate::build_mlx::{self as bm, Backend, Profile};
use crate::commands::Ctx;
use crate::progress::BuildProgress;
use build_pipeline::Tree;
use overlay::lock::Mode as LockMode;

pub mod compare;
mod from_file;
mod recipe;

use compare::{Comparison, RunTests, Verdict};

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

/// The pytest plugin that seeds MLX's and numpy's generators before every test (the same file
/// suite.sh gives the GPU machine's runs).
const SEED_PLUGIN: &str = include_str!("../../../../cuda/bundle/mlx_seed.py");

/// Pinned numpy and pytest for the venv (the registry's wheels for CPython 3.11..3.13).
const PY_REQUIREMENTS: &[&str] = &["numpy==2.3.5", "pytest==8.4.2"];

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
        gguf: has_gguf(&ctx),
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

/// The files `--python-test` names, `all` standing for every `test_*.py` of python/tests (in
/// name order, each once).
fn python_files(src: &Path, named: &[String]) -> Result<Vec<String>> {
    let mut files: Vec<String> = Vec::new();
    for n in named {
        if n != "all" {
            if !files.contains(n) {
                files.push(n.clone());
            }
            continue;
        }
        let dir = src.join("python/tests");
        let mut all: Vec<String> = std::fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f.starts_with("test_") && f.ends_with(".py"))
            .collect();
        all.sort();
        for f in all {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    Ok(files)
}

/// The runs here as the comparison's runs, one per policy, test ids as the GPU results spell
/// them (`test_x.py::Case::test_y`, `cpp::NAME`).
fn as_runs(results: &[SuiteResult]) -> Vec<RunTests> {
    let mut runs: Vec<RunTests> = Vec::new();
    for r in results {
        let device = if r.backend == "cpu" { "cpu" } else { "gpu" };
        let at = match runs.iter().position(|x| x.policy == r.policy) {
            Some(i) => i,
            None => {
                runs.push(RunTests {
                    policy: r.policy.into(),
                    device: device.into(),
                    ..RunTests::default()
                });
                runs.len() - 1
            }
        };
        let id = |n: &str| match r.suite.as_str() {
            "cpp" => format!("cpp::{n}"),
            _ => n.to_string(),
        };
        let tests = &mut runs[at].tests;
        tests.extend(r.passes.iter().map(|n| (id(n), Verdict::Passed)));
        tests.extend(r.failures.iter().map(|n| (id(n), Verdict::Failed)));
        tests.extend(r.skips.iter().map(|s| (id(&s.name), Verdict::Skipped)));
    }
    runs
}

/// `--from FILE`: a GPU machine's results, their counts and the comparison with the pin.
fn render_from(g: &Global, path: &Path) -> Result<ExitCode> {
    let res = from_file::read(path)?;
    let comparisons = compare::compare(&res.runs);
    if g.json {
        let runs: Vec<_> = res
            .runs
            .iter()
            .map(|r| serde_json::json!({"policy": r.policy, "device": r.device, "counts": compare::counts(r)}))
            .collect();
        let doc =
            serde_json::json!({"header": res.header, "runs": runs, "comparison": comparisons});
        println!("{}", crate::commands::versioned(doc));
    } else {
        println!("{}", describe_header(&res.header));
        println!(
            "{:<9} {:<6} {:>7} {:>7} {:>8} {:>8} {:>8}",
            "policy", "device", "passed", "failed", "skipped", "crashed", "timeout"
        );
        for r in &res.runs {
            let c = compare::counts(r);
            let n = |v| c.get(&v).copied().unwrap_or(0);
            println!(
                "{:<9} {:<6} {:>7} {:>7} {:>8} {:>8} {:>8}",
                r.policy,
                r.device,
                n(Verdict::Passed),
                n(Verdict::Failed),
                n(Verdict::Skipped),
                n(Verdict::Crashed),
                n(Verdict::Timeout)
            );
        }
        print!("{}", describe_comparisons(&comparisons));
    }
    let regressed = comparisons.iter().any(|c| !c.regressions.is_empty());
    Ok(ExitCode::from(u8::from(regressed)))
}

/// One line naming the machine of a results file (GPU, driver, nvcc, cuDNN).
fn describe_header(h: &serde_json::Value) -> String {
    let field = |k: &str| h.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
    format!(
        "{} (driver {}), {}, cuDNN {}",
        field("gpu"),
        field("driver"),
        field("nvcc"),
        field("cudnn")
    )
}

/// The verdict against the pin, per run: a count line, then each regression and each of
/// upstream's own failures by name.
fn describe_comparisons(comparisons: &[Comparison]) -> String {
    let mut s = String::new();
    if comparisons.is_empty() {
        s.push_str("no pin run to compare with: nothing judged against the pin\n");
    }
    for c in comparisons {
        let _ = writeln!(
            s,
            "{}/{} against the pin: {} regression(s), {} upstream's own, {} fixed, {} not at the pin, {} flaky",
            c.policy,
            c.device,
            c.regressions.len(),
            c.upstream_failures.len(),
            c.fixed.len(),
            c.not_at_pin.len(),
            c.flaky.len()
        );
        for id in &c.regressions {
            let _ = writeln!(s, "REGRESSION {}/{}: {id}", c.policy, c.device);
        }
        for id in &c.upstream_failures {
            let _ = writeln!(s, "upstream's own {}/{}: {id}", c.policy, c.device);
        }
        for id in &c.not_at_pin {
            let _ = writeln!(s, "not at the pin {}/{}: {id}", c.policy, c.device);
        }
        for id in &c.flaky {
            let _ = writeln!(
                s,
                "flaky {}/{} (failed, then passed when run again): {id}",
                c.policy, c.device
            );
        }
    }
    s
}

/// The pinned sources the test build needs, exported (cached) for FetchContent.
pub(crate) struct TestDeps {
    doctest: PathBuf,
    nanobind: PathBuf,
}

fn test_sources(ctx: &Ctx) -> Result<TestDeps> {
    let up = ctx.upstream();
    let find = |name: &str| -> Result<&Source> {
        up.sources.iter().find(|s| s.name == name).ok_or_else(|| {
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
        doctest: crate::sources::cached_source(doctest, &up.sources)?,
        nanobind: crate::sources::cached_source(nanobind, &up.sources)?,
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

/// Debian packages the Python suite needs beyond build-mlx's (headers for the extension, venv).
const APT_PYTHON: &[&str] = &["python3-dev", "python3-venv"];

fn python3() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn python_ready() -> bool {
    let probe = "import sysconfig, os, venv; \
                 assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))";
    bm::runs(&python3(), &["-c", probe])
}

fn install_python_deps(platform: &bm::Platform) -> Result<()> {
    if python_ready() {
        return Ok(());
    }
    if *platform != bm::Platform::Debian || !bm::is_root() {
        return Err(user_err(format!(
            "{} lacks its headers (Python.h) or venv; install {} (or set PYTHON to one that has them)",
            python3(),
            APT_PYTHON.join(" ")
        )));
    }
    for step in [
        vec!["apt-get", "update"],
        [&["apt-get", "install", "-y"][..], APT_PYTHON].concat(),
    ] {
        eprintln!("running: {}", step.join(" "));
        // std, not xshell: apt-get/dpkg keep the caller's stdin (xshell's run() gives a null one).
        let ok = Command::new(step[0])
            .args(&step[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(user_err(format!("`{}` failed", step.join(" "))));
        }
    }
    Ok(())
}

/// `<cache>/venv-tests-<hash>` with the pinned numpy and pytest, keyed by the interpreter and
/// the requirements; returns its python. Made once (a marker is written last).
fn python_venv() -> Result<PathBuf> {
    if !python_ready() {
        return Err(user_err(format!(
            "{} lacks its headers (Python.h) or venv: rerun with --install-deps, or install {}",
            python3(),
            APT_PYTHON.join(" ")
        )));
    }
    // std, not xshell: a failed start reports its io::Error, which xshell's error replaces.
    let out = Command::new(python3())
        .args(["-c", "import sys; print(sys.executable, sys.version)"])
        .output()
        .context("running python3")?;
    let who = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let key = bm::short_hash(&format!("{who}\n{}", PY_REQUIREMENTS.join("\n")));
    let venv = default_cache_root().join(format!("venv-tests-{key}"));
    let py = venv.join("bin/python");
    let marker = venv.join(".xtask-ready");
    if marker.is_file() {
        return Ok(py);
    }
    eprintln!(
        "creating {} ({})",
        venv.display(),
        PY_REQUIREMENTS.join(" ")
    );
    let steps: [Vec<String>; 2] = [
        vec![
            python3(),
            "-m".into(),
            "venv".into(),
            "--clear".into(),
            venv.display().to_string(),
        ],
        [
            vec![py.display().to_string(), "-m".into(), "pip".into()],
            ["install", "--quiet", "--disable-pip-version-check"]
                .map(String::from)
                .to_vec(),
            PY_REQUIREMENTS.iter().map(|r| r.to_string()).collect(),
        ]
        .concat(),
    ];
    for step in steps {
        // std, not xshell: a failed start reports its io::Error, which xshell's error replaces.
        let out = Command::new(&step[0])
            .args(&step[1..])
            .output()
            .with_context(|| format!("running {}", step[0]))?;
        if !out.status.success() {
            return Err(user_err(format!(
                "`{}` failed:\n{}",
                step.join(" "),
                bm::tail_lines(&String::from_utf8_lossy(&out.stderr), 20)
            )));
        }
    }
    std::fs::write(&marker, PY_REQUIREMENTS.join("\n"))?;
    Ok(py)
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

/// Test cases of features this build leaves out: (ctest name regex, when it applies, reason).
/// They are not run, and every report lists each one by name with the reason.
/// (ctest name regex, whether the build lacks the feature, reason).
type LeftOut = (&'static str, fn(&Features) -> bool, &'static str);

const LEFT_OUT: &[LeftOut] = &[(
    "gguf",
    |f| !f.gguf,
    "MLX_BUILD_GGUF=OFF: gguflib is not built (build-mlx builds it only when pins.toml's \
     fetchcontent names a gguflib checkout), so load_gguf/save_gguf only throw",
)];

/// Whether the test build compiles gguflib: pins.toml's fetchcontent names a checkout (as for
/// build-mlx) or a pinned `gguflib` source.
pub(crate) fn has_gguf(ctx: &Ctx) -> bool {
    let up = ctx.upstream();
    up.fetchcontent.contains_key("gguflib") || up.sources.iter().any(|s| s.name == "gguflib")
}

/// What the test build compiled in.
pub struct Features {
    pub gguf: bool,
}

fn run_ctest(
    build: &Path,
    features: &Features,
    backend: Backend,
    policy: &'static str,
) -> Result<SuiteResult> {
    eprintln!("running MLX's C++ tests (ctest), policy {policy}");
    let started = Instant::now();
    // `tests` runs the whole binary once more; doctest_discover_tests already gives one ctest
    // test per test case.
    let mut exclude = vec!["^tests$".to_string()];
    let mut skips = Vec::new();
    for (pattern, applies, reason) in LEFT_OUT {
        if applies(features) {
            exclude.push(pattern.to_string());
            for name in ctest_names(build, pattern)? {
                skips.push(Skip {
                    name,
                    reason: reason.to_string(),
                });
            }
        }
    }
    // One test at a time: MLX's test cases share temporary file names (export_import_tests.cpp
    // writes every model to `<tmp>/model.mlxfn`), as they were written for one doctest process;
    // ctest -j2 made them fail at random (docs/testing.md, "Findings").
    let (mut cmd, tmp) = ctest_command(build, &exclude, policy)?;
    let (text, code) = capture(&mut cmd)?;
    drop(tmp);
    let mut outcome = parse_ctest(&text);
    outcome.skips.extend(skips);
    finish("cpp", backend, policy, started, outcome, &text, code)
}

/// ctest, serial, with the policy and a TMPDIR of its own (dropped with the guard).
fn ctest_command(
    build: &Path,
    exclude: &[String],
    policy: &str,
) -> Result<(Command, tempfile::TempDir)> {
    // std, not xshell: capture() reports a failed start with its io::Error (xshell replaces it).
    let mut cmd = Command::new("ctest");
    cmd.arg("--test-dir")
        .arg(build)
        .args(["-E", &exclude.join("|"), "--timeout", "600"]);
    let tmp = with_policy(&mut cmd, policy)?;
    Ok((cmd, tmp))
}

/// The names of the ctest tests matching `regex` (`ctest -N`: `  Test  #12: name`).
fn ctest_names(build: &Path, regex: &str) -> Result<Vec<String>> {
    // std, not xshell: capture() reports a failed start with its io::Error (xshell replaces it).
    let (text, _) = capture(
        Command::new("ctest")
            .arg("--test-dir")
            .arg(build)
            .args(["-N", "-R", regex]),
    )?;
    Ok(parse_ctest_list(&text))
}

pub fn parse_ctest_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("Test")?.trim_start();
            let (num, name) = rest.split_once(": ")?;
            num.starts_with('#').then(|| name.trim().to_string())
        })
        .collect()
}

fn run_pytest(
    src: &Path,
    python: &Path,
    file: &str,
    backend: Backend,
    policy: &'static str,
) -> Result<SuiteResult> {
    eprintln!("running MLX's python/tests/{file} (pytest), policy {policy}");
    let tests = src.join("python/tests");
    if !tests.join(file).is_file() {
        return Err(user_err(format!(
            "--python-test {file}: no such file in the upstream's python/tests"
        )));
    }
    let started = Instant::now();
    // std, not xshell: capture() reports a failed start with its io::Error (xshell replaces it).
    let mut cmd = Command::new(python);
    let tmp = with_policy(&mut cmd, policy)?;
    // Every test from the same random state on the fork and at the pin (cuda/bundle/mlx_seed.py).
    let plugins = tmp.path().join("plugins");
    std::fs::create_dir_all(&plugins)
        .and_then(|()| std::fs::write(plugins.join("mlx_seed.py"), SEED_PLUGIN))
        .context("writing the seed plugin for pytest")?;
    let pythonpath = std::env::join_paths([src.join("python"), plugins])
        .context("joining PYTHONPATH for the tests")?;
    cmd.current_dir(&tests)
        .args([
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-p",
            "mlx_seed",
            file,
        ])
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // pytest cuts skip reasons to the terminal width.
        .env("COLUMNS", "400");
    let (text, code) = capture(&mut cmd)?;
    drop(tmp);
    let outcome = parse_pytest(&text);
    let name = format!("python:{}", file.trim_end_matches(".py"));
    finish(&name, backend, policy, started, outcome, &text, code)
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

/// ctest's per-test lines: `  3/212 Test   #7: name ....   Passed    0.01 sec`, with
/// `***Failed`, `***Exception: ...`, `***Timeout`, `***Skipped`, `***Not Run ...` otherwise.
pub fn parse_ctest(text: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in text.lines() {
        let Some(rest) = line.split_once(" Test ").map(|(_, r)| r.trim_start()) else {
            continue;
        };
        let Some((num, rest)) = rest.split_once(": ") else {
            continue;
        };
        if !num.starts_with('#') {
            continue;
        }
        let Some(cut) = rest.find(" ...").or_else(|| rest.find(" ***")) else {
            continue;
        };
        let name = rest[..cut].trim().to_string();
        let status = rest[cut..].trim_start_matches([' ', '.']).trim();
        if status.starts_with("Passed") {
            o.passed.push(name);
        } else if let Some(r) = status
            .strip_prefix("***Skipped")
            .or_else(|| status.strip_prefix("***Not Run"))
        {
            let reason = r.split(" sec").next().unwrap_or("").trim();
            o.skips.push(Skip {
                name,
                reason: reason
                    .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
                    .trim()
                    .to_string(),
            });
        } else if status.starts_with("***") {
            o.failed.push(name);
        }
    }
    o
}

/// pytest -v lines: `test_x.py::Class::test_y PASSED [ 5%]`, `... SKIPPED (reason) [ 7%]`,
/// `FAILED`, `ERROR`, `XFAIL`/`XPASS`.
pub fn parse_pytest(text: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(' ') else {
            continue;
        };
        if !name.contains("::") || name.starts_with("FAILED") || name.starts_with("ERROR") {
            continue;
        }
        let rest = rest.trim();
        let word = rest.split_whitespace().next().unwrap_or("");
        match word {
            "PASSED" | "XFAIL" => o.passed.push(name.to_string()),
            "FAILED" | "ERROR" | "XPASS" => o.failed.push(name.to_string()),
            "SKIPPED" => {
                let reason = rest["SKIPPED".len()..].trim();
                let reason = reason.rsplit_once(" [").map_or(reason, |(r, _)| r).trim();
                let reason = reason.strip_prefix('(').and_then(|r| r.strip_suffix(')'));
                o.skips.push(Skip {
                    name: name.to_string(),
                    reason: reason.unwrap_or("").to_string(),
                });
            }
            _ => {}
        }
    }
    o
}

fn print_report(json: bool, results: &[SuiteResult], comparisons: Option<&[Comparison]>) {
    if json {
        let mut doc = serde_json::json!({ "suites": results });
        if let Some(c) = comparisons {
            doc["comparison"] = serde_json::json!(c);
        }
        println!("{}", crate::commands::versioned(doc));
        return;
    }
    println!(
        "{:<24} {:<8} {:<9} {:>7} {:>7} {:>8} {:>8}",
        "suite", "backend", "policy", "passed", "failed", "skipped", "seconds"
    );
    let mut notes = String::new();
    for r in results {
        println!(
            "{:<24} {:<8} {:<9} {:>7} {:>7} {:>8} {:>8.1}",
            r.suite, r.backend, r.policy, r.passed, r.failed, r.skipped, r.seconds
        );
        for f in &r.failures {
            let _ = writeln!(notes, "FAILED  {} ({}): {f}", r.suite, r.policy);
        }
        for s in &r.skips {
            let _ = writeln!(
                notes,
                "skipped {} ({}): {} — {}",
                r.suite, r.policy, s.name, s.reason
            );
        }
    }
    print!("{notes}");
    if let Some(c) = comparisons {
        print!("{}", describe_comparisons(c));
    }
}

#[cfg(test)]
mod tests {
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
