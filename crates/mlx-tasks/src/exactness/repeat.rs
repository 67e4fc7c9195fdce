//! Runs of one configuration against each other. A `--from` file gathers several processes'
//! runs; those with the same policy, kernel settings and decoder (preset, shapes, dtype, head,
//! prompt, cache, seed) had the same inputs, so they must give the same bytes. That is not the
//! block-vs-chain promise (each run checks it alone) but what a user replaying a request at
//! temperature 0 expects, and a difference is a finding that says where the runs part: a
//! layer's keys and values after the prompt (the prompt's forward), the prompt's last logit
//! row, a decode step's logit row, or, for runs written before the probe had digests, the
//! first decoded token.

use std::collections::BTreeMap;

use serde::Serialize;

use super::report::{Decoder, Digests, Finding, Run};

/// One configuration's runs, each later one compared with its first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Repeat {
    pub policy: String,
    /// "7b decoder at prompt 1024, seed 0"
    pub config: String,
    pub env: BTreeMap<String, String>,
    /// 1-based places of the runs among the measured runs read (the control left out).
    pub runs: Vec<usize>,
    /// Each of those runs' file and line, where it was read from one (`--from`).
    pub sources: Vec<Option<String>>,
    /// Whether every run had digests (else only the decoded tokens were compared).
    pub digests: bool,
    pub differ: Vec<Parting>,
}

/// A run that differs from its configuration's first, and where first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Parting {
    pub run: usize,
    pub first: String,
}

/// The configurations run more than once, in order of their first run, and a finding for each
/// run that differs from its configuration's first. Perturbed runs and runs without a decoder
/// take no part.
pub fn repeats(runs: &[Run]) -> (Vec<Repeat>, Vec<Finding>) {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let Some(key) = group_key(run) else { continue };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let mut out = Vec::new();
    let mut findings = Vec::new();
    for (_, members) in groups.into_iter().filter(|(_, m)| m.len() > 1) {
        let repeat = compare(runs, &members);
        // "run 2" and, where it was read from a file, "(FILE:LINE)".
        let named = |n: usize| match &runs[n - 1].source {
            Some(src) => format!("run {n} ({src})"),
            None => format!("run {n}"),
        };
        for p in &repeat.differ {
            findings.push(Finding {
                policy: runs[members[0]].label(),
                kind: "repeat",
                what: format!(
                    "{} runs of the {}: {} differs from {}, first at {}",
                    repeat.runs.len(),
                    repeat.config,
                    named(p.run),
                    named(repeat.runs[0]),
                    p.first
                ),
            });
        }
        out.push(repeat);
    }
    (out, findings)
}

fn compare(runs: &[Run], members: &[usize]) -> Repeat {
    let first = &runs[members[0]];
    let d0 = decoder(first);
    let differ = members[1..]
        .iter()
        .filter_map(|&i| parting(d0, decoder(&runs[i])).map(|first| Parting { run: i + 1, first }))
        .collect();
    Repeat {
        policy: first.label(),
        config: format!(
            "{} decoder at prompt {}, seed {}",
            d0.preset, d0.prompt, d0.seed
        ),
        env: first.env.clone(),
        runs: members.iter().map(|i| i + 1).collect(),
        sources: members.iter().map(|&i| runs[i].source.clone()).collect(),
        digests: members.iter().all(|&i| decoder(&runs[i]).digests.is_some()),
        differ,
    }
}

fn decoder(run: &Run) -> &Decoder {
    run.probe
        .decoder
        .as_ref()
        .expect("grouped runs have a decoder")
}

/// What makes two runs' inputs the same: the policy, the settings the process saw, the device
/// and the decoder's configuration (not its results, its timing or its duration). A checkpoint's
/// line does not say which model folder it read, so those runs are not grouped.
fn group_key(run: &Run) -> Option<String> {
    let d = run
        .probe
        .decoder
        .as_ref()
        .filter(|d| !run.probe.perturbed && d.preset != "checkpoint")?;
    Some(
        serde_json::json!([
            run.policy,
            run.env,
            run.probe.device,
            d.preset,
            d.dims,
            d.dtype,
            d.dense_head,
            d.prompt,
            d.cache,
            d.seed
        ])
        .to_string(),
    )
}

/// Where `b` first differs from `a`: the digests in the order the probe computed them, then
/// the decoded tokens; None when everything compared is the same.
pub fn parting(a: &Decoder, b: &Decoder) -> Option<String> {
    if let (Some(x), Some(y)) = (&a.digests, &b.digests)
        && let Some(at) = digest_parting(x, y)
    {
        return Some(at);
    }
    first_index(&a.decoded, &b.decoded).map(|i| {
        let tok = |d: &Decoder| d.decoded.get(i).map_or("none".into(), |t| t.to_string());
        format!("decoded token {i} ({} against {})", tok(b), tok(a))
    })
}

