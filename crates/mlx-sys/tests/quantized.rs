//! Checks the bridge against the MLX built from the pinned tree: quantization accuracy,
//! quantized_matmul against an f64 reference, batch invariance, errors and threads.

mod common;

use common::Rng;
use mlx_sys::{Array, Dtype, dequantize, matmul, quantize, quantized_matmul};

const BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];
const GROUPS: [i32; 3] = [32, 64, 128];

impl Rng {
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

/// Unpacks MLX's affine layout in Rust: each row of `cols` values is a little-endian bit
/// stream of `bits`-wide codes spread over `cols * bits / 32` u32 words.
fn dequantize_ref(
    q: &[u32],
    scales: &[f32],
    biases: &[f32],
    rows: usize,
    cols: usize,
    group: usize,
    bits: usize,
) -> Vec<f64> {
    let words = cols * bits / 32;
    let groups = cols / group;
    assert_eq!(q.len(), rows * words);
    assert_eq!(scales.len(), rows * groups);
    let mask = (1u64 << bits) - 1;
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &q[r * words..(r + 1) * words];
        for c in 0..cols {
            let bit = c * bits;
            let (w, off) = (bit / 32, bit % 32);
            let mut v = u64::from(row[w]) >> off;
            if off + bits > 32 {
                v |= u64::from(row[w + 1]) << (32 - off);
            }
            let code = (v & mask) as f64;
            let g = r * groups + c / group;
            out.push(f64::from(scales[g]) * code + f64::from(biases[g]));
        }
    }
    out
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn quantize_dequantize_round_trip_is_within_one_and_a_half_steps() {
    // Bound: MLX snaps the group's larger-magnitude extreme exactly onto a code, which can
    // shrink the step below (max - min) / (2^bits - 1) and clip the other end by less than
    // one step; rounding adds half a step. So |w - dq| <= 1.5 * (max - min) / (2^bits - 1).
    let (rows, cols) = (8usize, 256usize);
    let mut rng = Rng::new(1);
    let data = rng.vec(rows * cols);
    let w = Array::from_f32(&data, &[rows as i32, cols as i32]).unwrap();
    for bits in BITS {
        for group in GROUPS {
            let q = quantize(&w, group, bits).unwrap();
            let g = group as usize;
            assert_eq!(
                q.wq.shape(),
                vec![rows as i32, (cols * bits as usize / 32) as i32]
            );
            assert_eq!(q.scales.shape(), vec![rows as i32, (cols / g) as i32]);
            assert_eq!(q.wq.dtype(), Dtype::Uint32);
            assert_eq!(q.scales.dtype(), Dtype::Float32);
            let dq = dequantize(&q.wq, &q.scales, &q.biases, group, bits)
                .unwrap()
                .to_f32_vec()
                .unwrap();
            assert_eq!(dq.len(), data.len());
            let levels = f64::from((1u32 << bits) - 1);
            let mut worst = 0.0f64;
            for (gi, chunk) in data.chunks(g).enumerate() {
                let max = chunk.iter().copied().fold(f32::MIN, f32::max);
                let min = chunk.iter().copied().fold(f32::MAX, f32::min);
                let step = f64::from(max - min) / levels;
                for (i, &x) in chunk.iter().enumerate() {
                    let err = (f64::from(x) - f64::from(dq[gi * g + i])).abs();
                    assert!(
                        err <= 1.5 * step + 1e-6,
                        "bits={bits} group={group} err={err} step={step}"
                    );
                    worst = worst.max(err / step);
                }
            }
            // Quantization is lossy at every width here: a zero error would mean a broken test.
            assert!(
                worst > 0.1,
                "bits={bits} group={group}: suspiciously exact ({worst})"
            );

            // The Rust unpacking used by the matmul reference agrees with MLX's dequantize.
            let r = dequantize_ref(
                &q.wq.to_u32_vec().unwrap(),
                &q.scales.to_f32_vec().unwrap(),
                &q.biases.to_f32_vec().unwrap(),
                rows,
                cols,
                g,
                bits as usize,
            );
            let d = max_abs_diff(&dq, &r);
            assert!(
                d <= 1e-6,
                "bits={bits} group={group}: Rust unpack differs from MLX by {d}"
            );
        }
    }
}

#[test]
fn quantized_matmul_matches_f64_reference() {
    // Every (bits, group, transpose). The weight's last axis is the quantized one: (N, K) for
    // transpose (out = x W^T), (K, N) otherwise (out = x W). The bound is relative to
    // sum_k |x_k w_kn|, which caps any f32 accumulation order's error.
    let (m, k, n) = (5usize, 256usize, 128usize);
    let mut rng = Rng::new(2);
    let xs = rng.vec(m * k);
    let x = Array::from_f32(&xs, &[m as i32, k as i32]).unwrap();
    for transpose in [true, false] {
        let (wr, wc) = if transpose { (n, k) } else { (k, n) };
        let wdata = rng.vec(wr * wc);
        let w = Array::from_f32(&wdata, &[wr as i32, wc as i32]).unwrap();
        for bits in BITS {
            for group in GROUPS {
                let q = quantize(&w, group, bits).unwrap();
                let wd = dequantize_ref(
                    &q.wq.to_u32_vec().unwrap(),
                    &q.scales.to_f32_vec().unwrap(),
                    &q.biases.to_f32_vec().unwrap(),
                    wr,
                    wc,
                    group as usize,
                    bits as usize,
                );
                let out = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, transpose, group, bits)
                    .unwrap();
                assert_eq!(out.shape(), vec![m as i32, n as i32]);
                let got = out.to_f32_vec().unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let (mut exact, mut mag) = (0.0f64, 0.0f64);
                        for kk in 0..k {
                            let wv = if transpose {
                                wd[j * k + kk]
                            } else {
                                wd[kk * n + j]
                            };
                            let p = f64::from(xs[i * k + kk]) * wv;
                            exact += p;
                            mag += p.abs();
                        }
                        let err = (f64::from(got[i * n + j]) - exact).abs();
                        assert!(
                            err <= 1e-5 * mag + 1e-6,
                            "bits={bits} group={group} transpose={transpose} ({i},{j}): got {} want {exact} (|.|-sum {mag})",
                            got[i * n + j]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn quantized_matmul_rows_do_not_depend_on_batch_size() {
    // A decode step (M=1) must produce exactly the row a batched prefill produces on CPU.
    let (k, n) = (256usize, 96usize);
    let mut rng = Rng::new(3);
    for (bits, group, transpose) in [
        (4, 64, true),
        (3, 32, true),
        (8, 128, false),
        (6, 64, false),
    ] {
        let (wr, wc) = if transpose { (n, k) } else { (k, n) };
        let wc = if transpose { wc } else { 128 };
        let n = if transpose { n } else { 128 };
        let w = Array::from_f32(&rng.vec(wr * wc), &[wr as i32, wc as i32]).unwrap();
        let q = quantize(&w, group, bits).unwrap();
        for m in 2..=16usize {
            let xs = rng.vec(m * k);
            let batch = quantized_matmul(
                &Array::from_f32(&xs, &[m as i32, k as i32]).unwrap(),
                &q.wq,
                &q.scales,
                &q.biases,
                transpose,
                group,
                bits,
            )
            .unwrap()
            .to_f32_vec()
            .unwrap();
            for r in 0..m {
                let one = quantized_matmul(
                    &Array::from_f32(&xs[r * k..(r + 1) * k], &[1, k as i32]).unwrap(),
                    &q.wq,
                    &q.scales,
                    &q.biases,
                    transpose,
                    group,
                    bits,
                )
                .unwrap()
                .to_f32_vec()
                .unwrap();
                let a: Vec<u32> = one.iter().map(|v| v.to_bits()).collect();
                let b: Vec<u32> = batch[r * n..(r + 1) * n]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(
                    a, b,
                    "bits={bits} group={group} transpose={transpose} M={m} row={r}"
                );
            }
        }
    }
}

#[test]
fn matmul_matches_reference() {
    let (m, k, n) = (7usize, 33usize, 9usize);
    let mut rng = Rng::new(4);
    let (a, b) = (rng.vec(m * k), rng.vec(k * n));
    let out = matmul(
        &Array::from_f32(&a, &[m as i32, k as i32]).unwrap(),
        &Array::from_f32(&b, &[k as i32, n as i32]).unwrap(),
    )
    .unwrap();
    assert_eq!(out.shape(), vec![m as i32, n as i32]);
    let got = out.to_f32_vec().unwrap();
    for i in 0..m {
        for j in 0..n {
            let exact: f64 = (0..k)
                .map(|kk| f64::from(a[i * k + kk]) * f64::from(b[kk * n + j]))
                .sum();
            let mag: f64 = (0..k)
                .map(|kk| (f64::from(a[i * k + kk]) * f64::from(b[kk * n + j])).abs())
                .sum();
            assert!((f64::from(got[i * n + j]) - exact).abs() <= 1e-6 * mag + 1e-7);
        }
    }
}

#[test]
fn half_and_bfloat_bits_round_trip() {
    // 1.0, -2.0, 0.5, 65504 (f16 max) in f16; 1.0, -2.0, 0.5, 3.0 in bf16.
    let f16 = [0x3C00u16, 0xC000, 0x3800, 0x7BFF];
    let a = Array::from_f16_bits(&f16, &[2, 2]).unwrap();
    assert_eq!(a.dtype(), Dtype::Float16);
    assert_eq!(a.shape(), vec![2, 2]);
    assert_eq!(a.to_u16_bits().unwrap(), f16);
    assert_eq!(a.to_f32_vec().unwrap(), vec![1.0, -2.0, 0.5, 65504.0]);

    let bf16 = [0x3F80u16, 0xC000, 0x3F00, 0x4040];
    let b = Array::from_bf16_bits(&bf16, &[4]).unwrap();
    assert_eq!(b.dtype(), Dtype::Bfloat16);
    assert_eq!(b.to_u16_bits().unwrap(), bf16);
    assert_eq!(b.to_f32_vec().unwrap(), vec![1.0, -2.0, 0.5, 3.0]);

    // f32 -> f16 through MLX matches the bit patterns above.
    let c = Array::from_f32(&[1.0, -2.0, 0.5, 65504.0], &[4])
        .unwrap()
        .astype(Dtype::Float16)
        .unwrap();
    assert_eq!(c.to_u16_bits().unwrap(), f16);
}

#[test]
fn quantized_matmul_in_half_precision_tracks_f32() {
    // f16 and bf16 activations/scales go through the same kernel family; compare with f32.
    let (m, k, n, group, bits) = (3usize, 128usize, 64usize, 64, 4);
    let mut rng = Rng::new(5);
    let xs = rng.vec(m * k);
    let w = Array::from_f32(&rng.vec(n * k), &[n as i32, k as i32]).unwrap();
    let x32 = Array::from_f32(&xs, &[m as i32, k as i32]).unwrap();
    let q = quantize(&w, group, bits).unwrap();
    let want = quantized_matmul(&x32, &q.wq, &q.scales, &q.biases, true, group, bits)
        .unwrap()
        .to_f32_vec()
        .unwrap();
    for (dt, tol) in [(Dtype::Float16, 2e-2f32), (Dtype::Bfloat16, 1e-1f32)] {
        let x = x32.astype(dt).unwrap();
        let s = q.scales.astype(dt).unwrap();
        let b = q.biases.astype(dt).unwrap();
        let out = quantized_matmul(&x, &q.wq, &s, &b, true, group, bits).unwrap();
        assert_eq!(out.dtype(), dt);
        let got = out.to_f32_vec().unwrap();
        let scale = want.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= tol * scale, "{dt:?}: {g} vs {w}");
        }
    }
}

#[test]
fn invalid_inputs_come_back_as_errors() {
    let mut rng = Rng::new(6);
    let w = Array::from_f32(&rng.vec(4 * 128), &[4, 128]).unwrap();

    let e = quantize(&w, 16, 4).unwrap_err();
    assert!(
        e.message()
            .contains("group_size must be 32, 64 or 128, got 16"),
        "{e}"
    );
    let e = quantize(&w, 64, 7).unwrap_err();
    assert!(e.message().contains("bits must be"), "{e}");
    // Not divisible by the group: MLX's own message.
    let odd = Array::from_f32(&rng.vec(2 * 96), &[2, 96]).unwrap();
    let e = quantize(&odd, 64, 4).unwrap_err();
    assert!(
        e.message().contains("[quantize]") && e.message().contains("divisible"),
        "{e}"
    );

    let q = quantize(&w, 64, 4).unwrap();
    // x has K=64 but w expands to K=128.
    let x = Array::from_f32(&rng.vec(2 * 64), &[2, 64]).unwrap();
    let e = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, 64, 4).unwrap_err();
    assert!(
        e.message().contains("[quantized_matmul]") && e.message().contains("does not match"),
        "{e}"
    );
    // Group size disagreeing with the scales' shape.
    let x = Array::from_f32(&rng.vec(2 * 128), &[2, 128]).unwrap();
    let e = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, 32, 4).unwrap_err();
    assert!(e.message().contains("incompatible"), "{e}");
    // A group size the kernel would reject inside eval is caught before.
    let e = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, 256, 4).unwrap_err();
    assert!(e.message().contains("group_size"), "{e}");

