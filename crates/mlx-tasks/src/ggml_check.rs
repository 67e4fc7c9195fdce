//! `cargo xtask ggml-check`: the static check of issue 17 (3.iv). Every kernel name ggml's Metal host
//! code can request for a type that `supports_op`'s MUL_MAT / MUL_MAT_ID / GET_ROWS gates admit must
//! be instantiated in `ggml-metal.metal`, and the mat-vec dispatch must have an nr0/nsg case for it;
//! a gate that admits a type without them is the crash class of seed 002 (the pipeline lookup
//! aborts). Everything is read from the tree: type names from `ggml.c`'s type traits, the gates from
//! `ggml-metal-device.m` (accept-lists, or the pin's reject-lists: every type but the ones named),
//! name formats and per-type suffixes from `ggml-metal-device.cpp`, the small-batch `mul_mv_ext`
//! types from `ggml-metal-ops.cpp`, and what test-backend-ops tests from its type lists.
//! Exit codes: 0 every admitted type has its kernels, 1 findings, 2 error (a file the check cannot
//! read as it expects: the host code changed and this check must follow it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use regex::Regex;
use serde::Serialize;

use crate::Global;
use crate::commands::{Ctx, versioned};

pub const METAL: &str = "src/ggml-metal/ggml-metal.metal";
pub const DEVICE_M: &str = "src/ggml-metal/ggml-metal-device.m";
pub const DEVICE_CPP: &str = "src/ggml-metal/ggml-metal-device.cpp";
pub const OPS_CPP: &str = "src/ggml-metal/ggml-metal-ops.cpp";
pub const GGML_C: &str = "src/ggml.c";
pub const TESTS: &str = "tests/test-backend-ops.cpp";
const FILES: [&str; 6] = [METAL, DEVICE_M, DEVICE_CPP, OPS_CPP, GGML_C, TESTS];

/// The `r1ptg` values `ggml_metal_op_mul_mat` chooses for the small-batch kernels (ne11 = 2..8).
const EXT_R1: [u32; 4] = [2, 3, 4, 5];

#[derive(clap::Args, Clone, Debug)]
pub struct GgmlCheckArgs {
    /// A ggml tree to check (e.g. `cargo xtask apply --upstream ggml`'s) [default: the pin plus the series, in memory]
    #[arg(long, value_name = "DIR")]
    pub src: Option<PathBuf>,
}

