//! Stage 2: the kernel binaries (patched and pristine, contraction off and
//! on, plus the perturbed control), what each runs, and running them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::compile::{self, Binary, Compiler, Contraction, Family, Instance};
use crate::error::{Error, Result};
use crate::extract::{self, Extracted, TreeFiles};

use super::dispatch::{Case, Dispatched};
use super::protocol::{CaseLine, Launch, Out};
use super::{ORDERS, Options};

/// One emulated run: a kernel instance on a case with a launch geometry.
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

impl Run {
    /// A run of `inst` on `c` with `l`'s geometry; `tag` prefixes the id
    /// ("m1", "wide", ...), which the claims look up.
    fn new(
        tag: &str,
        c: &Case,
        inst: Instance,
        l: &Launch,
        order: char,
        record: bool,
        threads: bool,
    ) -> Run {
        Run {
            id: format!("{tag}|{}|{order}|{}", c.id(), inst.family.name()),
            inst,
            case: c.clone(),
            grid: l.grid,
            group: l.group,
            order,
            record,
            threads,
        }
    }

    /// The request line of the kernel binary (cpp/kernels_main.cpp).
    fn line(&self, seed: u64) -> String {
        let (c, s) = (&self.case, &self.case.shape);
        format!(
            "case {} {} {} {} {} {} {} {} {} {} {} {} {} {} {seed} {} {} {}",
            self.id,
            self.inst.key(),
            c.ty,
            c.gs,
            c.bits,
            s.m,
            s.n,
            s.k,
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.group[0],
            self.group[1],
            self.group[2],
            self.order,
            self.record as i32,
            self.threads as i32
        )
    }
}

