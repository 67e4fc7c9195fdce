//! Claims 9 and 9c: MLX's SDPA vector kernels, a block of T causal query rows
//! against the chain of T decode steps (crate::sdpa builds the binary).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Claim, Status};
use std::path::PathBuf;

use crate::compile::{Contraction, run_lines};
use crate::error::{Error, Result};
use crate::extract::TreeFiles;
use crate::sdpa::{HOST, KERNELS};

/// One emulated configuration: element type, head dim, query and KV heads,
/// the architecture letter of the device, cached keys before the block.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub ty: &'static str,
    pub d: usize,
    pub hq: usize,
    pub hkv: usize,
    pub devc: char,
    pub l0: usize,
}

impl Case {
    fn name(&self) -> String {
        let (ty, d, hq, hkv, devc, l0) = (self.ty, self.d, self.hq, self.hkv, self.devc, self.l0);
        format!("{ty}/D{d}/{hq}q{hkv}kv/{devc}/L0={l0}")
    }
    fn gqa(&self) -> usize {
        self.hq / self.hkv
    }
    fn cap(&self) -> usize {
        self.l0 + 16
    }
}

/// L0 = 64: every row one-pass; 1016: rows at n = 1017..1032 straddle the
/// two-pass threshold (n >= 1024 on 'd'/'s') and, with 8 query heads per KV
/// head on 's', the block-count step at n > 1024; 1040: every row two-pass.
/// Sized for about two minutes on two cores (both contraction modes).
pub fn cases(quick: bool) -> Vec<Case> {
    let c = |ty, d, hq, hkv, devc, l0| Case {
        ty,
        d,
        hq,
        hkv,
        devc,
        l0,
    };
    if quick {
        return vec![c("bfloat16", 128, 4, 1, 's', 1016)];
    }
    vec![
        c("bfloat16", 128, 8, 2, 's', 64),
        c("bfloat16", 128, 4, 1, 'd', 1016),
        c("float32", 128, 8, 1, 's', 1016),
        c("float16", 64, 8, 2, 's', 1040),
    ]
}

/// Block sizes: 1..16 (quick: a subset crossing 8, upstream's vector limit).
pub fn block_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 2, 7, 8, 9, 16]
    } else {
        (1..=16).collect()
    }
}

#[derive(Deserialize)]
struct PlanLine {
    runs: Vec<(usize, usize, usize, u8, usize)>,
    error: String,
}

#[derive(Deserialize)]
struct AttnLine {
    rows: Vec<String>,
    error: String,
}

/// One launch: query rows [row0, row0 + rows) over kv_len keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Launch {
    row0: usize,
    rows: usize,
    kv_len: usize,
    two_pass: bool,
    blocks: usize,
}

fn plan_request(c: &Case, q_len: usize, n: usize, policy: &str) -> String {
    let isgqa = (c.hkv < c.hq) as u8;
    format!("plan {} {q_len} {n} {} {isgqa} {policy}", c.devc, c.gqa())
}

fn attn_request(c: &Case, l: &Launch, seed: u64) -> String {
    let causal = (l.rows > 1) as u8;
    format!(
        "attn {} {} {} {} {} {seed} {} {} {} {causal} {} {}",
        c.ty,
        c.d,
        c.hq,
        c.hkv,
        c.cap(),
        l.row0,
        l.rows,
        l.kv_len,
        l.two_pass as u8,
        l.blocks
    )
}

/// The plans: (case, policy, q_len, n) -> launches.
type Plans = BTreeMap<(usize, &'static str, usize, usize), Vec<Launch>>;

/// Whether upstream MLX serves `t` rows on the vector kernels (use_fallback).
fn upstream_vector(c: &Case, t: usize) -> bool {
    t <= 8 && t * c.gqa() <= 32
}

fn plans(bin: &std::path::Path, cases: &[Case], ts: &[usize]) -> Result<Plans> {
    let mut keys = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        for t in 0..16 {
            keys.push((i, "streamed", 1, c.l0 + t + 1));
        }
        for &t in ts {
            keys.push((i, "streamed", t, c.l0 + t));
            if upstream_vector(c, t) {
                keys.push((i, "upstream", t, c.l0 + t));
            }
        }
    }
    let reqs: Vec<String> = keys
        .iter()
        .map(|&(i, p, t, n)| plan_request(&cases[i], t, n, p))
        .collect();
    let lines: Vec<PlanLine> = run_lines(bin, &reqs)?;
    let mut out = Plans::new();
    for (key, (line, req)) in keys.into_iter().zip(lines.into_iter().zip(&reqs)) {
        if !line.error.is_empty() {
            return Err(answer(bin, req, &line.error));
        }
        // A call's q_len rows are the last of the n - l0 query rows so far.
        let shift = key.3 - cases[key.0].l0 - key.2;
        let runs = line.runs.iter();
        let launches = runs.map(|&(row0, rows, kv_len, two, blocks)| Launch {
            row0: row0 + shift,
            rows,
            kv_len,
            two_pass: two != 0,
            blocks,
        });
        out.insert(key, launches.collect());
    }
    Ok(out)
}

