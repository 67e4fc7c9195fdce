//! The exactness report as JSON (docs/json.md) and as a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use overlay_cli::commands::colour;
use serde_json::json;

use super::repeat::{self, InProcess, Repeat};
use super::report::{self, Backend, Control, Finding, OpRow, Run};

pub struct Report {
    pub backend: Backend,
    pub header: serde_json::Value,
    pub runs: Vec<Run>,
    pub control: Option<Control>,
    /// The decoder configurations run more than once, compared run against run.
    pub repeats: Vec<Repeat>,
    /// The runs whose forwards ran again in their own process (`repeat=N`).
    pub in_process: Vec<InProcess>,
    pub findings: Vec<Finding>,
}

impl Report {
    /// Marks promised rows and collects the findings; a missing control is a finding, since
    /// without it nothing shows the comparison can fail.
    pub fn new(
        backend: Backend,
        mut runs: Vec<Run>,
        control: Option<Run>,
        header: serde_json::Value,
    ) -> Report {
        let mut findings = Vec::new();
        for run in &mut runs {
            report::mark(backend, run);
            findings.extend(report::findings(run));
        }
        let (repeats, differ) = repeat::repeats(&runs);
        findings.extend(differ);
        let (in_process, differ) = repeat::in_process(&runs);
        findings.extend(differ);
        let control = match control {
            Some(c) => {
                let (c, f) = report::control(&c);
                findings.extend(f);
                if !in_process.is_empty() && c.repeats == 0 {
                    findings.push(Finding {
                        policy: "-".into(),
                        kind: "control",
                        what: "runs repeat their forwards in process, but the negative control repeated none: nothing shows that comparison can fail".into(),
                    });
                }
                Some(c)
            }
            None => {
                findings.push(Finding {
                    policy: "-".into(),
                    kind: "control",
                    what: "no negative control run: nothing shows the comparison can fail".into(),
                });
                None
            }
        };
        Report {
            backend,
            header,
            runs,
            control,
            repeats,
            in_process,
            findings,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "backend": self.backend,
            "header": self.header,
            "runs": self.runs,
            "control": self.control,
            "repeats": self.repeats,
            "in_process": self.in_process,
            "unpromised_rows_differ": self.runs.iter()
                .map(|r| (r.label(), report::unpromised_differ(r)))
                .collect::<BTreeMap<_, _>>(),
            "findings": self.findings,
        })
    }

    /// Whether any op row or decoder of the measured runs is promised.
    fn promises_any(&self) -> bool {
        self.runs.iter().any(|r| {
            r.probe.ops.iter().any(|o| o.asserted)
                || r.probe.decoder.as_ref().is_some_and(|d| d.asserted)
        })
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let pin = self.header["pin"]
            .as_str()
            .map_or("?", |p| &p[..9.min(p.len())]);
        let _ = writeln!(
            s,
            "exactness ({:?}, pin {pin}): one call over T rows against T one-row calls, bytes compared",
            self.backend
        );
        self.ops_table(&mut s);
        self.decoder_table(&mut s);
        self.repeat_lines(&mut s);
        self.in_process_lines(&mut s);
        self.summary(&mut s);
        s
    }

    fn ops_table(&self, s: &mut String) {
        let Some(first) = self.runs.iter().find(|r| !r.probe.ops.is_empty()) else {
            return;
        };
        let (t, seeds) = (first.probe.ops[0].t_max, first.probe.ops[0].seeds);
        let runs: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| !r.probe.ops.is_empty())
            .collect();
        let _ = writeln!(s, "\nop table (T = 1..{t}, {seeds} seeds)");
        let _ = write!(s, "  {:<18} {:<5}", "op", "dtype");
        for r in &runs {
            let _ = write!(s, " {:<56}", r.label());
        }
        s.push('\n');
        for ((op, dtype), _) in groups(&first.probe.ops) {
            let _ = write!(s, "  {op:<18} {dtype:<5}");
            for r in &runs {
                let cell = groups(&r.probe.ops)
                    .remove(&(op.clone(), dtype.clone()))
                    .map_or("-".to_string(), |g| cell(&g));
                let _ = write!(s, " {cell:<40}");
            }
            s.push('\n');
        }
    }

    /// One table per decoder configuration (preset, prompt, dtype, head), a column per run.
    fn decoder_table(&self, s: &mut String) {
        let mut seen: Vec<String> = Vec::new();
        for d in self.runs.iter().filter_map(|r| r.probe.decoder.as_ref()) {
            let key = decoder_key(d);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let runs: Vec<&Run> = self
                .runs
                .iter()
                .filter(|r| {
                    r.probe
                        .decoder
                        .as_ref()
                        .is_some_and(|x| decoder_key(x) == key)
                })
                .collect();
            let _ = writeln!(s, "\n{key}: verify k drafted tokens vs k decode steps");
            let _ = write!(s, "  {:>3}", "k");
            for r in &runs {
                let _ = write!(s, " {:<52}", r.label());
            }
            s.push('\n');
            for (i, b) in d.blocks.iter().enumerate() {
                let _ = write!(s, "  {:>3}", b.k);
                for r in &runs {
                    let text = r
                        .probe
                        .decoder
                        .as_ref()
                        .and_then(|d| d.blocks.get(i).map(|b| block_cell(b, d.asserted)));
                    let _ = write!(s, " {:<52}", text.unwrap_or_else(|| "-".into()));
                }
                s.push('\n');
            }
            timing_table(s, &runs);
        }
    }

    /// Each run whose forwards ran again in its process: identical, or where a repeat parts.
    fn in_process_lines(&self, s: &mut String) {
        if self.in_process.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "\nforwards run again in the same process (the prompt's forward and decode step 1, from the same inputs)"
        );
        for r in &self.in_process {
            let src = r
                .source
                .as_ref()
                .map_or(String::new(), |x| format!(" ({x})"));
            let _ = write!(
                s,
                "  {}, run {}{src}, {} repeats: ",
                r.policy, r.run, r.repeats
            );
            if r.differ.is_empty() {
                let _ = writeln!(s, "identical");
            }
            for (i, a) in r.differ.iter().enumerate() {
                let sep = if i + 1 < r.differ.len() { "; " } else { "\n" };
                let _ = write!(s, "repeat {}: {} at {}{sep}", a.repeat, a.forward, a.first);
            }
        }
    }

    /// Each configuration run more than once: identical, or which run parts from the first.
    fn repeat_lines(&self, s: &mut String) {
        if self.repeats.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "\nrepeated runs (the same inputs and settings in separate processes)"
        );
        for r in &self.repeats {
            let runs: Vec<String> = r
                .runs
                .iter()
                .zip(&r.sources)
                .map(|(n, src)| src.as_ref().map_or(n.to_string(), |s| format!("{n} ({s})")))
                .collect();
            let what = match (r.digests, r.taps) {
                (true, true) => "every op's digests and tokens",
                (true, false) => "digests and tokens",
                _ => "tokens only",
            };
            let _ = write!(
                s,
                "  {}, {}: runs {} ({what}): ",
                r.policy,
                r.config,
                runs.join(", ")
            );
            if r.differ.is_empty() {
                let _ = writeln!(s, "identical");
            }
            for (i, p) in r.differ.iter().enumerate() {
                let sep = if i + 1 < r.differ.len() { "; " } else { "\n" };
                let _ = write!(
                    s,
                    "run {} differs from run {} at {}{sep}",
                    p.run, r.runs[0], p.first
                );
            }
        }
    }

    fn summary(&self, s: &mut String) {
        s.push('\n');
        if let Some(c) = &self.control {
            let _ = writeln!(
                s,
                "negative control (one flipped bit per compared set): caught in {} of {} op cases, {} of {} decoder blocks{}",
                c.caught,
                c.cases,
                c.blocks_caught,
                c.blocks,
                c.repeats_text()
            );
        }
        for r in &self.runs {
            let _ = writeln!(
                s,
                "{} ({}): {} rows differ where nothing is promised{}",
                r.label(),
                run_scope(r),
                report::unpromised_differ(r),
                r.paths.map_or(String::new(), |p| format!(
                    "; quantized-matmul kernel calls: {} streamed, {} row by row",
                    p.streamed, p.row_by_row
                ))
            );
        }
        if self.findings.is_empty() && !self.promises_any() {
            let _ = writeln!(
                s,
                "nothing in these runs is promised on {:?} (docs/kernels/exactness.md): every difference above is reported, none fails the run",
                self.backend
            );
            return;
        }
        if self.findings.is_empty() {
            let _ = writeln!(s, "{}", colour("every promised row is identical", "32"));
            return;
        }
        for f in &self.findings {
            let _ = writeln!(
                s,
                "{} [{}] {}: {}",
                colour("FINDING", "31;1"),
                f.policy,
                f.kind,
                f.what
            );
        }
        let _ = writeln!(s, "{} findings", self.findings.len());
    }
}

