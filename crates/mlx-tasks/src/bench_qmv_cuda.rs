//! `cargo xtask bench qmv-cuda --report FILE`: renders the results JSON of a GPU run
//! (`cuda/machine/gpu-session.sh` → `cuda/bench/collect.py`, schema 1) as tables and an SVG plot.
//!
//! The GPU machine has no Rust, so the measuring happens there and this side only renders: the
//! tables go to stdout (and `--markdown FILE`), the plot to `--svg FILE`. Every ratio divides
//! two times of the same run: an arm at M over upstream's dispatch at M = 1.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

#[derive(clap::Args)]
pub struct QmvCudaArgs {
    /// The results JSON a GPU run wrote (schema 1)
    #[arg(long, value_name = "FILE")]
    pub report: PathBuf,
    /// Also write the tables as Markdown here
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write the plot (time over upstream's M = 1, 4-bit) as SVG here
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

#[derive(Deserialize)]
pub struct Results {
    pub schema: u32,
    pub header: serde_json::Value,
    #[serde(default)]
    pub parity: Vec<serde_json::Value>,
    pub rows: Vec<Row>,
}

#[derive(Deserialize, Clone)]
pub struct Row {
    pub dtype: String,
    pub bits: u32,
    pub gs: u32,
    pub n: u64,
    pub k: u64,
    pub m: u32,
    pub arms: BTreeMap<String, f64>,
    /// Per arm, whether row 0 at this M equals row 0 at M = 1 bit for bit (where it was measured).
    #[serde(default)]
    pub bit_identical: BTreeMap<String, bool>,
    /// The arms measured in a config of their own, filed in this row of the same bits, N, K and M
    /// (collect.py: Marlin's float16 gs 128 in the bfloat16 gs 64 rows).
    #[serde(default)]
    pub arm_config: BTreeMap<String, ArmConfig>,
}

/// An arm's own dtype and group size, where they differ from its row's.
#[derive(Deserialize, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ArmConfig {
    pub dtype: String,
    pub gs: u32,
}

/// The columns of the tables: (arm in the JSON, heading).
const COLUMNS: &[(&str, &str)] = &[
    ("lib_upstream", "MLX upstream"),
    ("lib_streamed", "streamed policy"),
    ("lib_invariant", "invariant policy"),
    ("upstream_qmv", "qmv kernel"),
    ("streamed_by_m", "streamed kernel"),
    ("invariant", "invariant kernel"),
    ("tinygemm", "tinygemm"),
    ("marlin", "Marlin"),
    ("dense_bf16", "dense bf16"),
];

pub fn load(path: &Path) -> Result<Results> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the results", path.display()))?;
    let r: Results = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a qmv-cuda results file", path.display()))?;
    if r.schema != 1 {
        bail!(
            "{}: results schema {} (this xtask reads schema 1)",
            path.display(),
            r.schema
        );
    }
    Ok(r)
}

/// One table's rows by M, keyed by (bits, n, k, dtype, gs): rows of another dtype or group size
/// with the same shape get a table of their own (an arm filed in another config's rows says so
/// in its `arm_config`).
type Groups = BTreeMap<(u32, u64, u64, String, u32), BTreeMap<u32, Row>>;

/// What the ratios divide by: upstream's dispatch through the library at M = 1 (`lib_upstream`),
/// or, in a run without the library (the kernel harness alone), upstream's `qmv` kernel at M = 1.
fn baseline(rows: &BTreeMap<u32, Row>) -> Option<(&'static str, f64)> {
    let m1 = rows.get(&1)?;
    ["lib_upstream", "upstream_qmv"]
        .into_iter()
        .find_map(|arm| m1.arms.get(arm).map(|t| (arm, *t)))
}

fn groups(r: &Results) -> Groups {
    let mut g: Groups = BTreeMap::new();
    for row in &r.rows {
        g.entry((row.bits, row.n, row.k, row.dtype.clone(), row.gs))
            .or_default()
            .insert(row.m, row.clone());
    }
    g
}

