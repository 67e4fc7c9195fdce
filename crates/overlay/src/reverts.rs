//! Reverted upstream work: lines an overlay deletes that upstream *added after* the commit the
//! overlay's version of the file was based on.
//!
//! A whole-file copy made at an older upstream commit and laid over a newer pin silently drops
//! whatever upstream added in between; turned into an overlay, that loss becomes a few `-` lines
//! nobody wrote on purpose. The base an overlay was made against is recorded in its trailers
//! (`Base: <commit>` for every file, or `Base: <commit> <path>` for one file; the pin when there is
//! none). Upstream's additions are the lines `git diff <base> <pin> -- <path>` adds; the commit that
//! added each is `git blame --first-parent <base>..<pin>`'s answer. A deliberate revert is
//! confirmed with a `Reverts-Upstream: <commit>` trailer, which quiets the finding for that commit's
//! lines only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::apply::Text;
use crate::check::{Finding, FindingKind};
use crate::error::{Error, Result};
use crate::help::{Help, NextStep};
use crate::patch::{LineKind, Overlay};
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

/// The trailer naming the commit an overlay's files were copied from.
pub const BASE_TRAILER: &str = "Base";
/// The trailer confirming that an overlay reverts one upstream commit's lines on purpose.
pub const ACCEPT_TRAILER: &str = "Reverts-Upstream";
/// The trailer confirming that an overlay drops lines an earlier overlay adds, on purpose.
pub const ACCEPT_OVERLAY_TRAILER: &str = "Reverts-Overlay";

/// What the overlay's trailers confirm.
#[derive(Debug, Default, Clone)]
pub struct Confirmed {
    /// `Reverts-Upstream: <commit>`.
    pub commits: BTreeSet<git2::Oid>,
    /// `Reverts-Overlay: <name>`.
    pub overlays: BTreeSet<String>,
}

/// A run of consecutive lines an overlay deletes that one upstream commit added after the base.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Revert {
    /// The file, as upstream names it.
    pub file: String,
    /// The commit the overlay's version of the file was based on.
    pub base: String,
    /// The upstream commit that added the lines (`git blame --first-parent base..pin`); `None`
    /// when blame gives them to the base itself (moved lines).
    pub commit: Option<String>,
    /// That commit's subject line (empty when `commit` is `None`).
    pub subject: String,
    /// 1-based, inclusive: the lines in upstream's file at the pin.
    pub first_line: usize,
    /// The run's last line (see `first_line`).
    pub last_line: usize,
    /// The deleted lines' text, as upstream has them at the pin.
    pub lines: Vec<String>,
    /// A `Reverts-Upstream:` trailer names the commit: the user confirmed it.
    pub accepted: bool,
    /// Where the first deleted line is in the overlay (hunk number, 1-based patch line), when the
    /// overlay exists.
    pub hunk: Option<usize>,
    /// The overlay's patch line that deletes the first line (see `hunk`).
    pub patch_line: Option<usize>,
    /// The lines are an earlier overlay's, not upstream's (the audit, `crate::audit`): confirmed
    /// by `Reverts-Overlay: <name>`; `commit` is then `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay: Option<String>,
    /// Upstream deleted the lines after the base (`commit`), and the copy brings them back;
    /// `first_line` and `last_line` are then the copy's lines.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resurrected: bool,
}

/// One overlay's reverts (only overlays with at least one are listed).
#[derive(Debug, Clone, serde::Serialize)]
pub struct OverlayReverts {
    /// The overlay's file name.
    pub overlay: String,
    /// Its reverts, in the order of its files and lines.
    pub reverts: Vec<Revert>,
}

/// What an overlay's trailers say about its base and the reverts it accepts.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// `Base: <commit>` without a path.
    pub base: Option<git2::Oid>,
    /// `Base: <commit> <path>`.
    pub per_file: BTreeMap<String, git2::Oid>,
    /// `Reverts-Upstream: <commit>`.
    pub accepted: BTreeSet<git2::Oid>,
    /// `Reverts-Overlay: <name>`: earlier overlays whose lines it drops on purpose.
    pub accepted_overlays: BTreeSet<String>,
}

impl Recorded {
    /// The base of `path`, if the overlay records one.
    pub fn base_for(&self, path: &str) -> Option<git2::Oid> {
        self.per_file.get(path).copied().or(self.base)
    }
    /// Whether the overlay records no `Base:` at all (its base is then the pin); `accepted` is
    /// not looked at.
    pub fn is_empty(&self) -> bool {
        self.base.is_none() && self.per_file.is_empty()
    }
    /// What the trailers confirm, for the audit.
    pub fn confirmed(&self) -> Confirmed {
        Confirmed {
            commits: self.accepted.clone(),
            overlays: self.accepted_overlays.clone(),
        }
    }
}

