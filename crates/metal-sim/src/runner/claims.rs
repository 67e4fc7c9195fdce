//! The claims, one function each, evaluated on the recorded launches
//! ([`Dispatched`]) and the emulated runs ([`Kernels`]).
//! docs/kernels/metal-sim.md states what each claim means.

use std::collections::{BTreeMap, BTreeSet};

use crate::compile::{Compiler, Contraction, Family};
use crate::error::Result;
use crate::extract::TreeFiles;

use super::dispatch::{Case, Dispatched, POLICIES};
use super::kernels::Kernels;
use super::protocol::{Launch, Out};
use super::{Claim, Status, TYPES, bound};

const CONTRACTIONS: [Contraction; 2] = [Contraction::Off, Contraction::On];

fn claim(id: &str, title: &str, ok: bool, detail: String) -> Claim {
    Claim {
        id: id.into(),
        title: title.into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
    }
}

/// The counting every comparison claim does: how many pairs were compared,
/// how many of them differ.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    n: usize,
    differ: usize,
}

/// Counts `differs` (one item per compared pair, `true` where it differs).
fn tally(differs: impl IntoIterator<Item = bool>) -> Tally {
    differs.into_iter().fold(Tally::default(), |t, d| Tally {
        n: t.n + 1,
        differ: t.differ + d as usize,
    })
}

/// ", first X" for the first of `items`, or nothing.
fn first<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .first()
        .map(|d| format!(", first {d}"))
        .unwrap_or_default()
}

/// Vector `v` of an M-vector output (hex digits per element known from the
/// type).
fn row<'a>(y: &'a str, ty: &str, n: i64, v: i64) -> &'a str {
    let w = if ty == "float32" { 8 } else { 4 } as usize;
    let n = n as usize;
    let v = v as usize;
    y.get(v * n * w..(v + 1) * n * w).unwrap_or("")
}

