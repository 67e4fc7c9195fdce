//! Metal quantized mat-vec for M = 1..limit under the fork's three M >= 2 policies
//! (`upstream` = qmv_wide on gen 15+, `narrow` = the M = 1 kernel with grid.x = M,
//! `streamed` = the order-preserving twin), 4-bit, group size 64, float16, on the shapes of a
//! 7-8B model's projections. Per M it prints the median time of each policy and the recovered
//! fraction (t_narrow − t_streamed) / (t_narrow − t_wide): 1 means streamed is as fast as
//! qmv_wide, 0 means it gains nothing over narrow. Policies are interleaved per repetition so
//! drift (thermal, clocks) hits all three alike.
//!
//! macOS with MLX built with Metal only:
//! `cargo run --release -p mlx-sys --features metal --example bench_qmv -- [--json] [--reps N] [--limit M]`

// Without the feature there is no Metal policy to switch; main says so instead of the build
// failing for lack of a main function.
#[cfg(not(feature = "metal"))]
fn main() {
    eprintln!("bench_qmv needs `--features metal` (macOS, MLX built with Metal)");
    std::process::exit(2);
}

#[cfg(feature = "metal")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench::main()
}

#[cfg(feature = "metal")]
mod bench {
    use std::time::Instant;

    use mlx_sys::metal_policy::{QmvBatchPolicy, set_qmv_batch_policy};
    use mlx_sys::{Array, quantize, quantized_matmul};

    /// (N, K) of `x @ W.T` with W N×K: attention/MLP projections of 7-8B models and a wide one.
    const SHAPES: [(usize, usize); 4] = [(4096, 4096), (4096, 14336), (14336, 4096), (3840, 15360)];
    const GROUP: i32 = 64;
    const BITS: i32 = 4;

    struct Args {
        json: bool,
        reps: usize,
        limit: usize,
    }

    fn parse_args() -> Result<Args, String> {
        // MLX's qmv batch limit is at most a few dozen; M up to 16 covers every shape here.
        let mut a = Args {
            json: false,
            reps: 21,
            limit: 16,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut num = |name: &str| -> Result<usize, String> {
                it.next()
                    .and_then(|v| v.parse().ok())
                    .ok_or(format!("{name} needs a number"))
            };
            match arg.as_str() {
                "--json" => a.json = true,
                "--reps" => a.reps = num("--reps")?.max(1),
                "--limit" => a.limit = num("--limit")?.max(1),
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(a)
    }

    /// Deterministic values in [-1, 1) (no rand dependency; the data do not affect the timing).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    }

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let args = parse_args()?;
        let mut rows = Vec::new();
        for &(n, k) in &SHAPES {
            let w = Array::from_f32(&values(n * k, 1), &[n as i32, k as i32])?
                .astype(mlx_sys::Dtype::Float16)?;
            let q = quantize(&w, GROUP, BITS)?;
            for m in 1..=args.limit {
                let x = Array::from_f32(&values(m * k, 2 + m as u64), &[m as i32, k as i32])?
                    .astype(mlx_sys::Dtype::Float16)?;
                let run = || -> Result<f64, mlx_sys::Error> {
                    let t = Instant::now();
                    let y = quantized_matmul(&x, &q.wq, &q.scales, &q.biases, true, GROUP, BITS)?;
                    // eval waits for the command buffer: the time is the GPU's, end to end.
                    y.eval()?;
                    Ok(t.elapsed().as_secs_f64())
                };
                let mut times: [Vec<f64>; 3] = Default::default();
                for rep in 0..args.reps + 2 {
                    for (i, p) in QmvBatchPolicy::ALL.iter().enumerate() {
                        set_qmv_batch_policy(*p)?;
                        let t = run()?;
                        // The first two rounds warm the pipeline caches and the weights.
                        if rep >= 2 {
                            times[i].push(t);
                        }
                    }
                }
                let [wide, narrow, streamed] = times.map(|mut v| median(&mut v));
                let recovered = if (narrow - wide).abs() > f64::EPSILON {
                    (narrow - streamed) / (narrow - wide)
                } else {
                    f64::NAN
                };
                rows.push((n, k, m, wide, narrow, streamed, recovered));
            }
        }
        set_qmv_batch_policy(QmvBatchPolicy::Upstream)?;
        if args.json {
            let items: Vec<String> = rows
            .iter()
            .map(|(n, k, m, w, nw, s, r)| {
                format!(
                    "{{\"n\":{n},\"k\":{k},\"m\":{m},\"upstream_s\":{w:e},\"narrow_s\":{nw:e},\"streamed_s\":{s:e},\"recovered\":{}}}",
                    if r.is_finite() { format!("{r:.4}") } else { "null".into() }
                )
            })
            .collect();
            println!(
                "{{\"bits\":{BITS},\"group_size\":{GROUP},\"dtype\":\"float16\",\"reps\":{},\"rows\":[{}]}}",
                args.reps,
                items.join(",")
            );
        } else {
            println!(
                "4-bit, gs {GROUP}, float16, median of {} reps (µs)",
                args.reps
            );
            println!(
                "{:>6} {:>6} {:>3} {:>9} {:>9} {:>9} {:>9}",
                "N", "K", "M", "upstream", "narrow", "streamed", "recov."
            );
            for (n, k, m, w, nw, s, r) in &rows {
                println!(
                    "{n:>6} {k:>6} {m:>3} {:>9.1} {:>9.1} {:>9.1} {:>9.2}",
                    w * 1e6,
                    nw * 1e6,
                    s * 1e6,
                    r
                );
            }
        }
        Ok(())
    }
}