/// The kernel instance MLX's launch `l` of case `case` asks for.
fn instance(case: &Case, l: &Launch) -> Result<Instance> {
    let bad = |reason: String| Error::Launch {
        case: case.id(),
        reason,
    };
    let family =
        Family::from_func(&l.func).ok_or_else(|| bad(format!("unknown kernel {}", l.func)))?;
    if l.targs.len() < 2 || l.targs[0] != case.gs || l.targs[1] != case.bits {
        return Err(bad(format!("unexpected template arguments {:?}", l.targs)));
    }
    let extra = match family {
        Family::Quad => vec![l.targs[2]],
        Family::Wide => vec![l.targs[2], l.targs[3]],
        Family::FastStreamed | Family::QmvStreamed => {
            // [gs, bits, V, batched]; the harness launches unbatched only.
            if l.targs.len() != 4 || l.targs[3] != 0 {
                return Err(bad(format!("streamed template arguments {:?}", l.targs)));
            }
            vec![l.targs[2]]
        }
        Family::Fast | Family::Qmv => {
            // The narrow (2 results per simdgroup) variant is nvfp4-only.
            if l.targs.get(4) != Some(&4) {
                return Err(bad(format!(
                    "results_per_simdgroup {:?} not emulated",
                    l.targs.get(4)
                )));
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

/// One kernel binary: a tree, a contraction mode, the runs it executes.
struct Job<'a> {
    name: String,
    files: &'a TreeFiles,
    code: &'a Extracted,
    contraction: Contraction,
    runs: Vec<Run>,
}

/// The results of stage 2, in job order: patched Off, patched On, pristine
/// Off, pristine On, perturbed Off.
pub(super) struct Kernels {
    /// Job names ("patched Off", ...).
    pub names: Vec<String>,
    /// Per job: run id → results.
    pub outs: Vec<BTreeMap<String, Out>>,
    /// The extracted kernel source is the same in both trees.
    pub same_source: bool,
    /// How many simd_sum orders each M=1 case ran with.
    pub orders: usize,
    pub runs: usize,
}

/// The index of contraction `c`'s job within a tree's pair of jobs.
fn slot(c: Contraction) -> usize {
    match c {
        Contraction::Off => 0,
        Contraction::On => 1,
    }
}

impl Kernels {
    pub fn patched(&self, c: Contraction) -> &BTreeMap<String, Out> {
        &self.outs[slot(c)]
    }
    pub fn pristine(&self, c: Contraction) -> &BTreeMap<String, Out> {
        &self.outs[2 + slot(c)]
    }
    pub fn perturbed(&self) -> &BTreeMap<String, Out> {
        self.outs.last().expect("the perturbed job")
    }
}

/// M = 1 runs of one tree: every case in every simd_sum order.
fn m1_runs(d: &Dispatched, recs: &[Launch], orders: &[(char, &str)]) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for (c, l) in d.m1.iter().zip(recs) {
        let inst = instance(c, l)?;
        for &(o, _) in orders {
            runs.push(Run::new(
                "m1",
                c,
                inst.clone(),
                l,
                o,
                d.streamed_seen,
                false,
            ));
        }
    }
    Ok(runs)
}

/// The patched tree's runs beyond M = 1: the controls' and accuracy's M >= 2
/// kernels, qmv forced where qmv_fast runs, the scheduler cross-check
/// (contraction off) and the streamed claim's pairs.
fn patched_runs(d: &Dispatched, contraction: Contraction) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for ((c, w), o) in d.multi.iter().zip(&d.l_wide).zip(&d.l_old) {
        runs.push(Run::new("wide", c, instance(c, w)?, w, 'b', false, false));
        runs.push(Run::new("old", c, instance(c, o)?, o, 'b', false, false));
    }
    for (c, l) in
        d.m1.iter()
            .zip(&d.l_m1)
            .filter(|(_, l)| l.func == "qmv_fast")
    {
        let mut inst = instance(c, l)?;
        inst.family = Family::Qmv;
        runs.push(Run::new("forced", c, inst, l, 'b', false, false));
    }
    if contraction == Contraction::Off {
        // Scheduler cross-check: OS threads + barrier vs coroutines.
        for (c, l) in d.m1.iter().zip(&d.l_m1).step_by(7).take(6) {
            runs.push(Run::new("threads", c, instance(c, l)?, l, 'b', true, true));
            runs.push(Run::new("coro", c, instance(c, l)?, l, 'b', true, false));
        }
    }
    // Claim 5: the streamed launch the policy dispatch recorded against the
    // narrow one (the M=1 kernel, grid.x = M).
    if d.streamed_seen {
        let pairs = d.accepted("streamed").iter().zip(d.accepted("narrow"));
        for (c, (s, n)) in d.scases.iter().zip(pairs) {
            if Family::from_func(&s.func).is_none_or(|f| f.base() == f) {
                continue;
            }
            runs.push(Run::new("sV", c, instance(c, s)?, s, 'b', true, false));
            runs.push(Run::new("s1", c, instance(c, n)?, n, 'b', true, false));
        }
    }
    Ok(runs)
}

/// The three trees' extracted kernel code.
struct Codes {
    patched: Extracted,
    pristine: Extracted,
    perturbed_files: TreeFiles,
    perturbed: Extracted,
}

impl Codes {
    fn extract(patched: &TreeFiles, pristine: &TreeFiles) -> Result<Codes> {
        let perturbed_files = extract::perturb(
            patched,
            extract::KERNEL_HEADER,
            "load_vector",
            "x[i + 1] + x[i + 2]",
            "x[i + 2] + x[i + 1]",
        )?;
        Ok(Codes {
            patched: compile::kernel_code(patched)?,
            pristine: compile::kernel_code(pristine)?,
            perturbed: compile::kernel_code(&perturbed_files)?,
            perturbed_files,
        })
    }
}

/// Every job of stage 2 and what it runs.
fn jobs<'a>(
    patched: &'a TreeFiles,
    pristine: &'a TreeFiles,
    codes: &'a Codes,
    d: &Dispatched,
    orders: &[(char, &str)],
) -> Result<Vec<Job<'a>>> {
    let mut jobs = Vec::new();
    let trees = [
        (patched, &codes.patched, &d.l_m1),
        (pristine, &codes.pristine, &d.l_m1_pristine),
    ];
    for (i, (files, code, recs)) in trees.into_iter().enumerate() {
        for contraction in [Contraction::Off, Contraction::On] {
            let mut runs = m1_runs(d, recs, orders)?;
            if i == 0 {
                runs.extend(patched_runs(d, contraction)?);
            }
            jobs.push(Job {
                name: format!("{} {:?}", files.label, contraction),
                files,
                code,
                contraction,
                runs,
            });
        }
    }
    jobs.push(Job {
        name: "perturbed Off".into(),
        files: &codes.perturbed_files,
        code: &codes.perturbed,
        contraction: Contraction::Off,
        runs: m1_runs(d, &d.l_m1, &[ORDERS[0]])?
            .into_iter()
            .map(|r| Run { record: false, ..r })
            .collect(),
    });
    Ok(jobs)
}

