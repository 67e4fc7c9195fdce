//! test-upstream's Python suite: MLX's python/tests files through pytest, seeded, and pytest's
//! lines parsed.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};

use super::{Outcome, Skip, SuiteResult, capture, finish, user_err, with_policy};
use crate::build_mlx::Backend;

/// The pytest plugin that seeds MLX's and numpy's generators before every test (the same file
/// suite.sh gives the GPU machine's runs).
const SEED_PLUGIN: &str = include_str!("../../../../cuda/bundle/mlx_seed.py");

/// The files `--python-test` names, `all` standing for every `test_*.py` of python/tests (in
/// name order, each once).
pub(super) fn python_files(src: &Path, named: &[String]) -> Result<Vec<String>> {
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

pub(super) fn run_pytest(
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
    // std, not xshell: capture() and with_policy() take std's Command (see ctest_command).
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