/// Markdown tables: per (bits, N×K), a row per M with µs and the ratio to upstream at M = 1.
pub fn markdown(r: &Results) -> String {
    let mut out = String::new();
    let h = &r.header;
    let _ = writeln!(
        out,
        "GPU: {} · driver {} · {} · SM clock max {} · copy ceiling {} GB/s\n",
        h["gpu"].as_str().unwrap_or("?"),
        h["driver"].as_str().unwrap_or("?"),
        h["nvcc"].as_str().unwrap_or("?"),
        h["clocks"]["clocks.max.sm [MHz]"].as_str().unwrap_or("?"),
        h["copy_ceiling_gbps"]
    );
    for p in &r.parity {
        let _ = writeln!(out, "- parity: `{p}`");
    }
    for ((bits, n, k, dtype, gs), rows) in groups(r) {
        let based = baseline(&rows);
        let base = based.map(|b| b.1);
        let _ = writeln!(
            out,
            "\n**{bits}-bit {dtype} gs {gs}, N×K = {n}×{k}** (µs; × {} at M = 1)\n",
            match based {
                Some(("lib_upstream", _)) => "MLX upstream",
                Some(_) => "the qmv kernel",
                None => "nothing measured",
            }
        );
        let head: Vec<&str> = COLUMNS.iter().map(|c| c.1).collect();
        let _ = writeln!(out, "| M | {} |", head.join(" | "));
        let _ = writeln!(out, "|---:|{}", "---:|".repeat(COLUMNS.len()));
        for (m, row) in &rows {
            let cells: Vec<String> = COLUMNS
                .iter()
                .map(|(arm, _)| match (row.arms.get(*arm), base) {
                    (Some(t), Some(b)) if *arm != "dense_bf16" => format!("{t:.1} ({:.2}x)", t / b),
                    (Some(t), _) => format!("{t:.1}"),
                    (None, _) => "–".into(),
                })
                .collect();
            let _ = writeln!(out, "| {m} | {} |", cells.join(" | "));
        }
        for note in arm_configs(&rows).into_iter().chain(bit_identical(&rows)) {
            let _ = writeln!(out, "\n{note}");
        }
        serial_table(&mut out, &rows);
    }
    out
}

/// The library's arms one call at a time (`qmv_lib serial`: CUDA graphs off, each call starting
/// when the one before it ended), where the run measured them.
const SERIAL: &[(&str, &str)] = &[
    ("lib_upstream_serial", "MLX upstream"),
    ("lib_streamed_serial", "streamed policy"),
    ("lib_invariant_serial", "invariant policy"),
    ("lib_invariant_launcher_serial", "invariant, launcher"),
];

/// A second table of the group where it has serial arms: µs and the ratio to upstream's serial
/// M = 1 (the flatness a decoder's forward sees; the first table's library arms are throughput).
fn serial_table(out: &mut String, rows: &BTreeMap<u32, Row>) {
    let has = |r: &Row| SERIAL.iter().any(|(a, _)| r.arms.contains_key(*a));
    if !rows.values().any(has) {
        return;
    }
    let base = rows.get(&1).and_then(|r| r.arms.get(SERIAL[0].0)).copied();
    let _ = writeln!(
        out,
        "\nOne call at a time (CUDA graphs off; µs; × MLX upstream one at a time at M = 1)\n"
    );
    let head: Vec<&str> = SERIAL.iter().map(|c| c.1).collect();
    let _ = writeln!(out, "| M | {} |", head.join(" | "));
    let _ = writeln!(out, "|---:|{}", "---:|".repeat(SERIAL.len()));
    for (m, row) in rows.iter().filter(|(_, r)| has(r)) {
        let cells: Vec<String> = SERIAL
            .iter()
            .map(|(arm, _)| match (row.arms.get(*arm), base) {
                (Some(t), Some(b)) => format!("{t:.1} ({:.2}x)", t / b),
                (Some(t), None) => format!("{t:.1}"),
                (None, _) => "–".into(),
            })
            .collect();
        let _ = writeln!(out, "| {m} | {} |", cells.join(" | "));
    }
}

