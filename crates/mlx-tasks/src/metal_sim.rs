//! `cargo xtask metal-sim`: run MLX's quantized mat-vec and SDPA vector
//! kernels from a tree on the CPU emulator and check the bit-identity claims. Exit codes: 0 every
//! evaluated claim holds, 1 a claim fails, 2 error (from main).

use crate::workspace_root;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use metal_sim::{Options, TreeFiles};

use crate::Global;

#[derive(clap::Args, Clone, Debug)]
pub struct MetalSimArgs {
    /// Tree under test (a materialized MLX checkout) [default: the pin plus the series]
    #[arg(long, value_name = "DIR")]
    pub src: Option<PathBuf>,
    /// Pristine tree to compare with [default: the pin without overlays, or --src itself]
    #[arg(long, value_name = "DIR")]
    pub pristine: Option<PathBuf>,
    /// Small matrix (one group size, bits 3 and 4, two simd_sum orders; SDPA: one case, T in {1, 2, 7, 8, 9, 16})
    #[arg(long)]
    pub quick: bool,
    /// Machine-readable report on stdout
    #[arg(long)]
    pub json: bool,
    /// Seed of the inputs
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compiler / emulator processes at once
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Cache of compiled binaries [default: <root>/target/metal-sim]
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Write the output hash of every M=1 case and variant to FILE
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Compare with hashes in FILE ({"case id": "hash"}, e.g. from real hardware)
    #[arg(long, value_name = "FILE")]
    pub compare: Option<PathBuf>,
}

pub fn run(args: &MetalSimArgs, global: &Global) -> Result<ExitCode> {
    let root = global.root.clone().unwrap_or_else(workspace_root);
    let (patched, pristine) = match &args.src {
        Some(dir) => {
            let patched = TreeFiles::from_dir("patched", dir)?;
            let pristine = match &args.pristine {
                Some(p) => TreeFiles::from_dir("pristine", p)?,
                None => TreeFiles::from_dir("pristine", dir)?,
            };
            (patched, pristine)
        }
        None => {
            // Read the project as the other readers do: never half-way through another command's write.
            let _lock = overlay::lock::lock_project(
                &root,
                overlay::lock::Mode::Shared,
                "metal-sim",
                &mut |msg| eprintln!("{msg}"),
            )?;
            let p = metal_sim::pinned::load(&root, global.upstream.as_deref())?;
            let pristine = match &args.pristine {
                Some(d) => TreeFiles::from_dir("pristine", d)?,
                None => p.pristine,
            };
            (p.patched, pristine)
        }
    };
    let opts = Options {
        quick: args.quick,
        cache: args
            .cache
            .clone()
            .unwrap_or_else(|| root.join("target").join("metal-sim")),
        seed: args.seed,
        jobs: args.jobs,
    };
    let report = metal_sim::run(&patched, Some(&pristine), &opts)?;
    if let Some(f) = &args.record {
        let text = serde_json::to_string_pretty(&report.hashes)?;
        std::fs::write(f, text + "\n").with_context(|| format!("writing {}", f.display()))?;
    }
    let comparison = match &args.compare {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            let theirs: BTreeMap<String, String> = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a JSON object of hashes", f.display()))?;
            Some(metal_sim::compare_hashes(&report.hashes, &theirs))
        }
        None => None,
    };
    if args.json || global.json {
        let v = serde_json::json!({ "report": report, "ok": report.ok(), "compare": comparison });
        println!("{}", crate::commands::versioned(v));
    } else {
        println!(
            "metal-sim: {} vs {} ({} runs, {})\n",
            report.patched, report.pristine, report.runs, report.compiler
        );
        print!("{}", report.table());
        println!();
        for (phase, s) in &report.timings {
            println!("  {phase}: {s:.1}s");
        }
        if let Some(c) = &comparison {
            println!(
                "\ncomparison with {}:",
                args.compare.as_ref().unwrap().display()
            );
            for (variant, matched, n) in c {
                println!("  {variant}: {matched}/{n} cases match");
            }
        }
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
