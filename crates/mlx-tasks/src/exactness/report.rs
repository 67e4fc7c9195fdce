//! The exactness report: the probe's raw results (`crates/mlx-sys/probe/exactness.h`), which
//! rows each policy promises on each backend, and the findings (docs/kernels/exactness.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One op case of the op table: rows compared over T = 1..t_max and the seeds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpRow {
    pub op: String,
    pub dtype: String,
    pub params: BTreeMap<String, i64>,
    pub t_max: u32,
    pub seeds: u32,
    pub rows: u64,
    pub rows_differ: u64,
    /// The smallest block size T with a differing row.
    pub first_t: Option<u32>,
    /// Differing rows per block size: `[T - 1]` counts the blocks of T rows.
    #[serde(default)]
    pub differ_by_t: Vec<u64>,
    /// Whether this run's policy promises these rows (set here, not by the probe): the blocks
    /// of T <= `promised_t` rows.
    #[serde(default)]
    pub asserted: bool,
    #[serde(default)]
    pub promised_t: Option<u32>,
}

impl OpRow {
    /// Differing rows in the blocks the policy promises.
    pub fn promised_differ(&self) -> u64 {
        let Some(t) = self.promised_t.filter(|_| self.asserted) else {
            return 0;
        };
        if self.differ_by_t.is_empty() {
            return self.rows_differ;
        }
        self.differ_by_t.iter().take(t as usize).sum()
    }
}

/// The first intermediate output, in forward order, that differs in a verify block.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FirstDiff {
    pub row: u32,
    /// None for ops after the last layer (final norm, logits).
    pub layer: Option<u32>,
    pub op: String,
}

/// One verify block of k drafted tokens against k steps of classic decode.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Block {
    pub k: u32,
    pub logit_rows: u32,
    pub logit_rows_identical: u32,
    pub tokens_same: u32,
    pub first_diff: Option<FirstDiff>,
}

/// What one forward costs (the probe's `timing=R`): medians of R runs after a warm-up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Timing {
    pub reps: u32,
    /// Where the forwards' token ids lived: "device" (made once in device memory) or "host"
    /// (built from host data in each forward); absent from probes before session 36: host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<String>,
    pub rows: Vec<TimingRow>,
}

impl Timing {
    /// Whether the forwards' token ids were built from host data in each forward.
    pub fn host_tokens(&self) -> bool {
        self.tokens.as_deref() != Some("device")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimingRow {
    /// Tokens in the forward: 1 is a decode step, k > 1 a verify of k drafted tokens.
    pub k: u32,
    /// The whole forward from the prompt's cache (logits and cache evaluated).
    pub forward_ms: f64,
    /// The attention op alone at the decoder's shapes, per call (per layer).
    pub sdpa_ms: f64,
    /// The GPU's busy time in the same forwards: kernels, copies and sets, their intervals
    /// joined (CUPTI; the CUDA probe built with it, docs/kernels/exactness.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_ms: Option<f64>,
    /// Of it, the quantized matmuls' kernels (names with "qmv" or "qmm").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_qmm_ms: Option<f64>,
    /// Kernels the forward ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kernels: Option<u64>,
    /// The GPU's time with each CUDA graph launch taken whole, from its first start to its last
    /// end (the gaps between a graph's kernels counted, those between launches not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_graph_ms: Option<f64>,
    /// The graph launches the forward made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_graphs: Option<u64>,
    /// Where the GPU's time went in the repetition with the median busy time: each kernel
    /// name's summed milliseconds (demangled, without template arguments) and launches, the
    /// longest first, the rest after the probe's first names as "(others)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_by_kernel: Option<Vec<KernelTime>>,
}

/// One kernel name's figures in `gpu_by_kernel`: `[name, ms, launches]`, or `[name, ms]` from
/// the first probe that had them (session 36's first runs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum KernelTime {
    Counted(String, f64, u64),
    Named(String, f64),
}

impl KernelTime {
    pub fn name(&self) -> &str {
        match self {
            KernelTime::Counted(n, ..) | KernelTime::Named(n, _) => n,
        }
    }

    pub fn ms(&self) -> f64 {
        match self {
            KernelTime::Counted(_, ms, _) | KernelTime::Named(_, ms) => *ms,
        }
    }

