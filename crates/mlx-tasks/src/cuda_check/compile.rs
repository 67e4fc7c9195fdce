//! `cargo xtask cuda-check compile`: the patched CUDA translation units compile, without a GPU.
//! nvcc 13.0 (the GPU machine's release), the bundle's pinned CUTLASS/CCCL/NVTX/fmt, sm_90a as on
//! the H200. qmv.cu, qmm_sm90.cu and scaled_dot_product_attention.cu are compiled to objects
//! (device code included); quantized.cpp and device.cpp are checked by the host compiler, as MLX
//! builds them;
//! cuda/harness/profile.cu (which includes every harness header), peak.cu, wgmma.cu and
//! sdpa_rows.cu (attention's rows kernels from scaled_dot_product_attention.cu, and the
//! tensor-core kernels of sdpa_mma.cuh it includes) are compiled
//! against the tree, and wgmma_switch.cu (MLX_CUDA_QMV_WGMMA's routing, host code)
//! built and run;
//! cuda/bench/marlin_bench.cu against the bundle's pinned Marlin. The first unit that does not
//! compile stops the check (exit 1, the unit named).

use std::ffi::OsString;
use std::time::Instant;

use anyhow::{Context as _, Result};
use xshell::cmd;

use super::{Failed, Setup, Toolkit, words};
use crate::Global;

/// The summary line's name for the check.
const NAME: &str = "cuda-compile-check";

pub fn run(g: &Global, t: &Toolkit) -> Result<()> {
    let s = Setup::new(g, t, NAME)?;
    s.ctx.unlock();
    let inc = s.includes();
    let flags = s.nvcc_flags("mlx_nvcc_flags", "sm_90a")?;
    let start = Instant::now();
    let cu = s.bundle.join("mlx/mlx/backend/cuda");
    let qmv = cu.join("quantized/qmm/qmv.cu");
    let out = words!["-c", qmv, "-o", s.w("qmv.o")];
    s.nvcc("qmv.cu", &[&flags[..], &inc, &out].concat())?;
    host_check(&s, &inc)?;
    // Attention: the sdpa_vector kernels and their routing under the streamed policy (overlay
    // 0013), the invariant policy's tensor-core kernels it includes (overlay 0018, sdpa_mma.cuh).
    let sdpa = cu.join("scaled_dot_product_attention.cu");
    let out = words!["-c", sdpa, "-o", s.w("sdpa.o")];
    s.nvcc(
        "scaled_dot_product_attention.cu",
        &[&flags[..], &inc, &out].concat(),
    )?;
    // qmm_sm90.cu (overlay 0008) includes the JIT sources MLX's build embeds: generate them as it does.
    bin2h(&s)?;
    let gen_dir = words!["-I", s.w("gen")];
    let out = words![
        "-c",
        cu.join("quantized/qmm/qmm_sm90.cu"),
        "-o",
        s.w("qmm_sm90.o")
    ];
    s.nvcc("qmm_sm90.cu", &[&flags[..], &gen_dir, &inc, &out].concat())?;
    // The kernel harness's headers against this tree (the split experiment restates the overlay's
    // helpers): the Nsight Compute target includes them all and instantiates both kernels.
    harness_header(&s, &qmv, "qmv_kernels.cuh")?;
    harness_header(&s, &sdpa, "sdpa_kernels.cuh")?;
    let dirs = words!["-I", s.w("h"), "-I", "cuda/harness"];
    let out = words!["-c", "cuda/harness/profile.cu", "-o", s.w("profile.o")];
    s.nvcc("profile.cu", &[&flags[..], &dirs, &inc, &out].concat())?;
    // The tensor-core ceiling's microbenchmark (`qmv_harness mma-peak`): the kernel's mma helper.
    let out = words!["-c", "cuda/harness/peak.cu", "-o", s.w("peak.o")];
    s.nvcc("peak.cu", &[&flags[..], &dirs, &inc, &out].concat())?;
    // The warpgroup-mma prototype (`qmv_wgmma`): its wgmma (sm_90a only) and the launcher beside it.
    let out = words!["-c", "cuda/harness/wgmma.cu", "-o", s.w("wgmma.o")];
    s.nvcc("wgmma.cu", &[&flags[..], &dirs, &inc, &out].concat())?;
    // Attention's pass 1 by rows (`sdpa_rows`): overlay 0013's kernels from the tree's sdpa unit.
    let out = words!["-c", "cuda/harness/sdpa_rows.cu", "-o", s.w("sdpa_rows.o")];
    s.nvcc("sdpa_rows.cu", &[&flags[..], &dirs, &inc, &out].concat())?;
    wgmma_switch(&s, &flags, &inc)?;
    // The qmv benchmark's Marlin arm (cuda/bench/marlin_bench.cu) with the pinned kernel file, built
    // as cuda/machine/gpu-session.sh builds it (the wheels have no CCCL: <nv/target> from the
    // bundle's).
    let marlin = s.nvcc_flags("marlin_nvcc_flags", "sm_90a")?;
    let b = &s.bundle;
    let rest = words![
        "-isystem",
        b.join("deps/cccl/include"),
        "-I",
        b.join("deps/marlin/marlin"),
        "-c",
        "cuda/bench/marlin_bench.cu",
        "-o",
        s.w("marlin_bench.o"),
    ];
    s.nvcc("marlin_bench.cu", &[&marlin[..], &rest].concat())?;
    println!(
        "{NAME}: qmv.cu, qmm_sm90.cu and scaled_dot_product_attention.cu (sm_90a), quantized.cpp and device.cpp, the harness's profile.cu, peak.cu, wgmma.cu and sdpa_rows.cu, and marlin_bench.cu compile, wgmma_switch.cu passes ({} s)",
        start.elapsed().as_secs()
    );
    Ok(())
}