/// What a run measured, for its summary line: "op table, 7b decoder at prompt 40".
fn run_scope(r: &Run) -> String {
    let mut parts = Vec::new();
    if !r.probe.ops.is_empty() {
        parts.push("op table".to_string());
    }
    if let Some(d) = &r.probe.decoder {
        parts.push(format!("{} decoder at prompt {}", d.preset, d.prompt));
    }
    parts.join(", ")
}

/// "decoder 7b (28 layers, d 3584, ...), prompt 40" : what makes two runs' blocks comparable.
fn decoder_key(d: &report::Decoder) -> String {
    let dims = |k: &str| d.dims.get(k).copied().unwrap_or(0);
    format!(
        "decoder {} ({} layers, d {}, {}/{} heads of {}, mlp {}, vocab {}, {}{}, prompt {}{})",
        d.preset,
        dims("layers"),
        dims("d_model"),
        dims("q_heads"),
        dims("kv_heads"),
        dims("head_dim"),
        dims("mlp"),
        dims("vocab"),
        d.dtype,
        if d.dense_head { ", dense head" } else { "" },
        d.prompt,
        if d.cache == "step" {
            ", mlx-lm's KV cache"
        } else {
            ""
        }
    )
}

/// The runs' timings of one decoder configuration: per k, the forward and the attention op,
/// and each run against the upstream run of the same settings (a ratio measured in one session).
fn timing_table(s: &mut String, runs: &[&Run]) {
    let timed: Vec<(&Run, &report::Timing)> = runs
        .iter()
        .filter_map(|r| Some((*r, r.probe.decoder.as_ref()?.timing.as_ref()?)))
        .collect();
    let Some((_, first)) = timed.first() else {
        return;
    };
    let ids = host_tokens(&timed);
    let _ = writeln!(
        s,
        "  timing (median of {}): forward of k tokens from the prompt's cache, attention alone per layer{ids}",
        first.reps
    );
    for row in &first.rows {
        let _ = write!(s, "  {:>3}", row.k);
        for (run, t) in &timed {
            let Some(r) = t.rows.iter().find(|x| x.k == row.k) else {
                let _ = write!(s, " {:<52}", "-");
                continue;
            };
            let mut cell = format!(
                "{:.2} ms, attention {:.1} us",
                r.forward_ms,
                r.sdpa_ms * 1e3
            );
            if let Some(base) = upstream_row(&timed, run, r.k) {
                let _ = write!(
                    cell,
                    " ({:.2}x, {:.2}x)",
                    r.forward_ms / base.forward_ms,
                    r.sdpa_ms / base.sdpa_ms
                );
            }
            let _ = write!(s, " {cell:<52}");
        }
        s.push('\n');
    }
    gpu_table(s, &timed);
    graph_table(s, &timed);
    by_kernel_table(s, &timed);
}

