//! test-upstream's reports: the table (or `--json`) of a run, the comparison with the pin, and
//! `--from FILE` (a GPU machine's results).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use super::SuiteResult;
use super::compare::{self, Comparison, RunTests, Verdict};
use super::from_file;
use crate::Global;

/// The runs here as the comparison's runs, one per policy, test ids as the GPU results spell
/// them (`test_x.py::Case::test_y`, `cpp::NAME`).
pub(super) fn as_runs(results: &[SuiteResult]) -> Vec<RunTests> {
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
pub(super) fn render_from(g: &Global, path: &Path) -> Result<ExitCode> {
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

pub(super) fn print_report(
    json: bool,
    results: &[SuiteResult],
    comparisons: Option<&[Comparison]>,
) {
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