fn answer(bin: &std::path::Path, request: &str, reason: &str) -> Error {
    Error::Answer {
        bin: bin.to_path_buf(),
        request: request.to_string(),
        reason: reason.to_string(),
    }
}

/// Per launch (case, launch) the row hashes, or the run's error.
type Outputs = BTreeMap<(usize, Launch), Result<Vec<String>, String>>;

fn run_launches(
    bin: &std::path::Path,
    cases: &[Case],
    plans: &Plans,
    seed: u64,
    jobs: usize,
) -> Result<Outputs> {
    let mut todo: Vec<(usize, Launch)> = plans
        .iter()
        .flat_map(|(k, ls)| ls.iter().map(move |l| (k.0, *l)))
        .collect();
    todo.sort();
    todo.dedup();
    let jobs = jobs.max(1).min(todo.len().max(1));
    let chunks: Vec<Vec<(usize, Launch)>> = (0..jobs)
        .map(|j| todo.iter().skip(j).step_by(jobs).copied().collect())
        .collect();
    let results: Vec<Result<Answered>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| s.spawn(move || run_chunk(bin, cases, chunk, seed)))
            .collect();
        let joined = handles.into_iter().map(|h| h.join());
        joined
            .map(|r| r.unwrap_or_else(|_| Err(panicked(bin))))
            .collect()
    });
    let mut out = Outputs::new();
    for r in results {
        for (key, line) in r? {
            let v = if line.error.is_empty() && line.rows.len() == key.1.rows {
                Ok(line.rows)
            } else {
                Err(format!("{} ({} rows)", line.error, line.rows.len()))
            };
            out.insert(key, v);
        }
    }
    Ok(out)
}

/// Launches and their answers, in request order.
type Answered = Vec<((usize, Launch), AttnLine)>;

/// One emulator process running `chunk`.
fn run_chunk(
    bin: &std::path::Path,
    cases: &[Case],
    chunk: &[(usize, Launch)],
    seed: u64,
) -> Result<Answered> {
    let reqs: Vec<String> = chunk
        .iter()
        .map(|(i, l)| attn_request(&cases[*i], l, seed))
        .collect();
    let lines: Vec<AttnLine> = run_lines(bin, &reqs)?;
    Ok(chunk.iter().copied().zip(lines).collect())
}

fn panicked(bin: &std::path::Path) -> Error {
    answer(bin, "attn", "the thread running it panicked")
}

/// The row hashes of a block (its launches in row order).
fn block_rows(outs: &Outputs, case: usize, launches: &[Launch]) -> Result<Vec<String>, String> {
    let mut rows = Vec::new();
    for l in launches {
        match outs.get(&(case, *l)) {
            Some(Ok(r)) => rows.extend(r.iter().cloned()),
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("launch not run".into()),
        }
    }
    Ok(rows)
}

#[derive(Default)]
struct Tally {
    rows: usize,
    differ: usize,
    errors: Vec<String>,
    first_diff: Option<String>,
}

/// Every row of every `policy` block against its chain row (the streamed
/// plan's decode step at that row's key count).
fn compare(cases: &[Case], plans: &Plans, outs: &Outputs, ts: &[usize], policy: &str) -> Tally {
    let mut tally = Tally::default();
    for (i, c) in cases.iter().enumerate() {
        for &t in ts {
            let Some((_, launches)) = plans
                .iter()
                .find(|(k, _)| **k == (i, k.1, t, c.l0 + t) && k.1 == policy)
            else {
                continue;
            };
            let block = match block_rows(outs, i, launches) {
                Ok(b) => b,
                Err(e) => {
                    tally.errors.push(format!("{} T={t}: {e}", c.name()));
                    continue;
                }
            };
            for (r, got) in block.iter().enumerate() {
                let chain = plans
                    .get(&(i, "streamed", 1, c.l0 + r + 1))
                    .ok_or_else(|| "no decode plan".to_string())
                    .and_then(|ls| block_rows(outs, i, ls));
                match chain {
                    Ok(ch) if ch.len() == 1 => {
                        tally.rows += 1;
                        if ch[0] != *got {
                            tally.differ += 1;
                            tally
                                .first_diff
                                .get_or_insert(format!("{} T={t} row {r}", c.name()));
                        }
                    }
                    Ok(_) => tally
                        .errors
                        .push(format!("{} decode {r}: not one row", c.name())),
                    Err(e) => tally.errors.push(format!("{} decode {r}: {e}", c.name())),
                }
            }
        }
    }
    tally
}

