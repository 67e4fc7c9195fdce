//! `cargo xtask bench qmv-cuda --report FILE`: renders the results JSON of a GPU run
//! (`cuda/bundle/gpu-session.sh` → `cuda/bench/collect.py`, schema 1) as tables and an SVG plot.
//!
//! The GPU machine has no Rust, so the measuring happens there and this side only renders: the
//! tables go to stdout (and `--markdown FILE`), the plot to `--svg FILE`. Every ratio divides
//! two times of the same run: an arm at M over upstream's dispatch at M = 1.

use std::collections::BTreeMap;
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

/// One (bits, n, k) group's rows by M.
type Groups = BTreeMap<(u32, u64, u64), BTreeMap<u32, Row>>;

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
        g.entry((row.bits, row.n, row.k))
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
    for ((bits, n, k), rows) in groups(r) {
        let based = baseline(&rows);
        let base = based.map(|b| b.1);
        let _ = writeln!(
            out,
            "\n**{bits}-bit {} gs {}, N×K = {n}×{k}** (µs; × {} at M = 1)\n",
            rows.values().next().map_or("?", |r| r.dtype.as_str()),
            rows.values().next().map_or(0, |r| r.gs),
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
    }
    out
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
        .filter(|((b, _, _), _)| *b == 4)
        .collect();
    for (i, ((_, n, k), rows)) in four.iter().enumerate() {
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
}
