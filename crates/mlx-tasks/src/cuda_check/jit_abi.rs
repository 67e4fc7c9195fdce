//! `cargo xtask cuda-check jit-abi`: the JIT-compiled qmm_sm90 kernel reads the Params the host
//! builds (overlay 0008): check, without a GPU, that NVRTC and nvcc lay them out alike. nvcc and
//! NVRTC 13.0 (the GPU machine's release), the pinned CUTLASS/CCCL from a bundle of this project.
//! For three instantiations the host's alignof(cute::TmaDescriptor) and sizeof(Params) come from a
//! program nvcc builds, with the text qmm_sm90.cu prepends to the JIT source
//! (qmm_sm90_jit_defines); the JIT source is then compiled as MLX compiles it
//! (`ci/nvrtc-params-size.py`), that text first, and must agree. And the pin's JIT source (the
//! series' changes to it taken back), where CUDA 13's 128-byte CUtensorMap must make the sizes
//! differ: if they ever agree, CUTLASS has fixed its NVRTC stand-in and the workaround can go.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use xshell::cmd;

use super::{Failed, JitAbiArgs, Setup, words};
use crate::Global;

/// The summary line's name for the check.
const NAME: &str = "cuda-jit-abi-check";

/// The JIT source, in the tree.
const REL: &str = "mlx/backend/cuda/device/qmm_sm90.cuh";

/// The instantiations checked: `qmm_sm90_kernel_t`'s template arguments.
const KERNELS: [&str; 3] = [
    "128, cutlass::half_t, cutlass::uint4b_t, cute::tuple<cute::C<128>, cute::C<128>, cute::C<64>>",
    "64, cutlass::bfloat16_t, uint8_t, cute::tuple<cute::C<128>, cute::C<256>, cute::C<64>>",
    "128, float, cutlass::uint4b_t, cute::tuple<cute::C<128>, cute::C<16>, cute::C<64>>",
];

pub fn run(g: &Global, a: &JitAbiArgs) -> Result<()> {
    let sh = xshell::Shell::new()?;
    sh.change_dir(crate::workspace_root());
    let nvrtc_lib = match &a.nvrtc {
        Some(dir) => std::path::absolute(dir)?,
        None => super::wheels(&sh, "NVRTC_WHEELS")?.join("nvidia/cu13/lib"),
    };
    let s = Setup::new(g, &a.toolkit, NAME)?;
    let ld = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    let mut ld_path = nvrtc_lib.clone().into_os_string();
    ld_path.push(":");
    ld_path.push(ld);
    s.sh.set_var("LD_LIBRARY_PATH", ld_path);
    let cuh = s.bundle.join("mlx").join(REL);
    let start = Instant::now();
    let host = host_sizes(&s, &cuh)?;
    let jit = Jit {
        s: &s,
        libnvrtc: nvrtc_lib.join("libnvrtc.so.13"),
    };
    let mut fail = false;
    for (i, kernel) in KERNELS.iter().enumerate() {
        let (align, size) = &host[i];
        let prefix = s.w(&format!("prefix{i}.h"));
        let Some(got) = jit.size(&s.w(&format!("jit{i}.cu")), &cuh, Some(&prefix), kernel) else {
            fail = true;
            continue;
        };
        println!(
            "qmm_sm90_kernel_t<{kernel}>: host {size} bytes (descriptor alignment {align}), NVRTC {got}"
        );
        if &got != size {
            eprintln!("  the host and NVRTC disagree");
            fail = true;
        }
    }
    let pin_cuh = pin_source(&s, &cuh)?;
    let size = &host[0].1;
    let Some(pin) = jit.size(&s.w("pin.cu"), &pin_cuh, None, KERNELS[0]) else {
        return Err(Failed::finding(
            "the pin's JIT source",
            "NVRTC does not compile it",
        ));
    };
    println!("the pin's JIT source, as the pin compiles it: NVRTC {pin} bytes, host {size}");
    if &pin == size {
        eprintln!(
            "  they agree: CUTLASS's NVRTC TmaDescriptor now matches CUtensorMap; overlay 0008's workaround can go"
        );
        fail = true;
    }
    if fail {
        return Err(Failed::finding(
            "qmm_sm90's Params",
            "nvcc and NVRTC do not agree (above)",
        ));
    }
    println!(
        "{NAME}: qmm_sm90's Params agree between nvcc and NVRTC ({} s)",
        start.elapsed().as_secs()
    );
    Ok(())
}

