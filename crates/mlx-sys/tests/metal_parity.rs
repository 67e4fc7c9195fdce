//! On the GPU: under the `streamed` policy every row of an M-row affine quantized mat-vec is
//! bitwise equal to the same row computed alone (M = 1), for the shapes that take each
//! streamed kernel (qmv_fast_streamed: N % 8 == 0 and K aligned; qmv_streamed: otherwise),
//! every vector tile V = 2..5 and a partial last tile, in float16, bfloat16 and float32.
//! The emulator (crates/metal-sim, claim 5) shows the same on the CPU; this is the hardware's
//! word: the Metal compiler's contraction and the real simd_sum.
//!
//! macOS with MLX built with Metal only: `cargo test -p mlx-sys --features metal --test metal_parity`.

#![cfg(feature = "metal")]

mod common;

use common::bits_of;
use mlx_sys::metal_policy::{QmvBatchPolicy, qmv_batch_policy, set_qmv_batch_policy};
use mlx_sys::{Array, Dtype, quantize, quantized_matmul};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // ±[1/8, 1): never zero, far from denormals (the emulator's inputs).
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            let mag = 0.125 + 0.875 * u;
            if s & 1 == 0 { mag } else { -mag }
        })
        .collect()
}

/// Every row of the M-row product equals the 1-row product of that row, bit for bit.
fn check(dtype: Dtype, n: usize, k: usize, m: usize, group: i32, bits: i32) -> Result<(), String> {
    let w = Array::from_f32(&values(n * k, 7), &[n as i32, k as i32]).unwrap();
    let w = w.astype(dtype).unwrap();
    let q = quantize(&w, group, bits).unwrap();
    let xs = values(m * k, 11 + m as u64);
    let x = Array::from_f32(&xs, &[m as i32, k as i32])
        .unwrap()
        .astype(dtype)
        .unwrap();
    let y = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, group, bits).unwrap();
    let y = bits_of(&y);
    for row in 0..m {
        let xr = Array::from_f32(&xs[row * k..(row + 1) * k], &[1, k as i32])
            .unwrap()
            .astype(dtype)
            .unwrap();
        let yr = quantized_matmul(&xr, &q.wq, &q.scales, &q.biases, true, group, bits).unwrap();
        if bits_of(&yr) != y[row * n..(row + 1) * n] {
            return Err(format!(
                "{dtype:?} N={n} K={k} M={m} gs={group} b={bits}: row {row} differs"
            ));
        }
    }
    Ok(())
}

/// One test: the policy is process-wide, so the cases must not run on parallel test threads.
#[test]
fn streamed_rows_equal_single_row_results() {
    set_qmv_batch_policy(QmvBatchPolicy::Streamed).unwrap();
    assert_eq!(qmv_batch_policy(), QmvBatchPolicy::Streamed);
    let mut failures = Vec::new();
    for dtype in [Dtype::Float16, Dtype::Bfloat16, Dtype::Float32] {
        // (N, K): qmv_fast-eligible, N not a multiple of 8, N < 8, K not 512-aligned.
        for (n, k) in [(4096, 4096), (4100, 4096), (5, 1024), (512, 640)] {
            for m in [2, 3, 4, 5, 7, 11] {
                for (group, bits) in [(64, 4), (32, 3), (128, 8)] {
                    if let Err(e) = check(dtype, n, k, m, group, bits) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    set_qmv_batch_policy(QmvBatchPolicy::Upstream).unwrap();
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