/// Which runs timed forwards on token ids built from host data in each forward (probes before
/// session 36 all did; later ones say `tokens`): nothing where none did, else which columns.
fn host_tokens(timed: &[(&Run, &report::Timing)]) -> String {
    let host: Vec<String> = (1..)
        .zip(timed)
        .filter(|(_, (_, t))| t.host_tokens())
        .map(|(i, _)| i.to_string())
        .collect();
    match host.len() {
        0 => String::new(),
        n if n == timed.len() => "; token ids built from host data in each forward".into(),
        _ => format!(
            "; token ids built from host data in each forward in column(s) {}",
            host.join(", ")
        ),
    }
}

/// Where the probe measured the GPU (CUPTI): per k, each run's GPU busy time, its quantized
/// matmuls' part, and both against the same run's k = 1 (what verifying k tokens costs the GPU
/// over one decode step; the wall time above is mostly the host's).
fn gpu_table(s: &mut String, timed: &[(&Run, &report::Timing)]) {
    let title =
        "GPU time (same forwards): busy, of it quantized matmuls; each over its run's k = 1";
    k_table(s, timed, title, |r| r.gpu_ms.is_some(), gpu_cell);
}

/// A table of one cell per (k, run) under `title`, where some row `has` what the cells show.
fn k_table(
    s: &mut String,
    timed: &[(&Run, &report::Timing)],
    title: &str,
    has: fn(&report::TimingRow) -> bool,
    cell: fn(&report::Timing, u32) -> Option<String>,
) {
    if !timed.iter().any(|(_, t)| t.rows.iter().any(has)) {
        return;
    }
    let _ = writeln!(s, "  {title}");
    for row in &timed[0].1.rows {
        let _ = write!(s, "  {:>3}", row.k);
        for (_, t) in timed {
            let c = cell(t, row.k).unwrap_or_else(|| "-".into());
            let _ = write!(s, " {c:<52}");
        }
        s.push('\n');
    }
}

