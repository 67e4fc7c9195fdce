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

#[cfg(test)]
mod tests {
    use super::*;

    fn bin() -> &'static Path {
        Path::new("sim")
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_zero() {
        // The old Value protocol read a missing `align` as 0 and a missing `y` as "".
        let e = serde_json::from_str::<AlignLine>(r#"{"bits":4}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `align`"), "{e}");
        let e = serde_json::from_str::<DispatchLine>(
            r#"{"id":"c","func":"qmv","kname":"k","dispatches":1,"targs":[],"group":[1,1,1]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing field `grid`"), "{e}");
        let line: CaseLine =
            serde_json::from_str(r#"{"id":"r","error":"","rel_err":0.5,"sums":[]}"#).unwrap();
        let e = line.out(bin(), "r").unwrap_err();
        assert!(
            matches!(&e, Error::Answer { reason, .. } if reason.contains("`y`")),
            "{e}"
        );
    }

    #[test]
    fn an_ill_typed_field_is_an_error() {
        let e = serde_json::from_str::<DispatchLine>(
            r#"{"id":"c","func":"qmv","kname":"k","dispatches":1,"targs":[],"grid":[1,1],"group":[1,1,1]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("invalid length 2"), "{e}");
        let e =
            serde_json::from_str::<CaseLine>(r#"{"id":"r","error":"","rel_err":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn a_refused_run_keeps_its_error_and_no_results() {
        let line: CaseLine =
            serde_json::from_str(r#"{"id":"r","error":"bad case line or unknown kernel key"}"#)
                .unwrap();
        let out = line.out(bin(), "r").unwrap();
        assert_eq!(out.error, "bad case line or unknown kernel key");
        assert_eq!(out.rel_err, f64::INFINITY);
        assert!(out.y.is_empty() && out.sums.is_empty());
    }

    #[test]
    fn an_answer_to_another_request_is_an_error() {
        let line: CaseLine = serde_json::from_str(
            r#"{"id":"other","error":"","rel_err":0.0,"y":"00","sums":[[0,0,0,1,"ab"]]}"#,
        )
        .unwrap();
        let e = line.out(bin(), "r").unwrap_err();
        assert!(e.to_string().contains("the line answers `other`"), "{e}");
        let d: DispatchLine = serde_json::from_str(
            r#"{"id":"c","func":"qmv","kname":"k","dispatches":2,"targs":[],"grid":[1,1,1],"group":[1,1,1]}"#,
        )
        .unwrap();
        assert!(matches!(d.launch(bin(), "c"), Err(Error::Launch { .. })));
    }

    #[test]
    fn sums_group_by_simdgroup() {
        let line: CaseLine = serde_json::from_str(
            r#"{"id":"r","error":"","rel_err":0.0,"y":"00","sums":[[0,1,2,3,"ab"],[0,1,2,4,"cd"]]}"#,
        )
        .unwrap();
        let out = line.out(bin(), "r").unwrap();
        let want: BTreeSet<String> = ["3:ab".to_string(), "4:cd".to_string()].into();
        assert_eq!(out.sums[&(0, 1, 2)], want);
    }
}