/// The heading of an arm's column (the arm itself when it has none).
fn heading(arm: &str) -> &str {
    COLUMNS
        .iter()
        .find(|(a, _)| *a == arm)
        .map_or(arm, |(_, h)| h)
}

/// The arms in the order of the columns, then any other in name order, each once.
fn in_column_order<'a>(arms: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = arms.into_iter().collect();
    v.sort_by_key(|a| (COLUMNS.iter().position(|(c, _)| c == a), *a));
    v.dedup();
    v
}

/// A footnote per arm measured in a config of its own: its dtype and group size.
fn arm_configs(rows: &BTreeMap<u32, Row>) -> Vec<String> {
    let mut own: BTreeMap<&str, BTreeSet<&ArmConfig>> = BTreeMap::new();
    for (arm, c) in rows.values().flat_map(|r| &r.arm_config) {
        own.entry(arm.as_str()).or_default().insert(c);
    }
    in_column_order(own.keys().copied())
        .into_iter()
        .map(|arm| {
            let list: Vec<String> = own[arm]
                .iter()
                .map(|c| format!("{}, gs {}", c.dtype, c.gs))
                .collect();
            format!(
                "{}: {} (its own config, what it supports); same bits, N, K and M.",
                heading(arm),
                list.join("; ")
            )
        })
        .collect()
}

/// Per arm that measured it: is row 0 at M bit-identical to row 0 at M = 1 at every M, or at which
/// M is it not.
fn bit_identical(rows: &BTreeMap<u32, Row>) -> Option<String> {
    let arms = in_column_order(
        rows.values()
            .flat_map(|r| r.bit_identical.keys().map(String::as_str)),
    );
    if arms.is_empty() {
        return None;
    }
    let parts: Vec<String> = arms
        .iter()
        .map(|arm| {
            let differ: Vec<String> = rows
                .iter()
                .filter(|(_, r)| r.bit_identical.get(*arm) == Some(&false))
                .map(|(m, _)| m.to_string())
                .collect();
            match differ.as_slice() {
                [] => format!("{} at every M it ran", heading(arm)),
                ms => format!("{} not at M = {}", heading(arm), ms.join(", ")),
            }
        })
        .collect();
    Some(format!(
        "Row 0 bit-identical to M = 1: {}.",
        parts.join("; ")
    ))
}

/// The plot: for each 4-bit shape, upstream's dispatch and the streamed and invariant policies over M, as a
/// multiple of upstream's M = 1 time (hand-written SVG polylines; no plotting crate needed).
pub fn svg(r: &Results) -> String {
    let (w, h, pad) = (720.0, 420.0, 50.0);
    let (max_m, max_y) = (16.0, 8.0);
    let x = |m: f64| pad + (w - 2.0 * pad) * (m - 1.0) / (max_m - 1.0);
    let y = |v: f64| h - pad - (h - 2.0 * pad) * v.min(max_y) / max_y;
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
        "#17becf",
    ];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for v in 0..=(max_y as u32) {
        let yy = y(v as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{pad}\" y1=\"{yy}\" x2=\"{}\" y2=\"{yy}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\">{v}x</text>",
            w - pad,
            pad - 30.0,
            yy + 4.0
        );
    }
    for m in [1, 2, 4, 8, 12, 16] {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\">M={m}</text>",
            x(m as f64) - 10.0,
            h - pad + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\">4-bit bf16 gs 64, time / upstream at M = 1 (solid: streamed, dotted: invariant, dashed: upstream)</text>"
    );
    let four: Vec<_> = groups(r)
        .into_iter()
        .filter(|((b, ..), _)| *b == 4)
        .collect();
    for (i, ((_, n, k, ..), rows)) in four.iter().enumerate() {
        let color = colors[i % colors.len()];
        let Some((base_arm, base)) = baseline(rows) else {
            continue;
        };
        // Through the library when the run has it, else the kernels launched directly.
        let arms = if base_arm == "lib_upstream" {
            [
                ("lib_streamed", ""),
                ("lib_invariant", " stroke-dasharray=\"1,3\""),
                ("lib_upstream", " stroke-dasharray=\"5,4\""),
            ]
        } else {
            [
                ("streamed_by_m", ""),
                ("invariant", " stroke-dasharray=\"1,3\""),
                ("upstream_qmv", " stroke-dasharray=\"5,4\""),
            ]
        };
        for (arm, dash) in arms {
            let pts: Vec<String> = rows
                .iter()
                .filter_map(|(m, row)| {
                    row.arms
                        .get(arm)
                        .map(|t| format!("{:.1},{:.1}", x(*m as f64), y(t / base)))
                })
                .collect();
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
                pts.join(" ")
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{n}×{k}</text>",
            w - pad - 90.0,
            pad + 14.0 * i as f64
        );
    }
    s.push_str("</svg>\n");
    s
}

