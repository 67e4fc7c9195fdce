//! What the C++ binaries print, one JSON object per line, as typed structs.
//! A missing or ill-typed field is an [`Error::Protocol`] naming it, never a
//! silent default (see cpp/dispatch_main.cpp and cpp/kernels_main.cpp).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// `align BITS` → `{"bits":B,"align":A}` (dispatch binary).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct AlignLine {
    pub bits: i64,
    pub align: i64,
}

/// `dispatch ID ...` → what MLX's host code would launch, as recorded by the
/// dispatch binary's shim.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct DispatchLine {
    id: String,
    func: String,
    kname: String,
    dispatches: i64,
    targs: Vec<i64>,
    grid: [i64; 3],
    group: [i64; 3],
}

/// One launch of MLX's host code.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Launch {
    pub func: String,
    /// The kernel name the host asks the library for.
    pub kname: String,
    pub targs: Vec<i64>,
    pub grid: [i64; 3],
    pub group: [i64; 3],
}

impl DispatchLine {
    /// The single launch recorded for case `case` (the id the request sent).
    pub fn launch(self, bin: &Path, case: &str) -> Result<Launch> {
        if self.id != case {
            return Err(protocol(
                bin,
                format!("the line answers `{}`", self.id),
                case,
            ));
        }
        if self.dispatches != 1 {
            return Err(Error::Launch {
                case: case.to_string(),
                reason: format!(
                    "dispatch recorded {} launches, not one (func `{}`)",
                    self.dispatches, self.func
                ),
            });
        }
        Ok(Launch {
            func: self.func,
            kname: self.kname,
            targs: self.targs,
            grid: self.grid,
            group: self.group,
        })
    }
}

/// `case ID ...` → one emulated run (kernel binary). A run the binary
/// refused (`error` set, e.g. an unknown kernel key) carries no results;
/// a run without an error must carry all of them.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct CaseLine {
    id: String,
    error: String,
    rel_err: Option<f64>,
    y: Option<String>,
    sums: Option<Vec<SumRecord>>,
}

/// One recorded simd_sum: (tg.y, tg.z, simdgroup, kind, operand hash).
type SumRecord = (i64, i64, i64, i64, String);

/// One emulated run's results.
#[derive(Clone, Debug)]
pub(super) struct Out {
    /// Empty when the run completed.
    pub error: String,
    pub rel_err: f64,
    /// Output bits, hex digits per element.
    pub y: String,
    /// The simd_sum operand hashes ("kind:hash") per (tg.y, tg.z, simdgroup).
    pub sums: BTreeMap<(i64, i64, i64), BTreeSet<String>>,
}

impl CaseLine {
    pub fn out(self, bin: &Path, run: &str) -> Result<Out> {
        if self.id != run {
            return Err(protocol(
                bin,
                format!("the line answers `{}`", self.id),
                run,
            ));
        }
        let failed = !self.error.is_empty();
        let missing =
            |field: &str| protocol(bin, format!("missing field `{field}` (and no error)"), run);
        let rel_err = match self.rel_err {
            Some(e) => e,
            None if failed => f64::INFINITY,
            None => return Err(missing("rel_err")),
        };
        let y = match self.y {
            Some(y) => y,
            None if failed => String::new(),
            None => return Err(missing("y")),
        };
        let mut sums: BTreeMap<(i64, i64, i64), BTreeSet<String>> = BTreeMap::new();
        match self.sums {
            Some(list) => {
                for (ty, tz, sg, kind, hash) in list {
                    sums.entry((ty, tz, sg))
                        .or_default()
                        .insert(format!("{kind}:{hash}"));
                }
            }
            None if failed => {}
            None => return Err(missing("sums")),
        }
        Ok(Out {
            error: self.error,
            rel_err,
            y,
            sums,
        })
    }
}

fn protocol(bin: &Path, reason: String, request: &str) -> Error {
    Error::Answer {
        bin: bin.to_path_buf(),
        request: request.to_string(),
        reason,
    }
}
