//! `test-upstream --from FILE`: a results file a GPU machine wrote (cuda/bundle/suite_json.py,
//! docs/benchmarks/cuda-tests-h200.json) read back here and judged by [`super::compare`], so a
//! run made where there is no Rust is rendered and decided by the same rule as the runs made here.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use super::compare::{RunTests, Verdict};

#[derive(Deserialize)]
struct Doc {
    schema: u32,
    #[serde(default)]
    header: serde_json::Value,
    runs: Vec<Run>,
}

#[derive(Deserialize)]
struct Run {
    policy: String,
    device: String,
    tests: Vec<Test>,
}

#[derive(Deserialize)]
struct Test {
    id: String,
    outcome: String,
    /// The first attempt's outcome, where the file ran twice and it differed.
    #[serde(default)]
    first_outcome: Option<String>,
}

/// What a results file holds: the machine it names and its runs.
pub struct Results {
    pub header: serde_json::Value,
    pub runs: Vec<RunTests>,
}

/// Reads and checks a results file; every problem names the file (and the line where serde
/// knows it).
pub fn read(path: &Path) -> Result<Results> {
    let bad = |msg: String| super::user_err(format!("{}: {msg}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let doc: Doc = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "line {}, column {}: {e} (expected suite_json.py's results: {{schema: 1, header, \
             runs: [{{policy, device, tests: [{{id, outcome}}]}}]}})",
            e.line(),
            e.column()
        ))
    })?;
    if doc.schema != 1 {
        return Err(bad(format!(
            "schema {} is not one this version reads (1)",
            doc.schema
        )));
    }
    let mut runs = Vec::new();
    for (i, r) in doc.runs.into_iter().enumerate() {
        if !matches!(
            r.policy.as_str(),
            "upstream" | "streamed" | "invariant" | "pin"
        ) || !matches!(r.device.as_str(), "gpu" | "cpu")
        {
            return Err(bad(format!(
                "runs[{i}]: policy {:?} and device {:?}: expected upstream|streamed|invariant|pin and gpu|cpu",
                r.policy, r.device
            )));
        }
        let mut tests = BTreeMap::new();
        let mut passed_on_retry = std::collections::BTreeSet::new();
        for t in r.tests {
            let v = Verdict::parse(&t.outcome).ok_or_else(|| {
                bad(format!(
                    "runs[{i}] ({}/{}): test {}: outcome {:?} is not one of passed, failed, \
                     error, skipped, crashed, timeout",
                    r.policy, r.device, t.id, t.outcome
                ))
            })?;
            let first = t.first_outcome.as_deref().and_then(Verdict::parse);
            if v == Verdict::Passed && matches!(first, Some(Verdict::Failed | Verdict::Crashed)) {
                passed_on_retry.insert(t.id.clone());
            }
            tests.insert(t.id, v);
        }
        runs.push(RunTests {
            policy: r.policy,
            device: r.device,
            tests,
            passed_on_retry,
        });
    }
    if runs.is_empty() {
        return Err(bad("no runs in it".into()));
    }
    Ok(Results {
        header: doc.header,
        runs,
    })
}
