//! test-upstream's C++ suite: MLX's doctest cases through ctest, one at a time, the cases of
//! features the build leaves out listed as skipped, and ctest's lines parsed.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use super::{Outcome, Skip, SuiteResult, capture, finish, with_policy};
use crate::build_mlx::Backend;

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
pub(crate) fn has_gguf(settings: &crate::settings::BuildSettings) -> bool {
    settings.fetchcontent.contains_key("gguflib")
        || settings.sources.iter().any(|s| s.name == "gguflib")
}

/// What the test build compiled in.
pub struct Features {
    pub gguf: bool,
}

pub(super) fn run_ctest(
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
pub(super) fn ctest_command(
    build: &Path,
    exclude: &[String],
    policy: &str,
) -> Result<(Command, tempfile::TempDir)> {
    // std, not xshell: a test reads this command's arguments and environment back (get_args,
    // get_envs), which xshell's Cmd does not expose; with_policy and capture take it.
    let mut cmd = Command::new("ctest");
    cmd.arg("--test-dir")
        .arg(build)
        .args(["-E", &exclude.join("|"), "--timeout", "600"]);
    let tmp = with_policy(&mut cmd, policy)?;
    Ok((cmd, tmp))
}

/// The names of the ctest tests matching `regex` (`ctest -N`: `  Test  #12: name`).
fn ctest_names(build: &Path, regex: &str) -> Result<Vec<String>> {
    // std, not xshell: capture() and with_policy() take std's Command (see ctest_command).
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
