//! CPU quantized matmul (affine, transposed weights) for M = 1..16 rows under both kernel
//! policies of the fork: MLX's row-by-row loops ("upstream") and the row-streamed kernels
//! ("streamed"), measured in the same process, interleaved, as medians after warm-up.
//!
//! `cargo run --release -p mlx-sys --example bench_qmm -- [--json] [--reps N] [--svg FILE]`
//! (normally through `cargo xtask bench qmm`).

use std::time::Instant;

use mlx_sys::{Array, qmm_policy, quantize, quantized_matmul};

const MS: [usize; 6] = [1, 2, 4, 8, 13, 16];

struct Config {
    label: &'static str,
    n: usize,
    k: usize,
    bits: i32,
    group: i32,
}

/// The first is the headline shape (the `rows` of `--json` and the plot).
const CONFIGS: [Config; 3] = [
    Config {
        label: "N=K=4096, 4-bit, gs 64, f32",
        n: 4096,
        k: 4096,
        bits: 4,
        group: 64,
    },
    Config {
        label: "N=4096, K=14336, 4-bit, gs 64, f32",
        n: 4096,
        k: 14336,
        bits: 4,
        group: 64,
    },
    Config {
        label: "N=K=4096, 8-bit, gs 64, f32",
        n: 4096,
        k: 4096,
        bits: 8,
        group: 64,
    },
];

struct Args {
    json: bool,
    reps: usize,
    warmup: usize,
    svg: Option<String>,
    quick: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        reps: 7,
        warmup: 1,
        svg: None,
        quick: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--json" => a.json = true,
            "--quick" => a.quick = true,
            "--reps" => {
                a.reps = value("--reps")?
                    .parse()
                    .map_err(|e| format!("--reps: {e}"))?
            }
            "--warmup" => {
                a.warmup = value("--warmup")?
                    .parse()
                    .map_err(|e| format!("--warmup: {e}"))?
            }
            "--svg" => a.svg = Some(value("--svg")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    Ok(a)
}

/// xorshift64*: fixed data, no rand dependency.
struct Rng(u64);

impl Rng {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
                ((v >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }
}

struct Row {
    m: usize,
    upstream_ms: f64,
    streamed_ms: f64,
    bit_identical: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn run_config(c: &Config, a: &Args) -> mlx_sys::Result<Vec<Row>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c.n * 31 + c.k) as u64);
    let w = Array::from_f32(&rng.vec(c.n * c.k), &[c.n as i32, c.k as i32])?;
    let q = quantize(&w, c.group, c.bits)?;
    q.wq.eval()?;
    q.scales.eval()?;
    q.biases.eval()?;
    drop(w);
    let max_m = *MS.iter().max().expect("non-empty");
    let xs = rng.vec(max_m * c.k);
    let x_of = |m: usize| Array::from_f32(&xs[..m * c.k], &[m as i32, c.k as i32]);
    let qmm = |x: &Array| quantized_matmul(x, &q.wq, &q.scales, &q.biases, true, c.group, c.bits);
    let xs_by_m: Vec<Array> = MS.iter().map(|&m| x_of(m)).collect::<Result<_, _>>()?;

    // Each row alone (M = 1) is the reference for every row of every M, under both policies.
    let alone: Vec<Vec<u32>> = (0..max_m)
        .map(|r| {
            let x = Array::from_f32(&xs[r * c.k..(r + 1) * c.k], &[1, c.k as i32])?;
            Ok(bits(&qmm(&x)?.to_f32_vec()?))
        })
        .collect::<mlx_sys::Result<_>>()?;

    let mut times = vec![(Vec::new(), Vec::new()); MS.len()];
    let mut identical = vec![true; MS.len()];
    let reps = if a.quick { 1 } else { a.reps };
    for rep in 0..a.warmup + reps {
        for (i, x) in xs_by_m.iter().enumerate() {
            let m = MS[i];
            // Alternate which policy goes first so drift in machine load hits both alike.
            let order = if (rep + i) % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for streamed in order {
                qmm_policy::set_streamed(streamed)?;
                let t0 = Instant::now();
                let out = qmm(x)?;
                out.eval()?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                if rep >= a.warmup {
                    let slot = &mut times[i];
                    if streamed { &mut slot.1 } else { &mut slot.0 }.push(ms);
                }
                if rep == a.warmup {
                    let got = bits(&out.to_f32_vec()?);
                    let n = c.n;
                    identical[i] &= (0..m).all(|r| got[r * n..(r + 1) * n] == alone[r][..]);
                }
            }
        }
    }
    qmm_policy::set_streamed(true)?;
    Ok(MS
        .iter()
        .zip(times)
        .zip(identical)
        .map(|((&m, (up, st)), bit_identical)| Row {
            m,
            upstream_ms: median(up),
            streamed_ms: median(st),
            bit_identical,
        })
        .collect())
}

fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cpus} CPU(s), {}", std::env::consts::ARCH)
}