    pub fn launches(&self) -> Option<u64> {
        match self {
            KernelTime::Counted(.., n) => Some(*n),
            KernelTime::Named(..) => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decoder {
    pub preset: String,
    pub dims: BTreeMap<String, i64>,
    pub dtype: String,
    pub dense_head: bool,
    pub prompt: u32,
    /// The KV cache: "concat" (grown by concatenation) or "step" (mlx-lm's 256-row buffers).
    #[serde(default = "concat")]
    pub cache: String,
    pub seed: u64,
    /// t0 (after the prompt) and the tokens classic greedy decode produced after it.
    pub decoded: Vec<u32>,
    /// Fingerprints to compare with other runs of the same configuration (probes since
    /// session 41; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digests: Option<Digests>,
    pub blocks: Vec<Block>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    pub seconds: f64,
    #[serde(default)]
    pub asserted: bool,
}

/// 64-bit digests (16 hex digits) of a decoder run's tensors (`probe/exactness.cc`'s `digest`
/// and `write_digests`): each layer's keys and values after the prompt, the prompt's last logit
/// row, each classic decode step's logit row; with the probe's `taps=1` also every tap (each
/// op's output, layer by layer) of the prompt's forward and of each decode step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Digests {
    pub prefill_kv: Vec<String>,
    pub prefill_logits: String,
    pub decode_logits: Vec<String>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub taps: Option<TapDigests>,
}

/// Every tap of each forward (`taps=1`): their names in forward order ("layer/op", or the op
/// alone outside the layers), the same in every forward, and their digests; with `repeat=N`
/// also those of the prompt's forward and of the first decode step run N more times in the
/// same process (from the same inputs: they must equal `prefill_taps` and `decode_taps[0]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TapDigests {
    #[serde(rename = "taps")]
    pub names: Vec<String>,
    pub prefill_taps: Vec<String>,
    pub decode_taps: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefill_repeats: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_repeats: Vec<Vec<String>>,
}

fn concat() -> String {
    "concat".into()
}

/// The probe's own object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Probe {
    pub probe: u32,
    pub device: String,
    pub perturbed: bool,
    #[serde(default)]
    pub ops: Vec<OpRow>,
    pub decoder: Option<Decoder>,
}

/// Kernel calls per path of the CPU quantized matmul during the run (absent on CUDA).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Paths {
    pub streamed: u64,
    pub row_by_row: u64,
}

/// One probe run under one policy: a line of the example's (or the CUDA bundle's) output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub policy: String,
    pub paths: Option<Paths>,
    /// The kernel settings the probe's process saw (the CUDA bundle's program writes them:
    /// `MLX_CUDA_USE_CUDNN_SDPA` and the policy switches).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub probe: Probe,
    /// Where `--from` read it ("FILE:LINE"); not part of the probe's line.
    #[serde(skip)]
    pub source: Option<String>,
}

impl Run {
    /// The decoder's tap digests (`taps=1` or `repeat=N`), where it has them.
    pub fn tap_digests(&self) -> Option<&TapDigests> {
        let d = self.probe.decoder.as_ref()?;
        d.digests.as_ref()?.taps.as_ref()
    }

