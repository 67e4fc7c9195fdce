//! The CPU row-streamed quantized matmul (transposed weights) against the row-by-row loops:
//! bit identity with M = 1 for every bits x group size x dtype, and proof that the policy
//! switch really selects the kernel (path counters, not timing).

use std::sync::Mutex;

mod common;

use common::{Rng, bits_of};
use mlx_sys::{Array, Dtype, qmm_policy, quantize, quantized_matmul};

const BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];
const GROUPS: [i32; 3] = [32, 64, 128];
const DTYPES: [Dtype; 3] = [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16];
/// The largest M the overlay streams; one more must take the row-by-row loops.
const STREAM_MAX_ROWS: usize = 16;

/// The policy is process-wide: tests that set it or read its counters run one at a time.
static POLICY: Mutex<()> = Mutex::new(());

impl Rng {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    POLICY.lock().unwrap_or_else(|e| e.into_inner())
}

fn require_policy() {
    assert!(
        qmm_policy::available(),
        "the linked MLX lacks overlay 0002-cpu-qmm-t-policy-switch; rebuild with `cargo xtask build-mlx`"
    );
}

struct Case {
    q: mlx_sys::Quantized,
    bits: i32,
    group: i32,
}

impl Case {
    fn new(rng: &mut Rng, n: usize, k: usize, bits: i32, group: i32, dtype: Dtype) -> Case {
        let w = Array::from_f32(&rng.vec(n * k), &[n as i32, k as i32]).unwrap();
        let mut q = quantize(&w, group, bits).unwrap();
        if dtype != Dtype::Float32 {
            q.scales = q.scales.astype(dtype).unwrap();
            q.biases = q.biases.astype(dtype).unwrap();
        }
        Case { q, bits, group }
    }

    fn matmul(&self, x: &Array) -> Array {
        let out = quantized_matmul(
            x,
            &self.q.wq,
            &self.q.scales,
            &self.q.biases,
            true,
            self.group,
            self.bits,
        )
        .unwrap();
        out.eval().unwrap();
        out
    }
}

/// `rows` rows of x (row-major f32 data) as an array of `dtype`.
fn x_array(data: &[f32], rows: usize, k: usize, dtype: Dtype) -> Array {
    let x = Array::from_f32(&data[..rows * k], &[rows as i32, k as i32]).unwrap();
    if dtype == Dtype::Float32 {
        x
    } else {
        x.astype(dtype).unwrap()
    }
}

