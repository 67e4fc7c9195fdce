//! The case matrix and the claims.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::compile::{self, Binary, Compiler, Contraction, Family, Instance};
use crate::extract::{self, TreeFiles};

#[derive(Clone, Debug)]
pub struct Options {
    /// Small matrix (one group size, two bit widths).
    pub quick: bool,
    /// Where compiled binaries are cached.
    pub cache: PathBuf,
    /// Input seed; inputs are a pure function of seed and case shape.
    pub seed: u64,
    /// Concurrent compiler / emulator processes.
    pub jobs: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Pass,
    Fail,
    NotEvaluated,
}

#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    pub id: String,
    pub title: String,
    pub status: Status,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub patched: String,
    pub pristine: String,
    pub compiler: String,
    pub claims: Vec<Claim>,
    pub runs: usize,
    /// (phase, seconds)
    pub timings: Vec<(String, f64)>,
    /// Output hash per M=1 case and variant, for --record / --compare.
    pub hashes: BTreeMap<String, String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.claims.iter().all(|c| c.status != Status::Fail)
    }

    pub fn table(&self) -> String {
        let mut s = String::from("| # | claim | result | detail |\n|---|---|---|---|\n");
        for c in &self.claims {
            let st = match c.status {
                Status::Pass => "PASS",
                Status::Fail => "FAIL",
                Status::NotEvaluated => "not evaluated",
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                c.id, c.title, st, c.detail
            ));
        }
        s
    }
}

pub const TYPES: &[&str] = &["float32", "float16", "bfloat16"];
const ORDERS: &[(char, &str)] = &[('b', "butterfly"), ('l', "linear"), ('p', "pairwise")];
/// gen 15: M >= 2 goes to qmv_wide; gen 14: it goes to qmv / qmv_fast.
const ARCH_WIDE: &str = "applegpu_g15s";
const ARCH_OLD: &str = "applegpu_g14s";

/// Documented accuracy bound: max |y - ref| / sum |x_k| (|s q_k| + |b|), in
/// units of the type's unit roundoff (float64 reference on the same
/// quantized data). The output rounding alone costs up to one unit.
pub fn bound(ty: &str) -> f64 {
    match ty {
        "float32" => 8.0 * f64::powi(2.0, -24),
        "float16" => f64::powi(2.0, -11),
        _ => f64::powi(2.0, -8),
    }
}

#[derive(Clone, Debug)]
struct Shape {
    name: &'static str,
    m: i64,
    n: i64,
    k: i64,
}

/// What MLX's host code would launch, as recorded by the dispatch binary.
#[derive(Clone, Debug, PartialEq)]
struct Launch {
    func: String,
    /// The kernel name the host asks the library for.
    kname: String,
    targs: Vec<i64>,
    grid: [i64; 3],
    group: [i64; 3],
}

#[derive(Clone, Debug)]
struct Case {
    ty: &'static str,
    gs: i64,
    bits: i64,
    shape: Shape,
}

impl Case {
    fn id(&self) -> String {
        format!(
            "{}/gs{}/b{}/{}/M{}N{}K{}",
            self.ty, self.gs, self.bits, self.shape.name, self.shape.m, self.shape.n, self.shape.k
        )
    }
}

#[derive(Clone, Debug)]
struct Run {
    id: String,
    inst: Instance,
    case: Case,
    grid: [i64; 3],
    group: [i64; 3],
    order: char,
    record: bool,
    threads: bool,
}

#[derive(Clone, Debug)]
struct Out {
    error: String,
    rel_err: f64,
    y: String,
    sums: BTreeMap<(i64, i64, i64), BTreeSet<String>>,
}

fn launch_of(v: &serde_json::Value) -> Result<Launch> {
    let arr = |k: &str| -> Vec<i64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
            .unwrap_or_default()
    };
    let (g, b) = (arr("grid"), arr("group"));
    if v["dispatches"].as_i64() != Some(1) || g.len() != 3 || b.len() != 3 {
        bail!("dispatch recorded no single launch: {v}");
    }
    Ok(Launch {
        func: v["func"].as_str().unwrap_or("").to_string(),
        kname: v["kname"].as_str().unwrap_or("").to_string(),
        targs: arr("targs"),
        grid: [g[0], g[1], g[2]],
        group: [b[0], b[1], b[2]],
    })
}

fn instance(case: &Case, l: &Launch) -> Result<Instance> {
    let family =
        Family::from_func(&l.func).with_context(|| format!("unknown kernel {}", l.func))?;
    if l.targs.len() < 2 || l.targs[0] != case.gs || l.targs[1] != case.bits {
        bail!(
            "unexpected template arguments {:?} for {}",
            l.targs,
            case.id()
        );
    }
    let extra = match family {
        Family::Quad => vec![l.targs[2]],
        Family::Wide => vec![l.targs[2], l.targs[3]],
        Family::FastStreamed | Family::QmvStreamed => {
            // [gs, bits, V, batched]; the harness launches unbatched only.
            if l.targs.len() != 4 || l.targs[3] != 0 {
                bail!("{}: streamed template arguments {:?}", case.id(), l.targs);
            }
            vec![l.targs[2]]
        }
        Family::Fast | Family::Qmv => {
            // The narrow (2 results per simdgroup) variant is nvfp4-only.
            if l.targs.get(4) != Some(&4) {
                bail!(
                    "{}: results_per_simdgroup {:?} not emulated",
                    case.id(),
                    l.targs.get(4)
                );
            }
            vec![]
        }
    };
    Ok(Instance {
        family,
        ty: case.ty.to_string(),
        gs: case.gs,
        bits: case.bits,
        extra,
    })
}

