//! The control's verdict: a run of the patched build against the same suites at the unpatched pin,
//! test by test. Only a test that fails on the fork and passes at the pin is a regression; a test
//! failing at both is upstream's own; one that fails at the pin and passes on the fork is fixed.
//! Used for the runs `test-upstream --control` makes here and for a GPU machine's results read
//! back with `--from` (cuda/bundle/suite_json.py's file), so both are judged by one rule.

use std::collections::BTreeMap;

use serde::Serialize;

/// How one test ended in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Passed,
    Failed,
    Skipped,
    /// Reached, not finished: its process died (signal, abort).
    Crashed,
    /// Reached, not finished: its file ran out of time.
    Timeout,
}

impl Verdict {
    /// Parses the outcome words of the GPU results' schema (`error` counts as failed).
    pub fn parse(word: &str) -> Option<Verdict> {
        Some(match word {
            "passed" => Verdict::Passed,
            "failed" | "error" => Verdict::Failed,
            "skipped" => Verdict::Skipped,
            "crashed" => Verdict::Crashed,
            "timeout" => Verdict::Timeout,
            _ => return None,
        })
    }

    /// Whether the test did not pass although it ran (skips are neither).
    pub fn is_failure(self) -> bool {
        matches!(self, Verdict::Failed | Verdict::Crashed | Verdict::Timeout)
    }
}

/// Every test of one run (policy, device), by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTests {
    pub policy: String,
    pub device: String,
    pub tests: BTreeMap<String, Verdict>,
    /// Tests that failed (or crashed) on their file's first attempt and passed when it ran again
    /// (a GPU machine's results: `first_outcome`); empty for runs made here.
    pub passed_on_retry: std::collections::BTreeSet<String>,
}

/// One run of the patched build against the pin's run on the same device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub policy: String,
    pub device: String,
    /// Fail here, pass at the pin: these alone fail the run.
    pub regressions: Vec<String>,
    /// Fail here and at the pin: upstream's own.
    pub upstream_failures: Vec<String>,
    /// Fail at the pin, pass here.
    pub fixed: Vec<String>,
    /// Fail here, never reached (or skipped) at the pin: not judged, listed.
    pub not_at_pin: Vec<String>,
    /// Failed on a first attempt and passed when the file ran again, here or at the pin: not
    /// judged, listed.
    pub flaky: Vec<String>,
}

/// Compares every non-pin run with the pin's run on its device; a device with no pin run is
/// left out (nothing to compare with).
pub fn compare(runs: &[RunTests]) -> Vec<Comparison> {
    let pins: BTreeMap<&str, &RunTests> = runs
        .iter()
        .filter(|r| r.policy == "pin")
        .map(|r| (r.device.as_str(), r))
        .collect();
    runs.iter()
        .filter(|r| r.policy != "pin")
        .filter_map(|r| pins.get(r.device.as_str()).map(|p| compare_one(r, p)))
        .collect()
}

fn compare_one(run: &RunTests, pin: &RunTests) -> Comparison {
    let mut c = Comparison {
        policy: run.policy.clone(),
        device: run.device.clone(),
        regressions: Vec::new(),
        upstream_failures: Vec::new(),
        fixed: Vec::new(),
        not_at_pin: Vec::new(),
        flaky: run
            .passed_on_retry
            .union(&pin.passed_on_retry)
            .cloned()
            .collect(),
    };
    for (id, &v) in &run.tests {
        let at_pin = pin.tests.get(id).copied();
        match (v.is_failure(), at_pin) {
            (true, Some(Verdict::Passed)) => c.regressions.push(id.clone()),
            (true, Some(p)) if p.is_failure() => c.upstream_failures.push(id.clone()),
            (true, _) => c.not_at_pin.push(id.clone()),
            (false, Some(p)) if v == Verdict::Passed && p.is_failure() => c.fixed.push(id.clone()),
            _ => {}
        }
    }
    c
}

/// Counts of each verdict in a run, in the schema's words.
pub fn counts(run: &RunTests) -> BTreeMap<Verdict, usize> {
    let mut m = BTreeMap::new();
    for v in run.tests.values() {
        *m.entry(*v).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &str, tests: &[(&str, Verdict)]) -> RunTests {
        RunTests {
            policy: policy.into(),
            device: "cpu".into(),
            tests: tests.iter().map(|(i, v)| (i.to_string(), *v)).collect(),
            passed_on_retry: Default::default(),
        }
    }

    #[test]
    fn only_a_failure_the_pin_passes_is_a_regression() {
        use Verdict::*;
        let pin = run(
            "pin",
            &[
                ("a", Passed),
                ("b", Failed),
                ("c", Failed),
                ("d", Passed),
                ("e", Skipped),
            ],
        );
        let fork = run(
            "streamed",
            &[
                ("a", Crashed),
                ("b", Timeout),
                ("c", Passed),
                ("d", Passed),
                ("e", Failed),
                ("f", Failed),
            ],
        );
        let c = compare(&[fork, pin]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].regressions, ["a"]);
        assert_eq!(c[0].upstream_failures, ["b"]);
        assert_eq!(c[0].fixed, ["c"]);
        assert_eq!(c[0].not_at_pin, ["e", "f"]);
    }

    #[test]
    fn a_device_without_a_pin_run_compares_nothing() {
        let mut gpu = run("streamed", &[("a", Verdict::Failed)]);
        gpu.device = "gpu".into();
        assert!(compare(&[gpu, run("pin", &[("a", Verdict::Passed)])]).is_empty());
    }

    #[test]
    fn schema_words_parse_and_unknown_ones_do_not() {
        assert_eq!(Verdict::parse("error"), Some(Verdict::Failed));
        assert_eq!(Verdict::parse("timeout"), Some(Verdict::Timeout));
        assert_eq!(Verdict::parse("flaky"), None);
        assert!(!Verdict::Skipped.is_failure());
    }
}
