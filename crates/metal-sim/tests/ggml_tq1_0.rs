//! ggml's TQ1_0 Metal kernels (overlays/ggml 0002-0004) on the CPU:
//! verification tiers (i)-(iii) of issue 17 (docs/kernels/ggml-tq1_0.md).
//! The pinned ggml with its series is read through the overlay engine.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use metal_sim::compile::Compiler;
use metal_sim::extract::TreeFiles;
use metal_sim::ggml;
use serde_json::Value;

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn compiler() -> Compiler {
    Compiler::detect(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("metal-sim-ggml")).unwrap()
}

fn patched() -> &'static TreeFiles {
    static T: OnceLock<TreeFiles> = OnceLock::new();
    T.get_or_init(|| ggml::load_pinned(workspace(), "ggml").unwrap().0)
}

/// The emulator binary of the patched tree, built once per test process.
fn binary() -> &'static PathBuf {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| ggml::build(patched(), &compiler()).unwrap().path)
}

fn run(reqs: &[&str]) -> Vec<Value> {
    let reqs: Vec<String> = reqs.iter().map(|s| s.to_string()).collect();
    let out = ggml::run(binary(), &reqs).unwrap();
    for v in &out {
        println!("{v}");
    }
    out
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn no_error(v: &Value) {
    assert_eq!(v["error"].as_str(), Some(""), "{v}");
}

/// Tier (i): all 256 byte values x every digit (5 for qs, 4 for qh) at every
/// position of a block, six scales (signs, a non-dyadic d, subnormals),
/// through the Metal dequantize_tq1_0 into float4x4 and half4x4: bitwise
/// equal to ggml's dequantize_row_tq1_0 (compiled from the tree as C).
#[test]
fn tier1_dequantize_exhaustive_bitwise() {
    let v = &run(&["deq"])[0];
    assert_eq!(u(v, "compared"), 6 * 256 * 256 * 2);
    assert_eq!(u(v, "mismatches"), 0, "{v}");
    assert_eq!(u(v, "wrong_digit_pairs"), 0, "{v}");
}

/// Tier (ii): kernel_get_rows_tq1_0 and kernel_cpy_tq1_0_{f32,f16}, launched
/// as ggml_metal_op_get_rows / ggml_metal_op_cpy launch them, on random
/// blocks (every byte uniform in 0..255, random half scales), one to four
/// blocks per row: bitwise equal to dequantize_row_tq1_0 (f16: the CPU value
/// rounded to half), every output written.
#[test]
fn tier2_get_rows_and_cpy_bitwise() {
    let out = run(&[
        "get_rows 1 7 256 5",
        "get_rows 2 5 1024 9",
        "get_rows 3 3 768 4",
        "cpy 4 3 512 f32",
        "cpy 5 2 1024 f16",
        "cpy 6 4 256 f16",
    ]);
    for v in &out {
        no_error(v);
        assert!(u(v, "compared") > 0, "{v}");
        assert_eq!(u(v, "mismatches"), 0, "{v}");
        assert_eq!(u(v, "unwritten"), 0, "{v}");
    }
}

/// test-backend-ops' MUL_MAT / MUL_MAT_ID error bound (normalized mean
/// squared error against the CPU backend).
const NMSE_MAX: f64 = 5e-4;

/// Tier (iii), mat-vec: kernel_mul_mv_tq1_0_f32 launched as
/// ggml_metal_op_mul_mat does for ne11 <= 8 (nr0/nsg from the dispatch),
/// single-token and small batches, one to four blocks per row, a row count
/// that leaves the last simdgroup partly idle: within NMSE 5e-4 of ggml's CPU
/// result (src1 through q8_K, vec_dot_tq1_0_q8_K) and within float rounding
/// of a float64 reference on the same quantized weights.
#[test]
fn tier3_mul_mv_matches_cpu_and_float64() {
    let out = run(&[
        "mul_mv 11 16 256 1",
        "mul_mv 12 13 512 1",
        "mul_mv 13 40 768 3",
        "mul_mv 14 32 1024 8",
        // two passes of the block loop (NBLOCK = 4 blocks per pass)
        "mul_mv 15 8 2048 1",
    ]);
    for v in &out {
        no_error(v);
        assert_eq!(u(v, "unwritten"), 0, "{v}");
        assert!(f(v, "nmse_cpu") < NMSE_MAX, "{v}");
        assert!(f(v, "max_rel_ref") < 1e-5, "{v}");
    }
}

fn assert_product(v: &Value) {
    no_error(v);
    assert!(u(v, "outputs") > 0, "{v}");
    assert_eq!(u(v, "unwritten"), 0, "{v}");
    assert!(f(v, "nmse_cpu") < NMSE_MAX, "{v}");
    assert!(f(v, "max_rel_ref") < 1e-5, "{v}");
}

/// Tier (iii), mat-mat: kernel_mul_mm_tq1_0_f32 launched as
/// ggml_metal_op_mul_mat does for ne11 > 8 (4 simdgroups, threadgroup
/// memory, barriers, simdgroup 8x8 matrices): full tiles, partial tiles
/// (the bounds-checked store through threadgroup memory), multi-block rows,
/// and the `_f16` entry (half src1).
#[test]
fn tier3_mul_mm_matches_cpu_and_float64() {
    let out = run(&[
        "mul_mm 21 64 256 32",
        "mul_mm 22 72 512 9",
        "mul_mm 23 128 1024 40",
        "mul_mm 24 64 768 17 f16",
    ]);
    for v in &out {
        assert_product(v);
        assert!(u(v, "barriers") > 0, "{v}");
    }
}

/// Tier (iii), MUL_MAT_ID: fewer experts used than available, so a wrong
/// per-expert base offset reads another expert's rows; multi-block rows
/// (k = 512..1024). Mat-vec below 32 tokens (kernel_mul_mv_id_tq1_0_f32,
/// single-token included), map0 + kernel_mul_mm_id_tq1_0_f32 from 32, and
/// kernel_mul_mm_id_tq1_0_f16 (half src1).
#[test]
fn tier3_mul_mat_id_matches_cpu_and_float64() {
    let out = run(&[
        "mul_mv_id 31 8 2 3 16 512",
        "mul_mv_id 32 4 2 1 32 1024",
        "mul_mv_id 33 6 4 5 24 768",
        "mul_mv_id 34 4 2 2 8 2048",
        "mul_mm_id 41 4 2 32 64 512",
        "mul_mm_id 42 8 4 33 72 768",
        "mul_mm_id 43 8 2 40 72 512 f16",
    ]);
    for v in &out {
        assert_product(v);
    }
}

fn run_tree(files: &TreeFiles, reqs: &[&str]) -> Vec<Value> {
    let bin = ggml::build(files, &compiler()).unwrap().path;
    let reqs: Vec<String> = reqs.iter().map(|s| s.to_string()).collect();
    let out = ggml::run(&bin, &reqs).unwrap();
    for v in &out {
        println!("{} {v}", files.label);
    }
    out
}

fn perturbed(func: &str, from: &str, to: &str) -> TreeFiles {
    metal_sim::extract::perturb(patched(), ggml::METAL, func, from, to).unwrap()
}

/// Power: each tier fails on a kernel with a plausible defect (a textual
/// edit of the patched source, compiled like the real one).
/// - the digit decode in half instead of float (the reason it stays float):
///   tier (i) finds mismatches;
/// - the qh values transposed in dequantize_tq1_0 (digit and byte swapped):
///   tiers (i) and (ii) fail, while mul_mm, whose TQ1_0 loader does not call
///   dequantize_tq1_0, still passes (so the mat-mat tier runs the new loader);
/// - a wrong hoisted coefficient in the mat-vec kernel: tier (iii) fails;
/// - in the mat-mat block loader, the digit order of the low qs bytes
///   reversed (steps 0..4), or the qh digits transposed (step 7): mul_mm
///   and mul_mm_id (f32 and f16 src1) fail.
#[test]
fn tiers_fail_on_defective_kernels() {
    let half = perturbed(
        "tq1_0_digit",
        "return floor(b*(3.0f*p)) - 3.0f*floor(b*p);",
        "return floor((float)((half)b*(half)(3.0f*p))) - 3.0f*floor((float)((half)b*(half)p));",
    );
    let v = &run_tree(&half, &["deq"])[0];
    assert!(u(v, "mismatches") > 0, "{v}");
    assert!(u(v, "wrong_digit_pairs") > 0, "{v}");

    let transposed = perturbed("dequantize_tq1_0", "reg_f[n][j] =", "reg_f[j][n] =");
    let out = run_tree(
        &transposed,
        &["deq", "get_rows 1 7 256 5", "mul_mm 21 64 256 32"],
    );
    assert!(u(&out[0], "mismatches") > 0, "{}", out[0]);
    assert!(u(&out[1], "mismatches") > 0, "{}", out[1]);
    assert_product(&out[2]);

    let coef = perturbed(
        "kernel_mul_mv_tq1_0_f32_impl",
        "ca[4] = ya[4];",
        "ca[4] = ya[3];",
    );
    let out = run_tree(&coef, &["mul_mv 11 16 256 1", "mul_mv_id 31 8 2 3 16 512"]);
    for v in &out {
        assert!(f(v, "nmse_cpu") > NMSE_MAX, "{v}");
    }

    let mm = [
        "mul_mm 21 64 256 32",
        "mul_mm 24 64 768 17 f16",
        "mul_mm_id 41 4 2 32 64 512",
        "mul_mm_id 43 8 2 40 72 512 f16",
    ];
    let reversed = perturbed(
        "tq1_0_mm_step",
        "tq1_0_digit(qb[m], s)",
        "tq1_0_digit(qb[m], 4 - s)",
    );
    let qh = perturbed(
        "tq1_0_mm_step",
        "kof[8 + 2*n + j] = 16 + 4*n + 2*t + j;",
        "kof[8 + 2*n + j] = 16 + 4*(2*t + j) + n;",
    );
    for tree in [&reversed, &qh] {
        for v in &run_tree(tree, &mm) {
            no_error(v);
            assert!(f(v, "nmse_cpu") > NMSE_MAX, "{v}");
        }
    }
}

/// The launches above take nr0/nsg from N_R0_TQ1_0 / N_SG_TQ1_0 (the tree's
/// ggml-metal-impl.h); both dispatch switches of ggml-metal-device.cpp
/// (mul_mv and mul_mv_id) must name exactly those for TQ1_0, or the Mac
/// would launch a different grid than the one verified here.
#[test]
fn dispatch_uses_the_verified_nr0_nsg() {
    let dev = patched().get(ggml::DEVICE).unwrap();
    let cases: Vec<&str> = dev.split("case GGML_TYPE_TQ1_0:").skip(1).collect();
    assert_eq!(
        cases.len(),
        2,
        "expected TQ1_0 in the mul_mv and mul_mv_id switches"
    );
    for c in cases {
        let body = &c[..c.find("} break;").unwrap()];
        assert!(body.contains("nsg = N_SG_TQ1_0;"), "{body}");
        assert!(body.contains("nr0 = N_R0_TQ1_0;"), "{body}");
        assert!(!body.contains("smem"), "{body}");
    }
    let pristine = ggml::load_pinned(workspace(), "ggml").unwrap().1;
    assert!(
        !pristine
            .get(ggml::DEVICE)
            .unwrap()
            .contains("GGML_TYPE_TQ1_0")
    );
    assert!(!pristine.get(ggml::METAL).unwrap().contains("tq1_0"));
}