/// A job's binary, its answers and the emulation time.
type JobOut = (Binary, Vec<Out>, f64);

/// Compiles and runs one job.
fn execute(
    compiler: &Compiler,
    unit: &(String, Vec<String>),
    job: &Job,
    seed: u64,
) -> Result<JobOut> {
    let b = compiler.build(&unit.0, &unit.1)?;
    let t = Instant::now();
    let lines: Vec<String> = job.runs.iter().map(|r| r.line(seed)).collect();
    let answers = compile::run_lines::<CaseLine>(&b.path, &lines)
        .and_then(|a| {
            a.into_iter()
                .zip(&job.runs)
                .map(|(a, r)| a.out(&b.path, &r.id))
                .collect::<Result<Vec<Out>>>()
        })
        .map_err(|e| Error::Job {
            job: job.name.clone(),
            err: Box::new(e),
        })?;
    Ok((b, answers, t.elapsed().as_secs_f64()))
}

/// Runs `jobs`, `parallel` at a time; results in job order.
fn execute_all(
    compiler: &Compiler,
    jobs: &[Job],
    units: &[(String, Vec<String>)],
    opts: &Options,
) -> Vec<Result<JobOut>> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<JobOut>>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= jobs.len() {
                        break;
                    }
                    let r = execute(compiler, &units[i], &jobs[i], opts.seed);
                    *slots[i].lock().unwrap() = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every job ran"))
        .collect()
}

/// Stage 2: builds the jobs, compiles and runs them.
pub(super) fn run(
    patched: &TreeFiles,
    pristine: &TreeFiles,
    compiler: &Compiler,
    opts: &Options,
    d: &Dispatched,
    timings: &mut Vec<(String, f64)>,
) -> Result<Kernels> {
    let codes = Codes::extract(patched, pristine)?;
    let orders: &[(char, &str)] = if opts.quick { &ORDERS[..2] } else { ORDERS };
    let jobs = jobs(patched, pristine, &codes, d, orders)?;
    let units: Vec<(String, Vec<String>)> = jobs
        .iter()
        .map(|j| {
            let inst: BTreeSet<Instance> = j.runs.iter().map(|r| r.inst.clone()).collect();
            let inst: Vec<Instance> = inst.into_iter().collect();
            Ok((
                compile::kernel_unit(j.files, j.code, &inst)?,
                j.contraction.flags(),
            ))
        })
        .collect::<Result<_>>()?;
    let t = Instant::now();
    let results = execute_all(compiler, &jobs, &units, opts);
    let mut outs = Vec::new();
    let (mut compile_s, mut run_s, mut cached) = (0.0, 0.0, 0);
    for (j, r) in jobs.iter().zip(results) {
        let (b, answers, secs) = r?;
        compile_s += if b.cached { 0.0 } else { b.seconds };
        cached += b.cached as usize;
        run_s += secs;
        let ids = j.runs.iter().map(|r| r.id.clone());
        outs.push(ids.zip(answers).collect::<BTreeMap<_, _>>());
    }
    let name = format!(
        "kernel binaries: {} ({} cached), compile",
        jobs.len(),
        cached
    );
    timings.push((name, compile_s));
    timings.push(("emulated runs (sum over binaries)".to_string(), run_s));
    timings.push(("kernels wall".to_string(), t.elapsed().as_secs_f64()));
    Ok(Kernels {
        names: jobs.iter().map(|j| j.name.clone()).collect(),
        same_source: codes.patched.code == codes.pristine.code,
        orders: orders.len(),
        runs: jobs.iter().map(|j| j.runs.len()).sum(),
        outs,
    })
}
