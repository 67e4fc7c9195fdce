//! Stage 1: the case matrix, and what MLX's host dispatch code (compiled
//! from each tree) launches for every case.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::compile::{self, Compiler, Family};
use crate::error::Result;
use crate::extract::TreeFiles;

use super::protocol::{AlignLine, DispatchLine, Launch};
use super::{Options, TYPES};

/// gen 15: M >= 2 goes to qmv_wide; gen 14: it goes to qmv / qmv_fast.
const ARCH_WIDE: &str = "applegpu_g15s";
const ARCH_OLD: &str = "applegpu_g14s";
/// The M >= 2 policies of overlay 0005, in the order they are recorded.
pub(super) const POLICIES: [&str; 3] = ["upstream", "narrow", "streamed"];

#[derive(Clone, Debug)]
pub(super) struct Shape {
    pub name: &'static str,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

#[derive(Clone, Debug)]
pub(super) struct Case {
    pub ty: &'static str,
    pub gs: i64,
    pub bits: i64,
    pub shape: Shape,
}

impl Case {
    pub fn id(&self) -> String {
        format!(
            "{}/gs{}/b{}/{}/M{}N{}K{}",
            self.ty, self.gs, self.bits, self.shape.name, self.shape.m, self.shape.n, self.shape.k
        )
    }
}

/// Every case and what each tree's dispatch code launches for it.
pub(super) struct Dispatched {
    /// qmv_fast's K alignment per bit width (from the patched tree).
    pub align: BTreeMap<i64, i64>,
    /// M = 1 cases and their patched / pristine launches (gen 15).
    pub m1: Vec<Case>,
    pub l_m1: Vec<Launch>,
    pub l_m1_pristine: Vec<Launch>,
    /// M >= 2 cases and their patched launches on gen 15 and gen 14.
    pub multi: Vec<Case>,
    pub l_wide: Vec<Launch>,
    pub l_old: Vec<Launch>,
    /// Cases of the streamed claims (M=1 shapes at several M) and probes
    /// outside the policy's accept-list.
    pub scases: Vec<Case>,
    pub outside: Vec<Case>,
    /// Per policy: launches of `scases` then of `outside` (patched, gen 15).
    pub by_policy: BTreeMap<&'static str, Vec<Launch>>,
    /// The streamed policy launched a streamed kernel somewhere.
    pub streamed_seen: bool,
}

impl Dispatched {
    /// The launches of `policy` for the accepted cases (`scases`).
    pub fn accepted(&self, policy: &str) -> &[Launch] {
        &self.by_policy[policy][..self.scases.len()]
    }
    /// The launches of `policy` for the probes outside the accept-list.
    pub fn outside_of(&self, policy: &str) -> &[Launch] {
        &self.by_policy[policy][self.scases.len()..]
    }
}

/// The request line asking `entry` what it launches for `c` on `arch`.
fn dispatch_line(c: &Case, entry: &str, arch: &str) -> String {
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
}

/// What `bin` launches for each of `cases` (one request per case).
fn launches<'a>(
    bin: &Path,
    cases: impl IntoIterator<Item = (&'a Case, &'static str)>,
    env: &[(&str, &str)],
) -> Result<Vec<Launch>> {
    let (ids, lines): (Vec<String>, Vec<String>) = cases
        .into_iter()
        .map(|(c, arch)| (c.id(), dispatch_line(c, "dispatch_qmv", arch)))
        .unzip();
    compile::run_lines_env::<DispatchLine>(bin, &lines, env)?
        .into_iter()
        .zip(&ids)
        .map(|(d, id)| d.launch(bin, id))
        .collect()
}

/// qmv_fast's K alignment for each of `bits`, from the tree's own code.
fn alignments(bin: &Path, bits: &[i64]) -> Result<BTreeMap<i64, i64>> {
    let lines: Vec<String> = bits.iter().map(|b| format!("align {b}")).collect();
    let answers: Vec<AlignLine> = compile::run_lines(bin, &lines)?;
    let mut align = BTreeMap::new();
    for (a, (want, line)) in answers.into_iter().zip(bits.iter().zip(&lines)) {
        if a.bits != *want {
            return Err(crate::Error::Answer {
                bin: bin.to_path_buf(),
                request: line.clone(),
                reason: format!("the line answers bits {}", a.bits),
            });
        }
        align.insert(a.bits, a.align);
    }
    Ok(align)
}