fn json_rows(rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"m\":{},\"upstream_ms\":{:.3},\"streamed_ms\":{:.3},\"bit_identical\":{}}}",
                r.m, r.upstream_ms, r.streamed_ms, r.bit_identical
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn table(label: &str, rows: &[Row]) -> String {
    let base = rows.iter().find(|r| r.m == 1);
    let mut s = format!(
        "{label}\n{:>3} | {:>12} | {:>12} | {:>8} | {:>9} | {:>9} | {}\n",
        "M", "upstream ms", "streamed ms", "speedup", "up/M1", "str/M1", "bit-identical"
    );
    s.push_str(&format!("{}\n", "-".repeat(84)));
    for r in rows {
        let (ru, rs) = base.map_or((f64::NAN, f64::NAN), |b| {
            (r.upstream_ms / b.upstream_ms, r.streamed_ms / b.streamed_ms)
        });
        s.push_str(&format!(
            "{:>3} | {:>12.2} | {:>12.2} | {:>7.2}x | {:>8.2}x | {:>8.2}x | {}\n",
            r.m,
            r.upstream_ms,
            r.streamed_ms,
            r.upstream_ms / r.streamed_ms,
            ru,
            rs,
            if r.bit_identical { "yes" } else { "NO" }
        ));
    }
    s
}

/// Time versus M for both policies, as a self-contained SVG.
fn svg(label: &str, machine: &str, rows: &[Row]) -> String {
    let (w, h, l, r, t, b) = (640.0, 400.0, 60.0, 20.0, 50.0, 50.0);
    let max_m = rows.iter().map(|r| r.m).max().unwrap_or(1) as f64;
    let max_t = rows
        .iter()
        .map(|r| r.upstream_ms.max(r.streamed_ms))
        .fold(1.0, f64::max);
    // A round top for the y axis: 1, 2 or 5 times a power of ten.
    let mag = 10f64.powf(max_t.log10().floor());
    let top = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|f| f * mag)
        .find(|&v| v >= max_t)
        .unwrap_or(10.0 * mag);
    let px = |m: f64| l + (m / max_m) * (w - l - r);
    let py = |ms: f64| h - b - (ms / top) * (h - t - b);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{l}\" y=\"20\" font-size=\"14\">quantized_matmul CPU, {}</text>\n\
         <text x=\"{l}\" y=\"36\" fill=\"#555\">{}</text>\n",
        xml(label),
        xml(machine)
    );
    for i in 0..=5 {
        let v = top * f64::from(i) / 5.0;
        let y = py(v);
        s.push_str(&format!(
            "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>\n",
            w - r,
            l - 6.0,
            y + 4.0
        ));
    }
    for r0 in rows {
        let x = px(r0.m as f64);
        s.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            h - b + 16.0,
            r0.m
        ));
    }
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">M (rows of x)</text>\n\
         <text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">median ms</text>\n",
        (l + w - r) / 2.0,
        h - 12.0,
        (t + h - b) / 2.0
    ));
    for (name, color, get) in [
        (
            "upstream (row by row)",
            "#d62728",
            (|r: &Row| r.upstream_ms) as fn(&Row) -> f64,
        ),
        ("streamed", "#1f77b4", |r: &Row| r.streamed_ms),
    ] {
        let pts: Vec<String> = rows
            .iter()
            .map(|r0| format!("{:.1},{:.1}", px(r0.m as f64), py(get(r0))))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        ));
        for r0 in rows {
            s.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                px(r0.m as f64),
                py(get(r0))
            ));
        }
        let ly = if color == "#d62728" {
            t + 10.0
        } else {
            t + 26.0
        };
        s.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{name}</text>\n",
            l + 10.0,
            l + 30.0,
            l + 36.0,
            ly + 4.0
        ));
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn main() -> std::process::ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench_qmm: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if !qmm_policy::available() {
        eprintln!(
            "bench_qmm: the linked MLX lacks the CPU qmm policy overlay; run `cargo xtask build-mlx`"
        );
        return std::process::ExitCode::from(2);
    }
    let machine = machine();
    let configs: &[Config] = if a.quick { &CONFIGS[..1] } else { &CONFIGS };
    let mut results = Vec::new();
    for c in configs {
        if !a.json {
            eprintln!("measuring {} ...", c.label);
        }
        match run_config(c, &a) {
            Ok(rows) => results.push((c, rows)),
            Err(e) => {
                eprintln!("bench_qmm: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let (head, head_rows) = &results[0];
    if let Some(path) = &a.svg
        && let Err(e) = std::fs::write(path, svg(head.label, &machine, head_rows))
    {
        eprintln!("bench_qmm: writing {path}: {e}");
        return std::process::ExitCode::from(2);
    }
    if a.json {
        let extra: Vec<String> = results[1..]
            .iter()
            .map(|(c, rows)| {
                format!(
                    "{{\"config\":{},\"rows\":{}}}",
                    json_str(c.label),
                    json_rows(rows)
                )
            })
            .collect();
        println!(
            "{{\"machine\":{},\"config\":{},\"rows\":{},\"extra\":[{}]}}",
            json_str(&machine),
            json_str(head.label),
            json_rows(head_rows),
            extra.join(",")
        );
    } else {
        println!(
            "machine: {machine}\nmedian of {} interleaved run(s) per cell after {} warm-up\n",
            if a.quick { 1 } else { a.reps },
            a.warmup
        );
        for (c, rows) in &results {
            println!("{}", table(c.label, rows));
        }
    }
    let all_identical = results
        .iter()
        .all(|(_, rows)| rows.iter().all(|r| r.bit_identical));
    if all_identical {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("bench_qmm: some rows differ from the same row computed alone");
        std::process::ExitCode::from(1)
    }
}
