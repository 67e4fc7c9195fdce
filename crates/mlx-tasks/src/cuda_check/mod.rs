//! `cargo xtask cuda-check compile | jit-abi`: the CUDA overlays checked without a GPU, with nvcc
//! (and NVRTC) 13.0 from PyPI, the GPU machine's release, against a bundle of this project
//! (`build-mlx --backend cuda --bundle`: the patched tree and the pinned CUTLASS/CCCL/NVTX/fmt).
//! [`compile`]: the patched CUDA units compile for sm_90a; [`jit_abi`]: the JIT-compiled
//! qmm_sm90 kernel's Params have one layout under nvcc and NVRTC.
//!
//! The wheels are installed once into the tool's cache by `ci/cuda-wheels.sh` (a folder keyed by
//! their versions); the nvcc flags are `cuda/bundle/nvcc-flags.sh`'s, the one list the harness's
//! build and the GPU machine use too. `--cuda DIR` (and `--nvrtc DIR`) use a given toolkit instead.
//! Exit codes: 0 every unit compiles (and agrees), 1 one does not (named on stderr), 2 error.

pub mod compile;
pub mod jit_abi;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use xshell::{Shell, cmd};

use crate::Global;
use crate::commands::Ctx;

/// The CUDA checks.
#[derive(clap::Subcommand, Debug)]
pub enum CudaCheck {
    /// qmv.cu, qmm_sm90.cu, scaled_dot_product_attention.cu (sm_90a), quantized.cpp and device.cpp, the harness's profile.cu, peak.cu, wgmma.cu and sdpa_rows.cu, and marlin_bench.cu compile; wgmma_switch.cu (MLX_CUDA_QMV_WGMMA's routing and MLX_CUDA_QMV_WGMMA_PDL) builds and passes
    Compile(Toolkit),
    /// qmm_sm90's JIT Params: NVRTC and nvcc lay them out alike (overlay 0008)
    JitAbi(JitAbiArgs),
}

/// Where nvcc comes from.
#[derive(clap::Args, Debug, Clone)]
pub struct Toolkit {
    /// A CUDA folder (bin/nvcc, include, lib) to use instead of the nvcc 13.0 wheels from PyPI
    #[arg(long, value_name = "DIR")]
    pub cuda: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct JitAbiArgs {
    #[command(flatten)]
    pub toolkit: Toolkit,
    /// A folder holding libnvrtc.so.13 to use instead of the NVRTC 13.0 wheel from PyPI
    #[arg(long, value_name = "DIR")]
    pub nvrtc: Option<PathBuf>,
}

/// A unit that did not compile (or did not agree): the check's finding, exit 1.
#[derive(Debug)]
pub struct Failed {
    /// The unit, as the summary line names it (`qmv.cu`).
    pub unit: String,
    pub error: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.unit, self.error)
    }
}

impl std::error::Error for Failed {}

impl Failed {
    /// `unit` did not compile: `error` says how (the command, its exit status).
    pub fn compile(unit: &str, error: impl std::fmt::Display) -> anyhow::Error {
        Failed::finding(unit, format!("does not compile: {error}"))
    }

    /// `unit`'s finding: `error` says what it is.
    pub fn finding(unit: &str, error: impl std::fmt::Display) -> anyhow::Error {
        anyhow::Error::new(Failed {
            unit: unit.to_string(),
            error: error.to_string(),
        })
    }
}

pub fn run(g: &Global, c: &CudaCheck) -> Result<ExitCode> {
    let (name, result) = match c {
        CudaCheck::Compile(t) => ("cuda-compile-check", compile::run(g, t)),
        CudaCheck::JitAbi(a) => ("cuda-jit-abi-check", jit_abi::run(g, a)),
    };
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => match e.downcast_ref::<Failed>() {
            Some(f) => {
                eprintln!("{name}: {f}");
                Ok(ExitCode::from(1))
            }
            None => Err(e),
        },
    }
}

/// What both checks start from: a shell in the project's root, a scratch folder (removed on
/// drop), the bundle unpacked in it, and the CUDA folder.
pub struct Setup {
    pub sh: Shell,
    pub work: tempfile::TempDir,
    /// `<work>/mlx-cuda-bundle`.
    pub bundle: PathBuf,
    /// The CUDA folder: `bin/nvcc`, `include`, `lib`.
    pub cuda: PathBuf,
    /// The project: its root and series.
    pub ctx: Ctx,
}

