//! Runs of one configuration against each other. A `--from` file gathers several processes'
//! runs; those with the same policy, kernel settings and decoder (preset, shapes, dtype, head,
//! prompt, cache, seed) had the same inputs, so they must give the same bytes. That is not the
//! block-vs-chain promise (each run checks it alone) but what a user replaying a request at
//! temperature 0 expects, and a difference is a finding that says where the runs part: a
//! layer's keys and values after the prompt (the prompt's forward), the prompt's last logit
//! row, a decode step's logit row, or, for runs written before the probe had digests, the
//! first decoded token; with tap digests (the probe's `taps=1`), the first op of the prompt's
//! forward or of a decode step whose output differs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::report::{Decoder, Digests, Finding, Run, TapDigests};

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
    /// Whether every run also had tap digests (the probe's `taps=1`): a parting names the op.
    pub taps: bool,
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
        taps: members.iter().all(|&i| runs[i].tap_digests().is_some()),
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
    // Tap digests (`taps=1`) on both sides, of forwards with the same taps: the op first.
    let taps = a
        .taps
        .as_ref()
        .zip(b.taps.as_ref())
        .filter(|(x, y)| x.names == y.names);
    if let Some((x, y)) = taps
        && let Some(i) = first_index(&x.prefill_taps, &y.prefill_taps)
    {
        return Some(format!("the prompt's forward, {}", tap_name(&x.names, i)));
    }
    if let Some(l) = first_index(&a.prefill_kv, &b.prefill_kv) {
        return Some(format!("layer {l}'s keys and values after the prompt"));
    }
    if a.prefill_logits != b.prefill_logits {
        return Some("the prompt's last logit row".into());
    }
    let steps = a.decode_logits.len().max(b.decode_logits.len());
    (0..steps).find_map(|s| {
        let step_taps = |t: &TapDigests| t.decode_taps.get(s).cloned().unwrap_or_default();
        if let Some((x, y)) = taps
            && let Some(i) = first_index(&step_taps(x), &step_taps(y))
        {
            return Some(format!("decode step {}, {}", s + 1, tap_name(&x.names, i)));
        }
        (a.decode_logits.get(s) != b.decode_logits.get(s))
            .then(|| format!("decode step {}'s logit row", s + 1))
    })
}

/// "layer 3's sdpa" for the tap "3/sdpa", the op alone outside the layers ("final_norm").
fn tap_name(names: &[String], i: usize) -> String {
    match names.get(i).map(|n| n.split_once('/')) {
        Some(Some((layer, op))) => format!("layer {layer}'s {op}"),
        Some(None) => names[i].clone(),
        None => format!("tap {i}"),
    }
}

/// A run whose prompt forward and first decode step ran again in its own process (the
/// probe's `repeat=N`), each repeat compared with the run's own first forward of the same inputs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InProcess {
    pub policy: String,
    /// 1-based place of the run among the measured runs read, and its file and line.
    pub run: usize,
    pub source: Option<String>,
    /// How many times each of the two forwards ran again.
    pub repeats: usize,
    pub differ: Vec<Again>,
}

/// One repeated forward that differs from the first, and at which tap first.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Again {
    /// 1-based: which repeat.
    pub repeat: usize,
    /// "the prompt's forward" or "decode step 1".
    pub forward: String,
    pub first: String,
}

/// Each repeated forward (`prefill_repeats`, `decode_repeats`) against the first of the same
/// inputs; the ones that differ. Repeats missing their first (no decode step) are skipped.
pub fn again(t: &TapDigests) -> Vec<Again> {
    let sets = [
        (
            "the prompt's forward",
            Some(&t.prefill_taps),
            &t.prefill_repeats,
        ),
        ("decode step 1", t.decode_taps.first(), &t.decode_repeats),
    ];
    let mut out = Vec::new();
    for (forward, first, repeats) in sets {
        let Some(first) = first else { continue };
        for (i, r) in repeats.iter().enumerate() {
            if let Some(j) = first_index(first, r) {
                out.push(Again {
                    repeat: i + 1,
                    forward: forward.into(),
                    first: tap_name(&t.names, j),
                });
            }
        }
    }
    out.sort_by_key(|a| a.repeat);
    out
}

