//! The case matrix and the claims: [`run`] records what MLX's dispatch code
//! launches (`dispatch`), runs the kernels (`kernels`) and evaluates each
//! claim (`claims`, one function per claim) on the results; `protocol` holds
//! the typed lines the C++ binaries print.

mod claims;
mod dispatch;
mod kernels;
mod protocol;
mod sdpa;

pub use sdpa::upstream_rules as upstream_sdpa_rules;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::compile::{Compiler, Contraction};
use crate::error::Result;
use crate::extract::TreeFiles;

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
/// The simd_sum orders the M=1 kernels run with (the first is the default).
const ORDERS: &[(char, &str)] = &[('b', "butterfly"), ('l', "linear"), ('p', "pairwise")];

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

/// Runs the whole matrix on `patched` (and `pristine`, default: itself) and
/// evaluates the claims.
pub fn run(patched: &TreeFiles, pristine: Option<&TreeFiles>, opts: &Options) -> Result<Report> {
    let t_all = Instant::now();
    let mut timings = Vec::new();
    let pristine = match pristine {
        Some(p) => p.clone(),
        None => {
            let mut p = patched.clone();
            p.label = "pristine".into();
            p
        }
    };
    let compiler = Compiler::detect(&opts.cache)?;
    let d = dispatch::record(patched, &pristine, &compiler, opts, &mut timings)?;
    let mut claims = vec![claims::dispatch_rule(&d)];
    let k = kernels::run(patched, &pristine, &compiler, opts, &d, &mut timings)?;
    claims.push(claims::completes(&k));
    claims.push(claims::m1_identity(&k));
    claims.extend(claims::controls(&d, &k));
    claims.push(claims::accuracy(&k));
    claims.extend(claims::streamed(&d, &k, opts.quick));
    let t = Instant::now();
    claims.push(claims::compiles(patched, &compiler, opts.quick, &d)?);
    timings.push(("compile check".to_string(), t.elapsed().as_secs_f64()));
    claims.push(claims::scheduler(&k));
    let t = Instant::now();
    claims.extend(sdpa_claims(patched, &pristine, &compiler, opts)?);
    timings.push(("sdpa (claims 9, 9c)".to_string(), t.elapsed().as_secs_f64()));
    claims.sort_by(|a, b| a.id.cmp(&b.id));
    timings.push(("total".to_string(), t_all.elapsed().as_secs_f64()));
    Ok(Report {
        patched: patched.label.clone(),
        pristine: pristine.label.clone(),
        compiler: compiler.version().to_string(),
        claims,
        runs: k.runs,
        timings,
        hashes: hashes(&k),
    })
}

/// Only the SDPA claims (9, 9c), e.g. for a test that does not need the qmv
/// matrix.
pub fn run_sdpa(patched: &TreeFiles, pristine: &TreeFiles, opts: &Options) -> Result<Vec<Claim>> {
    let compiler = Compiler::detect(&opts.cache)?;
    sdpa_claims(patched, pristine, &compiler, opts)
}

/// Claims 9 and 9c; not evaluated when the patched tree has no streamed SDPA
/// routing (overlay 0014's host rules) to emulate.
fn sdpa_claims(
    patched: &TreeFiles,
    pristine: &TreeFiles,
    compiler: &Compiler,
    opts: &Options,
) -> Result<Vec<Claim>> {
    let mut bins = Vec::new();
    for contraction in [Contraction::Off, Contraction::On] {
        match crate::sdpa::build(patched, compiler, contraction) {
            Ok((bin, _)) => bins.push((contraction, bin)),
            Err(crate::Error::Source(why)) => {
                let claim = |id: &str| Claim {
                    id: id.into(),
                    title: "SDPA vector kernels: block vs chain".into(),
                    status: Status::NotEvaluated,
                    detail: why.clone(),
                };
                return Ok(vec![claim("9"), claim("9c")]);
            }
            Err(e) => return Err(e),
        }
    }
    sdpa::claims(&bins, patched, pristine, opts.quick, opts.seed, opts.jobs)
}

/// Hashes of M=1 outputs per variant, for comparison with real hardware.
fn hashes(k: &kernels::Kernels) -> BTreeMap<String, String> {
    let mut hashes = BTreeMap::new();
    for contraction in [Contraction::Off, Contraction::On] {
        let m1 = k.patched(contraction).iter();
        for (id, o) in m1.filter(|(id, _)| id.starts_with("m1|")) {
            let parts: Vec<&str> = id.split('|').collect();
            let order = ORDERS
                .iter()
                .find(|(c, _)| parts[2].starts_with(*c))
                .map(|o| o.1)
                .unwrap_or("?");
            let h = crate::compile::short_hex(Sha256::digest(o.y.as_bytes()), 8);
            hashes.insert(format!("{}#{order}#contract-{contraction:?}", parts[1]), h);
        }
    }
    hashes
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