/// Reads the `Base:` and `Reverts-Upstream:` trailers (the message's last paragraph, as
/// `parse_overlay` reads trailers). A malformed one is an error naming the overlay's line.
pub fn recorded(ov: &Overlay) -> Result<Recorded> {
    let prelude: Vec<&str> = ov.prelude.lines().collect();
    // The trailer paragraph: the last block of non-empty lines before `---`.
    let end = prelude.len().saturating_sub(1); // the `---` line
    let mut start = end;
    while start > 0 && !prelude[start - 1].trim().is_empty() {
        start -= 1;
    }
    let mut rec = Recorded::default();
    for (i, l) in prelude.iter().enumerate().take(end).skip(start) {
        let Some((k, v)) = l.split_once(": ") else {
            continue;
        };
        let line = i + 1;
        let bad = |what: &str| {
            Error::input(&ov.path, Some(line), format!("{k}: {what}, found {v:?}")).with_help(
                Help::new("write the full 40-hex upstream commit id, as ")
                    .step(NextStep::plain("import"))
                    .text(" does"),
            )
        };
        let v = v.trim();
        let (first, rest) = v.split_once(' ').map_or((v, ""), |(a, b)| (a, b.trim()));
        if k.eq_ignore_ascii_case(BASE_TRAILER) {
            let id = full_id(first)
                .ok_or_else(|| bad("expected \"<40-hex commit>\" or \"<40-hex commit> <path>\""))?;
            if rest.is_empty() {
                rec.base = Some(id);
            } else if let Err(why) = crate::patch::check_rel_path(rest) {
                return Err(bad(&format!("the path: {why}")));
            } else {
                rec.per_file.insert(rest.to_string(), id);
            }
        } else if k.eq_ignore_ascii_case(ACCEPT_TRAILER) {
            let id = full_id(first)
                .ok_or_else(|| bad("expected \"<40-hex commit>\" (and an optional note)"))?;
            rec.accepted.insert(id);
        } else if k.eq_ignore_ascii_case(ACCEPT_OVERLAY_TRAILER) && !first.is_empty() {
            rec.accepted_overlays.insert(first.to_string());
        }
    }
    Ok(rec)
}

fn full_id(s: &str) -> Option<git2::Oid> {
    (s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| git2::Oid::from_str(s).ok())
        .flatten()
}

/// A line diff: which old lines are removed, which new lines are added, and for each new line the
/// old line it is unchanged from (git's diff, so the same pairing `git diff` shows).
pub struct LineDiff {
    /// The 0-based lines of `old` removed.
    pub removed: Vec<usize>,
    /// The 0-based lines of `new` added.
    pub added: Vec<usize>,
    /// For each line of `new`, the line of `old` it is unchanged from; `None` for an added line.
    pub new_to_old: Vec<Option<usize>>,
}

impl LineDiff {
    /// Lines added plus lines removed: the size of `git diff --stat`'s change.
    pub fn size(&self) -> usize {
        self.removed.len() + self.added.len()
    }
}

/// `old` -> `new`, 0-based line indices.
pub fn line_diff(old: &Text, new: &Text) -> Result<LineDiff> {
    let (a, b) = (old.render(), new.render());
    let mut removed = Vec::new();
    let mut added = Vec::new();
    if a != b {
        let mut opts = git2::DiffOptions::new();
        opts.context_lines(0)
            .indent_heuristic(true)
            .force_text(true);
        let patch =
            git2::Patch::from_buffers(a.as_bytes(), None, b.as_bytes(), None, Some(&mut opts))
                .map_err(|e| Error::git("diffing", e))?;
        for h in 0..patch.num_hunks() {
            let n = patch
                .num_lines_in_hunk(h)
                .map_err(|e| Error::git("diffing", e))?;
            for l in 0..n {
                let line = patch
                    .line_in_hunk(h, l)
                    .map_err(|e| Error::git("diffing", e))?;
                match line.origin() {
                    '-' => removed.extend(line.old_lineno().map(|n| n as usize - 1)),
                    '+' => added.extend(line.new_lineno().map(|n| n as usize - 1)),
                    _ => {}
                }
            }
        }
    }
    let gone: BTreeSet<usize> = removed.iter().copied().collect();
    let new_lines: BTreeSet<usize> = added.iter().copied().collect();
    let mut kept_old = (0..old.lines.len()).filter(|i| !gone.contains(i));
    let new_to_old = (0..new.lines.len())
        .map(|i| {
            if new_lines.contains(&i) {
                None
            } else {
                kept_old.next()
            }
        })
        .collect();
    Ok(LineDiff {
        removed,
        added,
        new_to_old,
    })
}