/// The measured runs with repeated forwards, and a finding for each repeat that differs.
pub fn in_process(runs: &[Run]) -> (Vec<InProcess>, Vec<Finding>) {
    let mut out = Vec::new();
    let mut findings = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let Some(t) = run.tap_digests().filter(|t| !t.prefill_repeats.is_empty()) else {
            continue;
        };
        let r = InProcess {
            policy: run.label(),
            run: i + 1,
            source: run.source.clone(),
            repeats: t.prefill_repeats.len(),
            differ: again(t),
        };
        let named = r
            .source
            .as_ref()
            .map_or(format!("run {}", r.run), |s| format!("run {} ({s})", r.run));
        for a in &r.differ {
            findings.push(Finding {
                policy: r.policy.clone(),
                kind: "repeat",
                what: format!(
                    "{named}: {} run again in the same process (repeat {} of {}) differs from its first at {}",
                    a.forward, a.repeat, r.repeats, a.first
                ),
            });
        }
        out.push(r);
    }
    (out, findings)
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
            taps: None,
        })
    }

    /// `digests` with tap digests: two layers of two taps and the logits, in each forward.
    fn with_taps(prefill: [&str; 5], step1: [&str; 5], step2: [&str; 5]) -> Option<Digests> {
        let names = ["0/q_proj", "0/sdpa", "1/q_proj", "1/sdpa", "logits"];
        let mut d = digests(["a", "b"], "c", ["d", "e"])?;
        d.taps = Some(TapDigests {
            names: names.map(String::from).to_vec(),
            prefill_taps: prefill.map(String::from).to_vec(),
            decode_taps: vec![
                step1.map(String::from).to_vec(),
                step2.map(String::from).to_vec(),
            ],
            ..TapDigests::default()
        });
        Some(d)
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
    fn tap_digests_name_the_first_op_whose_output_differs() {
        let d = |x| run("invariant", vec![1, 2], x);
        let p = ["p0", "p1", "p2", "p3", "p4"];
        let (s1, s2) = (
            ["s0", "s1", "s2", "s3", "s4"],
            ["t0", "t1", "t2", "t3", "t4"],
        );
        let base = d(with_taps(p, s1, s2));
        let at = |other: Run| parting(decoder(&base), decoder(&other));
        assert_eq!(at(d(with_taps(p, s1, s2))), None);
        // The prompt's forward parts at layer 1's sdpa: named before the (also differing) keys.
        let mut other = with_taps(["p0", "p1", "p2", "X", "X"], s1, s2).unwrap();
        other.prefill_kv[1] = "X".into();
        assert_eq!(
            at(d(Some(other))).as_deref(),
            Some("the prompt's forward, layer 1's sdpa")
        );
        // A decode step's tap, before that step's logit row; the logits outside the layers.
        let mut other = with_taps(p, s1, ["t0", "X", "X", "X", "X"]).unwrap();
        other.decode_logits[1] = "X".into();
        assert_eq!(
            at(d(Some(other))).as_deref(),
            Some("decode step 2, layer 0's sdpa")
        );
        assert_eq!(
            at(d(with_taps(p, ["s0", "s1", "s2", "s3", "X"], s2))).as_deref(),
            Some("decode step 1, logits")
        );
        // Without taps on one side, or with other tap names, the coarser digests place it.
        let mut other = with_taps(p, s1, ["t0", "X", "t2", "t3", "t4"]).unwrap();
        other.decode_logits[1] = "X".into();
        other.taps.as_mut().unwrap().names[4] = "head".into();
        assert_eq!(
            at(d(Some(other))).as_deref(),
            Some("decode step 2's logit row")
        );
        assert_eq!(at(d(digests(["a", "b"], "c", ["d", "e"]))), None);
    }

    #[test]
    fn a_repeated_forward_that_differs_from_its_first_is_named_at_its_first_tap() {
        let p = ["p0", "p1", "p2", "p3", "p4"];
        let s = ["s0", "s1", "s2", "s3", "s4"];
        let mut d = with_taps(p, s, s).unwrap();
        let t = d.taps.as_mut().unwrap();
        let v = |x: [&str; 5]| x.map(String::from).to_vec();
        t.prefill_repeats = vec![v(p), v(["p0", "p1", "p2", "X", "p4"]), v(p)];
        t.decode_repeats = vec![v(s), v(s), v(["X", "s1", "s2", "s3", "s4"])];
        let mut r = run("invariant", vec![1, 2], Some(d));
        r.source = Some("a.jsonl:3".into());
        let runs = vec![run("invariant", vec![1, 2], None), r];
        let (reps, findings) = in_process(&runs);
        assert_eq!(reps.len(), 1, "the run without repeats is not listed");
        assert_eq!((reps[0].run, reps[0].repeats), (2, 3));
        let at = |a: &Again| (a.repeat, a.forward.clone(), a.first.clone());
        assert_eq!(
            reps[0].differ.iter().map(at).collect::<Vec<_>>(),
            vec![
                (2, "the prompt's forward".into(), "layer 1's sdpa".into()),
                (3, "decode step 1".into(), "layer 0's q_proj".into()),
            ]
        );
        assert_eq!(findings.len(), 2);
        assert_eq!(
            findings[0].what,
            "run 2 (a.jsonl:3): the prompt's forward run again in the same process (repeat 2 of 3) differs from its first at layer 1's sdpa"
        );
        // Identical repeats: listed, nothing differs, no finding.
        let mut d = with_taps(p, s, s).unwrap();
        let t = d.taps.as_mut().unwrap();
        (t.prefill_repeats, t.decode_repeats) = (vec![v(p)], vec![v(s)]);
        let (reps, findings) = in_process(&[run("invariant", vec![1, 2], Some(d))]);
        assert!(reps[0].differ.is_empty() && findings.is_empty());
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
