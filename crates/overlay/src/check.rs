//! `check`: every hunk applies at its exact recorded line at the pin, and every hunk is exactly what
//! re-diffing the result produces (the series is canonical). What git varies between versions (index
//! abbreviation, the signature, the hunk heading) is not compared.

use crate::apply::Text;
use crate::diff;
use crate::error::{Error, Result};
use crate::help::{Help, NextStep};
use std::collections::BTreeSet;

use crate::patch::{FilePatch, Hunk, Overlay, parse_overlay};
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
/// What a [`Finding`] is about.
pub enum FindingKind {
    /// A hunk cannot be placed.
    DoesNotApply,
    /// A hunk applies, but not at its recorded line.
    Offset,
    /// The hunks differ from what `git diff` would write for the same change.
    NotCanonical,
    /// A `*.patch` file in the overlay folder that the series does not list.
    Unlisted,
    /// A `Depends-On:` trailer names a definition upstream does not have at the pin (a typo would
    /// otherwise surface only in drift's canary).
    UnknownDependency,
    /// The overlay deletes upstream lines added after its recorded base (`reverts.rs`).
    Reverts,
    /// The overlay drops lines an earlier overlay adds, or brings back lines upstream deleted after
    /// its recorded base (`audit.rs`).
    Drops,
    /// The overlay's change is already at the pin (every hunk's result is there): it applies
    /// only elsewhere, adding its lines a second time (a `rev` edited by hand past its merge).
    Upstreamed,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
/// One problem `check` found in an overlay.
pub struct Finding {
    /// The overlay's file name.
    pub overlay: String,
    /// What kind of problem.
    pub kind: FindingKind,
    /// The file in the tree it concerns, when one.
    pub file: Option<String>,
    /// The 1-based hunk within that file's diff, when one.
    pub hunk: Option<usize>,
    /// 1-based line in the overlay file.
    pub patch_line: Option<usize>,
    /// The human-readable message; the commands it names are typed (a CLI writes them with its
    /// program name; serialized, they are bare subcommands).
    pub message: Help,
}

/// The text of `path` in `tree` (empty when absent or `None`).
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
    let mut symbols = std::collections::BTreeMap::new();
    for ov in &series.overlays {
        findings.extend(unknown_dependencies(ov, base, src, &mut symbols)?);
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
                    message: format!("{reason}; later overlays are checked without this one")
                        .into(),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        if outcome.offsets().next().is_some() && already_upstream(ov, &before, src)? {
            findings.push(upstreamed_finding(ov));
            continue;
        }
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
                message: Help::new(format!(
                    "applies at line {}, recorded at {} (offset {:+}); ",
                    p.actual,
                    p.recorded,
                    p.offset()
                ))
                .step(NextStep::plain("canonicalize"))
                .text(" records it at its line"),
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
                    message: Help::new(format!("{why}; "))
                        .step(NextStep::plain("canonicalize"))
                        .text(" rewrites it canonically"),
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

/// `Depends-On:` trailers of `ov` whose definition upstream's own file at the pin (`base`, no
/// overlay applied) does not have: the same test drift applies, found before any bump.
fn unknown_dependencies(
    ov: &Overlay,
    base: &Tree,
    src: &dyn BlobSource,
    symbols: &mut std::collections::BTreeMap<String, Option<crate::symbols::SymbolIndex>>,
) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    for d in &ov.trailers.depends_on {
        if !symbols.contains_key(&d.path) {
            let index = base
                .bytes(&d.path, src)?
                .map(|b| crate::symbols::scan(&String::from_utf8_lossy(&b)));
            symbols.insert(d.path.clone(), index);
        }
        let found = symbols[&d.path]
            .as_ref()
            .is_some_and(|ix| ix.fingerprint_of(&d.symbol).is_some());
        if found {
            continue;
        }
        let why = if symbols[&d.path].is_none() {
            "upstream has no such file at the pin"
        } else {
            "no such definition in upstream's file at the pin"
        };
        out.push(Finding {
            overlay: ov.name.clone(),
            kind: FindingKind::UnknownDependency,
            file: Some(d.path.clone()),
            hunk: None,
            patch_line: depends_on_line(ov, &d.path, &d.symbol),
            message: format!(
                "Depends-On: {}::{}: {why}; fix the trailer (the path is relative to the upstream root, the symbol a function, class or macro name)",
                d.path, d.symbol
            )
            .into(),
        });
    }
    Ok(out)
}

/// One overlay rewritten canonically by [`canonicalize`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rewrite {
    /// The overlay's file name.
    pub overlay: String,
    #[serde(skip)]
    /// The overlay file.
    pub path: std::path::PathBuf,
    /// What was wrong: the findings `check` reports for it (OFFSET, NONCANON).
    pub findings: Vec<String>,
    #[serde(skip)]
    /// Its text before the rewrite.
    pub old: String,
    #[serde(skip)]
    /// Its text after the rewrite.
    pub new: String,
}

/// Whether every change of `ov` is already in `before`: each file's hunks undo there (their
/// results found exactly). Such an overlay applies only at another place, a second time.
pub fn already_upstream(ov: &Overlay, before: &Tree, src: &dyn BlobSource) -> Result<bool> {
    for fp in &ov.files {
        let Some(path) = fp
            .new_path
            .as_deref()
            .filter(|p| before.entries.contains_key(*p))
        else {
            return Ok(false);
        };
        let text = text_of(before, Some(path), src)?;
        let undo = FilePatch {
            hunks: fp.hunks.iter().map(crate::apply::reverse).collect(),
            ..fp.clone()
        };
        if crate::apply::apply_hunks(&text, &undo).is_err() {
            return Ok(false);
        }
    }
    Ok(!ov.files.is_empty())
}