    /// The policy, and the non-default kernel settings the run had (`streamed, cudnn sdpa off`).
    pub fn label(&self) -> String {
        match self.env.get("MLX_CUDA_USE_CUDNN_SDPA").map(String::as_str) {
            Some("0") => format!("{}, cudnn sdpa off", self.policy),
            _ => self.policy.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cpu,
    Cuda,
}

/// Ops whose every row depends on that row alone in every MLX kernel: promised under the
/// streamed policy on every backend.
const ROWWISE: [&str; 5] = ["rms_norm", "softmax", "argmax_ties", "rope", "kv_concat"];

/// The policy switches' row range: blocks of up to this many rows are routed (overlays 0002,
/// 0007, 0009, 0010).
pub const POLICY_ROWS: u32 = 16;

/// Up to which block size `policy` promises block-vs-chain identity for `op` on `backend`
/// (None: not promised). `upstream` is MLX untouched and promises nothing: the control.
/// `invariant` is CUDA's third qmv policy (overlays 0007, 0015; attention runs as under
/// `streamed`, overlay 0013): on CUDA it promises what `streamed` does, elsewhere nothing.
pub fn promised(backend: Backend, policy: &str, op: &str) -> Option<u32> {
    let streamed_like =
        policy == "streamed" || (policy == "invariant" && matches!(backend, Backend::Cuda));
    if !streamed_like {
        return None;
    }
    if ROWWISE.contains(&op) {
        return Some(u32::MAX);
    }
    match (backend, op) {
        (_, "quantized_matmul") => Some(POLICY_ROWS),
        // Overlays 0009 (float32 BLAS one row per call) and 0010 (causal attention per row).
        (Backend::Cpu, "matmul" | "sdpa_causal") => Some(POLICY_ROWS),
        // Overlay 0013: causal attention over up to 16 rows runs sdpa_vector, row by row as
        // decode does.
        (Backend::Cuda, "sdpa_causal") => Some(POLICY_ROWS),
        // Dense matmul on CUDA (cuBLAS, tiles chosen by M) is outside the promise.
        _ => None,
    }
}

/// Marks the rows `run`'s policy promises on `backend`; the decoder is promised when every op
/// it calls is (attention, and dense matmul for a dense head).
pub fn mark(backend: Backend, run: &mut Run) {
    let policy = run.policy.clone();
    for row in &mut run.probe.ops {
        row.promised_t = promised(backend, &policy, &row.op);
        row.asserted = row.promised_t.is_some();
    }
    let upto = |op| promised(backend, &policy, op).unwrap_or(0);
    if let Some(d) = &mut run.probe.decoder {
        let k = d.blocks.iter().map(|b| b.k).max().unwrap_or(0);
        d.asserted = upto("quantized_matmul") >= k
            && upto("sdpa_causal") >= k
            && (!d.dense_head || upto("matmul") >= k);
    }
}

/// What exits 1: a promised row that differs, or a negative control the comparison missed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    pub policy: String,
    pub kind: &'static str,
    pub what: String,
}

pub fn op_label(row: &OpRow) -> String {
    let params: Vec<String> = row.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} {} {}", row.op, row.dtype, params.join(" "))
}

/// Promised rows that differ, in a run that was not perturbed.
pub fn findings(run: &Run) -> Vec<Finding> {
    let mut out = Vec::new();
    let finding = |kind, what| Finding {
        policy: run.label(),
        kind,
        what,
    };
    for row in run.probe.ops.iter().filter(|r| r.promised_differ() > 0) {
        out.push(finding(
            "op",
            format!(
                "{}: {} of {} rows differ (first at T = {}; promised up to T = {})",
                op_label(row),
                row.rows_differ,
                row.rows,
                row.first_t.unwrap_or(0),
                row.promised_t.unwrap_or(0).min(row.t_max)
            ),
        ));
    }
    if let Some(d) = run.probe.decoder.as_ref().filter(|d| d.asserted) {
        for b in d
            .blocks
            .iter()
            .filter(|b| b.logit_rows_identical < b.logit_rows)
        {
            out.push(finding("decoder", block_text(d, b)));
        }
    }
    out
}

pub fn block_text(d: &Decoder, b: &Block) -> String {
    let mut s = format!(
        "{} decoder, k = {}: {} of {} logit rows identical, {} tokens the same",
        d.preset, b.k, b.logit_rows_identical, b.logit_rows, b.tokens_same
    );
    if let Some(f) = &b.first_diff {
        let layer = f
            .layer
            .map_or("after the layers".into(), |l| format!("layer {l}"));
        s.push_str(&format!(
            "; first differs: {} in {layer}, row {}",
            f.op, f.row
        ));
    }
    s
}

/// The negative control: a run whose chain rows had one bit flipped must report a difference
/// in every op case and in every decoder block, or the comparison cannot fail.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Control {
    pub cases: usize,
    pub caught: usize,
    pub blocks: usize,
    pub blocks_caught: usize,
    /// Forwards run again in the process (the probe's `repeat=N`), each with one flipped bit:
    /// every one must differ from its first.
    pub repeats: usize,
    pub repeats_caught: usize,
}

impl Control {
    /// ", 2 of 2 repeated forwards" where the control had repeats.
    pub fn repeats_text(&self) -> String {
        if self.repeats == 0 {
            return String::new();
        }
        format!(
            ", {} of {} repeated forwards",
            self.repeats_caught, self.repeats
        )
    }
}

/// (repeated forwards that have a first to compare with, those that differ from it).
fn control_repeats(run: &Run) -> (usize, usize) {
    run.tap_digests().map_or((0, 0), |t| {
        let decode = if t.decode_taps.is_empty() {
            0
        } else {
            t.decode_repeats.len()
        };
        (
            t.prefill_repeats.len() + decode,
            super::repeat::again(t).len(),
        )
    })
}