pub fn run(a: &QmvCudaArgs) -> Result<ExitCode> {
    let r = load(&a.report)?;
    let md = markdown(&r);
    print!("{md}");
    if let Some(p) = &a.markdown {
        std::fs::write(p, &md).with_context(|| format!("{}: cannot write", p.display()))?;
    }
    if let Some(p) = &a.svg {
        std::fs::write(p, svg(&r)).with_context(|| format!("{}: cannot write", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(arms: &[(&str, f64)], m1_upstream: f64) -> Results {
        let row = |m: u32, arms: BTreeMap<String, f64>| Row {
            dtype: "bfloat16".into(),
            bits: 4,
            gs: 64,
            n: 4096,
            k: 4096,
            m,
            arms,
            bit_identical: BTreeMap::new(),
            arm_config: BTreeMap::new(),
        };
        Results {
            schema: 1,
            header: serde_json::json!({"gpu": "NVIDIA H200"}),
            parity: vec![],
            rows: vec![
                row(1, [("lib_upstream".to_string(), m1_upstream)].into()),
                row(16, arms.iter().map(|(a, t)| (a.to_string(), *t)).collect()),
            ],
        }
    }

    #[test]
    fn the_invariant_arms_get_columns_and_ratios_over_upstreams_m1() {
        let r = results(&[("lib_invariant", 30.0), ("invariant", 15.0)], 20.0);
        let md = markdown(&r);
        let head = md.lines().find(|l| l.starts_with("| M |")).unwrap();
        assert!(
            head.contains("invariant policy") && head.contains("invariant kernel"),
            "{head}"
        );
        assert!(head.contains("Marlin"), "{head}");
        let m16 = md.lines().find(|l| l.starts_with("| 16 |")).unwrap();
        assert!(
            m16.contains("30.0 (1.50x)") && m16.contains("15.0 (0.75x)"),
            "{m16}"
        );
        // An arm the run did not measure is a dash, not a zero.
        assert!(m16.contains('–'), "{m16}");
        assert!(svg(&r).contains("stroke-dasharray=\"1,3\""));
    }

    #[test]
    fn a_run_without_the_library_divides_by_the_qmv_kernel() {
        let mut r = results(&[("invariant", 15.0), ("upstream_qmv", 40.0)], 20.0);
        r.rows[0].arms = [("upstream_qmv".to_string(), 10.0)].into();
        let md = markdown(&r);
        assert!(md.contains("× the qmv kernel at M = 1"), "{md}");
        let m16 = md.lines().find(|l| l.starts_with("| 16 |")).unwrap();
        assert!(
            m16.contains("15.0 (1.50x)") && m16.contains("40.0 (4.00x)"),
            "{m16}"
        );
        assert!(svg(&r).contains("<polyline"));
    }

    /// `qmv_lib serial`'s arms get a table of their own, over upstream's serial M = 1; a run
    /// without them has none.
    #[test]
    fn serial_arms_get_their_own_table_over_upstreams_serial_m1() {
        let mut r = results(
            &[("lib_invariant", 30.0), ("lib_invariant_serial", 33.0)],
            20.0,
        );
        r.rows[0].arms.insert("lib_upstream_serial".into(), 22.0);
        let md = markdown(&r);
        let serial: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("One call at a time"))
            .collect();
        assert!(
            serial
                .iter()
                .any(|l| l.starts_with("| 16 |") && l.contains("33.0 (1.50x)")),
            "{md}"
        );
        assert!(
            serial
                .iter()
                .any(|l| l.starts_with("| 1 |") && l.contains("22.0 (1.00x)")),
            "{md}"
        );
        let main_m16 = md.lines().find(|l| l.starts_with("| 16 |")).unwrap();
        assert!(main_m16.contains("30.0 (1.50x)"), "{main_m16}");
        let plain = markdown(&results(&[("lib_invariant", 30.0)], 20.0));
        assert!(!plain.contains("One call at a time"), "{plain}");
    }

    /// What collect.py writes for a run with Marlin: its float16 gs 128 times in the bfloat16
    /// gs 64 rows, its config under arm_config, bit_identical per arm.
    fn with_marlin() -> Results {
        let rows: Vec<serde_json::Value> = [1, 2, 16]
            .into_iter()
            .map(|m| {
                serde_json::json!({
                    "dtype": "bfloat16", "bits": 4, "gs": 64, "n": 4096, "k": 4096, "m": m,
                    "arms": {"lib_upstream": 20.0, "tinygemm": 12.0, "marlin": 10.0 * m as f64},
                    "bytes": {"marlin": 8650752},
                    "bit_identical": {"tinygemm": true, "marlin": m != 2 && m != 16},
                    "arm_config": {"marlin": {"dtype": "float16", "gs": 128}},
                })
            })
            .collect();
        let doc = serde_json::json!({"schema": 1, "header": {"gpu": "NVIDIA H200"}, "rows": rows});
        serde_json::from_value(doc).unwrap()
    }

    /// An arm filed in another config's rows is named under the table with its own dtype and
    /// group size; row 0's bit identity is told per arm, with the Ms where it does not hold.
    #[test]
    fn an_arm_of_its_own_config_gets_a_footnote_and_bit_identity_per_arm() {
        let md = markdown(&with_marlin());
        let m1 = md.lines().find(|l| l.starts_with("| 1 |")).unwrap();
        assert!(m1.contains("10.0 (0.50x)"), "{m1}");
        let notes: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("| 16 |"))
            .collect();
        assert_eq!(
            notes,
            [
                "| 16 | 20.0 (1.00x) | – | – | – | – | – | 12.0 (0.60x) | 160.0 (8.00x) | – |",
                "",
                "Marlin: float16, gs 128 (its own config, what it supports); same bits, N, K and M.",
                "",
                "Row 0 bit-identical to M = 1: tinygemm at every M it ran; Marlin not at M = 2, 16."
            ]
        );
        // A run without either has neither line.
        let plain = markdown(&results(&[("invariant", 15.0)], 20.0));
        assert!(
            !plain.contains("own config") && !plain.contains("bit-identical"),
            "{plain}"
        );
    }

    /// Rows of another dtype or group size with the same bits, N and K are a table of their own
    /// (a run of Marlin alone), not written over the main config's.
    #[test]
    fn rows_of_another_config_are_a_table_of_their_own() {
        let mut r = with_marlin();
        let mut own = r.rows[0].clone();
        (own.dtype, own.gs, own.arm_config) = ("float16".into(), 128, BTreeMap::new());
        own.arms = [("marlin".to_string(), 11.0)].into();
        r.rows.push(own);
        let md = markdown(&r);
        let tables: Vec<&str> = md.lines().filter(|l| l.starts_with("**4-bit")).collect();
        assert_eq!(
            tables,
            [
                "**4-bit bfloat16 gs 64, N×K = 4096×4096** (µs; × MLX upstream at M = 1)",
                "**4-bit float16 gs 128, N×K = 4096×4096** (µs; × nothing measured at M = 1)"
            ]
        );
        assert_eq!(md.matches("| 1 |").count(), 2, "{md}");
        assert!(
            md.contains("| 1 | – | – | – | – | – | – | – | 11.0 | – |"),
            "{md}"
        );
        // Only the main config's table has a baseline to plot against.
        assert_eq!(svg(&r).matches("4096×4096").count(), 1);
    }
}