/// check's UPSTREAMED finding for `ov` (see [`already_upstream`]).
fn upstreamed_finding(ov: &Overlay) -> Finding {
    Finding {
        overlay: ov.name.clone(),
        kind: FindingKind::Upstreamed,
        file: ov.files.first().map(|f| f.path().to_string()),
        hunk: None,
        patch_line: None,
        message: Help::new("its change is already upstream at the pin; applied, it adds its lines a second time (the pin was moved past its merge without bump-pin). Retire it: delete it and its series line, or put the old rev back and ")
            .step(crate::help::drop_upstreamed()),
    }
}

/// Rewrites the overlays named in `only` (every one when empty) that `check` finds off their
/// recorded lines or not canonical: the same change re-diffed with git's defaults at its exact
/// lines, prelude (header, message, trailers) kept. Each rewrite is verified to give the same tree
/// with no offset and no finding. The whole series must apply; an overlay that does not is refused
/// (nothing can be canonical on top of it).
pub fn canonicalize(
    base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    only: &[String],
) -> Result<Vec<Rewrite>> {
    for name in only {
        if !series.overlays.iter().any(|o| &o.name == name) {
            return Err(Error::input(
                series.dir.join(crate::series::SERIES_FILE),
                None,
                format!("{name}: no such overlay in the series"),
            )
            .with_help(
                Help::new("name overlays as the series lists them (")
                    .step(NextStep::plain("status"))
                    .text(")"),
            ));
        }
    }
    let mut out = Vec::new();
    let mut tree = base.clone();
    for ov in &series.overlays {
        let before = tree.clone();
        let outcome = tree.apply_overlay(ov, src).map_err(|e| match e {
            Error::Apply { reason, patch_line, file, .. } => Error::input(
                &ov.path,
                Some(patch_line),
                format!("{file}: {reason}; it does not apply at the pin, so nothing was rewritten"),
            )
            .with_help("canonicalize only re-diffs changes that apply; carry this one by hand (edit it, or `bump-pin` from the commit it was made on)"),
            e => e,
        })?;
        if !only.is_empty() && !only.contains(&ov.name) {
            continue;
        }
        if outcome.offsets().next().is_some() && already_upstream(ov, &before, src)? {
            return Err(Error::refused(&ov.path, None, crate::Refusal::UpstreamedAtPin)
                .with_help(
                    Help::new("retire it instead: delete it and its series line, or put the old rev back and ")
                        .step(crate::help::drop_upstreamed())
                        .text("; nothing was rewritten"),
                ));
        }
        let mut findings: Vec<String> = outcome
            .offsets()
            .map(|(p, pl)| format!("OFFSET {p} hunk #{} ({:+})", pl.hunk, pl.offset()))
            .collect();
        if findings.is_empty() {
            for fp in &ov.files {
                if let Some((hunk, why)) = canonical_difference(fp, &before, &tree, src)? {
                    findings.push(format!("NONCANON {} hunk #{hunk}: {why}", fp.path()));
                }
            }
        }
        if findings.is_empty() {
            continue;
        }
        let new = rerender(ov, &before, &tree, src)?;
        out.push(Rewrite {
            overlay: ov.name.clone(),
            path: ov.path.clone(),
            findings,
            old: ov.raw.clone(),
            new,
        });
    }
    Ok(out)
}

/// `ov` re-diffed canonically between `before` and `after`, verified: it parses, applies to
/// `before` at its exact lines, gives `after` on every path, and `check` finds nothing in it.
fn rerender(ov: &Overlay, before: &Tree, after: &Tree, src: &dyn BlobSource) -> Result<String> {
    let paths: BTreeSet<String> = ov.touched_paths().collect();
    let files = crate::merge::canonical_files(before, after, &paths, src)?;
    let layout = crate::render::Layout::of(ov);
    let raw = crate::render::patch(&layout, &files, before, after, src)?;
    let new = parse_overlay(&ov.name, &ov.path, &raw)?;
    let mut t = before.clone();
    let outcome = t.apply_overlay(&new, src)?;
    let same = t.entries.len() == after.entries.len()
        && after.entries.iter().all(|(p, e)| {
            t.entries.get(p).is_some_and(|x| x.mode == e.mode) && t.blob_id(p) == after.blob_id(p)
        });
    let mut canonical = true;
    for fp in &new.files {
        canonical &= canonical_difference(fp, before, &t, src)?.is_none();
    }
    if !same || outcome.offsets().next().is_some() || !canonical {
        return Err(Error::input(
            &ov.path,
            None,
            "internal: the canonical rewrite does not reproduce the overlay's tree; nothing was written",
        )
        .with_help("please report it with the overlay file"));
    }
    Ok(raw)
}

/// The 1-based line of the overlay file holding `Depends-On: path::sym`, if found.
pub fn depends_on_line(ov: &Overlay, path: &str, sym: &str) -> Option<usize> {
    let want = format!("{path}::{sym}");
    ov.raw
        .lines()
        .position(|l| {
            l.strip_prefix("Depends-On:")
                .is_some_and(|v| v.trim() == want)
        })
        .map(|i| i + 1)
}