fn run_line(r: &Run, seed: u64) -> String {
    format!(
        "case {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
        r.id,
        r.inst.key(),
        r.case.ty,
        r.case.gs,
        r.case.bits,
        r.case.shape.m,
        r.case.shape.n,
        r.case.shape.k,
        r.grid[0],
        r.grid[1],
        r.grid[2],
        r.group[0],
        r.group[1],
        r.group[2],
        seed,
        r.order,
        r.record as i32,
        r.threads as i32
    )
}

fn parse_out(v: &serde_json::Value) -> Out {
    let mut sums: BTreeMap<(i64, i64, i64), BTreeSet<String>> = BTreeMap::new();
    for s in v["sums"].as_array().into_iter().flatten() {
        let a = s.as_array().cloned().unwrap_or_default();
        if a.len() == 5 {
            let key = (
                a[0].as_i64().unwrap_or(-1),
                a[1].as_i64().unwrap_or(-1),
                a[2].as_i64().unwrap_or(-1),
            );
            sums.entry(key).or_default().insert(format!(
                "{}:{}",
                a[3],
                a[4].as_str().unwrap_or("")
            ));
        }
    }
    Out {
        error: v["error"].as_str().unwrap_or("no error field").to_string(),
        rel_err: v["rel_err"].as_f64().unwrap_or(f64::INFINITY),
        y: v["y"].as_str().unwrap_or("").to_string(),
        sums,
    }
}

/// A job's binary, its answers and the emulation time.
type JobOut = (Binary, Vec<serde_json::Value>, f64);

/// One kernel binary: a tree, a contraction mode, the runs it executes.
struct Job<'a> {
    name: String,
    files: &'a TreeFiles,
    contraction: Contraction,
    runs: Vec<Run>,
}

fn claim(id: &str, title: &str, ok: bool, detail: String) -> Claim {
    Claim {
        id: id.into(),
        title: title.into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
    }
}

/// Vector `v` of an M-vector output (hex digits per element known from the
/// type).
fn row<'a>(y: &'a str, ty: &str, n: i64, v: i64) -> &'a str {
    let w = if ty == "float32" { 8 } else { 4 } as usize;
    let n = n as usize;
    let v = v as usize;
    y.get(v * n * w..(v + 1) * n * w).unwrap_or("")
}