pub fn control(run: &Run) -> (Control, Vec<Finding>) {
    let ops = &run.probe.ops;
    let blocks = run
        .probe
        .decoder
        .as_ref()
        .map_or(&[][..], |d| &d.blocks[..]);
    let (repeats, repeats_caught) = control_repeats(run);
    let c = Control {
        cases: ops.len(),
        caught: ops.iter().filter(|r| r.rows_differ > 0).count(),
        blocks: blocks.len(),
        blocks_caught: blocks
            .iter()
            .filter(|b| b.logit_rows_identical < b.logit_rows && b.first_diff.is_some())
            .count(),
        repeats,
        repeats_caught,
    };
    let mut f = Vec::new();
    let empty = c.cases + c.blocks == 0;
    let missed = c.caught < c.cases || c.blocks_caught < c.blocks || c.repeats_caught < c.repeats;
    if !run.probe.perturbed || missed || empty {
        f.push(Finding {
            policy: run.label(),
            kind: "control",
            what: format!(
                "the negative control (one flipped bit per compared set) was caught in {} of {} op cases and {} of {} decoder blocks{}: the comparison can miss a difference",
                c.caught,
                c.cases,
                c.blocks_caught,
                c.blocks,
                c.repeats_text()
            ),
        });
    }
    (c, f)
}