    let e = matmul(&x, &x).unwrap_err();
    assert!(e.message().contains("[matmul]"), "{e}");
    let e = Array::from_f32(&[1.0, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert!(e.message().contains("4 elements but data has 3"), "{e}");
    let e = dequantize(&q.wq, &q.scales, &q.biases, 64, 3).unwrap_err();
    assert!(e.message().contains("[dequantize]"), "{e}");
    let e = q.scales.to_u32_vec().unwrap_err();
    assert!(e.message().contains("needs uint32"), "{e}");

    // The process is still usable after errors.
    assert_eq!(q.wq.to_u32_vec().unwrap().len(), 4 * 128 * 4 / 32);
}

#[test]
fn arrays_move_between_threads() {
    let (k, n) = (128usize, 64usize);
    let mut rng = Rng::new(7);
    let w = Array::from_f32(&rng.vec(n * k), &[n as i32, k as i32]).unwrap();
    let q = std::sync::Arc::new(quantize(&w, 32, 4).unwrap());
    let xs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(2 * k)).collect();
    let serial: Vec<Vec<f32>> = xs
        .iter()
        .map(|x| {
            let x = Array::from_f32(x, &[2, k as i32]).unwrap();
            quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, 32, 4)
                .unwrap()
                .to_f32_vec()
                .unwrap()
        })
        .collect();
    let handles: Vec<_> = xs
        .into_iter()
        .map(|x| {
            let q = q.clone();
            // Built on this thread, evaluated on another.
            let xa = Array::from_f32(&x, &[2, k as i32]).unwrap();
            let lazy = quantized_matmul(&xa, &q.wq, &q.scales, &q.biases, true, 32, 4).unwrap();
            std::thread::spawn(move || lazy.to_f32_vec().unwrap())
        })
        .collect();
    let parallel: Vec<Vec<f32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(serial, parallel);
}
