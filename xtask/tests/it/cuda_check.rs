//! `cargo xtask cuda-check compile | jit-abi` without a GPU or nvcc: a fixture whose upstream has
//! the CUDA units' paths, a stand-in nvcc (`--cuda DIR`) and c++ (on PATH) that record their calls
//! and fail for the unit named in `FAIL_UNIT`, and a stand-in `bin2h.cmake` that writes the JIT
//! sources it is given. The units compiled, with the one flag list (cuda/bundle/nvcc-flags.sh) for
//! sm_90a, the summary line, and exit 1 with the failing unit named.

use std::path::{Path, PathBuf};

use crate::fixture::{Fixture, Out};

const CU: &str = "mlx/backend/cuda";

/// A fixture with the units' paths in its upstream and the harness and benchmark units in the
/// project, and a stand-in toolkit under `<t>/cuda` and `<t>/bin`.
fn fixture() -> Fixture {
    fixture_with_sdpa("// sdpa kernels\n} // namespace cu\n// sdpa host\n")
}

/// [`fixture`] with `sdpa` as the attention unit's text.
fn fixture_with_sdpa(sdpa: &str) -> Fixture {
    let qmv = "// kernels\n} // namespace cu\n// host, left out of the harness's header\n";
    let bin2h = "file(WRITE gen/jit_sources.txt \"${MLX_JIT_SOURCES}\")\n";
    let files = [
        (format!("{CU}/quantized/qmm/qmv.cu"), qmv),
        (format!("{CU}/quantized/qmm/qmm_sm90.cu"), "// qmm\n"),
        (format!("{CU}/quantized/quantized.cpp"), "// host\n"),
        (format!("{CU}/device.cpp"), "// encoder\n"),
        (format!("{CU}/scaled_dot_product_attention.cu"), sdpa),
        (format!("{CU}/device/qmm_sm90.cuh"), "// jit\n"),
        (format!("{CU}/device/utils.h"), "// utils\n"),
        (format!("{CU}/device/notes.txt"), "not a JIT source\n"),
        (format!("{CU}/bin2h.cmake"), bin2h),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    let f = Fixture::new(&files);
    for (p, text) in [
        ("cuda/bundle/build.sh", "echo build\n"),
        ("cuda/harness/profile.cu", "// profile\n"),
        ("cuda/harness/peak.cu", "// peak\n"),
        ("cuda/harness/wgmma.cu", "// wgmma\n"),
        ("cuda/harness/sdpa_rows.cu", "// sdpa rows\n"),
        ("cuda/harness/wgmma_switch.cu", "// switch\n"),
        ("cuda/bench/marlin_bench.cu", "// marlin\n"),
    ] {
        let path = f.root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // Each call on its own line; the folders it is given that the check generated (`gen`, `h`)
    // and the .cu files it compiles, copied after it.
    let stand_in = |name: &str| {
        format!(
            "#!/bin/sh\nlog={log}\necho \"{name} $*\" >> $log\n\
             for a; do case $a in */gen|*/h) cat \"$a\"/* >> $log; echo >> $log;; \
             *host.cu) cat \"$a\" >> $log;; esac; done\n\
             case \"$*\" in *\"$FAIL_UNIT\"*) exit 1;; esac\n\
             case \"$*\" in *wgmma_switch.cu*) o=; for a; do [ \"$o\" = -o ] && o=$a && break; o=$a; done; \
             printf '#!/bin/sh\\necho \"switch: %s\"\\nexit %s\\n' \"$SWITCH_SAYS\" \"$SWITCH_RC\" > \"$o\"; \
             chmod +x \"$o\";; esac\n",
            log = f.t().join("calls.log").display()
        )
    };
    for (dir, name) in [("cuda/bin", "nvcc"), ("bin", "c++")] {
        let path = f.t().join(dir).join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, stand_in(name)).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&path)
            .status()
            .unwrap();
    }
    f
}

/// `cuda-check ARGS --cuda <t>/cuda` with `<t>/bin` first on PATH, failing `fail` (if not empty).
fn check(f: &Fixture, args: &[&str], fail: &str) -> Out {
    check_env(f, args, fail, &[])
}