impl Setup {
    /// The CUDA folder (`t.cuda` or the nvcc wheels), then the bundle of the project's tree.
    pub fn new(g: &Global, t: &Toolkit, command: &str) -> Result<Setup> {
        let ctx = Ctx::load(g, overlay::lock::Mode::Shared, command)?;
        let sh = Shell::new()?;
        sh.change_dir(&ctx.project.root);
        let cuda = match &t.cuda {
            Some(dir) => std::path::absolute(dir)?,
            None => wheels(&sh, "NVCC_WHEELS")?.join("nvidia/cu13"),
        };
        if !cuda.join("bin/nvcc").is_file() {
            anyhow::bail!("no bin/nvcc in {}: not a CUDA folder", cuda.display());
        }
        let work = tempfile::tempdir()?;
        eprintln!("{command}: bundling the patched tree");
        let args = crate::build_mlx::BuildMlxArgs {
            backend: Some(crate::build_mlx::Backend::Cuda),
            profile: crate::build_mlx::Profile::Release,
            jobs: None,
            install_deps: false,
            bundle: None,
            bundle_python: false,
        };
        let archive = work.path().join("bundle.tar.gz");
        crate::cuda_bundle::write(&ctx, &args, &archive)?;
        let file = std::fs::File::open(&archive)
            .with_context(|| format!("opening {}", archive.display()))?;
        tar::Archive::new(flate2::read::GzDecoder::new(file))
            .unpack(work.path())
            .with_context(|| format!("unpacking {}", archive.display()))?;
        let bundle = work.path().join(crate::cuda_bundle::BUNDLE_DIR);
        Ok(Setup {
            sh,
            work,
            bundle,
            cuda,
            ctx,
        })
    }

    /// `<work>/NAME`.
    pub fn w(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// nvcc with `args`, `PATH` led by the CUDA folder's `bin` as a toolkit's own tools expect;
    /// a failure is `unit`'s [`Failed`].
    pub fn nvcc(&self, unit: &str, args: &[OsString]) -> Result<()> {
        eprintln!("nvcc: {unit}");
        let bin = self.cuda.join("bin");
        let nvcc = bin.join("nvcc");
        cmd!(self.sh, "{nvcc} {args...}")
            .env("PATH", with_path(&bin)?)
            .quiet()
            .run()
            .map_err(|e| Failed::compile(unit, e))
    }

    /// The nvcc flags `cuda/bundle/nvcc-flags.sh`'s function `set` (`mlx_nvcc_flags`,
    /// `marlin_nvcc_flags`) gives for `arch`.
    pub fn nvcc_flags(&self, set: &str, arch: &str) -> Result<Vec<OsString>> {
        let script = crate::workspace_root().join("cuda/bundle/nvcc-flags.sh");
        let body = format!(". \"$1\" && {set} \"$2\" && printf '%s\\n' \"${{NVCC_FLAGS[@]}}\"");
        let out = cmd!(self.sh, "bash -c {body} nvcc-flags {script} {arch}")
            .quiet()
            .read()?;
        Ok(out.lines().map(OsString::from).collect())
    }

    /// The bundle's include flags for MLX's units: its tree, the pinned CCCL, CUTLASS, fmt and
    /// NVTX, fmt header-only, the CUDA backend on.
    pub fn includes(&self) -> Vec<OsString> {
        let b = &self.bundle;
        let mut v: Vec<OsString> = vec!["-I".into(), b.join("mlx").into()];
        for dep in [
            "cccl/include",
            "cutlass/include",
            "fmt/include",
            "nvtx3/c/include",
        ] {
            v.push("-isystem".into());
            v.push(b.join("deps").join(dep).into());
        }
        v.push("-DFMT_HEADER_ONLY".into());
        v.push("-DMLX_USE_CUDA".into());
        v
    }
}

/// `ci/cuda-wheels.sh`'s `cuda_wheels $VAR`: the folder its wheels are installed in (pip's
/// `--target`), installed when missing.
pub fn wheels(sh: &Shell, var: &str) -> Result<PathBuf> {
    let script = crate::workspace_root().join("ci/cuda-wheels.sh");
    eprintln!("cuda-wheels: ${var}");
    let body = format!(". \"$1\" && cuda_wheels ${var}");
    let dir = cmd!(sh, "bash -c {body} cuda-wheels {script}")
        .quiet()
        .read()
        .context("installing the CUDA wheels from PyPI")?;
    Ok(PathBuf::from(dir))
}

/// `$PATH` with `dir` first.
pub fn with_path(dir: &Path) -> Result<OsString> {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&rest));
    Ok(std::env::join_paths(dirs)?)
}

/// Command-line words of mixed types (`&str`, paths): `words!["-c", src]`.
macro_rules! words {
    ($($a:expr),* $(,)?) => { vec![$(std::ffi::OsString::from(&$a)),*] };
}
pub(crate) use words;