/// `cuda/harness/wgmma_switch.cu` linked (the toolkit's static cudart) and run: how
/// `MLX_CUDA_QMV_WGMMA` routes qmv_wgmma_wins, bad values included. Host code only; it fails
/// (a finding) when a case does not hold.
fn wgmma_switch(s: &Setup, flags: &[OsString], inc: &[OsString]) -> Result<()> {
    let unit = "wgmma_switch.cu";
    let exe = s.w("wgmma_switch");
    let libs = words!["-L", s.cuda.join("lib"), "-L", s.cuda.join("lib64")];
    let out = words!["cuda/harness/wgmma_switch.cu", "-o", &exe];
    s.nvcc(unit, &[flags, inc, &libs, &out].concat())?;
    eprintln!("run: {unit}");
    let run = cmd!(s.sh, "{exe}").ignore_status().quiet().output()?;
    let said = String::from_utf8_lossy(&run.stdout).trim().to_string();
    if !run.status.success() {
        return Err(Failed::finding(unit, format!("{said} ({})", run.status)));
    }
    eprintln!("{said}");
    Ok(())
}

/// The host units the overlays touch, under `mlx/backend/cuda/`: quantized.cpp (the policy's
/// routing) and device.cpp (the command encoder's programmatic launch, overlay 0016).
const HOST_UNITS: [&str; 2] = ["quantized/quantized.cpp", "device.cpp"];

/// The host units through the host compiler (`c++ -fsyntax-only`), as MLX builds them.
fn host_check(s: &Setup, inc: &[OsString]) -> Result<()> {
    let cuda_inc = s.cuda.join("include");
    for path in HOST_UNITS {
        let unit = path.rsplit('/').next().unwrap_or(path);
        eprintln!("c++: {unit}");
        let cpp = s.bundle.join("mlx/mlx/backend/cuda").join(path);
        cmd!(
            s.sh,
            "c++ -std=c++20 -fsyntax-only -isystem {cuda_inc} {inc...} {cpp}"
        )
        .quiet()
        .run()
        .map_err(|e| Failed::compile(unit, e))?;
    }
    Ok(())
}

/// MLX's `bin2h.cmake` run as its build runs it: the JIT sources (`device/*.h`, `device/*.cuh`)
/// as headers under `<work>/gen`.
fn bin2h(s: &Setup) -> Result<()> {
    let cu = s.bundle.join("mlx/mlx/backend/cuda");
    let mut sources = Vec::new();
    for e in std::fs::read_dir(cu.join("device")).context("reading the JIT sources")? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".h") || name.ends_with(".cuh") {
            sources.push(format!("device/{name}"));
        }
    }
    sources.sort();
    let root = format!("-DMLX_SOURCE_ROOT={}", cu.display());
    let jit = format!("-DMLX_JIT_SOURCES={}", sources.join(":"));
    let script = cu.join("bin2h.cmake");
    let _dir = s.sh.push_dir(s.work.path());
    cmd!(s.sh, "cmake {root} {jit} -P {script}")
        .quiet()
        .ignore_stdout()
        .run()
        .context("generating the JIT headers (bin2h.cmake)")?;
    Ok(())
}

/// `<work>/h/<name>`: a unit up to the end of its `cu` namespace (the kernels), closed; a unit
/// without that line is a finding naming it (the harness's build.sh stops there too).
fn harness_header(s: &Setup, unit: &std::path::Path, name: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(unit).with_context(|| format!("reading {}", unit.display()))?;
    let mut head = String::new();
    let mut closed = false;
    for line in text.split_inclusive('\n') {
        head.push_str(line);
        if line.trim_end_matches('\n') == "} // namespace cu" {
            closed = true;
            break;
        }
    }
    if !closed {
        let file = unit
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned());
        return Err(Failed::finding(
            &file,
            "has no '} // namespace cu' line to end the harness's header at (cuda/harness/build.sh needs it too)",
        ));
    }
    head.push_str("} // namespace mlx::core\n");
    std::fs::create_dir_all(s.w("h"))?;
    std::fs::write(s.w("h").join(name), head)?;
    Ok(())
}