/// Claim 4: the dispatch binary (MLX's code) against the rule as the
/// harness understands it, plus coverage of every path.
pub(super) fn dispatch_rule(d: &Dispatched) -> Claim {
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for (c, l) in d.m1.iter().zip(&d.l_m1) {
        let (n, k, bits) = (c.shape.n, c.shape.k, c.bits);
        let want = if (k == 64 || k == 128) && bits & (bits - 1) == 0 {
            "qmv_quad"
        } else if n % 8 == 0 && k % d.align[&bits] == 0 {
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
    for ((c, w), o) in d.multi.iter().zip(&d.l_wide).zip(&d.l_old) {
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
    let pristine_same = d.l_m1 == d.l_m1_pristine;
    let ok = bad.is_empty() && missing.is_empty() && pristine_same;
    claim(
        "4",
        "dispatch follows quantized.cpp (extracted dispatch_qmv / qmv_fast_k_alignment)",
        ok,
        if ok {
            format!(
                "{} M=1 + {} M>=2 shapes; paths covered: {}; alignment {:?}; pristine dispatch identical",
                d.m1.len(),
                2 * d.multi.len(),
                seen.iter().cloned().collect::<Vec<_>>().join(", "),
                d.align
            )
        } else {
            format!(
                "mismatches: {bad:?}; uncovered: {missing:?}; pristine dispatch identical: {pristine_same}"
            )
        },
    )
}

/// Claim 0: errors (divergence, out-of-bounds writes, unwritten outputs)
/// fail the run.
pub(super) fn completes(k: &Kernels) -> Claim {
    let mut errors = Vec::new();
    for (name, m) in k.names.iter().zip(&k.outs) {
        for (id, o) in m {
            if !o.error.is_empty() {
                errors.push(format!("{name} {id}: {}", o.error));
            }
        }
    }
    claim(
        "0",
        "every run completes: no divergent simd op, no write past the output, every output written",
        errors.is_empty(),
        if errors.is_empty() {
            format!("{} runs", k.runs)
        } else {
            format!("{} errors, first: {}", errors.len(), errors[0])
        },
    )
}

/// Claim 1: M=1 outputs, patched vs pristine, every order and contraction.
pub(super) fn m1_identity(k: &Kernels) -> Claim {
    let mut compared = 0;
    let mut diffs = Vec::new();
    for contraction in CONTRACTIONS {
        let (p, q) = (k.patched(contraction), k.pristine(contraction));
        for (id, o) in p.iter().filter(|(id, _)| id.starts_with("m1|")) {
            compared += 1;
            match q.get(id) {
                Some(o2) if o2.y == o.y && !o.y.is_empty() => {}
                _ => diffs.push(format!("{contraction:?} {id}")),
            }
        }
    }
    claim(
        "1",
        "M=1 kernels: patched tree bitwise equal to pristine tree",
        diffs.is_empty() && compared > 0,
        format!(
            "{compared} outputs compared ({} orders x contraction off/on, separately compiled binaries; extracted kernel source {}); {} differ{}",
            k.orders,
            if k.same_source {
                "identical"
            } else {
                "differs"
            },
            diffs.len(),
            first(&diffs)
        ),
    )
}

/// Claims 2a-2c: the negative controls must each detect a difference.
pub(super) fn controls(d: &Dispatched, k: &Kernels) -> [Claim; 3] {
    let p = k.patched(Contraction::Off);
    let wide_old = d.multi.iter().filter_map(|c| {
        let w = p.get(&format!("wide|{}|b|qmv_wide", c.id()))?;
        let old = format!("old|{}|b|", c.id());
        let (_, o) = p.iter().find(|(id, _)| id.starts_with(&old))?;
        Some(w.y != o.y)
    });
    let a = tally(wide_old);
    let fast_qmv =
        d.m1.iter()
            .zip(&d.l_m1)
            .filter(|(c, l)| l.func == "qmv_fast" && c.ty == "float32")
            .filter_map(|(c, _)| {
                let f = p.get(&format!("m1|{}|b|qmv_fast", c.id()))?;
                let q = p.get(&format!("forced|{}|b|qmv", c.id()))?;
                Some(f.y != q.y)
            });
    let b = tally(fast_qmv);
    let perturbed = k
        .perturbed()
        .iter()
        .filter_map(|(id, o)| p.get(id).map(|base| base.y != o.y));
    let c = tally(perturbed);
    [
        claim(
            "2a",
            "control: qmv_wide (gen 15) differs from the gen-14 M>=2 kernel (qmv_fast/qmv) for some inputs",
            a.differ > 0,
            format!("{} of {} M>=2 cases differ", a.differ, a.n),
        ),
        claim(
            "2b",
            "control: qmv differs from qmv_fast at T=float for some shapes",
            b.differ > 0,
            format!(
                "{} of {} float32 qmv_fast-eligible shapes differ",
                b.differ, b.n
            ),
        ),
        claim(
            "2c",
            "control: load_vector with two summands swapped (x[i+1]+x[i+2]) is detected",
            c.differ > 0,
            format!(
                "{} of {} M=1 cases differ from the unperturbed kernel",
                c.differ, c.n
            ),
        ),
    ]
}

/// Claim 3: accuracy against the float64 reference (patched and pristine
/// jobs).
pub(super) fn accuracy(k: &Kernels) -> Claim {
    let mut worst: BTreeMap<&str, (f64, String)> = BTreeMap::new();
    let mut bad = Vec::new();
    for (name, m) in k.names.iter().zip(&k.outs).take(4) {
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
                bad.push(format!("{name} {id}: {:.3e}", o.rel_err));
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
    claim(
        "3",
        "accuracy: every kernel within the documented bound of a float64 reference",
        bad.is_empty(),
        if bad.is_empty() {
            detail
        } else {
            format!("{} over bound, first {}; {detail}", bad.len(), bad[0])
        },
    )
}

const TITLE5: &str = "streamed kernel (as dispatched): every vector's output and simd_sum operands equal the M=1 kernel's";
const TITLE7: &str = "policy dispatch: streamed = twin of the M=1 kernel on the accept-list, upstream's launch elsewhere; narrow = M=1 kernel with grid.x = M";

/// Claims 5 and 7, or both not evaluated when the tree has no streamed
/// kernel.
pub(super) fn streamed(d: &Dispatched, k: &Kernels, quick: bool) -> [Claim; 2] {
    if !d.streamed_seen {
        let detail = "streamed kernel not present in this tree (the streamed policy never dispatches it): identity claim not evaluated";
        return [("5", TITLE5), ("7", TITLE7)].map(|(id, title)| Claim {
            id: id.into(),
            title: title.into(),
            status: Status::NotEvaluated,
            detail: detail.into(),
        });
    }
    [streamed_identity(d, k, quick), policy_launches(d)]
}

/// Compares one streamed run with its M=1 twin; `covered` collects the
/// families, tiles and partial tiles reached. `None` when the pair was not
/// run (the streamed policy kept a non-streamed kernel there), `Err` when the
/// M=1 twin is missing; else the differences found.
fn streamed_pair(
    p: &BTreeMap<String, Out>,
    c: &Case,
    (s, l): (&Launch, &Launch),
    contraction: Contraction,
    covered: &mut BTreeSet<String>,
) -> Option<Result<Vec<String>, String>> {
    let sid = format!("sV|{}|b|{}", c.id(), s.func);
    let sv = p.get(&sid)?;
    let Some(one) = p.get(&format!("s1|{}|b|{}", c.id(), l.func)) else {
        return Some(Err(format!("{sid}: no M=1 run")));
    };
    let mut bad = Vec::new();
    let v = s.targs.get(2).copied().unwrap_or(0);
    covered.insert(format!("{} V{v}", s.func));
    if s.grid[0] * v > c.shape.m {
        covered.insert("partial last tile".into());
    }
    for vec in 0..c.shape.m {
        let a = row(&sv.y, c.ty, c.shape.n, vec);
        let b = row(&one.y, c.ty, c.shape.n, vec);
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
    Some(Ok(bad))
}

/// Claim 5: every streamed run equals its M=1 twin, vector by vector.
fn streamed_identity(d: &Dispatched, k: &Kernels, quick: bool) -> Claim {
    let mut n = 0;
    let mut bad = Vec::new();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    for contraction in CONTRACTIONS {
        let p = k.patched(contraction);
        let pairs = d.accepted("streamed").iter().zip(d.accepted("narrow"));
        for (c, pair) in d.scases.iter().zip(pairs) {
            match streamed_pair(p, c, pair, contraction, &mut covered) {
                None => {}
                Some(Err(e)) => bad.push(e),
                Some(Ok(b)) => {
                    n += 1;
                    bad.extend(b);
                }
            }
        }
    }
    // Full mode must reach both families, every V and a partial tile.
    let mut missing = Vec::new();
    if !quick {
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
    claim(
        "5",
        TITLE5,
        bad.is_empty() && missing.is_empty() && n > 0,
        format!(
            "{n} streamed runs (contraction off/on; simd_sum operands compared, so any reduction order); covered: {}; {} failures{}{}",
            covered.iter().cloned().collect::<Vec<_>>().join(", "),
            bad.len(),
            first(&bad),
            if missing.is_empty() {
                String::new()
            } else {
                format!("; not covered: {missing:?}")
            }
        ),
    )
}

/// Claim 7's check of one accepted case: what the streamed and narrow
/// policies launch against upstream's launch and the M=1 launch `one`.
fn accepted_launch(c: &Case, [u, nw, s]: [&Launch; 3], one: &Launch, bad: &mut Vec<String>) {
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

/// Claim 7: what each policy launches.
fn policy_launches(d: &Dispatched) -> Claim {
    let mut bad = Vec::new();
    let m1_of = |c: &Case| -> Option<&Launch> {
        d.m1.iter()
            .zip(&d.l_m1)
            .find(|(m, _)| {
                m.ty == c.ty && m.gs == c.gs && m.bits == c.bits && m.shape.name == c.shape.name
            })
            .map(|(_, l)| l)
    };
    let [up, narrow, streamed] = POLICIES.map(|p| d.accepted(p));
    for (i, c) in d.scases.iter().enumerate() {
        let Some(one) = m1_of(c) else {
            bad.push(format!("{}: no M=1 dispatch", c.id()));
            continue;
        };
        accepted_launch(c, [&up[i], &narrow[i], &streamed[i]], one, &mut bad);
    }
    let pairs = d
        .outside_of("upstream")
        .iter()
        .zip(d.outside_of("streamed"));
    for (c, (u, s)) in d.outside.iter().zip(pairs) {
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
    let probes: Vec<&str> = d.outside.iter().map(|c| c.shape.name).collect();
    claim(
        "7",
        TITLE7,
        bad.is_empty(),
        format!(
            "{} accepted cases x 3 policies, {} outside the accept-list ({}); {} mismatches{}",
            d.scases.len(),
            d.outside.len(),
            probes.join(", "),
            bad.len(),
            first(&bad)
        ),
    )
}

/// Claim 8: what reaches the Mac compiles here, and every kernel name the
/// dispatch asks for (every policy) is instantiated in quantized.metal.
pub(super) fn compiles(
    patched: &TreeFiles,
    compiler: &Compiler,
    quick: bool,
    d: &Dispatched,
) -> Result<Claim> {
    let r = crate::syntax::check(patched, compiler, quick)?;
    // Valid cases only: the probes outside the accept-list (group size
    // 16, 1 bit) are shapes MLX rejects before dispatch.
    let knames = d
        .l_m1
        .iter()
        .chain(&d.l_wide)
        .chain(&d.l_old)
        .chain(d.by_policy.keys().flat_map(|p| d.accepted(p)))
        .map(|l| l.kname.as_str());
    let missing = if r.kernels.ok {
        crate::syntax::missing_names(knames, &r.instantiations)
    } else {
        Vec::new()
    };
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
    Ok(claim(
        "8",
        "compiles here: patched quantized.cpp whole (host), qmv-family [[kernel]]s with their quantized.metal instantiations (shim); dispatched kernel names are instantiated",
        r.ok() && missing.is_empty() && (!d.streamed_seen || r.streamed > 0),
        detail,
    ))
}

/// Claim 6: the scheduler cross-check (OS threads + barrier vs coroutines).
pub(super) fn scheduler(k: &Kernels) -> Claim {
    let p = k.patched(Contraction::Off);
    let t = tally(
        p.iter()
            .filter(|(id, _)| id.starts_with("threads|"))
            .map(|(id, t)| {
                let c = p.get(&id.replacen("threads|", "coro|", 1));
                c.is_none_or(|c| c.y != t.y || c.sums != t.sums || c.sums.is_empty())
            }),
    );
    claim(
        "6",
        "SIMT scheduler: OS-thread+barrier lanes equal coroutine lanes (outputs and simd_sum operands)",
        t.differ == 0 && t.n > 0,
        format!("{} cases, {} differ", t.n, t.differ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_pairs_and_differences() {
        assert_eq!(tally([]), Tally { n: 0, differ: 0 });
        assert_eq!(tally([true, false, true]), Tally { n: 3, differ: 2 });
    }

    #[test]
    fn row_slices_one_vector() {
        assert_eq!(row("0011223344556677", "float16", 2, 1), "44556677");
        assert_eq!(row("00112233", "float32", 1, 0), "00112233");
        assert_eq!(row("0011", "float16", 1, 3), "");
    }
}