/// The host's side: a program nvcc builds writes, for each kernel, qmm_sm90_jit_defines() (what
/// qmm_sm90.cu prepends to the JIT source) to `<work>/prefixI.h` and prints the descriptor
/// alignment and the Params size; returns them, one pair per kernel.
fn host_sizes(s: &Setup, cuh: &Path) -> Result<Vec<(String, String)>> {
    std::fs::write(s.w("host.cu"), host_program(cuh))?;
    let b = &s.bundle;
    let args = words![
        "-std=c++20",
        "-arch=sm_90a",
        "--expt-relaxed-constexpr",
        "-w",
        "-isystem",
        b.join("deps/cutlass/include"),
        "-isystem",
        b.join("deps/cccl/include"),
        "-L",
        s.cuda.join("lib"),
        s.w("host.cu"),
        "-o",
        s.w("host"),
    ];
    s.nvcc("host.cu", &args)?;
    let (host, work) = (s.w("host"), s.work.path());
    let out = cmd!(s.sh, "{host} {work}").quiet().read()?;
    let sizes: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    if sizes.len() != KERNELS.len() {
        bail!(
            "the host program printed {} sizes, not {}: {out:?}",
            sizes.len(),
            KERNELS.len()
        );
    }
    Ok(sizes)
}

/// host.cu: for each kernel, its jit defines into `argv[1]/prefixI.h` and its sizes on stdout.
fn host_program(cuh: &Path) -> String {
    let mut text = format!("#include \"{}\"\n", cuh.display());
    text.push_str("#include <cstdio>\n#include <fstream>\nint main(int, char** argv) {\n");
    for (i, k) in KERNELS.iter().enumerate() {
        let _ = writeln!(
            text,
            "  {{ using K = mlx::core::cu::qmm_sm90_kernel_t<{k}>;"
        );
        let _ = writeln!(
            text,
            "    std::ofstream(std::string(argv[1]) + \"/prefix{i}.h\") << mlx::core::cu::qmm_sm90_jit_defines<K>();"
        );
        text.push_str(
            "    std::printf(\"%zu %zu\\n\", alignof(cute::TmaDescriptor), sizeof(typename K::Params)); }\n",
        );
    }
    text.push_str("}\n");
    text
}

/// NVRTC's side, as MLX's JIT compiles it.
struct Jit<'a> {
    s: &'a Setup,
    libnvrtc: PathBuf,
}

impl Jit<'_> {
    /// Writes `out` (the `prefix` file if any, the JIT source, a `params_size` constant of
    /// `kernel`'s Params) and returns the constant NVRTC gives it; `None` when NVRTC did not
    /// compile it (its log on stderr).
    fn size(&self, out: &Path, cuh: &Path, prefix: Option<&Path>, kernel: &str) -> Option<String> {
        let mut text = match prefix {
            Some(p) => std::fs::read_to_string(p).ok()?,
            None => String::new(),
        };
        text.push_str(&std::fs::read_to_string(cuh).ok()?);
        text.push_str("namespace mlx::core::cu {\n");
        let _ = writeln!(
            text,
            "__device__ unsigned long long params_size = sizeof(typename qmm_sm90_kernel_t<{kernel}>::Params);"
        );
        text.push_str("}\n");
        std::fs::write(out, text).ok()?;
        let (s, lib) = (self.s, &self.libnvrtc);
        let script = crate::workspace_root().join("ci/nvrtc-params-size.py");
        let b = &s.bundle;
        let incs = [
            b.join("deps/cutlass/include"),
            b.join("deps/cccl/include"),
            s.cuda.join("include"),
        ];
        let got = cmd!(
            s.sh,
            "python3 {script} {lib} {out} params_size compute_90a {incs...}"
        )
        .quiet()
        .read();
        match got {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("{e}");
                None
            }
        }
    }
}

/// The pin's JIT source: the series' changes to qmm_sm90.cuh taken back, last overlay first
/// (`git apply -R` of each overlay that touches it, in `<work>/pin`).
fn pin_source(s: &Setup, cuh: &Path) -> Result<PathBuf> {
    let pin = s.w("pin");
    let copy = pin.join(REL);
    std::fs::create_dir_all(copy.parent().expect("REL has folders"))?;
    std::fs::copy(cuh, &copy)?;
    let series = s.ctx.series()?;
    let header = format!("diff --git a/{REL} ");
    let _dir = s.sh.push_dir(&pin);
    let _ceiling = s.sh.push_env("GIT_CEILING_DIRECTORIES", s.work.path());
    for o in series.overlays.iter().rev() {
        if !o.raw.lines().any(|l| l.starts_with(&header)) {
            continue;
        }
        let patch = std::path::absolute(&o.path)?;
        cmd!(s.sh, "git apply -R --include={REL} {patch}")
            .quiet()
            .run()
            .with_context(|| format!("taking {} back from the JIT source", o.name))?;
    }
    Ok(copy)
}