/// The text of `path` at `commit` (empty when the commit has no such file).
pub fn text_at(repo: &git2::Repository, commit: git2::Oid, path: &str) -> Result<Option<Text>> {
    let c = repo
        .find_commit(commit)
        .map_err(|e| Error::git(format!("reading commit {commit}"), e))?;
    let tree = c
        .tree()
        .map_err(|e| Error::git(format!("reading the tree of {commit}"), e))?;
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(None);
    };
    let Ok(blob) = repo.find_blob(entry.id()) else {
        return Ok(None);
    };
    Ok(Some(Text::parse(&String::from_utf8_lossy(blob.content()))))
}

/// The question for one file: `pre` is the text the overlay applies to (upstream's file at `pin`
/// with the earlier overlays applied, `pin_text` upstream's own), `deleted` the 0-based lines of
/// `pre` the overlay removes. Answers the runs of those lines upstream added after `base`.
pub struct FileQuestion<'a> {
    /// The file, as upstream names it.
    pub path: &'a str,
    /// The commit the overlay's version of the file was based on.
    pub base: git2::Oid,
    /// The pin.
    pub pin: git2::Oid,
    /// Upstream's file at the pin.
    pub pin_text: &'a Text,
    /// The text the overlay applies to.
    pub pre: &'a Text,
    /// The 0-based lines of `pre` the overlay removes.
    pub deleted: &'a [usize],
}

/// Upstream lines the overlay deletes that upstream added after `q.base` (nothing when the base is
/// the pin or comes after it: a copy ahead of the pin carries upstream's later work, it does not
/// revert it). `accepted` are the commits the overlay confirms reverting.
pub fn reverted(
    repo: &git2::Repository,
    q: &FileQuestion<'_>,
    accepted: &BTreeSet<git2::Oid>,
) -> Result<Vec<Revert>> {
    if q.deleted.is_empty() || q.base == q.pin || !is_ancestor(repo, q.base, q.pin)? {
        return Ok(Vec::new());
    }
    let base_text = text_at(repo, q.base, q.path)?.unwrap_or_else(|| Text::parse(""));
    let upstream_added: BTreeSet<usize> = line_diff(&base_text, q.pin_text)?
        .added
        .into_iter()
        .collect();
    if upstream_added.is_empty() {
        return Ok(Vec::new());
    }
    // Lines of `pre` that are upstream's (unchanged by earlier overlays), as pin lines.
    let pre_to_pin = if q.pre == q.pin_text {
        (0..q.pre.lines.len()).map(Some).collect()
    } else {
        line_diff(q.pin_text, q.pre)?.new_to_old
    };
    let hits: Vec<usize> = q
        .deleted
        .iter()
        .filter_map(|&i| pre_to_pin.get(i).copied().flatten())
        .filter(|p| upstream_added.contains(p))
        .collect();
    if hits.is_empty() {
        return Ok(Vec::new());
    }
    let owners = blame_lines(repo, q, &hits)?;
    let mut out: Vec<Revert> = Vec::new();
    for (&line, owner) in hits.iter().zip(owners) {
        let (commit, subject) = match owner {
            Some(c) => (Some(c.to_string()), summary(repo, c)),
            None => (None, String::new()),
        };
        let text = q.pin_text.lines[line].clone();
        if let Some(last) = out.last_mut()
            && last.last_line == line
            && last.commit == commit
        {
            last.last_line = line + 1;
            last.lines.push(text);
            continue;
        }
        // A run blame gives to the base is confirmed by naming the base.
        let accepted = accepted.contains(&owner.unwrap_or(q.base));
        out.push(Revert {
            file: q.path.to_string(),
            base: q.base.to_string(),
            commit,
            subject,
            first_line: line + 1,
            last_line: line + 1,
            lines: vec![text],
            accepted,
            hunk: None,
            patch_line: None,
            overlay: None,
            resurrected: false,
        });
    }
    Ok(out)
}

fn is_ancestor(repo: &git2::Repository, ancestor: git2::Oid, of: git2::Oid) -> Result<bool> {
    repo.graph_descendant_of(of, ancestor)
        .map_err(|e| Error::git(format!("relating {ancestor} to {of}"), e))
}