/// What the streamed plans cover: blocks with a one-pass launch, with a
/// two-pass launch, with both (straddling the threshold), with several
/// launches; and whether every decode plan (T = 1) is upstream's.
struct Coverage {
    one: usize,
    two: usize,
    straddle: usize,
    multi: usize,
    decode_same: bool,
}

fn coverage(plans: &Plans) -> Coverage {
    let mut cov = Coverage {
        one: 0,
        two: 0,
        straddle: 0,
        multi: 0,
        decode_same: true,
    };
    for ((i, policy, t, n), ls) in plans {
        if *policy != "streamed" {
            continue;
        }
        if *t == 1 {
            let up = plans.get(&(*i, "upstream", 1, *n));
            cov.decode_same &= up.is_none_or(|u| u == ls);
            continue;
        }
        let (one, two) = (
            ls.iter().any(|l| !l.two_pass),
            ls.iter().any(|l| l.two_pass),
        );
        cov.one += one as usize;
        cov.two += two as usize;
        cov.straddle += (one && two) as usize;
        cov.multi += (ls.len() > 1) as usize;
    }
    cov
}

/// Runs the block-vs-chain matrix on the patched tree's binaries (one per
/// contraction mode; the plans come from the first) and evaluates claims 9
/// (streamed: every row identical) and 9c (upstream: some differ).
pub fn claims(
    bins: &[(Contraction, PathBuf)],
    patched: &TreeFiles,
    pristine: &TreeFiles,
    quick: bool,
    seed: u64,
    jobs: usize,
) -> Result<Vec<Claim>> {
    let cases = cases(quick);
    let ts = block_sizes(quick);
    let first = bins.first().map(|b| b.1.as_path());
    let first = first.ok_or_else(|| Error::Source("no SDPA binary".into()))?;
    let plans = plans(first, &cases, &ts)?;
    let (mut streamed, mut upstream) = (Tally::default(), Tally::default());
    for (contraction, bin) in bins {
        let outs = run_launches(bin, &cases, &plans, seed, jobs)?;
        let tag = format!("contraction {contraction:?}");
        streamed.add(compare(&cases, &plans, &outs, &ts, "streamed"), &tag);
        upstream.add(compare(&cases, &plans, &outs, &ts, "upstream"), &tag);
    }
    let cov = coverage(&plans);
    let rules = upstream_rules(pristine, patched);
    Ok(vec![
        claim_9(&streamed, &cov, cases.len(), &ts),
        claim_9c(&upstream, &rules),
    ])
}

impl Tally {
    /// Adds `o` (one contraction mode's comparison, named by `tag`).
    fn add(&mut self, o: Tally, tag: &str) {
        self.rows += o.rows;
        self.differ += o.differ;
        self.errors
            .extend(o.errors.into_iter().map(|e| format!("{tag}: {e}")));
        if self.first_diff.is_none() {
            self.first_diff = o.first_diff.map(|d| format!("{d} ({tag})"));
        }
    }
}

fn claim_9(t: &Tally, cov: &Coverage, ncases: usize, ts: &[usize]) -> Claim {
    let ok = t.errors.is_empty()
        && t.rows > 0
        && t.differ == 0
        && cov.one > 0
        && cov.two > 0
        && cov.straddle > 0
        && cov.decode_same;
    let mut detail = format!(
        "{} block rows (T in {}, {ncases} cases, contraction off and on) vs decode rows: {} differ; blocks with a 1-pass launch {}, a 2-pass launch {}, both (straddling the threshold) {}, several launches {}; decode plans (T=1) equal upstream's: {}",
        t.rows,
        t_set(ts),
        t.differ,
        cov.one,
        cov.two,
        cov.straddle,
        cov.multi,
        if cov.decode_same { "yes" } else { "no" },
    );
    if let Some(d) = &t.first_diff {
        detail.push_str(&format!("; first difference: {d}"));
    }
    push_errors(&mut detail, &t.errors);
    Claim {
        id: "9".into(),
        title: "SDPA vector kernels, streamed routing (sdpa_vector_row_runs): every row of a causal block of T = 1..16 query rows is byte-identical to the decode step at its KV length".into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
    }
}