fn gpu_cell(t: &report::Timing, k: u32) -> Option<String> {
    let r = t.rows.iter().find(|x| x.k == k)?;
    let (gpu, qmm) = (r.gpu_ms?, r.gpu_qmm_ms?);
    let mut cell = format!("{gpu:.3} ms, qmm {qmm:.3} ms");
    if let Some(one) = t.rows.iter().find(|x| x.k == 1)
        && let (Some(g1), Some(q1)) = (one.gpu_ms, one.gpu_qmm_ms)
    {
        let _ = write!(cell, " ({:.2}x, {:.2}x)", gpu / g1, qmm / q1);
    }
    Some(cell)
}

/// Where the probe measured it: the GPU's time with each graph launch taken whole (the gaps
/// between a graph's kernels counted), its launches, and each k over the same run's k = 1.
fn graph_table(s: &mut String, timed: &[(&Run, &report::Timing)]) {
    let title = "GPU time, each graph launch whole (first start to last end); over its run's k = 1";
    k_table(s, timed, title, |r| r.gpu_graph_ms.is_some(), graph_cell);
}

fn graph_cell(t: &report::Timing, k: u32) -> Option<String> {
    let r = t.rows.iter().find(|x| x.k == k)?;
    let ms = r.gpu_graph_ms?;
    let mut cell = format!("{ms:.3} ms");
    if let Some(n) = r.gpu_graphs {
        let _ = write!(cell, " in {n} launches");
    }
    if let Some(one) = t
        .rows
        .iter()
        .find(|x| x.k == 1)
        .and_then(|x| x.gpu_graph_ms)
    {
        let _ = write!(cell, " ({:.2}x)", ms / one);
    }
    Some(cell)
}

/// Where the probe named its kernels: per run, what each kernel name took at k = 1 and at the
/// largest k (ms, and launches where the probe counted them), the names that grew most first:
/// where verifying k tokens spends its time.
fn by_kernel_table(s: &mut String, timed: &[(&Run, &report::Timing)]) {
    for (run, t) in timed {
        let (Some(one), Some(last)) = (t.rows.iter().find(|x| x.k == 1), t.rows.last()) else {
            continue;
        };
        let (Some(a), Some(b)) = (&one.gpu_by_kernel, &last.gpu_by_kernel) else {
            continue;
        };
        if last.k == 1 {
            continue;
        }
        let host = if t.host_tokens() {
            ", token ids from the host"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  GPU time by kernel, {}{host}: k = 1 -> {} (ms, launches; the repetition of median busy time)",
            run.label(),
            last.k
        );
        for (name, x, y) in by_growth(a, b) {
            let ms = |v: Option<&report::KernelTime>| {
                v.map_or_else(|| "-".into(), |v| format!("{:.3}", v.ms()))
            };
            let n = |v: Option<&report::KernelTime>| {
                v.and_then(|v| v.launches())
                    .map_or_else(|| "-".into(), |n| n.to_string())
            };
            let grew = match (x, y) {
                (Some(x), Some(y)) => format!("{:+.3}", y.ms() - x.ms()),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "    {name:<56} {:>8} {:>8} {grew:>8} {:>6} {:>6}",
                ms(x),
                ms(y),
                n(x),
                n(y)
            );
        }
    }
}