/// Runs the whole matrix on `patched` (and `pristine`, default: itself) and
/// evaluates the claims.
pub fn run(patched: &TreeFiles, pristine: Option<&TreeFiles>, opts: &Options) -> Result<Report> {
    let t_all = Instant::now();
    let mut timings = Vec::new();
    let pristine_files = match pristine {
        Some(p) => p.clone(),
        None => {
            let mut p = patched.clone();
            p.label = "pristine".into();
            p
        }
    };
    let compiler = Compiler::detect(&opts.cache)?;

    // Stage 1: MLX's host dispatch code decides what runs.
    let t = Instant::now();
    let d_patched = compiler.build(&compile::dispatch_unit(patched)?, &[])?;
    let d_pristine = compiler.build(&compile::dispatch_unit(&pristine_files)?, &[])?;
    timings.push((
        "compile dispatch (2 trees)".to_string(),
        t.elapsed().as_secs_f64(),
    ));

    let bits_set: Vec<i64> = if opts.quick {
        vec![3, 4]
    } else {
        vec![2, 3, 4, 5, 6, 8]
    };
    let gs_set: Vec<i64> = if opts.quick {
        vec![64]
    } else {
        vec![32, 64, 128]
    };
    let ms: Vec<i64> = if opts.quick {
        vec![3]
    } else {
        vec![2, 3, 5, 7]
    };
    let align_lines: Vec<String> = bits_set.iter().map(|b| format!("align {b}")).collect();
    let mut align = BTreeMap::new();
    for v in compile::run_lines(&d_patched.path, &align_lines)? {
        align.insert(
            v["bits"].as_i64().unwrap_or(0),
            v["align"].as_i64().unwrap_or(0),
        );
    }

    let mut m1 = Vec::new();
    let mut multi = Vec::new();
    for &ty in TYPES {
        for &gs in &gs_set {
            for &bits in &bits_set {
                let a = align[&bits];
                let mut shapes = vec![
                    Shape {
                        name: "k128",
                        m: 1,
                        n: 72,
                        k: 128,
                    },
                    Shape {
                        name: "aligned",
                        m: 1,
                        n: 16,
                        k: 2 * a,
                    },
                    Shape {
                        name: "n_odd",
                        m: 1,
                        n: 12,
                        k: a + gs,
                    },
                    Shape {
                        name: "n_lt8",
                        m: 1,
                        n: 5,
                        k: a,
                    },
                    Shape {
                        name: "k_unaligned",
                        m: 1,
                        n: 16,
                        k: a + gs,
                    },
                ];
                if gs <= 64 {
                    shapes.push(Shape {
                        name: "k64",
                        m: 1,
                        n: 72,
                        k: 64,
                    });
                }
                for shape in shapes {
                    m1.push(Case {
                        ty,
                        gs,
                        bits,
                        shape,
                    });
                }
                for &m in &ms {
                    multi.push(Case {
                        ty,
                        gs,
                        bits,
                        shape: Shape {
                            name: "multi",
                            m,
                            n: 16,
                            k: a,
                        },
                    });
                }
            }
        }
    }

    let dispatch_line = |c: &Case, entry: &str, arch: &str| {
        format!(
            "dispatch {} {entry} {} {} {} {} {} {} {arch}",
            c.id(),
            c.ty,
            c.gs,
            c.bits,
            c.shape.m,
            c.shape.n,
            c.shape.k
        )
    };
    let t = Instant::now();
    let mut lines: Vec<String> = m1
        .iter()
        .map(|c| dispatch_line(c, "dispatch_qmv", ARCH_WIDE))
        .collect();
    lines.extend(
        multi
            .iter()
            .map(|c| dispatch_line(c, "dispatch_qmv", ARCH_WIDE)),
    );
    lines.extend(
        multi
            .iter()
            .map(|c| dispatch_line(c, "dispatch_qmv", ARCH_OLD)),
    );
    let rec_patched = compile::run_lines(&d_patched.path, &lines)?
        .iter()
        .map(launch_of)
        .collect::<Result<Vec<_>>>()?;
    let m1_lines = &lines[..m1.len()];
    let rec_pristine = compile::run_lines(&d_pristine.path, m1_lines)?
        .iter()
        .map(launch_of)
        .collect::<Result<Vec<_>>>()?;
    timings.push(("dispatch".to_string(), t.elapsed().as_secs_f64()));
    let l_m1 = &rec_patched[..m1.len()];
    let l_wide = &rec_patched[m1.len()..m1.len() + multi.len()];
    let l_old = &rec_patched[m1.len() + multi.len()..];

    // Policy dispatch (gen 15) for the streamed claims: every M=1 shape that
    // is not qmv_quad's, at several M, under the three policies of the
    // patched tree; plus cases outside the accept-list, which must keep
    // upstream's launch. Trees without the policy ignore the variable.
    let t = Instant::now();
    let stream_ms: Vec<i64> = if opts.quick {
        vec![3, 7]
    } else {
        vec![2, 3, 5, 7, 11]
    };
    let mut scases = Vec::new();
    for c in m1.iter().filter(|c| c.shape.k != 64 && c.shape.k != 128) {
        for &m in &stream_ms {
            let mut cm = c.clone();
            cm.shape.m = m;
            scases.push(cm);
        }
    }
    let mut outside = Vec::new();
    if let Some(c) = m1.iter().find(|c| c.shape.name == "aligned") {
        for (gs, bits, m, k, why) in [
            (16, c.bits, 3, c.shape.k, "gs16"),
            (c.gs, 1, 3, c.shape.k, "bits1"),
            (c.gs, c.bits, 40, c.shape.k, "m_over_limit"),
            (c.gs, 4, 3, 128, "quad_k128"),
        ] {
            let mut o = c.clone();
            o.gs = gs;
            o.bits = bits;
            o.shape.m = m;
            o.shape.k = k;
            o.shape.name = why;
            outside.push(o);
        }
    }
    let policy_lines: Vec<String> = scases
        .iter()
        .chain(&outside)
        .map(|c| dispatch_line(c, "dispatch_qmv", ARCH_WIDE))
        .collect();
    let mut by_policy = BTreeMap::new();
    for policy in ["upstream", "narrow", "streamed"] {
        let rec = compile::run_lines_env(
            &d_patched.path,
            &policy_lines,
            &[(compile::POLICY_ENV, policy)],
        )?
        .iter()
        .map(launch_of)
        .collect::<Result<Vec<_>>>()?;
        by_policy.insert(policy, rec);
    }
    timings.push(("policy dispatch".to_string(), t.elapsed().as_secs_f64()));
    let ns = scases.len();
    let s_up = &by_policy["upstream"][..ns];
    let s_narrow = &by_policy["narrow"][..ns];
    let s_str = &by_policy["streamed"][..ns];
    let streamed_seen = s_str
        .iter()
        .any(|l| Family::from_func(&l.func).is_some_and(|f| f.base() != f));

    let mut claims = Vec::new();

    // Claim 4: the dispatch binary (MLX's code) against the rule as the
    // harness understands it, plus coverage of every path.
    {
        let mut bad = Vec::new();
        let mut seen = BTreeSet::new();
        for (c, l) in m1.iter().zip(l_m1) {
            let (n, k, bits) = (c.shape.n, c.shape.k, c.bits);
            let want = if (k == 64 || k == 128) && bits & (bits - 1) == 0 {
                "qmv_quad"
            } else if n % 8 == 0 && k % align[&bits] == 0 {
                "qmv_fast"
            } else {
                "qmv"
            };
            let rows_per_tg = match l.func.as_str() {
                "qmv_quad" => 64,
                _ => 8,
            };
            if l.func != want || l.grid[0] != 1 || l.grid[1] * rows_per_tg < n {
                bad.push(format!("{}: {} grid {:?}", c.id(), l.func, l.grid));
            }
            seen.insert(if l.func == "qmv" && n < 8 {
                "qmv(N<8)".to_string()
            } else {
                l.func.clone()
            });
        }
        for ((c, w), o) in multi.iter().zip(l_wide).zip(l_old) {
            let kl = w.targs.get(3).copied().unwrap_or(0);
            let v = w.targs.get(2).copied().unwrap_or(0);
            if w.func != "qmv_wide"
                || kl <= 0
                || w.grid[0] * v < c.shape.m
                || w.grid[1] * (32 / kl) * 2 < c.shape.n
            {
                bad.push(format!("{} gen15: {} {:?}", c.id(), w.func, w.targs));
            }
            if o.func == "qmv_wide" || o.grid[0] != c.shape.m {
                bad.push(format!("{} gen14: {}", c.id(), o.func));
            }
            seen.insert(w.func.clone());
        }
        let want: BTreeSet<String> = ["qmv_quad", "qmv_fast", "qmv", "qmv(N<8)", "qmv_wide"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let missing: Vec<_> = want.difference(&seen).cloned().collect();
        let pristine_same = l_m1 == &rec_pristine[..];
        let ok = bad.is_empty() && missing.is_empty() && pristine_same;
        claims.push(claim(
            "4",
            "dispatch follows quantized.cpp (extracted dispatch_qmv / qmv_fast_k_alignment)",
            ok,
            if ok {
                format!(
                    "{} M=1 + {} M>=2 shapes; paths covered: {}; alignment {:?}; pristine dispatch identical",
                    m1.len(),
                    2 * multi.len(),
                    seen.iter().cloned().collect::<Vec<_>>().join(", "),
                    align
                )
            } else {
                format!("mismatches: {bad:?}; uncovered: {missing:?}; pristine dispatch identical: {pristine_same}")
            },
        ));
    }

    // Which kernels each binary must instantiate, and what it runs.
    let code_patched = compile::kernel_code(patched)?;
    let code_pristine = compile::kernel_code(&pristine_files)?;
    let perturbed_files = extract::perturb(
        patched,
        extract::KERNEL_HEADER,
        "load_vector",
        "x[i + 1] + x[i + 2]",
        "x[i + 2] + x[i + 1]",
    )?;
    let code_perturbed = compile::kernel_code(&perturbed_files)?;

    let orders: Vec<(char, &str)> = if opts.quick {
        vec![ORDERS[0], ORDERS[1]]
    } else {
        ORDERS.to_vec()
    };
    let mk = |tag: &str,
              c: &Case,
              inst: Instance,
              grid: [i64; 3],
              group: [i64; 3],
              order: char,
              record: bool,
              threads: bool| Run {
        id: format!("{tag}|{}|{order}|{}", c.id(), inst.family.name()),
        inst,
        case: c.clone(),
        grid,
        group,
        order,
        record,
        threads,
    };
    let mut jobs: Vec<Job> = Vec::new();
    for (files, recs) in [(patched, l_m1), (&pristine_files, &rec_pristine[..])] {
        for contraction in [Contraction::Off, Contraction::On] {
            let mut runs = Vec::new();
            for (c, l) in m1.iter().zip(recs) {
                let inst = instance(c, l)?;
                for &(o, _) in &orders {
                    runs.push(mk(
                        "m1",
                        c,
                        inst.clone(),
                        l.grid,
                        l.group,
                        o,
                        streamed_seen,
                        false,
                    ));
                }
            }
            if std::ptr::eq(files, patched) {
                // Negative controls and accuracy of the M >= 2 kernels.
                for ((c, w), o) in multi.iter().zip(l_wide).zip(l_old) {
                    runs.push(mk(
                        "wide",
                        c,
                        instance(c, w)?,
                        w.grid,
                        w.group,
                        'b',
                        false,
                        false,
                    ));
                    runs.push(mk(
                        "old",
                        c,
                        instance(c, o)?,
                        o.grid,
                        o.group,
                        'b',
                        false,
                        false,
                    ));
                }
                for (c, l) in m1.iter().zip(l_m1).filter(|(_, l)| l.func == "qmv_fast") {
                    let mut inst = instance(c, l)?;
                    inst.family = Family::Qmv;
                    runs.push(mk("forced", c, inst, l.grid, l.group, 'b', false, false));
                }
                if contraction == Contraction::Off {
                    // Scheduler cross-check: OS threads + barrier vs coroutines.
                    for (c, l) in m1.iter().zip(l_m1).step_by(7).take(6) {
                        let inst = instance(c, l)?;
                        runs.push(mk("threads", c, inst, l.grid, l.group, 'b', true, true));
                        let inst = instance(c, l)?;
                        runs.push(mk("coro", c, inst, l.grid, l.group, 'b', true, false));
                    }
                }
                // Claim 5: the streamed launch the policy dispatch recorded
                // against the narrow one (the M=1 kernel, grid.x = M).
                if streamed_seen {
                    for ((c, s), n) in scases.iter().zip(s_str).zip(s_narrow) {
                        let fam = Family::from_func(&s.func);
                        if fam.is_none_or(|f| f.base() == f) {
                            continue;
                        }
                        runs.push(mk(
                            "sV",
                            c,
                            instance(c, s)?,
                            s.grid,
                            s.group,
                            'b',
                            true,
                            false,
                        ));
                        runs.push(mk(
                            "s1",
                            c,
                            instance(c, n)?,
                            n.grid,
                            n.group,
                            'b',
                            true,
                            false,
                        ));
                    }
                }
            }
            jobs.push(Job {
                name: format!("{} {:?}", files.label, contraction),
                files,
                contraction,
                runs,
            });
        }
    }
    let pert_runs: Vec<Run> = m1
        .iter()
        .zip(l_m1)
        .map(|(c, l)| {
            Ok(mk(
                "m1",
                c,
                instance(c, l)?,
                l.grid,
                l.group,
                'b',
                false,
                false,
            ))
        })
        .collect::<Result<_>>()?;
    jobs.push(Job {
        name: "perturbed Off".into(),
        files: &perturbed_files,
        contraction: Contraction::Off,
        runs: pert_runs,
    });

    // Compile and run, `opts.jobs` binaries at a time.
    let codes = |files: &TreeFiles| -> &extract::Extracted {
        if std::ptr::eq(files, &perturbed_files) {
            &code_perturbed
        } else if std::ptr::eq(files, patched) {
            &code_patched
        } else {
            &code_pristine
        }
    };
    let units: Vec<(String, Vec<String>)> = jobs
        .iter()
        .map(|j| {
            let inst: BTreeSet<Instance> = j.runs.iter().map(|r| r.inst.clone()).collect();
            let inst: Vec<Instance> = inst.into_iter().collect();
            Ok((
                compile::kernel_unit(j.files, codes(j.files), &inst)?,
                j.contraction.flags(),
            ))
        })
        .collect::<Result<_>>()?;
    let t = Instant::now();
    let results: Vec<Result<JobOut>> = {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<Result<JobOut>>>> =
            jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..opts.jobs.max(1) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if i >= jobs.len() {
                            break;
                        }
                        let r = (|| {
                            let b = compiler.build(&units[i].0, &units[i].1)?;
                            let t = Instant::now();
                            let lines: Vec<String> = jobs[i]
                                .runs
                                .iter()
                                .map(|r| run_line(r, opts.seed))
                                .collect();
                            let out = compile::run_lines(&b.path, &lines)
                                .with_context(|| format!("running {}", jobs[i].name))?;
                            Ok((b, out, t.elapsed().as_secs_f64()))
                        })();
                        *slots[i].lock().unwrap() = Some(r);
                    }
                });
            }
        });
        slots
            .into_iter()
            .map(|m| m.into_inner().unwrap().unwrap())
            .collect()
    };
    let mut outs: Vec<BTreeMap<String, Out>> = Vec::new();
    let (mut compile_s, mut run_s, mut cached) = (0.0, 0.0, 0);
    for (j, r) in jobs.iter().zip(results) {
        let (b, vals, secs) = r?;
        compile_s += if b.cached { 0.0 } else { b.seconds };
        cached += b.cached as usize;
        run_s += secs;
        let mut m = BTreeMap::new();
        for (run, v) in j.runs.iter().zip(vals) {
            m.insert(run.id.clone(), parse_out(&v));
        }
        outs.push(m);
    }
    timings.push((
        format!(
            "kernel binaries: {} ({} cached), compile",
            jobs.len(),
            cached
        ),
        compile_s,
    ));
    timings.push(("emulated runs (sum over binaries)".to_string(), run_s));
    timings.push(("kernels wall".to_string(), t.elapsed().as_secs_f64()));
    let runs_total: usize = jobs.iter().map(|j| j.runs.len()).sum();

    // Errors (divergence, out-of-bounds writes, unwritten outputs) fail the run.
    let mut errors = Vec::new();
    for (j, m) in jobs.iter().zip(&outs) {
        for (id, o) in m {
            if !o.error.is_empty() {
                errors.push(format!("{} {id}: {}", j.name, o.error));
            }
        }
    }
    claims.insert(
        0,
        claim(
            "0",
            "every run completes: no divergent simd op, no write past the output, every output written",
            errors.is_empty(),
            if errors.is_empty() {
                format!("{runs_total} runs")
            } else {
                format!("{} errors, first: {}", errors.len(), errors[0])
            },
        ),
    );

    // Claim 1: M=1 outputs, patched vs pristine, every order and contraction.
    {
        let mut compared = 0;
        let mut diffs = Vec::new();
        for (ci, contraction) in [Contraction::Off, Contraction::On].iter().enumerate() {
            let (p, q) = (&outs[ci], &outs[2 + ci]);
            for (id, o) in p.iter().filter(|(id, _)| id.starts_with("m1|")) {
                compared += 1;
                match q.get(id) {
                    Some(o2) if o2.y == o.y && !o.y.is_empty() => {}
                    _ => diffs.push(format!("{contraction:?} {id}")),
                }
            }
        }
        let same_src = code_patched.code == code_pristine.code;
        claims.push(claim(
            "1",
            "M=1 kernels: patched tree bitwise equal to pristine tree",
            diffs.is_empty() && compared > 0,
            format!(
                "{compared} outputs compared ({} orders x contraction off/on, separately compiled binaries; extracted kernel source {}); {} differ{}",
                orders.len(),
                if same_src { "identical" } else { "differs" },
                diffs.len(),
                diffs.first().map(|d| format!(", first {d}")).unwrap_or_default()
            ),
        ));
    }

    // Claim 2: negative controls.
    {
        let p = &outs[0];
        let (mut n, mut differ) = (0, 0);
        for c in &multi {
            let w = p.get(&format!("wide|{}|b|qmv_wide", c.id()));
            let o = p
                .iter()
                .find(|(id, _)| id.starts_with(&format!("old|{}|b|", c.id())));
            if let (Some(w), Some((_, o))) = (w, o) {
                n += 1;
                differ += (w.y != o.y) as usize;
            }
        }
        claims.push(claim(
            "2a",
            "control: qmv_wide (gen 15) differs from the gen-14 M>=2 kernel (qmv_fast/qmv) for some inputs",
            differ > 0,
            format!("{differ} of {n} M>=2 cases differ"),
        ));
        let (mut n, mut differ) = (0, 0);
        for (c, _) in m1
            .iter()
            .zip(l_m1)
            .filter(|(c, l)| l.func == "qmv_fast" && c.ty == "float32")
        {
            let f = p.get(&format!("m1|{}|b|qmv_fast", c.id()));
            let q = p.get(&format!("forced|{}|b|qmv", c.id()));
            if let (Some(f), Some(q)) = (f, q) {
                n += 1;
                differ += (f.y != q.y) as usize;
            }
        }
        claims.push(claim(
            "2b",
            "control: qmv differs from qmv_fast at T=float for some shapes",
            differ > 0,
            format!("{differ} of {n} float32 qmv_fast-eligible shapes differ"),
        ));
        let pert = outs.last().expect("perturbed job");
        let (mut n, mut differ) = (0, 0);
        for (id, o) in pert {
            if let Some(base) = p.get(id) {
                n += 1;
                differ += (base.y != o.y) as usize;
            }
        }
        claims.push(claim(
            "2c",
            "control: load_vector with two summands swapped (x[i+1]+x[i+2]) is detected",
            differ > 0,
            format!("{differ} of {n} M=1 cases differ from the unperturbed kernel"),
        ));
    }

    // Claim 3: accuracy against the float64 reference.
    {
        let mut worst: BTreeMap<&str, (f64, String)> = BTreeMap::new();
        let mut bad = Vec::new();
        for (j, m) in jobs.iter().zip(&outs).take(4) {
            for (id, o) in m {
                let ty = id
                    .split('|')
                    .nth(1)
                    .and_then(|s| s.split('/').next())
                    .unwrap_or("");
                let ty = TYPES.iter().find(|t| **t == ty).copied().unwrap_or("?");
                let e = worst.entry(ty).or_insert((0.0, String::new()));
                if o.rel_err > e.0 {
                    *e = (o.rel_err, id.clone());
                }
                if o.rel_err.is_nan() || o.rel_err > bound(ty) {
                    bad.push(format!("{} {id}: {:.3e}", j.name, o.rel_err));
                }
            }
        }
        let detail = worst
            .iter()
            .map(|(t, (e, id))| {
                format!(
                    "{t} max {e:.2e} (bound {:.2e}; {})",
                    bound(t),
                    id.split('|').nth(1).unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        claims.push(claim(
            "3",
            "accuracy: every kernel within the documented bound of a float64 reference",
            bad.is_empty(),
            if bad.is_empty() {
                detail
            } else {
                format!("{} over bound, first {}; {detail}", bad.len(), bad[0])
            },
        ));
    }

    // Claims 5 and 7: streamed kernels and the policy dispatch.
    let title5 = "streamed kernel (as dispatched): every vector's output and simd_sum operands equal the M=1 kernel's";
    let title7 = "policy dispatch: streamed = twin of the M=1 kernel on the accept-list, upstream's launch elsewhere; narrow = M=1 kernel with grid.x = M";
    if !streamed_seen {
        let detail = "streamed kernel not present in this tree (the streamed policy never dispatches it): identity claim not evaluated";
        for (id, title) in [("5", title5), ("7", title7)] {
            claims.push(Claim {
                id: id.into(),
                title: title.into(),
                status: Status::NotEvaluated,
                detail: detail.into(),
            });
        }
    } else {
        let mut n = 0;
        let mut bad = Vec::new();
        let mut covered: BTreeSet<String> = BTreeSet::new();
        for (ci, contraction) in [Contraction::Off, Contraction::On].iter().enumerate() {
            let p = &outs[ci];
            for ((c, s), l) in scases.iter().zip(s_str).zip(s_narrow) {
                let sid = format!("sV|{}|b|{}", c.id(), s.func);
                let Some(sv) = p.get(&sid) else {
                    continue;
                };
                let Some(one) = p.get(&format!("s1|{}|b|{}", c.id(), l.func)) else {
                    bad.push(format!("{sid}: no M=1 run"));
                    continue;
                };
                n += 1;
                let v = s.targs.get(2).copied().unwrap_or(0);
                covered.insert(format!("{} V{v}", s.func));
                if s.grid[0] * v > c.shape.m {
                    covered.insert("partial last tile".into());
                }
                for vec in 0..c.shape.m {
                    let (a, b) = (
                        row(&sv.y, c.ty, c.shape.n, vec),
                        row(&one.y, c.ty, c.shape.n, vec),
                    );
                    if a != b || a.is_empty() {
                        bad.push(format!(
                            "{contraction:?} {sid}: vector {vec} output differs"
                        ));
                        break;
                    }
                }
                if sv.sums != one.sums || sv.sums.is_empty() {
                    bad.push(format!("{contraction:?} {sid}: simd_sum operands differ"));
                }
            }
        }
        // Full mode must reach both families, every V and a partial tile.
        let mut missing = Vec::new();
        if !opts.quick {
            for f in ["qmv_fast_streamed", "qmv_streamed"] {
                for v in 2..=5 {
                    if !covered.contains(&format!("{f} V{v}")) {
                        missing.push(format!("{f} V{v}"));
                    }
                }
            }
            if !covered.contains("partial last tile") {
                missing.push("partial last tile".into());
            }
        }
        claims.push(claim(
            "5",
            title5,
            bad.is_empty() && missing.is_empty() && n > 0,
            format!(
                "{n} streamed runs (contraction off/on; simd_sum operands compared, so any reduction order); covered: {}; {} failures{}{}",
                covered.iter().cloned().collect::<Vec<_>>().join(", "),
                bad.len(),
                bad.first().map(|b| format!(", first {b}")).unwrap_or_default(),
                if missing.is_empty() { String::new() } else { format!("; not covered: {missing:?}") }
            ),
        ));

        // Claim 7: what each policy launches.
        let mut bad = Vec::new();
        let m1_of = |c: &Case| -> Option<&Launch> {
            m1.iter()
                .zip(l_m1)
                .find(|(m, _)| {
                    m.ty == c.ty && m.gs == c.gs && m.bits == c.bits && m.shape.name == c.shape.name
                })
                .map(|(_, l)| l)
        };
        for (i, c) in scases.iter().enumerate() {
            let (u, nw, s) = (&s_up[i], &s_narrow[i], &s_str[i]);
            let Some(one) = m1_of(c) else {
                bad.push(format!("{}: no M=1 dispatch", c.id()));
                continue;
            };
            let fam = Family::from_func(&s.func);
            let base_ok = fam.is_some_and(|f| f != f.base() && f.base().name() == one.func);
            // V is qmv_wide's tile for the same M (upstream's gen-15 launch).
            let v = s.targs.get(2).copied().unwrap_or(0);
            let wide_v = (u.func == "qmv_wide").then(|| u.targs.get(2).copied().unwrap_or(-1));
            if !base_ok
                || wide_v != Some(v)
                || s.grid[0] != (c.shape.m + v - 1) / v
                || s.grid[1] != one.grid[1]
                || s.group != one.group
            {
                bad.push(format!(
                    "{} streamed: {} {:?} grid {:?} (M=1: {}, qmv_wide V {wide_v:?})",
                    c.id(),
                    s.func,
                    s.targs,
                    s.grid,
                    one.func
                ));
            }
            if nw.func != one.func || nw.grid != [c.shape.m, one.grid[1], one.grid[2]] {
                bad.push(format!("{} narrow: {} grid {:?}", c.id(), nw.func, nw.grid));
            }
        }
        for (k, c) in outside.iter().enumerate() {
            let (u, s) = (
                &by_policy["upstream"][ns + k],
                &by_policy["streamed"][ns + k],
            );
            if s != u {
                bad.push(format!(
                    "{} ({}): streamed policy launched {} instead of upstream's {}",
                    c.id(),
                    c.shape.name,
                    s.func,
                    u.func
                ));
            }
        }
        claims.push(claim(
            "7",
            title7,
            bad.is_empty(),
            format!(
                "{} accepted cases x 3 policies, {} outside the accept-list ({}); {} mismatches{}",
                scases.len(),
                outside.len(),
                outside
                    .iter()
                    .map(|c| c.shape.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                bad.len(),
                bad.first()
                    .map(|b| format!(", first {b}"))
                    .unwrap_or_default()
            ),
        ));
    }

    // Claim 8: what reaches the Mac compiles here, and every kernel name the
    // dispatch asks for (every policy) is instantiated in quantized.metal.
    {
        let t = Instant::now();
        let r = crate::syntax::check(patched, &compiler, opts.quick)?;
        // Valid cases only: the probes outside the accept-list (group size
        // 16, 1 bit) are shapes MLX rejects before dispatch.
        let knames = rec_patched
            .iter()
            .chain(by_policy.values().flat_map(|v| &v[..ns]))
            .map(|l| l.kname.as_str());
        let missing = if r.kernels.ok {
            crate::syntax::missing_names(knames, &r.instantiations)
        } else {
            Vec::new()
        };
        timings.push(("compile check".to_string(), t.elapsed().as_secs_f64()));
        let mut detail = format!(
            "{} -fsyntax-only: {} (metal-cpp declared by us, MLX headers from the tree); \
             quantized.metal: {} instantiation lines expanded, {} compiled through the shim ({} streamed){}",
            crate::extract::HOST_SOURCE,
            if r.host.ok { "compiles" } else { "FAILS" },
            r.instantiations.len(),
            r.compiled,
            r.streamed,
            if r.kernels.ok { "" } else { ": FAILS" },
        );
        for (what, step) in [("host", &r.host), ("kernels", &r.kernels)] {
            if !step.ok {
                detail.push_str(&format!(
                    "; {what}: {}",
                    step.errors.lines().next().unwrap_or("(no diagnostics)")
                ));
            }
        }
        if !missing.is_empty() {
            detail.push_str(&format!(
                "; {} dispatched kernel names not instantiated, first {}",
                missing.len(),
                missing[0]
            ));
        }
        claims.push(claim(
            "8",
            "compiles here: patched quantized.cpp whole (host), qmv-family [[kernel]]s with their quantized.metal instantiations (shim); dispatched kernel names are instantiated",
            r.ok() && missing.is_empty() && (!streamed_seen || r.streamed > 0),
            detail,
        ));
    }

    // Scheduler cross-check.
    {
        let p = &outs[0];
        let (mut n, mut bad) = (0, 0);
        for (id, t) in p.iter().filter(|(id, _)| id.starts_with("threads|")) {
            let c = p.get(&id.replacen("threads|", "coro|", 1));
            n += 1;
            if c.is_none_or(|c| c.y != t.y || c.sums != t.sums || c.sums.is_empty()) {
                bad += 1;
            }
        }
        claims.push(claim(
            "6",
            "SIMT scheduler: OS-thread+barrier lanes equal coroutine lanes (outputs and simd_sum operands)",
            bad == 0 && n > 0,
            format!("{n} cases, {bad} differ"),
        ));
    }

    // Hashes of M=1 outputs per variant, for comparison with real hardware.
    let mut hashes = BTreeMap::new();
    for (ci, contraction) in [Contraction::Off, Contraction::On].iter().enumerate() {
        for (id, o) in outs[ci].iter().filter(|(id, _)| id.starts_with("m1|")) {
            let parts: Vec<&str> = id.split('|').collect();
            let order = ORDERS
                .iter()
                .find(|(c, _)| parts[2].starts_with(*c))
                .map(|o| o.1)
                .unwrap_or("?");
            let h: String = Sha256::digest(o.y.as_bytes())
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect();
            hashes.insert(format!("{}#{order}#contract-{contraction:?}", parts[1]), h);
        }
    }

    claims.sort_by(|a, b| a.id.cmp(&b.id));
    timings.push(("total".to_string(), t_all.elapsed().as_secs_f64()));
    Ok(Report {
        patched: patched.label.clone(),
        pristine: pristine_files.label.clone(),
        compiler: compiler.version().to_string(),
        claims,
        runs: runs_total,
        timings,
        hashes,
    })
}

/// Compares hashes recorded elsewhere (e.g. on a Mac, keyed by case id) with
/// the emulator's: for each variant (order, contraction), how many cases match.
pub fn compare_hashes(
    ours: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Vec<(String, usize, usize)> {
    let mut per: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (key, h) in ours {
        let mut it = key.splitn(2, '#');
        let (case, variant) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        if let Some(t) = theirs.get(case) {
            let e = per.entry(variant.to_string()).or_default();
            e.1 += 1;
            e.0 += (t == h) as usize;
        }
    }
    per.into_iter().map(|(v, (m, n))| (v, m, n)).collect()
}
