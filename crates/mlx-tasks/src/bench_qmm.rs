//! `cargo xtask bench qmm`: the CPU quantized matmul under both kernel policies (row by row
//! and row-streamed), by running `crates/mlx-sys/examples/bench_qmm.rs` in release mode.
//!
//! xtask does not link mlx-sys (its build script needs an MLX that `build-mlx` has built), so
//! the measurement runs as a subprocess after `cargo xtask build-mlx` has brought the library
//! up to date. The example writes the SVG plot; this module chooses where.

use crate::{cargo, workspace_root};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

/// Where the plot goes unless `--svg` says otherwise (relative to the workspace root).
pub const DEFAULT_SVG: &str = "docs/benchmarks-qmm-cpu.svg";

#[derive(clap::Args, Debug, Clone)]
pub struct QmmArgs {
    /// Measured runs per cell (the median is reported), after the warm-up runs
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Unmeasured runs per cell before the measured ones
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Only the headline shape, one measured run (a smoke test, not a measurement)
    #[arg(long)]
    pub quick: bool,
    /// Write the time-versus-M plot here [default: docs/benchmarks-qmm-cpu.svg]
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Do not write the plot
    #[arg(long, conflicts_with = "svg")]
    pub no_svg: bool,
    /// Skip `cargo xtask build-mlx` (the MLX named by target/mlx/build-info.json is used as is)
    #[arg(long)]
    pub no_build: bool,
}

/// The `bench_qmm` example's command line for these arguments.
fn example_args(args: &QmmArgs, json: bool, root: &Path) -> Vec<String> {
    let mut v = crate::mlx_sys_example("bench_qmm");
    if json {
        v.push("--json".into());
    }
    if args.quick {
        v.push("--quick".into());
    }
    v.extend([
        "--reps".into(),
        args.reps.to_string(),
        "--warmup".into(),
        args.warmup.to_string(),
    ]);
    if !args.no_svg {
        let svg = args.svg.clone().unwrap_or_else(|| root.join(DEFAULT_SVG));
        v.push("--svg".into());
        v.push(svg.display().to_string());
    }
    v
}

pub fn run(args: &QmmArgs, json: bool) -> Result<ExitCode> {
    let root = workspace_root();
    if !args.no_build {
        // A failed build is the command's error, in the one error shape (exit 2).
        crate::build_mlx_first(&root, json).context("bench qmm: building MLX first")?;
    }
    let status = cargo()
        .args(example_args(args, json, &root))
        .current_dir(&root)
        .status()
        .context("running the bench_qmm example")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(1) => ExitCode::from(1),
        _ => ExitCode::from(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> QmmArgs {
        QmmArgs {
            reps: 7,
            warmup: 1,
            quick: false,
            svg: None,
            no_svg: false,
            no_build: true,
        }
    }

    #[test]
    fn json_and_the_default_plot_reach_the_example() {
        let v = example_args(&args(), true, Path::new("/r"));
        let tail = &v[v.iter().position(|s| s == "--").unwrap() + 1..];
        assert_eq!(
            tail,
            [
                "--json",
                "--reps",
                "7",
                "--warmup",
                "1",
                "--svg",
                "/r/docs/benchmarks-qmm-cpu.svg"
            ]
        );
    }

    #[test]
    fn no_svg_and_quick() {
        let a = QmmArgs {
            quick: true,
            no_svg: true,
            ..args()
        };
        let v = example_args(&a, false, Path::new("/r"));
        assert!(v.contains(&"--quick".to_string()));
        assert!(!v.iter().any(|s| s == "--svg" || s == "--json"));
    }
}