/// [`check`] with more of the environment (`SWITCH_SAYS`, `SWITCH_RC`: what the stand-in
/// wgmma_switch program prints and its exit status).
fn check_env(f: &Fixture, args: &[&str], fail: &str, env: &[(&str, &str)]) -> Out {
    let cuda: PathBuf = f.t().join("cuda");
    let path = std::env::join_paths(
        std::iter::once(f.t().join("bin"))
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut cmd = f.command(&[&["cuda-check"], args, &["--cuda", cuda.to_str().unwrap()]].concat());
    cmd.env("PATH", path)
        .env("FAIL_UNIT", if fail.is_empty() { "\u{1}" } else { fail })
        .envs(env.iter().copied());
    f.out(cmd.output().unwrap())
}

fn calls(f: &Fixture) -> String {
    std::fs::read_to_string(f.t().join("calls.log")).unwrap_or_default()
}

fn call<'a>(calls: &'a str, unit: &str) -> &'a str {
    calls
        .lines()
        .find(|l| l.contains(&format!("{unit} -o ")) || l.ends_with(unit))
        .unwrap_or_else(|| panic!("no call for {unit}: {calls}"))
}

/// Every unit compiled, in order, with MLX's flags for sm_90a (Marlin's for marlin_bench.cu), the
/// bundle's includes, the JIT headers and the harness's header generated; the summary line last.
#[test]
fn compile_calls_nvcc_for_every_unit_with_the_one_flag_list() {
    let f = fixture();
    let out = check(&f, &["compile"], "").code(0);
    assert!(
        out.stdout.starts_with("cuda-compile-check: qmv.cu, qmm_sm90.cu and scaled_dot_product_attention.cu (sm_90a), quantized.cpp and device.cpp, the harness's profile.cu, peak.cu, wgmma.cu and sdpa_rows.cu, and marlin_bench.cu compile, wgmma_switch.cu passes ("),
        "{}",
        out.snapshot()
    );
    let calls = calls(&f);
    let units: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("nvcc ") || l.starts_with("c++ "))
        .collect();
    assert_eq!(units.len(), 11, "{calls}");
    let mlx_flags = "-std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --extended-lambda";
    for unit in [
        "qmv.cu",
        "scaled_dot_product_attention.cu",
        "qmm_sm90.cu",
        "profile.cu",
        "peak.cu",
        "wgmma.cu",
        "sdpa_rows.cu",
    ] {
        let l = call(&calls, unit);
        assert!(l.starts_with(&format!("nvcc {mlx_flags} ")), "{l}");
        assert!(l.contains(" -DFMT_HEADER_ONLY -DMLX_USE_CUDA -c "), "{l}");
        assert!(l.contains("/mlx-cuda-bundle/deps/cutlass/include "), "{l}");
    }
    assert!(call(&calls, "qmm_sm90.cu").contains("/gen -I "), "{calls}");
    for unit in ["profile.cu", "peak.cu", "wgmma.cu", "sdpa_rows.cu"] {
        let l = call(&calls, unit);
        assert!(l.contains("/h -I cuda/harness -I "), "{l}");
    }
    // The switch's program is linked (no -c) against the toolkit's libraries, then run.
    let switch = call(&calls, "wgmma_switch.cu");
    assert!(
        switch.starts_with(&format!("nvcc {mlx_flags} ")),
        "{switch}"
    );
    assert!(
        switch.contains("/cuda/lib -L ") && !switch.contains(" -c "),
        "{switch}"
    );
    assert!(out.stderr.contains("\nswitch:\n"), "{}", out.snapshot());
    let marlin = call(&calls, "cuda/bench/marlin_bench.cu");
    assert!(
        marlin.starts_with("nvcc -std=c++17 -O3 -arch=sm_90a "),
        "{marlin}"
    );
    for unit in ["quantized/quantized.cpp", "backend/cuda/device.cpp"] {
        let cpp = call(&calls, unit);
        assert!(
            cpp.starts_with("c++ -std=c++20 -fsyntax-only -isystem "),
            "{cpp}"
        );
    }
    // bin2h.cmake was given the JIT sources (not notes.txt); the harness's header is qmv.cu's
    // kernels, its namespace closed.
    assert!(
        calls.contains("\ndevice/qmm_sm90.cuh:device/utils.h\n"),
        "{calls}"
    );
    assert!(
        calls.contains("// kernels\n} // namespace cu\n} // namespace mlx::core\n"),
        "{calls}"
    );
    assert!(
        calls.contains("// sdpa kernels\n} // namespace cu\n} // namespace mlx::core\n"),
        "{calls}"
    );
    assert!(!calls.contains("// sdpa host"), "{calls}");
}