/// The six files the check reads, by path.
pub struct Sources(pub BTreeMap<&'static str, String>);

impl Sources {
    fn get(&self, path: &str) -> &str {
        &self.0[path]
    }
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Gate {
    /// The op(s) the gate decides (GGML_OP_ names without the prefix).
    pub ops: Vec<String>,
    /// "accept-list" or "reject-list".
    pub form: String,
    /// 1-based line of the first `case GGML_OP_...:` in ggml-metal-device.m.
    pub line: usize,
    /// ggml type names (as `ggml_type_name` gives them) the gate admits; `src->dst` pairs for CPY.
    pub admits: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    pub op: String,
    /// The admitted type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Kernel names the host can request for it that no `[[host_name]]` / `kernel void` defines.
    pub missing_kernels: Vec<String>,
    /// The host function whose type switch has no case for it (it would GGML_ABORT), if any.
    pub missing_dispatch: Option<String>,
    /// test-backend-ops tests this type: a Metal run of it aborts.
    pub tested: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub gates: Vec<Gate>,
    /// How many kernel names were checked and found.
    pub kernels_checked: usize,
    pub findings: Vec<Finding>,
}

/// Runs the whole check on the six files.
pub fn check(src: &Sources) -> Result<Report> {
    let names = type_names(src.get(GGML_C))?;
    let kernels = kernel_names(src.get(METAL));
    let tested = tested_types(src.get(TESTS), &names)?;
    let device = src.get(DEVICE_CPP);
    for format in [
        "\"kernel_mul_mv_%s_%s%s\"",
        "\"kernel_mul_mv_id_%s_%s%s\"",
        "\"kernel_mul_mm_%s_%s\"",
        "\"kernel_mul_mm_id_%s_%s\"",
        "\"kernel_get_rows_%s\"",
        "\"kernel_cpy_%s_%s\"",
        "\"kernel_mul_mv_ext_%s_%s_r1_%d\"",
    ] {
        if !device.contains(format) {
            bail!(
                "{DEVICE_CPP}: the kernel name format {format} is gone; the host code changed, so ggml-check must be taught the new names"
            );
        }
    }
    let mv = type_switch(device, "ggml_metal_library_get_pipeline_mul_mv(", &names)?;
    let mv_id = type_switch(device, "ggml_metal_library_get_pipeline_mul_mv_id(", &names)?;
    let ext = ext_types(src.get(OPS_CPP), &names)?;
    let gates = gates(src.get(DEVICE_M), &names)?;
    let mut findings = Vec::new();
    let mut checked = 0;
    for gate in &gates {
        // DUP and CONT share CPY's gate and pipeline: one requirement per pair.
        let ops: Vec<&String> = match gate.ops.iter().find(|o| *o == "CPY") {
            Some(cpy) => vec![cpy],
            None => gate.ops.iter().collect(),
        };
        for t in &gate.admits {
            for &op in &ops {
                let (wanted, dispatch) = match op.as_str() {
                    "GET_ROWS" => (vec![format!("kernel_get_rows_{t}")], None),
                    "CPY" => {
                        let (src, dst) = t.split_once("->").expect("cpy_pairs writes src->dst");
                        (vec![format!("kernel_cpy_{src}_{dst}")], None)
                    }
                    "MUL_MAT" => {
                        let mut w: Vec<String> = suffixes(&mv, t)
                            .iter()
                            .map(|s| format!("kernel_mul_mv_{t}_f32{s}"))
                            .collect();
                        w.push(format!("kernel_mul_mm_{t}_f32"));
                        if ext.contains(t) {
                            w.extend(EXT_R1.map(|r| format!("kernel_mul_mv_ext_{t}_f32_r1_{r}")));
                        }
                        (w, Some(("ggml_metal_library_get_pipeline_mul_mv", &mv)))
                    }
                    "MUL_MAT_ID" => {
                        let mut w: Vec<String> = suffixes(&mv_id, t)
                            .iter()
                            .map(|s| format!("kernel_mul_mv_id_{t}_f32{s}"))
                            .collect();
                        w.push(format!("kernel_mul_mm_id_{t}_f32"));
                        (
                            w,
                            Some(("ggml_metal_library_get_pipeline_mul_mv_id", &mv_id)),
                        )
                    }
                    other => bail!("ggml-check does not know the kernels of GGML_OP_{other}"),
                };
                checked += wanted.len();
                let missing_kernels: Vec<String> = wanted
                    .into_iter()
                    .filter(|k| !kernels.contains(k))
                    .collect();
                let missing_dispatch = dispatch
                    .filter(|(_, sw)| !sw.contains_key(t.as_str()))
                    .map(|(f, _)| format!("{DEVICE_CPP}::{f}"));
                if !missing_kernels.is_empty() || missing_dispatch.is_some() {
                    findings.push(Finding {
                        op: op.clone(),
                        ty: t.clone(),
                        missing_kernels,
                        missing_dispatch,
                        tested: tested.contains(t.split("->").next().unwrap_or(t)),
                    });
                }
            }
        }
    }
    Ok(Report {
        gates,
        kernels_checked: checked,
        findings,
    })
}

/// `GGML_TYPE_X` -> its `ggml_type_name`, from the type traits table of ggml.c.
fn type_names(ggml_c: &str) -> Result<BTreeMap<String, String>> {
    let re = Regex::new(r#"\[GGML_TYPE_(\w+)\]\s*=\s*\{\s*\.type_name\s*=\s*"(\w+)""#).unwrap();
    let names: BTreeMap<String, String> = re
        .captures_iter(ggml_c)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    if names.len() < 10 {
        bail!(
            "{GGML_C}: found {} type_traits entries, expected the table of every ggml type",
            names.len()
        );
    }
    Ok(names)
}

/// `ggml_type_name(GGML_TYPE_<t>)`.
fn type_name(names: &BTreeMap<String, String>, t: &str) -> Result<String> {
    names
        .get(t)
        .cloned()
        .ok_or_else(|| anyhow!("GGML_TYPE_{t} is not in {GGML_C}'s type traits"))
}

/// Every kernel name the Metal library defines: `[[host_name("...")]]` and `kernel void name(`.
/// Comments are left out: a commented-out instantiation defines nothing.
fn kernel_names(metal: &str) -> BTreeSet<String> {
    let block = Regex::new(r"(?s)/\*.*?\*/").unwrap();
    let line = Regex::new(r"//[^\n]*").unwrap();
    let code = block.replace_all(metal, " ");
    let metal: &str = &line.replace_all(&code, "");
    let host = Regex::new(r#"host_name\(\s*"(\w+)"\s*\)"#).unwrap();
    let plain = Regex::new(r"kernel\s+void\s+(kernel_\w+)\s*\(").unwrap();
    host.captures_iter(metal)
        .chain(plain.captures_iter(metal))
        .map(|c| c[1].to_string())
        .collect()
}

/// The ggml type names test-backend-ops' `all_types` and `other_types` list (comments stripped).
fn tested_types(tests: &str, names: &BTreeMap<String, String>) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let ty = Regex::new(r"GGML_TYPE_(\w+)").unwrap();
    for list in ["all_types", "other_types"] {
        let start = tests
            .find(&format!("static const ggml_type {list}[] = {{"))
            .ok_or_else(|| anyhow!("{TESTS}: no `static const ggml_type {list}[]`"))?;
        let body = &tests[start..];
        let body = &body[..body.find("};").unwrap_or(body.len())];
        for line in body.lines() {
            let code = line.split("//").next().unwrap_or("");
            for c in ty.captures_iter(code) {
                out.insert(type_name(names, &c[1])?);
            }
        }
    }
    Ok(out)
}

/// The body of the function whose definition starts with `head` (up to the first `}` at column 0).
fn function<'a>(text: &'a str, head: &str) -> Result<(usize, &'a str)> {
    let start = text
        .find(&format!("\n{head}"))
        .or_else(|| text.find(&format!(" {head}")))
        .ok_or_else(|| anyhow!("no definition `{head}...`"))?;
    let rest = &text[start..];
    let end = rest.find("\n}").unwrap_or(rest.len());
    let line = text[..start].lines().count() + 1;
    Ok((line, &rest[..end]))
}

/// The `switch (tsrc0)` of a pipeline function: type name -> the suffixes its case block assigns
/// ("" when it assigns none, as `suffix` starts as "").
fn type_switch(
    device: &str,
    head: &str,
    names: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Vec<String>>> {
    let (_, body) = function(device, head).context(DEVICE_CPP)?;
    let sw = body
        .find("switch (tsrc0)")
        .ok_or_else(|| anyhow!("{DEVICE_CPP}: {head}...) has no `switch (tsrc0)`"))?;
    let label = Regex::new(r"^\s*case GGML_TYPE_(\w+):\s*$").unwrap();
    let suffix = Regex::new(r"suffix\s*=([^;]*);").unwrap();
    let literal = Regex::new(r#""(\w*)""#).unwrap();
    let mut out = BTreeMap::new();
    let mut labels: Vec<String> = Vec::new();
    let mut block = String::new();
    for line in body[sw..].lines().skip(1) {
        if line.trim_start().starts_with("default:") {
            break;
        }
        if let Some(c) = label.captures(line) {
            labels.push(type_name(names, &c[1])?);
            continue;
        }
        block.push_str(line);
        block.push('\n');
        if line.contains("} break;") {
            let mut s: Vec<String> = suffix
                .captures_iter(&block)
                .flat_map(|c| {
                    literal
                        .captures_iter(&c[1])
                        .map(|l| l[1].to_string())
                        .collect::<Vec<_>>()
                })
                .collect();
            if s.is_empty() {
                s.push(String::new());
            }
            s.sort();
            s.dedup();
            for l in labels.drain(..) {
                out.insert(l, s.clone());
            }
            block.clear();
        }
    }
    if out.is_empty() {
        bail!("{DEVICE_CPP}: {head}...)'s type switch has no cases");
    }
    Ok(out)
}

fn suffixes(sw: &BTreeMap<String, Vec<String>>, t: &str) -> Vec<String> {
    sw.get(t).cloned().unwrap_or_else(|| vec![String::new()])
}

/// The src0 types `ggml_metal_op_mul_mat` sends to `kernel_mul_mv_ext_*` (small batches).
fn ext_types(ops: &str, names: &BTreeMap<String, String>) -> Result<BTreeSet<String>> {
    let (_, body) = function(ops, "int ggml_metal_op_mul_mat(").with_context(|| OPS_CPP)?;
    let end = body.find("get_pipeline_mul_mv_ext(").ok_or_else(|| {
        anyhow!("{OPS_CPP}: ggml_metal_op_mul_mat no longer calls get_pipeline_mul_mv_ext")
    })?;
    let re = Regex::new(r"op->src\[0\]->type == GGML_TYPE_(\w+)").unwrap();
    re.captures_iter(&body[..end])
        .map(|c| type_name(names, &c[1]))
        .collect()
}

/// The MUL_MAT / MUL_MAT_ID and GET_ROWS gates of `ggml_metal_device_supports_op`.
fn gates(device_m: &str, names: &BTreeMap<String, String>) -> Result<Vec<Gate>> {
    let (fn_line, body) =
        function(device_m, "bool ggml_metal_device_supports_op(").with_context(|| DEVICE_M)?;
    let op_label = Regex::new(r"^ {8}case GGML_OP_(\w+):\s*$").unwrap();
    let lines: Vec<&str> = body.lines().collect();
    let mut out = Vec::new();
    for first in ["MUL_MAT", "GET_ROWS", "CPY"] {
        let at = lines
            .iter()
            .position(|l| l.trim() == format!("case GGML_OP_{first}:"))
            .ok_or_else(|| anyhow!("{DEVICE_M}: supports_op has no `case GGML_OP_{first}:`"))?;
        let mut ops = Vec::new();
        let mut i = at;
        while let Some(c) = lines.get(i).and_then(|l| op_label.captures(l)) {
            ops.push(c[1].to_string());
            i += 1;
        }
        let end = (i..lines.len())
            .find(|&j| op_label.is_match(lines[j]) || lines[j].starts_with("        default:"))
            .unwrap_or(lines.len());
        let line = fn_line + at;
        let read = if first == "CPY" {
            cpy_pairs(&lines[i..end], names).map(|p| ("accept-list", p))
        } else {
            gate_types(&lines[i..end], names)
        };
        let (form, admits) = read.with_context(|| {
            format!("{DEVICE_M}:{line}: cannot read the gate of GGML_OP_{first}")
        })?;
        out.push(Gate {
            ops,
            form: form.to_string(),
            line,
            admits,
        });
    }
    Ok(out)
}

/// The CPY / DUP / CONT gate: `src->dst` for each (src, dst) pair its nested accept-list admits
/// (outer `switch (op->src[0]->type)`, inner `switch (op->type)` or `return op->type == ...`).
fn cpy_pairs(body: &[&str], names: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let label = Regex::new(r"^(\s*)case GGML_TYPE_(\w+):\s*$").unwrap();
    let eq = Regex::new(r"op->type == GGML_TYPE_(\w+)").unwrap();
    let outer_indent = body
        .iter()
        .find_map(|l| label.captures(l).map(|c| c[1].len()))
        .ok_or_else(|| anyhow!("no `case GGML_TYPE_...:` in the gate"))?;
    let (mut outer, mut inner, mut open) = (Vec::new(), Vec::new(), false);
    let mut pairs = BTreeSet::new();
    for l in body {
        let t = l.trim();
        if let Some(c) = label.captures(l) {
            let ty = type_name(names, &c[2])?;
            if c[1].len() == outer_indent {
                if !open {
                    outer.clear();
                    open = true;
                }
                outer.push(ty);
            } else {
                open = false;
                inner.push(ty);
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        open = false;
        let dsts: Vec<String> = if t == "return true;" {
            std::mem::take(&mut inner)
        } else if t.starts_with("return") && t.contains("op->type ==") {
            eq.captures_iter(t)
                .map(|c| type_name(names, &c[1]))
                .collect::<Result<_>>()?
        } else {
            if t.starts_with("return") || t.starts_with("default:") {
                inner.clear();
            }
            continue;
        };
        for s in &outer {
            for d in &dsts {
                pairs.insert(format!("{s}->{d}"));
            }
        }
    }
    if pairs.is_empty() {
        bail!("no (src, dst) pair admitted");
    }
    Ok(pairs.into_iter().collect())
}

/// One gate's admitted types: an accept-list (`switch (op->src[0]->type)`, labels before
/// `return true`) or a reject-list (`op->src[0]->type != GGML_TYPE_X`: every type but those).
fn gate_types(
    body: &[&str],
    names: &BTreeMap<String, String>,
) -> Result<(&'static str, Vec<String>)> {
    let name = |t: &str| type_name(names, t);
    let text = body.join("\n");
    if text.contains("switch (op->src[0]->type)") {
        let label = Regex::new(r"^\s*case GGML_TYPE_(\w+):\s*$").unwrap();
        let mut pending = Vec::new();
        let mut admits = BTreeSet::new();
        for l in body {
            if let Some(c) = label.captures(l) {
                pending.push(c[1].to_string());
            } else if l.trim() == "return true;" {
                for t in pending.drain(..) {
                    admits.insert(name(&t)?);
                }
            } else if !l.trim().is_empty() && !l.trim().starts_with("//") {
                pending.clear();
            }
        }
        return Ok(("accept-list", admits.into_iter().collect()));
    }
    let reject = Regex::new(r"op->src\[0\]->type != GGML_TYPE_(\w+)").unwrap();
    let rejected: BTreeSet<String> = reject
        .captures_iter(&text)
        .map(|c| c[1].to_string())
        .collect();
    if rejected.is_empty() {
        bail!(
            "neither an accept-list (`switch (op->src[0]->type)`) nor a reject-list (`!= GGML_TYPE_...`)"
        );
    }
    for t in &rejected {
        name(t)?;
    }
    let admits: BTreeSet<String> = names
        .iter()
        .filter(|(t, _)| !rejected.contains(*t))
        .map(|(_, n)| n.clone())
        .collect();
    Ok(("reject-list", admits.into_iter().collect()))
}

/// Reads the six files from a directory.
pub fn sources_from_dir(dir: &std::path::Path) -> Result<Sources> {
    let mut m = BTreeMap::new();
    for f in FILES {
        let p = dir.join(f);
        m.insert(
            f,
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
        );
    }
    Ok(Sources(m))
}

fn sources_from_series(ctx: &Ctx) -> Result<Sources> {
    let up = ctx.upstream();
    let repo = ctx.open_upstream()?;
    let series = ctx.series()?;
    let applied = overlay::project::apply_series(&repo, &up.rev, &series)?;
    let mut m = BTreeMap::new();
    for f in FILES {
        let bytes = applied.result.bytes(f, &repo)?.ok_or_else(|| {
            anyhow!(
                "{f} is not in {}@{} plus its series: is this ggml?",
                up.name,
                up.rev
            )
        })?;
        m.insert(f, String::from_utf8(bytes).with_context(|| f.to_string())?);
    }
    Ok(Sources(m))
}

fn render(report: &Report, what: &str) -> String {
    use std::fmt::Write;
    let mut h = format!("ggml-check: {what}\n");
    for g in &report.gates {
        let _ = writeln!(
            h,
            "  {} ({}, {DEVICE_M}:{}): admits {} {}",
            g.ops.join(" / "),
            g.form,
            g.line,
            g.admits.len(),
            if g.admits.iter().any(|a| a.contains("->")) {
                "(src, dst) pair(s)"
            } else {
                "type(s)"
            }
        );
    }
    for f in &report.findings {
        let tested = if f.tested {
            " (test-backend-ops tests it: a Metal run aborts)"
        } else {
            ""
        };
        let _ = writeln!(h, "  MISSING  {} admits {}{tested}", f.op, f.ty);
        for k in &f.missing_kernels {
            let _ = writeln!(h, "      no kernel {k} in {METAL}");
        }
        if let Some(d) = &f.missing_dispatch {
            let _ = writeln!(h, "      no case for it in {d} (GGML_ABORT)");
        }
    }
    let _ = write!(
        h,
        "{} kernel name(s) checked, {} finding(s)",
        report.kernels_checked,
        report.findings.len()
    );
    if !report.findings.is_empty() {
        h.push_str("\n  help: give the type its kernels, or take it out of the accept-list");
    }
    h
}

pub fn run(g: &Global, a: &GgmlCheckArgs) -> Result<ExitCode> {
    let (sources, what) = match &a.src {
        Some(dir) => (sources_from_dir(dir)?, dir.display().to_string()),
        None => {
            // Without --upstream, the upstream named ggml (this check knows only ggml's sources).
            let mut g = g.clone();
            g.upstream.get_or_insert_with(|| "ggml".to_string());
            let ctx = Ctx::load(&g, overlay::lock::Mode::Shared, "ggml-check")?;
            let up = ctx.upstream();
            let what = format!("{}@{} plus its series", up.name, &up.rev[..12]);
            (sources_from_series(&ctx)?, what)
        }
    };
    let report = check(&sources)?;
    if g.json {
        println!("{}", versioned(serde_json::to_value(&report)?));
    } else {
        println!("{}", render(&report, &what));
    }
    Ok(ExitCode::from(u8::from(!report.findings.is_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commented_instantiations_define_nothing() {
        let metal = "template [[host_name(\"kernel_a\")]] kernel k_t k_a;\n// template [[host_name(\"kernel_b\")]] kernel k_t k_b;\n/* kernel void kernel_c(\n) */\nkernel void kernel_d(device float * x) {}\n";
        let names: Vec<String> = kernel_names(metal).into_iter().collect();
        assert_eq!(names, ["kernel_a", "kernel_d"]);
    }

    #[test]
    fn type_switch_reads_each_case_blocks_suffixes() {
        let names: BTreeMap<String, String> = [("F32", "f32"), ("F16", "f16"), ("Q4_K", "q4_K")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .into();
        let device = "\nres f(lib) {\n    switch (tsrc0) {\n        case GGML_TYPE_F32:\n        case GGML_TYPE_F16:\n            {\n                if (x) {\n                    suffix = \"_short\";\n                } else {\n                    suffix = y ? \"_4\" : \"\";\n                }\n            } break;\n        case GGML_TYPE_Q4_K:\n            {\n                nsg = 2;\n            } break;\n        default:\n            {\n                GGML_ABORT(\"x\");\n            }\n    };\n}\n";
        let sw = type_switch(device, "res f(", &names).unwrap();
        assert_eq!(sw["f32"], ["", "_4", "_short"]);
        assert_eq!(sw["f16"], sw["f32"]);
        assert_eq!(sw["q4_K"], [""]);
    }

    #[test]
    fn cpy_gate_pairs_nested_switches_and_type_tests() {
        let names: BTreeMap<String, String> = [
            ("F32", "f32"),
            ("F16", "f16"),
            ("Q4_0", "q4_0"),
            ("I32", "i32"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
        let body = "            {\n                switch (op->src[0]->type) {\n                    case GGML_TYPE_F32:\n                        switch (op->type) {\n                           case GGML_TYPE_F32:\n                           case GGML_TYPE_Q4_0:\n                                return true;\n                           default:\n                                return false;\n                        }\n                    case GGML_TYPE_F16:\n                    case GGML_TYPE_Q4_0:\n                        switch (op->type) {\n                            case GGML_TYPE_F32:\n                                return true;\n                            default:\n                                return false;\n                        }\n                    case GGML_TYPE_I32:\n                        return op->type == GGML_TYPE_F32 || op->type == GGML_TYPE_I32;\n                    default:\n                        return false;\n                };\n            }";
        let lines: Vec<&str> = body.lines().collect();
        let pairs = cpy_pairs(&lines, &names).unwrap();
        assert_eq!(
            pairs,
            [
                "f16->f32",
                "f32->f32",
                "f32->q4_0",
                "i32->f32",
                "i32->i32",
                "q4_0->f32"
            ]
        );
    }
}
