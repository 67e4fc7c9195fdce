//! `cargo xtask exactness`: block (one call over T rows, as speculative verification runs)
//! against chain (T calls of one row, as classic decode runs), byte for byte, per op and over
//! a whole decoder (docs/kernels/exactness.md). The probe is C++ against MLX's public API
//! (`crates/mlx-sys/probe/`): for the CPU build it runs here through mlx-sys's `exactness`
//! example, once per policy and once perturbed (the negative control); a CUDA run comes
//! from the bundle on a GPU machine and is rendered with `--from`.
//!
//! Exit codes: 0 every promised row identical and the control caught; 1 findings; 2 error.

pub mod checkpoint;
mod render;
pub mod repeat;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use report::{Backend, Run};

use crate::{Global, cargo, workspace_root};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policies {
    Upstream,
    Streamed,
    Both,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    Small,
    #[value(name = "7b")]
    SevenB,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ExactnessArgs {
    /// Kernel policies to probe (`upstream`, MLX untouched, promises nothing: the control)
    #[arg(long, value_enum, default_value_t = Policies::Both)]
    pub policy: Policies,
    /// cpu runs the probe here on the CPU build; cuda renders a run the CUDA bundle wrote (--from)
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// Decoder shapes: small (4 layers, d 512) or 7b (Qwen2.5-7B's shapes)
    #[arg(long, value_enum, default_value_t = Preset::Small)]
    pub preset: Preset,
    /// Prompt tokens before the verify blocks
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..))]
    pub prompt: u32,
    /// Largest verify block (k = 2..K drafted tokens)
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub k_max: u32,
    /// Op table: blocks of T = 1..N rows
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub t_max: u32,
    /// Op table: seeds per case
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub seeds: u32,
    /// Op table: KV cache lengths of the attention rows
    #[arg(long, value_delimiter = ',', default_values_t = [64u32, 512, 4096])]
    pub kv: Vec<u32>,
    /// The decoder's activation type
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16)]
    pub dtype: DtypeArg,
    /// The decoder's LM head unquantized (a dense matmul), as many checkpoints ship it
    #[arg(long)]
    pub dense_head: bool,
    /// Only the op table
    #[arg(long, conflicts_with = "decoder_only")]
    pub ops_only: bool,
    /// Only the decoder
    #[arg(long)]
    pub decoder_only: bool,
    /// The decoder's digests of every op's output (the prompt's forward and each decode step):
    /// runs of one configuration read together (`--from`) are then compared to the op
    #[arg(long, conflicts_with = "ops_only")]
    pub taps: bool,
    /// The prompt's forward and decode step 1 run N more times in the probe's process, every op's
    /// output compared with the first (a kernel whose bits follow timing shows as a finding)
    #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "ops_only",
          value_parser = clap::value_parser!(u32).range(0..=64))]
    pub repeat: u32,
    /// The decoder's weights and shapes from an MLX-format model folder (config.json +
    /// safetensors, as mlx-lm writes them) instead of the seeded preset: a fail-closed gate
    #[arg(long, value_name = "DIR", conflicts_with_all = ["preset", "ops_only"])]
    pub checkpoint: Option<PathBuf>,
    /// Render runs written elsewhere (one JSON line per run, as the CUDA bundle's probe writes) instead of probing; several files are read as one, and runs of one configuration across them compared
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Skip `cargo xtask build-mlx` (the MLX named by target/mlx/build-info.json is used as is)
    #[arg(long)]
    pub no_build: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendArg {
    Cpu,
    Cuda,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtypeArg {
    Bf16,
    F16,
    F32,
}

impl ExactnessArgs {
    /// The probe's option string (`probe/exactness.h`'s `parse_options`), unperturbed; with
    /// `--checkpoint`, the decoder alone, its dims and tensors from the folder.
    pub fn spec(&self) -> Result<String> {
        let base = self.base_spec();
        match &self.checkpoint {
            Some(dir) => Ok(format!(
                "{};ops=0;{}",
                base.replace(";ops=1", ""),
                checkpoint::spec(dir)?
            )),
            None => Ok(base),
        }
    }

    fn base_spec(&self) -> String {
        let preset = match self.preset {
            Preset::Small => "small",
            Preset::SevenB => "7b",
        };
        let dtype = match self.dtype {
            DtypeArg::Bf16 => "bf16",
            DtypeArg::F16 => "f16",
            DtypeArg::F32 => "f32",
        };
        let kv: Vec<String> = self.kv.iter().map(u32::to_string).collect();
        format!(
            "preset={preset};prompt={};k_max={};t_max={};seeds={};kv_lens={};dtype={dtype};dense_head={};ops={};decoder={};taps={};repeat={}",
            self.prompt,
            self.k_max,
            self.t_max,
            self.seeds,
            kv.join(","),
            u8::from(self.dense_head),
            u8::from(!self.decoder_only),
            u8::from(!self.ops_only),
            u8::from(self.taps),
            self.repeat,
        )
    }

    fn policies(&self) -> Vec<&'static str> {
        match self.policy {
            Policies::Upstream => vec!["upstream"],
            Policies::Streamed => vec!["streamed"],
            Policies::Both => vec!["streamed", "upstream"],
        }
    }
}

/// The negative control's options: every op case and a small decoder whose prompt forward and
/// first decode step run again once in the process, one flipped bit each.
pub const CONTROL_SPEC: &str =
    "preset=small;prompt=8;k_max=3;t_max=2;seeds=1;kv_lens=64;perturb=1;ops=1;decoder=1;repeat=1";