fn digest_parting(a: &Digests, b: &Digests) -> Option<String> {
    if let Some(l) = first_index(&a.prefill_kv, &b.prefill_kv) {
        return Some(format!("layer {l}'s keys and values after the prompt"));
    }
    if a.prefill_logits != b.prefill_logits {
        return Some("the prompt's last logit row".into());
    }
    first_index(&a.decode_logits, &b.decode_logits)
        .map(|s| format!("decode step {}'s logit row", s + 1))
}

/// The first index where the two lists differ, counting a missing element as different.
fn first_index<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exactness::report::tests::{decoder as small, run as bare};

    fn run(policy: &str, decoded: Vec<u32>, digests: Option<Digests>) -> Run {
        let mut r = bare(policy, vec![], false);
        r.probe.decoder = Some(small(decoded, digests));
        r
    }

    fn digests(kv: [&str; 2], logits: &str, steps: [&str; 2]) -> Option<Digests> {
        Some(Digests {
            prefill_kv: kv.map(String::from).to_vec(),
            prefill_logits: logits.into(),
            decode_logits: steps.map(String::from).to_vec(),
        })
    }

    #[test]
    fn the_same_configuration_twice_is_compared_and_a_difference_placed() {
        let same = digests(["a", "b"], "c", ["d", "e"]);
        let runs = vec![
            run("invariant", vec![1, 2, 3], same.clone()),
            run("streamed", vec![1, 9, 9], None),
            run("invariant", vec![1, 2, 3], same.clone()),
            run(
                "invariant",
                vec![1, 2, 4],
                digests(["a", "b"], "c", ["d", "x"]),
            ),
        ];
        let (reps, findings) = repeats(&runs);
        assert_eq!(reps.len(), 1, "streamed ran once: nothing to compare");
        assert_eq!(reps[0].runs, vec![1, 3, 4]);
        assert_eq!(reps[0].sources, vec![None, None, None]);
        assert!(reps[0].digests);
        assert_eq!(
            reps[0].differ,
            vec![Parting {
                run: 4,
                first: "decode step 2's logit row".into()
            }]
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].kind, "repeat");
        assert!(
            findings[0].what.contains(
                "3 runs of the small decoder at prompt 8, seed 0: run 4 differs from run 1"
            ),
            "{}",
            findings[0].what
        );
    }

    #[test]
    fn the_first_parting_is_the_earliest_tensor_the_probe_computed() {
        let d = |x| run("invariant", vec![1, 2], x);
        let base = d(digests(["a", "b"], "c", ["d", "e"]));
        let at = |other: Run| parting(decoder(&base), decoder(&other));
        assert_eq!(at(d(digests(["a", "b"], "c", ["d", "e"]))), None);
        assert_eq!(
            at(d(digests(["a", "B"], "C", ["D", "e"]))).as_deref(),
            Some("layer 1's keys and values after the prompt")
        );
        assert_eq!(
            at(d(digests(["a", "b"], "C", ["D", "e"]))).as_deref(),
            Some("the prompt's last logit row")
        );
        // Without digests on one side, the tokens alone; a shorter list differs where it ends.
        assert_eq!(
            at(run("invariant", vec![1, 3], None)).as_deref(),
            Some("decoded token 1 (3 against 2)")
        );
        assert_eq!(
            at(run("invariant", vec![1], None)).as_deref(),
            Some("decoded token 1 (none against 2)")
        );
    }

    #[test]
    fn other_settings_a_perturbed_run_a_run_without_decoder_and_checkpoints_are_not_repeats() {
        let mut launcher = run("invariant", vec![1, 5], None);
        launcher.env.insert("MLX_CUDA_QMV_WGMMA".into(), "0".into());
        let mut control = run("invariant", vec![1, 6], None);
        control.probe.perturbed = true;
        let mut ops_only = run("invariant", vec![], None);
        ops_only.probe.decoder = None;
        let mut other_seed = run("invariant", vec![1, 7], None);
        other_seed.probe.decoder.as_mut().unwrap().seed = 1;
        let checkpoint = |decoded| {
            let mut r = run("invariant", decoded, None);
            r.probe.decoder.as_mut().unwrap().preset = "checkpoint".into();
            r
        };
        let runs = vec![
            run("invariant", vec![1, 2], None),
            launcher,
            control,
            ops_only,
            other_seed,
            checkpoint(vec![1, 8]),
            checkpoint(vec![1, 9]),
        ];
        let (reps, findings) = repeats(&runs);
        assert!(reps.is_empty() && findings.is_empty(), "{reps:?}");
    }
}