/// The M = 1 shapes of one (gs, bits) with qmv_fast's alignment `a`.
fn m1_shapes(gs: i64, a: i64) -> Vec<Shape> {
    let s = |name, n, k| Shape { name, m: 1, n, k };
    let mut shapes = vec![
        s("k128", 72, 128),
        s("aligned", 16, 2 * a),
        s("n_odd", 12, a + gs),
        s("n_lt8", 5, a),
        s("k_unaligned", 16, a + gs),
    ];
    if gs <= 64 {
        shapes.push(s("k64", 72, 64));
    }
    shapes
}

/// The M = 1 and M >= 2 cases of the matrix.
fn matrix(opts: &Options, align: &BTreeMap<i64, i64>) -> (Vec<Case>, Vec<Case>) {
    let (gs_set, ms): (&[i64], &[i64]) = if opts.quick {
        (&[64], &[3])
    } else {
        (&[32, 64, 128], &[2, 3, 5, 7])
    };
    let (mut m1, mut multi) = (Vec::new(), Vec::new());
    for &ty in TYPES {
        for &gs in gs_set {
            for (&bits, &a) in align {
                for shape in m1_shapes(gs, a) {
                    m1.push(Case {
                        ty,
                        gs,
                        bits,
                        shape,
                    });
                }
                for &m in ms {
                    let shape = Shape {
                        name: "multi",
                        m,
                        n: 16,
                        k: a,
                    };
                    multi.push(Case {
                        ty,
                        gs,
                        bits,
                        shape,
                    });
                }
            }
        }
    }
    (m1, multi)
}

/// The streamed claims' cases: every M=1 shape that is not qmv_quad's, at
/// several M; plus probes outside the accept-list, which must keep
/// upstream's launch.
fn policy_cases(opts: &Options, m1: &[Case]) -> (Vec<Case>, Vec<Case>) {
    let stream_ms: &[i64] = if opts.quick {
        &[3, 7]
    } else {
        &[2, 3, 5, 7, 11]
    };
    let mut scases = Vec::new();
    for c in m1.iter().filter(|c| c.shape.k != 64 && c.shape.k != 128) {
        for &m in stream_ms {
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
    (scases, outside)
}

/// Compiles both trees' dispatch code and records every launch.
pub(super) fn record(
    patched: &TreeFiles,
    pristine: &TreeFiles,
    compiler: &Compiler,
    opts: &Options,
    timings: &mut Vec<(String, f64)>,
) -> Result<Dispatched> {
    let t = Instant::now();
    let d_patched = compiler.build(&compile::dispatch_unit(patched)?, &[])?.path;
    let d_pristine = compiler
        .build(&compile::dispatch_unit(pristine)?, &[])?
        .path;
    timings.push((
        "compile dispatch (2 trees)".to_string(),
        t.elapsed().as_secs_f64(),
    ));
    let bits: &[i64] = if opts.quick {
        &[3, 4]
    } else {
        &[2, 3, 4, 5, 6, 8]
    };
    let align = alignments(&d_patched, bits)?;
    let (m1, multi) = matrix(opts, &align);

    let t = Instant::now();
    // One process for every patched gen-15/gen-14 request, as one batch.
    let cases = m1.iter().map(|c| (c, ARCH_WIDE));
    let cases = cases.chain(multi.iter().map(|c| (c, ARCH_WIDE)));
    let mut rec = launches(
        &d_patched,
        cases.chain(multi.iter().map(|c| (c, ARCH_OLD))),
        &[],
    )?;
    let l_old = rec.split_off(m1.len() + multi.len());
    let l_wide = rec.split_off(m1.len());
    let l_m1 = rec;
    let l_m1_pristine = launches(&d_pristine, m1.iter().map(|c| (c, ARCH_WIDE)), &[])?;
    timings.push(("dispatch".to_string(), t.elapsed().as_secs_f64()));

    // Policy dispatch (gen 15); trees without the policy ignore the variable.
    let t = Instant::now();
    let (scases, outside) = policy_cases(opts, &m1);
    let mut by_policy = BTreeMap::new();
    for policy in POLICIES {
        let cases = scases.iter().chain(&outside).map(|c| (c, ARCH_WIDE));
        let env = [(compile::POLICY_ENV, policy)];
        by_policy.insert(policy, launches(&d_patched, cases, &env)?);
    }
    timings.push(("policy dispatch".to_string(), t.elapsed().as_secs_f64()));
    let streamed_seen = by_policy["streamed"][..scases.len()]
        .iter()
        .any(|l| Family::from_func(&l.func).is_some_and(|f| f.base() != f));
    Ok(Dispatched {
        align,
        m1,
        l_m1,
        l_m1_pristine,
        multi,
        l_wide,
        l_old,
        scases,
        outside,
        by_policy,
        streamed_seen,
    })
}