pub fn run(g: &Global, args: &ExactnessArgs) -> Result<ExitCode> {
    let backend = match args.backend {
        BackendArg::Cpu => Backend::Cpu,
        BackendArg::Cuda => Backend::Cuda,
    };
    let (runs, control) = match args.from.as_slice() {
        [] if backend == Backend::Cuda => {
            return Err(overlay_cli::error::HintedError::of_kind(
                Some(overlay_cli::error::Kind::Input),
                "exactness --backend cuda renders a run from the GPU machine",
                "run the CUDA bundle's exactness.sh there and pass its output with --from FILE (docs/kernels/exactness.md)",
            ));
        }
        [] => probe_here(args)?,
        files => split_control(read_files(files)?)?,
    };
    let report = render::Report::new(backend, runs, control, header(g)?);
    overlay_cli::commands::emit(g.json, report.json(), report.text());
    Ok(if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn header(g: &Global) -> Result<serde_json::Value> {
    let root = overlay_cli::commands::project_root(g)?;
    let pins = g
        .extensions
        .with(|extras| overlay::manifest::Pins::load(&root, extras))?;
    let up = pins.upstream(g.upstream.as_deref())?;
    Ok(serde_json::json!({
        "upstream": up.name,
        "pin": up.rev,
        "host": std::env::consts::ARCH,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
    }))
}

/// Builds MLX unless told not to, then one example process per policy and the control.
fn probe_here(args: &ExactnessArgs) -> Result<(Vec<Run>, Option<Run>)> {
    let root = workspace_root();
    // A bad --checkpoint is refused before anything is built.
    let spec = args.spec()?;
    if !args.no_build {
        crate::build_mlx_first(&root, false).context("exactness")?;
    }
    let mut runs = Vec::new();
    for policy in args.policies() {
        eprintln!("exactness: probing under the {policy} policy");
        runs.push(example(&root, policy, &spec)?);
    }
    eprintln!("exactness: the negative control (one flipped bit per case)");
    let control = example(&root, "streamed", CONTROL_SPEC)?;
    Ok((runs, Some(control)))
}

fn example(root: &Path, policy: &str, spec: &str) -> Result<Run> {
    let out = cargo()
        .args(crate::mlx_sys_example("exactness"))
        .args(["--policy", policy, "--spec", spec])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("running mlx-sys's exactness example")?;
    if !out.status.success() {
        bail!(
            "exactness: the probe under the {policy} policy failed ({})",
            out.status
        );
    }
    let text = String::from_utf8(out.stdout).context("the probe's output is not UTF-8")?;
    serde_json::from_str(text.trim()).context("the probe's output is not a run's JSON")
}

/// Runs from each file in turn, as one list.
fn read_files(files: &[PathBuf]) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for file in files {
        runs.extend(read_runs(file)?);
    }
    Ok(runs)
}

/// Runs from a file, one JSON object per line (blank lines and `#` comments skipped), each
/// knowing its file and line.
pub fn read_runs(file: &Path) -> Result<Vec<Run>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut run: Run = serde_json::from_str(line).map_err(|e| {
            overlay::Error::input(file, Some(i + 1), format!("not an exactness run ({e})"))
                .with_help("pass the lines the bundle's exactness.sh wrote, unedited")
        })?;
        run.source = Some(format!("{}:{}", file.display(), i + 1));
        runs.push(run);
    }
    if runs.is_empty() {
        bail!(
            overlay::Error::input(file, None, "holds no exactness run")
                .with_help("pass the lines the bundle's exactness.sh wrote")
        );
    }
    Ok(runs)
}

/// The perturbed run, if the file holds one, apart from the measured ones.
fn split_control(runs: Vec<Run>) -> Result<(Vec<Run>, Option<Run>)> {
    let (control, runs): (Vec<Run>, Vec<Run>) = runs.into_iter().partition(|r| r.probe.perturbed);
    if runs.is_empty() {
        bail!("the file holds only the negative control's run, no measured one");
    }
    Ok((runs, control.into_iter().next()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ExactnessArgs,
    }

    #[test]
    fn the_spec_carries_every_option() {
        let a = Cli::parse_from(["x", "--preset", "7b", "--kv", "64,16384", "--ops-only"]).args;
        assert_eq!(
            a.spec().unwrap(),
            "preset=7b;prompt=40;k_max=16;t_max=32;seeds=2;kv_lens=64,16384;dtype=bf16;dense_head=0;ops=1;decoder=0;taps=0;repeat=0"
        );
        let a = Cli::parse_from(["x", "--decoder-only", "--taps", "--repeat", "3"]).args;
        assert!(
            a.spec()
                .unwrap()
                .ends_with(";ops=0;decoder=1;taps=1;repeat=3")
        );
        assert!(Cli::try_parse_from(["x", "--ops-only", "--repeat", "2"]).is_err());
        assert!(Cli::try_parse_from(["x", "--repeat", "65"]).is_err());
        assert_eq!(a.policies(), ["streamed", "upstream"]);
        assert!(Cli::try_parse_from(["x", "--k-max", "1"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ops-only", "--decoder-only"]).is_err());
    }

    /// The CUDA bundle's script runs the same negative control as this command.
    #[test]
    fn the_bundle_script_runs_this_control() {
        let script = workspace_root().join("cuda/bundle/exactness.sh");
        let text = std::fs::read_to_string(script).unwrap();
        assert!(
            text.contains(&format!("control='{CONTROL_SPEC}'")),
            "{text}"
        );
    }
}
