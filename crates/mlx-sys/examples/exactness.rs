//! The block-vs-chain exactness probe under one CPU kernel policy, for
//! `cargo xtask exactness` (which runs this once per policy and renders the results).
//!
//! Usage: `exactness --policy upstream|streamed [--spec 'key=value;...']`. Prints one JSON
//! line, `{"policy", "paths": {"streamed", "row_by_row"}, "probe": {...}}`: the probe's raw
//! results (`probe/exactness.h`) and how many quantized-matmul kernel calls took each path
//! during the run, which shows the policy was in force. Exit 2 on a bad argument or error.

use std::process::ExitCode;

use mlx_sys::qmm_policy;

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: exactness: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<String, String> {
    let (policy, spec) = parse(std::env::args().skip(1))?;
    if !qmm_policy::available() {
        return Err(
            "the linked MLX lacks the CPU policy overlay (0002); rerun `cargo xtask build-mlx`"
                .into(),
        );
    }
    qmm_policy::set_streamed(policy == "streamed").map_err(|e| e.to_string())?;
    let before = qmm_policy::path_counts().map_err(|e| e.to_string())?;
    let probe = mlx_sys::exactness_probe(&spec).map_err(|e| e.to_string())?;
    let after = qmm_policy::path_counts().map_err(|e| e.to_string())?;
    Ok(format!(
        "{{\"policy\":\"{policy}\",\"paths\":{{\"streamed\":{},\"row_by_row\":{}}},\"probe\":{}}}",
        after.streamed - before.streamed,
        after.row_by_row - before.row_by_row,
        probe.trim_end()
    ))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<(String, String), String> {
    let (mut policy, mut spec) = (None, String::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--policy" => policy = args.next(),
            "--spec" => spec = args.next().ok_or("--spec needs a value")?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    match policy.as_deref() {
        Some("upstream" | "streamed") => Ok((policy.unwrap(), spec)),
        _ => Err("--policy upstream|streamed is required".into()),
    }
}