/// A unit the harness takes its kernels from without the line that ends them is a finding naming
/// it (exit 1), before any harness unit is compiled.
#[test]
fn compile_names_the_unit_whose_kernels_have_no_end() {
    let f = fixture_with_sdpa("// sdpa kernels, never closed\n");
    let out = check(&f, &["compile"], "").code(1);
    assert!(
        out.stderr.contains(
            "cuda-compile-check: scaled_dot_product_attention.cu: has no '} // namespace cu' line"
        ),
        "{}",
        out.snapshot()
    );
    assert!(!calls(&f).contains("profile.cu"), "{}", calls(&f));
}

/// A unit that does not compile stops the check: exit 1, the unit named, nothing compiled after it.
#[test]
fn compile_names_the_unit_that_does_not_compile() {
    let f = fixture();
    let out = check(&f, &["compile"], "qmm_sm90.cu").code(1);
    assert!(
        out.stderr
            .contains("cuda-compile-check: qmm_sm90.cu: does not compile: "),
        "{}",
        out.snapshot()
    );
    assert!(!out.stdout.contains("compile ("), "{}", out.snapshot());
    let calls = calls(&f);
    assert!(!calls.contains("profile.cu"), "{calls}");
    let f = fixture();
    let out = check(&f, &["compile"], "quantized.cpp").code(1);
    assert!(
        out.stderr
            .contains("cuda-compile-check: quantized.cpp: does not compile: "),
        "{}",
        out.snapshot()
    );
}

/// The switch's program failing a case is the check's finding: exit 1, the unit and what the
/// program said; marlin_bench.cu (after it) not compiled.
#[test]
fn compile_reports_the_switch_program_that_fails() {
    let f = fixture();
    let says = "FAIL taken (MLX_CUDA_QMV_WGMMA=0)";
    let env = [("SWITCH_SAYS", says), ("SWITCH_RC", "1")];
    let out = check_env(&f, &["compile"], "", &env).code(1);
    assert!(
        out.stderr.contains(&format!(
            "cuda-compile-check: wgmma_switch.cu: switch: {says} (exit status: 1)"
        )),
        "{}",
        out.snapshot()
    );
    assert!(!calls(&f).contains("marlin_bench.cu"), "{}", calls(&f));
}

/// jit-abi builds the host's program from the three instantiations, the bundle's JIT source
/// included; when nvcc cannot build it, exit 1 naming host.cu. A toolkit folder that is not one is
/// an error (exit 2).
#[test]
fn jit_abi_names_the_host_program_when_it_does_not_compile() {
    let f = fixture();
    let nvrtc = f.t().join("nvrtc");
    let out = check(
        &f,
        &["jit-abi", "--nvrtc", nvrtc.to_str().unwrap()],
        "host.cu",
    )
    .code(1);
    assert!(
        out.stderr
            .contains("cuda-jit-abi-check: host.cu: does not compile: "),
        "{}",
        out.snapshot()
    );
    let calls = calls(&f);
    let host = call(&calls, "host.cu");
    assert!(
        host.starts_with("nvcc -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -w "),
        "{host}"
    );
    assert!(calls.contains("/mlx-cuda-bundle/mlx/mlx/backend/cuda/device/qmm_sm90.cuh\"\n"));
    assert_eq!(
        calls.matches("qmm_sm90_jit_defines<K>()").count(),
        3,
        "{calls}"
    );
    assert!(calls.contains("qmm_sm90_kernel_t<64, cutlass::bfloat16_t, uint8_t, "));
    let missing: &Path = &f.t().join("no-such-cuda");
    let out = f
        .xtask(&["cuda-check", "compile", "--cuda", missing.to_str().unwrap()])
        .code(2);
    assert!(
        out.stderr
            .contains("no bin/nvcc in $TMP/no-such-cuda: not a CUDA folder"),
        "{}",
        out.snapshot()
    );
}