fn summary(repo: &git2::Repository, c: git2::Oid) -> String {
    repo.find_commit(c)
        .ok()
        .and_then(|c| c.summary().ok().flatten().map(str::to_string))
        .unwrap_or_default()
}

/// The commit in `base..pin` (first parents) that added each of `lines` (0-based, at the pin);
/// `None` for a line blame gives to the base.
fn blame_lines(
    repo: &git2::Repository,
    q: &FileQuestion<'_>,
    lines: &[usize],
) -> Result<Vec<Option<git2::Oid>>> {
    blame_between(repo, q.path, q.base, q.pin, lines)
}

/// The commit in `base..pin` (first parents) that added each of `lines` (0-based lines of
/// `path` at `pin`, ascending); `None` for a line blame gives to the base.
pub(crate) fn blame_between(
    repo: &git2::Repository,
    path: &str,
    base: git2::Oid,
    pin: git2::Oid,
    lines: &[usize],
) -> Result<Vec<Option<git2::Oid>>> {
    let (Some(first), Some(last)) = (lines.iter().min(), lines.iter().max()) else {
        return Ok(Vec::new());
    };
    if base == pin || !is_ancestor(repo, base, pin)? {
        return Ok(vec![None; lines.len()]);
    }
    let mut opts = git2::BlameOptions::new();
    opts.newest_commit(pin)
        .oldest_commit(base)
        .first_parent(true)
        .min_line(first + 1)
        .max_line(last + 1);
    let blame = repo
        .blame_file(Path::new(path), Some(&mut opts))
        .map_err(|e| Error::git(format!("blaming {path} between {base} and {pin}"), e))?;
    Ok(lines
        .iter()
        .map(|&l| {
            blame
                .get_line(l + 1)
                .filter(|h| !h.is_boundary() && h.final_commit_id() != base)
                .map(|h| h.final_commit_id())
        })
        .collect())
}

/// The 0-based old-side lines a file patch removes, with the hunk and patch line of each.
fn removals(fp: &crate::patch::FilePatch) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for (i, h) in fp.hunks.iter().enumerate() {
        let mut old = h.old_start.saturating_sub(1);
        for (k, l) in h.lines.iter().enumerate() {
            match l.kind {
                LineKind::Context => old += 1,
                LineKind::Remove => {
                    out.push((old, i + 1, h.patch_line + k + 1));
                    old += 1;
                }
                LineKind::Add => {}
            }
        }
    }
    out
}

/// Every overlay of `series` at `pin`: the upstream lines it deletes that upstream added after its
/// recorded base. Overlays without a `Base:` trailer are based on the pin and revert nothing, so a
/// series without one costs no blame and no diff.
pub fn series_reverts(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    pin: git2::Oid,
    series: &Series,
) -> Result<Vec<OverlayReverts>> {
    let records: Vec<Recorded> = series
        .overlays
        .iter()
        .map(recorded)
        .collect::<Result<_>>()?;
    if records.iter().all(Recorded::is_empty) {
        return Ok(Vec::new());
    }
    let pin_tree = crate::upstream::tree_of_commit(repo, pin)?;
    let mut tree: Tree = pin_tree.clone();
    let mut out = Vec::new();
    for (ov, rec) in series.overlays.iter().zip(&records) {
        let mut found = Vec::new();
        for fp in ov.files.iter().filter(|f| !f.is_new()) {
            let path = fp.old_path.as_deref().expect("not new");
            let Some(base) = rec.base_for(path) else {
                continue;
            };
            if repo.find_commit(base).is_err() {
                return Err(Error::input(
                    &ov.path,
                    None,
                    format!("{BASE_TRAILER}: {base} ({path}) is not a commit of the upstream"),
                )
                .with_help(
                    "name the upstream commit the file was copied from, or drop the trailer",
                ));
            }
            let pre = crate::check::text_of(&tree, Some(path), src)?;
            let pin_text = crate::check::text_of(&pin_tree, Some(path), src)?;
            let removed = removals(fp);
            let deleted: Vec<usize> = removed.iter().map(|r| r.0).collect();
            let q = FileQuestion {
                path,
                base,
                pin,
                pin_text: &pin_text,
                pre: &pre,
                deleted: &deleted,
            };
            let reverts = reverted(repo, &q, &rec.accepted)?;
            if reverts.is_empty() {
                continue;
            }
            let pre_to_pin = line_diff(&pin_text, &pre)?.new_to_old;
            for mut r in reverts {
                // The overlay line that deletes the run's first line.
                let at = removed.iter().find(|(old, _, _)| {
                    pre_to_pin.get(*old).copied().flatten() == Some(r.first_line - 1)
                });
                r.hunk = at.map(|a| a.1);
                r.patch_line = at.map(|a| a.2);
                found.push(r);
            }
        }
        // A later overlay applies to this one's result; one that does not apply is check's
        // finding (CONFLICT), and what follows it cannot be judged.
        if tree.apply_overlay(ov, src).is_err() {
            break;
        }
        if !found.is_empty() {
            out.push(OverlayReverts {
                overlay: ov.name.clone(),
                reverts: found,
            });
        }
    }
    Ok(out)
}