#[test]
fn streamed_rows_are_bit_identical_to_m1_for_every_bits_group_and_dtype() {
    let _g = lock();
    require_policy();
    qmm_policy::set_streamed(true).unwrap();
    // N odd (the kernel takes output columns 2, 4 or 8 at a time), K of one group and of
    // several groups, and for f32 (the vector path) a K of 40 groups, which spans several of
    // its K blocks for every tile height; every M from 2 to one past the limit (padded row
    // tiles of 4, 8, 12 and 16 all occur).
    let n = 67usize;
    let mut rng = Rng::new(11);
    let mut checked = 0usize;
    let before = qmm_policy::path_counts().unwrap();
    let mut streamed_calls = 0u64;
    for dtype in DTYPES {
        for bits in BITS {
            for group in GROUPS {
                let mut ks = vec![group as usize, 5 * group as usize];
                if matches!(dtype, Dtype::Float32) {
                    ks.push(40 * group as usize);
                }
                for k in ks {
                    let case = Case::new(&mut rng, n, k, bits, group, dtype);
                    let xs = rng.vec((STREAM_MAX_ROWS + 1) * k);
                    let alone: Vec<Vec<u32>> = (0..=STREAM_MAX_ROWS)
                        .map(|r| {
                            let x = x_array(&xs[r * k..], 1, k, dtype);
                            bits_of(&case.matmul(&x))
                        })
                        .collect();
                    for m in 2..=STREAM_MAX_ROWS + 1 {
                        let out = case.matmul(&x_array(&xs, m, k, dtype));
                        assert_eq!(out.dtype(), dtype);
                        let got = bits_of(&out);
                        for (r, want) in alone.iter().take(m).enumerate() {
                            assert_eq!(
                                &got[r * n..(r + 1) * n],
                                want.as_slice(),
                                "{dtype:?} bits={bits} group={group} K={k} M={m} row={r}"
                            );
                        }
                        streamed_calls += u64::from(m <= STREAM_MAX_ROWS);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, (3 * 2 + 1) * 6 * 3 * STREAM_MAX_ROWS);
    // Every batched call with M <= 16 went through the streamed kernels.
    let after = qmm_policy::path_counts().unwrap();
    assert_eq!(after.streamed - before.streamed, streamed_calls);
}

#[test]
fn the_switch_selects_the_kernel_and_both_agree() {
    let _g = lock();
    require_policy();
    let (n, k, group, bits) = (96usize, 256usize, 64, 4);
    let mut rng = Rng::new(12);
    let case = Case::new(&mut rng, n, k, bits, group, Dtype::Float32);
    let xs = rng.vec(32 * k);

    let run = |streamed: bool, m: usize| {
        qmm_policy::set_streamed(streamed).unwrap();
        assert_eq!(qmm_policy::streamed().unwrap(), streamed);
        let before = qmm_policy::path_counts().unwrap();
        let out = bits_of(&case.matmul(&x_array(&xs, m, k, Dtype::Float32)));
        let after = qmm_policy::path_counts().unwrap();
        let delta = (
            after.streamed - before.streamed,
            after.row_by_row - before.row_by_row,
        );
        (out, delta)
    };

    let (on, d_on) = run(true, 8);
    assert_eq!(d_on, (1, 0), "policy on, M=8 must stream");
    let (off, d_off) = run(false, 8);
    assert_eq!(d_off, (0, 1), "policy off, M=8 must run row by row");
    assert_eq!(on, off, "the two kernels must agree bit for bit");

    // Outside [2, 16] the row-by-row loops run whatever the policy says.
    for m in [1, STREAM_MAX_ROWS + 1, 32] {
        let (_, d) = run(true, m);
        assert_eq!(d, (0, 1), "M={m} is outside the streamed range");
    }

    // A batched x (2 x 5 rows) is one kernel call per batch element.
    qmm_policy::set_streamed(true).unwrap();
    let before = qmm_policy::path_counts().unwrap();
    let x = Array::from_f32(&xs[..10 * k], &[2, 5, k as i32]).unwrap();
    let out = bits_of(&case.matmul(&x));
    let after = qmm_policy::path_counts().unwrap();
    assert_eq!(after.streamed - before.streamed, 2);
    let flat = bits_of(&case.matmul(&x_array(&xs, 5, k, Dtype::Float32)));
    assert_eq!(&out[..5 * n], flat.as_slice());
}

/// Set in the child processes of `the_environment_sets_the_starting_policy`.
const CHILD: &str = "MLX_SYS_POLICY_CHILD";

/// Runs in a child process only: reports the starting policy the library read from
/// MLX_CPU_QMM_T_POLICY (the parent checks it).
#[test]
fn policy_child_reports_the_starting_policy() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    println!(
        "starting-policy-streamed={}",
        qmm_policy::streamed().unwrap()
    );
}

/// MLX_CPU_QMM_T_POLICY picks the starting policy of a process (what `cargo xtask test-upstream`
/// uses to run MLX's own suites under each policy), and an unknown value stops the process with
/// a message instead of running either kernel.
#[test]
fn the_environment_sets_the_starting_policy() {
    require_policy();
    let child = |value: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "policy_child_reports_the_starting_policy",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1");
        match value {
            Some(v) => cmd.env("MLX_CPU_QMM_T_POLICY", v),
            None => cmd.env_remove("MLX_CPU_QMM_T_POLICY"),
        };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    for (value, want) in [
        (None, true),
        (Some("streamed"), true),
        (Some("upstream"), false),
    ] {
        let (ok, text) = child(value);
        assert!(ok, "{value:?}: {text}");
        assert!(
            text.contains(&format!("starting-policy-streamed={want}")),
            "{value:?}: {text}"
        );
    }
    let (ok, text) = child(Some("fast"));
    assert!(!ok, "an unknown policy must stop the process: {text}");
    assert!(
        text.contains("MLX_CPU_QMM_T_POLICY must be streamed or upstream, got 'fast'"),
        "{text}"
    );
}