/// Rows the run reports (not promised) that differ: what the upstream control shows.
pub fn unpromised_differ(run: &Run) -> u64 {
    let ops: u64 = run
        .probe
        .ops
        .iter()
        .map(|r| r.rows_differ - r.promised_differ())
        .sum();
    let dec: u64 = run
        .probe
        .decoder
        .iter()
        .filter(|d| !d.asserted)
        .flat_map(|d| &d.blocks)
        .map(|b| u64::from(b.logit_rows - b.logit_rows_identical))
        .sum();
    ops + dec
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn row(op: &str, differ: u64) -> OpRow {
        OpRow {
            op: op.into(),
            dtype: "bf16".into(),
            params: BTreeMap::from([("n".into(), 8)]),
            t_max: 4,
            seeds: 1,
            rows: 10,
            rows_differ: differ,
            first_t: (differ > 0).then_some(2),
            differ_by_t: vec![0, differ],
            asserted: false,
            promised_t: None,
        }
    }

    pub(crate) fn run(policy: &str, ops: Vec<OpRow>, perturbed: bool) -> Run {
        Run {
            policy: policy.into(),
            paths: None,
            env: BTreeMap::new(),
            probe: Probe {
                probe: 1,
                device: "cpu".into(),
                perturbed,
                ops,
                decoder: None,
            },
            source: None,
        }
    }

    /// The small decoder at prompt 8, seed 0, with these tokens and digests and no blocks.
    pub(crate) fn decoder(decoded: Vec<u32>, digests: Option<Digests>) -> Decoder {
        Decoder {
            preset: "small".into(),
            dims: BTreeMap::new(),
            dtype: "bf16".into(),
            dense_head: false,
            prompt: 8,
            cache: "concat".into(),
            seed: 0,
            decoded,
            digests,
            blocks: vec![],
            timing: None,
            seconds: 0.0,
            asserted: false,
        }
    }

    #[test]
    fn only_promised_rows_are_findings() {
        let mut r = run(
            "streamed",
            vec![row("quantized_matmul", 3), row("matmul", 0)],
            false,
        );
        mark(Backend::Cuda, &mut r);
        let f = findings(&r);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].what
                .contains("3 of 10 rows differ (first at T = 2; promised up to T = 4)"),
            "{}",
            f[0].what
        );
        // Rows that differ only in blocks beyond the promised size are reported, not findings.
        let mut beyond = row("quantized_matmul", 5);
        beyond.t_max = 32;
        beyond.differ_by_t = [vec![0; 16], vec![5]].concat();
        let mut r = run("streamed", vec![beyond], false);
        mark(Backend::Cpu, &mut r);
        assert!(findings(&r).is_empty());
        assert_eq!(unpromised_differ(&r), 5);
        let mut up = run("upstream", vec![row("quantized_matmul", 3)], false);
        mark(Backend::Cpu, &mut up);
        assert!(findings(&up).is_empty(), "upstream promises nothing");
        assert_eq!(unpromised_differ(&up), 3);
    }

    #[test]
    fn invariant_promises_on_cuda_what_streamed_does_and_nothing_elsewhere() {
        let mut r = run("invariant", vec![row("quantized_matmul", 3)], false);
        mark(Backend::Cuda, &mut r);
        assert_eq!(
            findings(&r).len(),
            1,
            "a differing promised row is a finding"
        );
        for op in ["quantized_matmul", "sdpa_causal", "rope", "matmul"] {
            assert_eq!(
                promised(Backend::Cuda, "invariant", op),
                promised(Backend::Cuda, "streamed", op),
                "{op}"
            );
        }
        let mut cpu = run("invariant", vec![row("quantized_matmul", 3)], false);
        mark(Backend::Cpu, &mut cpu);
        assert!(
            findings(&cpu).is_empty(),
            "the CPU backend has no invariant policy"
        );
    }

    #[test]
    fn a_control_that_misses_one_case_is_a_finding() {
        let caught = run("streamed", vec![row("rope", 1), row("matmul", 2)], true);
        assert!(control(&caught).1.is_empty());
        let missed = run("streamed", vec![row("rope", 1), row("matmul", 0)], true);
        let (c, f) = control(&missed);
        assert_eq!((c.cases, c.caught), (2, 1));
        assert_eq!(f.len(), 1);
        // An unperturbed run cannot serve as the control, and neither can an empty one.
        assert_eq!(
            control(&run("streamed", vec![row("rope", 1)], false))
                .1
                .len(),
            1
        );
        assert_eq!(control(&run("streamed", vec![], true)).1.len(), 1);
    }

    /// The control's repeated forwards (each with one flipped bit) must all differ from their
    /// first; one that does not is a finding that says how many were caught.
    #[test]
    fn a_control_repeat_that_matches_its_first_is_a_finding() {
        let v = |x: &str| vec![x.to_string(), "same".to_string()];
        let with = |prefill_repeat: &str| {
            let mut r = run("streamed", vec![row("rope", 1)], true);
            let taps = TapDigests {
                names: vec!["0/q_proj".into(), "logits".into()],
                prefill_taps: v("a"),
                decode_taps: vec![v("b")],
                prefill_repeats: vec![v(prefill_repeat)],
                decode_repeats: vec![v("B")],
            };
            let digests = Digests {
                taps: Some(taps),
                ..Digests::default()
            };
            r.probe.decoder = Some(decoder(vec![1], Some(digests)));
            r
        };
        let (c, f) = control(&with("A"));
        assert_eq!((c.repeats, c.repeats_caught), (2, 2));
        assert!(f.is_empty(), "{f:?}");
        let (c, f) = control(&with("a"));
        assert_eq!((c.repeats, c.repeats_caught), (2, 1));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].what.contains(", 1 of 2 repeated forwards:"),
            "{}",
            f[0].what
        );
        // Without repeats nothing is said of them.
        let (c, f) = control(&run("streamed", vec![row("rope", 1)], true));
        assert_eq!((c.repeats, c.repeats_text()), (0, String::new()));
        assert!(f.is_empty());
    }

    #[test]
    fn the_decoder_is_promised_only_when_its_attention_and_head_are() {
        let mut r = run("streamed", vec![], false);
        r.probe.decoder = Some(Decoder {
            blocks: vec![Block {
                k: 2,
                logit_rows: 2,
                logit_rows_identical: 1,
                tokens_same: 2,
                first_diff: Some(FirstDiff {
                    row: 1,
                    layer: Some(0),
                    op: "sdpa".into(),
                }),
            }],
            ..decoder(vec![1, 2], None)
        });
        // A dense head is outside the CUDA promise: the decoder is reported, not asserted.
        r.probe.decoder.as_mut().unwrap().dense_head = true;
        mark(Backend::Cuda, &mut r);
        assert!(findings(&r).is_empty());
        r.probe.decoder.as_mut().unwrap().dense_head = false;
        mark(Backend::Cuda, &mut r);
        assert_eq!(
            findings(&r).len(),
            1,
            "overlay 0013 promises CUDA attention"
        );
        mark(Backend::Cpu, &mut r);
        let f = findings(&r);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].what.contains("first differs: sdpa in layer 0, row 1"),
            "{}",
            f[0].what
        );
    }
}