/// "; N errors, first: ..." when a case could not run.
fn push_errors(detail: &mut String, errors: &[String]) {
    if let Some(first) = errors.first() {
        detail.push_str(&format!("; {} errors, first: {first}", errors.len()));
    }
}

/// `1..=16` for a contiguous set, else the list.
fn t_set(ts: &[usize]) -> String {
    match (ts.first(), ts.last()) {
        (Some(a), Some(b)) if b - a + 1 == ts.len() => format!("{a}..={b}"),
        _ => format!("{ts:?}"),
    }
}

fn claim_9c(t: &Tally, rules: &Result<String, String>) -> Claim {
    let ok = t.errors.is_empty() && t.rows > 0 && t.differ > 0 && rules.is_ok();
    let mut detail = format!(
        "upstream routing (one launch, block count from n_simds = gqa * T): {} of {} block rows differ from decode",
        t.differ, t.rows
    );
    if let Some(d) = &t.first_diff {
        detail.push_str(&format!(" (first: {d})"));
    }
    match rules {
        Ok(s) => detail.push_str(&format!("; {s}")),
        Err(e) => detail.push_str(&format!("; RULES: {e}")),
    }
    push_errors(&mut detail, &t.errors);
    Claim {
        id: "9c".into(),
        title: "control: upstream's SDPA vector routing makes some block row differ from decode"
            .into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
    }
}

/// Whitespace-normalized text.
fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The upstream routing the control emulates is the pristine tree's: its
/// `sdpa_vector_2pass` carries the patched `sdpa_vector_blocks` rule verbatim
/// with n_simds = gqa_factor * q_len, its `eval_gpu` the patched
/// `sdpa_vector_two_pass` condition over k.shape(2), and its sdpa_vector.h
/// equals the patched one.
pub fn upstream_rules(pristine: &TreeFiles, patched: &TreeFiles) -> Result<String, String> {
    let text = |f: &TreeFiles, p: &str| f.get(p).map(str::to_string).map_err(|e| e.to_string());
    let (pri, pat) = (text(pristine, HOST)?, text(patched, HOST)?);
    let def = |src: &str, name: &str| -> Result<String, String> {
        let idx = overlay::symbols::scan(src);
        let defs: Vec<_> = idx
            .symbols()
            .iter()
            .filter(|s| s.qualified == name || s.qualified.ends_with(&format!("::{name}")))
            .collect();
        match defs[..] {
            [d] => Ok(norm(&src[d.span.clone()])),
            _ => Err(format!("{} definitions of {name}", defs.len())),
        }
    };
    let blocks = def(&pat, "sdpa_vector_blocks")?;
    let rule = blocks
        .split_once("int blocks; ")
        .and_then(|(_, r)| r.split_once(" return blocks;"))
        .map(|(r, _)| r.to_string())
        .ok_or("sdpa_vector_blocks: no `int blocks; ... return blocks;`")?;
    let two = def(&pat, "sdpa_vector_two_pass")?;
    let cond = two
        .split_once("return ")
        .and_then(|(_, r)| r.split_once(';'))
        .map(|(r, _)| {
            r.replace("N >=", "k.shape(2) >=")
                .replace("(gqa &&", "(k.shape(1) < q.shape(1) &&")
        })
        .ok_or("sdpa_vector_two_pass: no return")?;
    let pass2 = def(&pri, "sdpa_vector_2pass")?;
    let eval = def(&pri, "ScaledDotProductAttention::eval_gpu")?;
    let n_simds = "int n_simds = gqa_factor * q.shape(2);";
    let checks = [
        (
            pass2.contains(&rule),
            "pristine sdpa_vector_2pass has the block-count rule",
        ),
        (
            pass2.contains(n_simds),
            "pristine n_simds = gqa_factor * q.shape(2)",
        ),
        (
            eval.contains(&cond),
            "pristine eval_gpu has the two-pass condition",
        ),
        (
            text(pristine, KERNELS)? == text(patched, KERNELS)?,
            "sdpa_vector.h unchanged by the series",
        ),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, what)) => Err(format!("not so: {what}")),
        None => Ok("pristine host rules = the extracted ones, sdpa_vector.h unchanged".into()),
    }
}