type Pair<'a> = (
    &'a str,
    Option<&'a report::KernelTime>,
    Option<&'a report::KernelTime>,
);

/// The names of either list with their figures in each (None where a list does not name it:
/// its time is in that list's "(others)"), the largest growth first, "(others)" last.
fn by_growth<'a>(a: &'a [report::KernelTime], b: &'a [report::KernelTime]) -> Vec<Pair<'a>> {
    let find = |l: &'a [report::KernelTime], n: &str| l.iter().find(|m| m.name() == n);
    let mut names: Vec<&str> = a.iter().chain(b).map(|m| m.name()).collect();
    names.sort_unstable();
    names.dedup();
    let mut rows: Vec<Pair> = names
        .into_iter()
        .map(|n| (n, find(a, n), find(b, n)))
        .collect();
    let key = |r: &Pair| {
        let ms = |v: Option<&report::KernelTime>| v.map_or(0.0, |v| v.ms());
        (r.0 == "(others)", ms(r.1) - ms(r.2))
    };
    rows.sort_by(|x, y| {
        key(x)
            .partial_cmp(&key(y))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    rows
}

/// The upstream run's row at k with the same kernel settings as `run` (None for upstream itself).
fn upstream_row(timed: &[(&Run, &report::Timing)], run: &Run, k: u32) -> Option<report::TimingRow> {
    if run.policy == "upstream" {
        return None;
    }
    let cudnn = |r: &Run| r.env.get("MLX_CUDA_USE_CUDNN_SDPA").cloned();
    timed
        .iter()
        .find(|(r, _)| r.policy == "upstream" && cudnn(r) == cudnn(run))
        .and_then(|(_, t)| t.rows.iter().find(|x| x.k == k).cloned())
}

/// One table cell's totals: the cases of one op and dtype.
struct Group {
    cases: usize,
    rows: u64,
    differ: u64,
    cases_differ: usize,
    first_t: Option<u32>,
    asserted: bool,
    promised_t: Option<u32>,
    t_max: u32,
}

fn groups(ops: &[OpRow]) -> BTreeMap<(String, String), Group> {
    let mut out: BTreeMap<(String, String), Group> = BTreeMap::new();
    for r in ops {
        let g = out.entry((r.op.clone(), r.dtype.clone())).or_insert(Group {
            cases: 0,
            rows: 0,
            differ: 0,
            cases_differ: 0,
            first_t: None,
            asserted: r.asserted,
            promised_t: r.promised_t,
            t_max: r.t_max,
        });
        g.cases += 1;
        g.rows += r.rows;
        g.differ += r.rows_differ;
        g.cases_differ += usize::from(r.rows_differ > 0);
        g.first_t = match (g.first_t, r.first_t) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        g.asserted &= r.asserted;
    }
    out
}

fn cell(g: &Group) -> String {
    let promise = match g.promised_t.filter(|_| g.asserted) {
        Some(t) if t < g.t_max => format!("promised T<={t}"),
        Some(_) => "promised".into(),
        None => "reported".into(),
    };
    let cases = if g.cases > 1 {
        format!("{} cases, ", g.cases)
    } else {
        String::new()
    };
    if g.differ == 0 {
        return format!("{cases}identical ({promise})");
    }
    format!(
        "{cases}{}/{} rows differ, from T={} ({promise})",
        g.differ,
        g.rows,
        g.first_t.unwrap_or(0)
    )
}

fn block_cell(b: &report::Block, asserted: bool) -> String {
    let promise = if asserted { "promised" } else { "reported" };
    let mut s = format!(
        "{}/{} identical, tokens {}/{}",
        b.logit_rows_identical, b.logit_rows, b.tokens_same, b.logit_rows
    );
    if let Some(f) = &b.first_diff {
        let layer = f.layer.map_or("end".into(), |l| format!("L{l}"));
        let _ = write!(s, ", first {} {layer}", f.op);
    }
    format!("{s} ({promise})")
}