/// One line for a report: where, how much, which commit.
pub fn describe(r: &Revert) -> String {
    let lines = if r.first_line == r.last_line {
        format!("line {}", r.first_line)
    } else {
        format!("lines {}-{}", r.first_line, r.last_line)
    };
    let by = match &r.commit {
        Some(c) => format!("{} \"{}\"", &c[..12], r.subject),
        None => "a commit blame gives to the base (moved lines)".to_string(),
    };
    if let Some(o) = &r.overlay {
        return format!(
            "deletes {} line(s) ({lines}) that the earlier overlay {o} adds",
            r.lines.len()
        );
    }
    if r.resurrected {
        let by = match &r.commit {
            Some(_) => by,
            None => "upstream".to_string(),
        };
        return format!(
            "brings back {} line(s) ({lines} of the copy) that {by} deleted after the base {}",
            r.lines.len(),
            &r.base[..12]
        );
    }
    format!(
        "deletes {} upstream line(s) ({lines} at the pin) that {by} added after the base {}",
        r.lines.len(),
        &r.base[..12]
    )
}

/// `check`'s findings: every revert the overlay does not confirm with a `Reverts-Upstream:` trailer.
pub fn findings(all: &[OverlayReverts]) -> Vec<Finding> {
    let mut out = Vec::new();
    for o in all {
        for r in o.reverts.iter().filter(|r| !r.accepted) {
            let confirm = format!(
                "\"{ACCEPT_TRAILER}: {}\"",
                r.commit.as_deref().unwrap_or(&r.base)
            );
            out.push(Finding {
                overlay: o.overlay.clone(),
                kind: FindingKind::Reverts,
                file: Some(r.file.clone()),
                hunk: r.hunk,
                patch_line: r.patch_line,
                message: format!(
                    "{}; restore them, or confirm the revert with {confirm} in the overlay's trailers",
                    describe(r)
                )
                .into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";

    fn overlay(trailers: &str) -> Result<Overlay> {
        let raw = format!(
            "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nSubject: [PATCH] x\n\nBody.\n\nOverlay-Kind: local-only\n{trailers}---\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
        );
        crate::patch::parse_overlay("x.patch", Path::new("x.patch"), &raw)
    }

    #[test]
    fn trailers_name_bases_and_accepted_reverts() {
        let ov = overlay(&format!(
            "Base: {A}\nBase: {B} src/my file.c\nReverts-Upstream: {B}\n"
        ))
        .unwrap();
        let rec = recorded(&ov).unwrap();
        assert_eq!(rec.base_for("other.c").unwrap().to_string(), A);
        assert_eq!(rec.base_for("src/my file.c").unwrap().to_string(), B);
        assert!(rec.accepted.contains(&git2::Oid::from_str(B).unwrap()));
        // Not in the trailer paragraph: not a trailer.
        let ov = overlay("").unwrap();
        assert!(recorded(&ov).unwrap().is_empty());
        for bad in [
            "Base: abc\n",
            "Base: {A} ../x\n",
            "Reverts-Upstream: nope\n",
        ] {
            let err = recorded(&overlay(&bad.replace("{A}", A)).unwrap()).unwrap_err();
            assert!(err.to_string().starts_with("x.patch:8: "), "{err}");
        }
    }

    #[test]
    fn export_strips_the_import_trailers() {
        let body = format!("Why.\n\nOverlay-Kind: local-only\nBase: {A}\nReverts-Upstream: {B}");
        assert_eq!(crate::export::clean_message(&body, None), "Why.");
    }

    #[test]
    fn line_diff_pairs_unchanged_lines() {
        let a = Text::parse("a\nb\nc\nd\n");
        let b = Text::parse("a\nx\nc\nd\ne\n");
        let d = line_diff(&a, &b).unwrap();
        assert_eq!(d.removed, vec![1]);
        assert_eq!(d.added, vec![1, 4]);
        assert_eq!(d.new_to_old, vec![Some(0), None, Some(2), Some(3), None]);
        assert_eq!(d.size(), 3);
    }
}
