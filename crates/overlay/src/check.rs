//! `check`: every hunk applies at its exact recorded line at the pin, and every hunk is exactly what
//! re-diffing the result produces (the series is canonical). What git varies between versions (index
//! abbreviation, the signature, the hunk heading) is not compared.

use crate::apply::Text;
use crate::diff;
use crate::error::{Error, Result};
use crate::patch::{FilePatch, Hunk};
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A hunk cannot be placed.
    DoesNotApply,
    /// A hunk applies, but not at its recorded line.
    Offset,
    /// The hunks differ from what `git diff` would write for the same change.
    NotCanonical,
    /// A `*.patch` file in the overlay folder that the series does not list.
    Unlisted,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub overlay: String,
    pub kind: FindingKind,
    pub file: Option<String>,
    pub hunk: Option<usize>,
    /// 1-based line in the overlay file.
    pub patch_line: Option<usize>,
    pub message: String,
}

pub fn text_of(tree: &Tree, path: Option<&str>, src: &dyn BlobSource) -> Result<Text> {
    let Some(path) = path else {
        return Ok(Text::parse(""));
    };
    let bytes = tree.bytes(path, src)?.unwrap_or_default();
    Ok(Text::parse(&String::from_utf8_lossy(&bytes)))
}

fn describe(h: &Hunk) -> String {
    format!(
        "@@ -{},{} +{},{} @@",
        h.old_start, h.old_len, h.new_start, h.new_len
    )
}

/// Compares a file patch with git's own diff of the same change; the first difference, if any.
pub fn canonical_difference(
    fp: &FilePatch,
    before: &Tree,
    after: &Tree,
    src: &dyn BlobSource,
) -> Result<Option<(usize, String)>> {
    let old = text_of(before, fp.old_path.as_deref(), src)?;
    let new = text_of(after, fp.new_path.as_deref(), src)?;
    let want = diff::text_hunks(&old, &new, diff::CONTEXT)?;
    for (i, (have, want)) in fp.hunks.iter().zip(&want).enumerate() {
        if !have.same_as(want) {
            let why = if have.leading_context() != want.leading_context()
                || have.trailing_context() != want.trailing_context()
            {
                format!(
                    "git diff writes {} with {}+{} context lines, the overlay has {} with {}+{}",
                    describe(want),
                    want.leading_context(),
                    want.trailing_context(),
                    describe(have),
                    have.leading_context(),
                    have.trailing_context()
                )
            } else {
                format!(
                    "git diff writes {}, the overlay has {}",
                    describe(want),
                    describe(have)
                )
            };
            return Ok(Some((i + 1, why)));
        }
    }
    if fp.hunks.len() != want.len() {
        let i = fp.hunks.len().min(want.len());
        return Ok(Some((
            i + 1,
            format!(
                "git diff writes {} hunk(s), the overlay has {}",
                want.len(),
                fp.hunks.len()
            ),
        )));
    }
    Ok(None)
}

/// Checks the whole series against `base`. Errors are for bad input; findings are for overlays that
/// do not apply exactly or are not canonical.
pub fn check(base: &Tree, series: &Series, src: &dyn BlobSource) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let mut tree = base.clone();
    for ov in &series.overlays {
        let before = tree.clone();
        let outcome = match tree.apply_overlay(ov, src) {
            Ok(o) => o,
            Err(Error::Apply {
                file,
                hunk,
                patch_line,
                reason,
                ..
            }) => {
                findings.push(Finding {
                    overlay: ov.name.clone(),
                    kind: FindingKind::DoesNotApply,
                    file: Some(file),
                    hunk: (hunk > 0).then_some(hunk),
                    patch_line: Some(patch_line),
                    message: format!("{reason}; later overlays are checked without this one"),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        for (path, p) in outcome.offsets() {
            let fp = ov
                .files
                .iter()
                .find(|f| f.path() == path)
                .expect("outcome file");
            findings.push(Finding {
                overlay: ov.name.clone(),
                kind: FindingKind::Offset,
                file: Some(path.to_string()),
                hunk: Some(p.hunk),
                patch_line: Some(fp.hunks[p.hunk - 1].patch_line),
                message: format!(
                    "applies at line {}, recorded at {} (offset {:+})",
                    p.actual,
                    p.recorded,
                    p.offset()
                ),
            });
        }
        if outcome.offsets().next().is_some() {
            continue;
        }
        for fp in &ov.files {
            if let Some((hunk, why)) = canonical_difference(fp, &before, &tree, src)? {
                findings.push(Finding {
                    overlay: ov.name.clone(),
                    kind: FindingKind::NotCanonical,
                    file: Some(fp.path().to_string()),
                    hunk: Some(hunk),
                    patch_line: Some(
                        fp.hunks
                            .get(hunk - 1)
                            .map_or(fp.patch_line, |h| h.patch_line),
                    ),
                    message: format!("{why}; `refresh` rewrites it canonically"),
                });
            }
        }
    }
    for name in series.unlisted()? {
        findings.push(Finding {
            overlay: name,
            kind: FindingKind::Unlisted,
            file: None,
            hunk: None,
            patch_line: None,
            message: "not listed in the series, so it is never applied; add it to the series or delete it".into(),
        });
    }
    Ok(findings)
}
