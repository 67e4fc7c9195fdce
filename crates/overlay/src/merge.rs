//! The 3-way merge of one overlay onto a new chain, shared by `bump-pin` (`bump`, its forecast),
//! drift's classification and `export-upstream`: libgit2's `merge_file` (git's algorithm) per file
//! ([`merge3`], its markers named by [`Labels`]), upstream's renames followed, identical conflict
//! sides collapsed through [`rewrite_regions`] (the one conflict-region parser), a conflicting
//! merge resolved on the overlay's side ([`ours_side`], what the forecast carries on with), and
//! the canonical file patches between two trees ([`canonical_files`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::apply::Text;
use crate::diff;
use crate::error::{Error, Result};
use crate::patch::{FilePatch, Overlay};
use crate::tree::{BlobSource, Content, Entry, MODE_FILE, Tree};

/// The names the conflict markers give the three sides of a merge: the common ancestor
/// (`|||||||`), ours (`<<<<<<<`) and theirs (`>>>>>>>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labels<'a> {
    /// The common ancestor's name.
    pub base: &'a str,
    /// Our side's name (the overlay's, in a bump).
    pub ours: &'a str,
    /// Their side's name (the new upstream's, in a bump).
    pub theirs: &'a str,
}

/// The three trees of one overlay's merge: the old chain before and after the overlay, and the
/// new chain it is carried onto.
#[derive(Debug, Clone, Copy)]
pub struct MergeTrees<'a> {
    /// The series before the overlay, on the old pin (the merge's base).
    pub old_before: &'a Tree,
    /// The series with the overlay, on the old pin (ours).
    pub old_after: &'a Tree,
    /// The overlays carried so far, on the new pin (theirs).
    pub new_before: &'a Tree,
}

fn text(tree: &Tree, path: &str, src: &dyn BlobSource) -> Result<Option<Vec<u8>>> {
    tree.bytes(path, src)
}

/// libgit2's 3-way file merge: Ok(merged) or Err(merged with conflict markers).
pub fn merge3(
    base: &[u8],
    ours: &[u8],
    theirs: &[u8],
    path: &str,
    labels: Labels<'_>,
) -> Result<std::result::Result<Vec<u8>, Vec<u8>>> {
    // `git2::merge_file` neither initialises libgit2 (as a process's first git2 call it fails) nor
    // survives an empty result (git2 0.21 builds a slice from libgit2's null pointer). So: initialise
    // through an ordinary call, and keep every input (hence the result) non-empty with a guard line
    // all three sides share at the top, removed again afterwards.
    // One side unchanged, or both the same: the other side is the merge (git's trivial cases).
    if ours == theirs || base == theirs {
        return Ok(Ok(ours.to_vec()));
    }
    if base == ours {
        return Ok(Ok(theirs.to_vec()));
    }
    // libgit2 calls binary what has a NUL or other control bytes, and then returns no content at
    // all, from which git2 0.21 builds a slice out of a null pointer (an abort). So anything that
    // might look binary to it conflicts here, keeping ours, as git does for binary files.
    if [base, ours, theirs].iter().any(|b| may_be_binary(b)) {
        return Ok(Err(ours.to_vec()));
    }
    let _ = crate::tree::blob_id(b"");
    const GUARD: &[u8] = b"@@ overlay merge guard @@\n";
    let (base, ours, theirs) = (
        [GUARD, base].concat(),
        [GUARD, ours].concat(),
        [GUARD, theirs].concat(),
    );
    let mut a = git2::MergeFileInput::new();
    a.content(&base).path(path);
    let mut o = git2::MergeFileInput::new();
    o.content(&ours).path(path);
    let mut t = git2::MergeFileInput::new();
    t.content(&theirs).path(path);
    let mut opts = git2::MergeFileOptions::new();
    opts.ancestor_label(labels.base)
        .our_label(labels.ours)
        .their_label(labels.theirs);
    let mut r = git2::merge_file(&a, &o, &t, Some(&mut opts))
        .map_err(|e| Error::git(format!("merging {path}"), e))?;
    if !r.is_automergeable() {
        // git's cherry-pick and rebase (merge-ort) diff with histogram, which libgit2 lacks; its
        // closest, patience, resolves most of what Myers alignment leaves as false conflicts.
        opts.patience(true);
        let p = git2::merge_file(&a, &o, &t, Some(&mut opts))
            .map_err(|e| Error::git(format!("merging {path}"), e))?;
        if p.is_automergeable() {
            r = p;
        }
    }
    let Some(content) = r.content().strip_prefix(GUARD) else {
        return Err(
            Error::input(path, None, "internal: the 3-way merge lost its guard line")
                .with_help("please report it with the three inputs"),
        );
    };
    if r.is_automergeable() {
        return Ok(Ok(content.to_vec()));
    }
    // xdiff's Myers alignment can leave a "conflict" whose two sides are the same lines (git's
    // cherry-pick, with histogram, does not): both sides made the same change, so take it.
    let (collapsed, remaining) = collapse_identical(content, labels.ours, labels.theirs);
    Ok(if remaining == 0 {
        Ok(collapsed)
    } else {
        Err(collapsed)
    })
}

/// Replaces every conflict region whose two sides are identical by that text; returns the result
/// and how many real conflicts remain.
pub fn collapse_identical(content: &[u8], ours: &str, theirs: &str) -> (Vec<u8>, usize) {
    let r = rewrite_regions(content, ours, theirs, |o, t| (o == t).then(|| o.to_vec()));
    (r.text, r.kept + usize::from(r.unterminated))
}

/// What [`rewrite_regions`] made of a merged text.
pub(crate) struct Rewritten {
    /// The text with the resolved regions replaced.
    pub text: Vec<u8>,
    /// Regions replaced by the resolver's answer.
    pub resolved: usize,
    /// Regions kept as they were (the resolver said no).
    pub kept: usize,
    /// An unterminated region was left as it is, with everything after it.
    pub unterminated: bool,
}

/// Walks the conflict regions of `content` (`<<<<<<< ours` / [`||||||| base`] / `=======` /
/// theirs / `>>>>>>> theirs`) and replaces each by what `resolve(ours part, theirs part)` returns,
/// keeping it where that is `None`. The one region parser [`collapse_identical`] and the forecast's
/// `take_ours` share.
pub(crate) fn rewrite_regions(
    content: &[u8],
    ours: &str,
    theirs: &str,
    mut resolve: impl FnMut(&[u8], &[u8]) -> Option<Vec<u8>>,
) -> Rewritten {
    let open = format!("<<<<<<< {ours}");
    let close = format!(">>>>>>> {theirs}");
    let is = |l: &[u8], m: &str| l.strip_suffix(b"\n").unwrap_or(l) == m.as_bytes();
    let lines: Vec<&[u8]> = content.split_inclusive(|&b| b == b'\n').collect();
    let mut r = Rewritten {
        text: Vec::new(),
        resolved: 0,
        kept: 0,
        unterminated: false,
    };
    let mut i = 0;
    while i < lines.len() {
        if !is(lines[i], &open) {
            r.text.extend_from_slice(lines[i]);
            i += 1;
            continue;
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut part = 0; // 0 ours, 1 base, 2 theirs
        let mut j = i + 1;
        while j < lines.len() && !(part == 2 && is(lines[j], &close)) {
            let l = lines[j];
            if part < 2 && l.starts_with(b"||||||| ") {
                part = 1;
            } else if part < 2 && is(l, "=======") {
                part = 2;
            } else if part == 0 {
                a.extend_from_slice(l);
            } else if part == 2 {
                b.extend_from_slice(l);
            }
            j += 1;
        }
        if j == lines.len() {
            lines[i..].iter().for_each(|l| r.text.extend_from_slice(l));
            r.unterminated = true;
            return r;
        }
        match resolve(&a, &b) {
            Some(t) => (r.text.extend_from_slice(&t), r.resolved += 1),
            None => (
                lines[i..=j]
                    .iter()
                    .for_each(|l| r.text.extend_from_slice(l)),
                r.kept += 1,
            ),
        };
        i = j + 1;
    }
    r
}

/// A superset of libgit2's `git_str_is_binary`: a NUL, or any control byte that is not whitespace,
/// backspace, escape or form feed.
fn may_be_binary(b: &[u8]) -> bool {
    b.iter().any(|&c| {
        c == 0
            || c == 127
            || (c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r' | 0x0b | 0x08 | 0x1b | 0x0c))
    })
}

fn set(tree: &mut Tree, path: &str, bytes: Option<Vec<u8>>, mode: u32) {
    match bytes {
        Some(b) => {
            tree.entries.insert(
                path.to_string(),
                Entry {
                    mode,
                    content: Content::Bytes(Arc::from(b)),
                },
            );
        }
        None => {
            tree.entries.remove(path);
        }
    }
}

/// Merges one overlay onto `new_before`. Returns the merged tree, or the tree with conflict markers
/// and the conflicting paths.
///
/// `renames` are upstream's renames between the two pins (old path -> new path): a file the
/// overlay changes that upstream moved is merged at its new path, as git's merge follows renames.
pub fn merge_overlay(
    ov: &Overlay,
    trees: MergeTrees<'_>,
    src: &dyn BlobSource,
    labels: Labels<'_>,
    renames: &BTreeMap<String, String>,
) -> Result<(Tree, Vec<String>)> {
    let MergeTrees {
        old_before,
        old_after,
        new_before,
    } = trees;
    let mut out = new_before.clone();
    let mut conflicts = Vec::new();
    for fp in &ov.files {
        if let Some(moved) = follow_rename(fp, new_before, renames) {
            merge_moved(fp, &moved, trees, src, labels, &mut out).map(|c| conflicts.extend(c))?;
            continue;
        }
        let base = match &fp.old_path {
            Some(p) => text(old_before, p, src)?,
            None => None,
        };
        let ours = match &fp.new_path {
            Some(p) => text(old_after, p, src)?,
            None => None,
        };
        let theirs_path = fp
            .old_path
            .as_deref()
            .or(fp.new_path.as_deref())
            .expect("a path");
        let theirs = text(new_before, theirs_path, src)?;
        let mode = fp
            .new_mode
            .or_else(|| new_before.entries.get(theirs_path).map(|e| e.mode))
            .unwrap_or(MODE_FILE);
        let target = fp.new_path.as_deref().unwrap_or(theirs_path);
        match (base, ours, theirs) {
            // Added by the overlay.
            (None, Some(o), None) => set(&mut out, target, Some(o), mode),
            (None, Some(o), Some(t)) if o == t => {}
            (None, Some(o), Some(t)) => match merge3(b"", &o, &t, target, labels)? {
                Ok(m) => set(&mut out, target, Some(m), mode),
                Err(m) => {
                    set(&mut out, target, Some(m), mode);
                    conflicts.push(format!("{target} (added by both)"));
                }
            },
            // Deleted by the overlay.
            (Some(_), None, None) => {}
            (Some(b), None, Some(t)) if b == t => set(&mut out, theirs_path, None, mode),
            (Some(_), None, Some(_)) => conflicts.push(format!(
                "{theirs_path} (deleted by the overlay, changed upstream)"
            )),
            // Modified (and maybe renamed) by the overlay.
            (Some(_), Some(_), None) => conflicts.push(format!(
                "{theirs_path} (changed by the overlay, deleted upstream)"
            )),
            (Some(b), Some(o), Some(t)) => {
                if fp.is_rename() {
                    set(&mut out, theirs_path, None, mode);
                }
                match merge3(&b, &o, &t, target, labels)? {
                    Ok(m) => set(&mut out, target, Some(m), mode),
                    Err(m) => {
                        set(&mut out, target, Some(m), mode);
                        conflicts.push(target.to_string());
                    }
                }
            }
            (None, None, _) => {}
        }
    }
    Ok((out, conflicts))
}

/// Where upstream has the file an overlay modifies when it is no longer at its old path: at the
/// path the overlay renames it to (upstream did the same rename), or where upstream moved it.
pub(crate) fn follow_rename(
    fp: &FilePatch,
    new_before: &Tree,
    renames: &BTreeMap<String, String>,
) -> Option<String> {
    let old = fp.old_path.as_deref()?;
    let new = fp.new_path.as_deref()?;
    if new_before.entries.contains_key(old) {
        return None;
    }
    if fp.is_rename() && new_before.entries.contains_key(new) {
        return Some(new.to_string());
    }
    renames
        .get(old)
        .filter(|p| new_before.entries.contains_key(p.as_str()))
        .cloned()
}

/// Merges a modified file whose upstream version now lives at `moved`; the result goes there
/// (or to the overlay's own new name when it renames the file the same way). Returns conflicts.
fn merge_moved(
    fp: &FilePatch,
    moved: &str,
    trees: MergeTrees<'_>,
    src: &dyn BlobSource,
    labels: Labels<'_>,
    out: &mut Tree,
) -> Result<Vec<String>> {
    let MergeTrees {
        old_before,
        old_after,
        new_before,
    } = trees;
    let old = fp.old_path.as_deref().expect("followed");
    let new = fp.new_path.as_deref().expect("followed");
    let base = text(old_before, old, src)?.unwrap_or_default();
    let ours = text(old_after, new, src)?.unwrap_or_default();
    let theirs = text(new_before, moved, src)?.unwrap_or_default();
    if fp.is_rename() && new != moved {
        return Ok(vec![format!(
            "{old} (renamed to {new} by the overlay, to {moved} upstream)"
        )]);
    }
    let mode = fp
        .new_mode
        .or_else(|| new_before.entries.get(moved).map(|e| e.mode))
        .unwrap_or(MODE_FILE);
    Ok(match merge3(&base, &ours, &theirs, moved, labels)? {
        Ok(m) => {
            set(out, moved, Some(m), mode);
            vec![]
        }
        Err(m) => {
            set(out, moved, Some(m), mode);
            vec![format!("{moved} (upstream moved {old} there)")]
        }
    })
}

/// The canonical file patches taking `before` to `after` for `paths`.
pub fn canonical_files(
    before: &Tree,
    after: &Tree,
    paths: &BTreeSet<String>,
    src: &dyn BlobSource,
) -> Result<Vec<FilePatch>> {
    let mut files = Vec::new();
    for p in paths {
        let a = text(before, p, src)?;
        let b = text(after, p, src)?;
        if a == b && before.entries.get(p).map(|e| e.mode) == after.entries.get(p).map(|e| e.mode) {
            continue;
        }
        let ta = Text::parse(&String::from_utf8_lossy(a.as_deref().unwrap_or_default()));
        let tb = Text::parse(&String::from_utf8_lossy(b.as_deref().unwrap_or_default()));
        let (om, nm) = (
            before.entries.get(p).map(|e| e.mode),
            after.entries.get(p).map(|e| e.mode),
        );
        files.push(FilePatch {
            old_path: a.as_ref().map(|_| p.clone()),
            new_path: b.as_ref().map(|_| p.clone()),
            // Modes are written only where git writes them: created, deleted or changed.
            old_mode: if (a.is_some() && b.is_some() && om != nm) || b.is_none() {
                om
            } else {
                None
            },
            new_mode: if (a.is_some() && b.is_some() && om != nm) || a.is_none() {
                nm
            } else {
                None
            },
            hunks: diff::text_hunks(&ta, &tb, diff::CONTEXT)?,
            patch_line: 0,
        });
    }
    Ok(files)
}

/// The paths an overlay's merge may write: its own, and where upstream moved them.
pub(crate) fn carried_paths(ov: &Overlay, renames: &BTreeMap<String, String>) -> BTreeSet<String> {
    ov.touched_paths()
        .flat_map(|p| [renames.get(&p).cloned(), Some(p)])
        .flatten()
        .collect()
}

/// The merge of a conflicting overlay resolved to the overlay's side: each conflict region of
/// the files it wrote replaced by its "ours" part; a file upstream deleted that the overlay
/// changed comes back as the overlay has it, one the overlay deleted that upstream changed goes.
pub(crate) fn ours_side(
    ov: &Overlay,
    trees: MergeTrees<'_>,
    mut merged: Tree,
    paths: &BTreeSet<String>,
    renames: &BTreeMap<String, String>,
    src: &dyn BlobSource,
    labels: Labels<'_>,
) -> Result<Tree> {
    let MergeTrees {
        old_before,
        old_after,
        new_before,
    } = trees;
    for p in paths {
        if merged.blob_id(p) == new_before.blob_id(p) {
            continue;
        }
        let Some(bytes) = merged.bytes(p, src)? else {
            continue;
        };
        let (resolved, regions) = take_ours(&bytes, labels.ours, labels.theirs);
        if regions > 0 {
            let mode = merged.entries.get(p).map(|e| e.mode).unwrap_or_default();
            merged.entries.insert(
                p.clone(),
                crate::tree::Entry {
                    mode,
                    content: crate::tree::Content::Bytes(std::sync::Arc::from(resolved)),
                },
            );
        }
    }
    for fp in &ov.files {
        // Moved upstream: merged at the new path, where the pass above took its side.
        if follow_rename(fp, new_before, renames).is_some() {
            continue;
        }
        let Some(old) = fp.old_path.as_deref() else {
            continue;
        };
        let (in_base, in_upstream) = (
            old_before.entries.contains_key(old),
            new_before.entries.contains_key(old),
        );
        match fp.new_path.as_deref() {
            // Changed by the overlay, deleted upstream: the overlay's file.
            Some(n) if in_base && !in_upstream => {
                if let Some(e) = old_after.entries.get(n) {
                    merged.entries.insert(n.to_string(), e.clone());
                }
            }
            // Deleted by the overlay, changed upstream: deleted.
            None if in_base && in_upstream => {
                merged.entries.remove(old);
            }
            _ => {}
        }
    }
    Ok(merged)
}

/// Replaces every conflict region (`<<<<<<< ours` … `>>>>>>> theirs`, with or without a base
/// part) by its ours part; returns the result and how many regions were replaced. An unterminated
/// region is left as it is.
pub fn take_ours(content: &[u8], ours: &str, theirs: &str) -> (Vec<u8>, usize) {
    let r = rewrite_regions(content, ours, theirs, |o, _| Some(o.to_vec()));
    (r.text, r.resolved)
}

#[cfg(test)]
mod tests {
    use super::{collapse_identical, take_ours};

    #[test]
    fn identical_sides_are_not_a_conflict_different_ones_stay() {
        let m = b"a\n<<<<<<< overlay\nx\ny\n=======\nx\ny\n>>>>>>> new upstream\nb\n<<<<<<< overlay\n1\n||||||| old pin\n0\n=======\n2\n>>>>>>> new upstream\n";
        let (out, remaining) = collapse_identical(m, "overlay", "new upstream");
        assert_eq!(remaining, 1);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a\nx\ny\nb\n<<<<<<< overlay\n1\n||||||| old pin\n0\n=======\n2\n>>>>>>> new upstream\n"
        );
        // An unterminated region stays as it is, and counts.
        let (out, remaining) =
            collapse_identical(b"<<<<<<< overlay\nx\n", "overlay", "new upstream");
        assert_eq!(
            (out.as_slice(), remaining),
            (&b"<<<<<<< overlay\nx\n"[..], 1)
        );
    }

    #[test]
    fn ours_part_of_each_region_with_or_without_base() {
        let m = b"a\n<<<<<<< overlay\nx\n=======\ny\n>>>>>>> new upstream\nb\n<<<<<<< overlay\n1\n||||||| old pin\n0\n=======\n2\n>>>>>>> new upstream\nc\n";
        let (out, n) = take_ours(m, "overlay", "new upstream");
        assert_eq!(
            (String::from_utf8(out).unwrap().as_str(), n),
            ("a\nx\nb\n1\nc\n", 2)
        );
        let (out, n) = take_ours(b"<<<<<<< overlay\nx\n", "overlay", "new upstream");
        assert_eq!((out.as_slice(), n), (&b"<<<<<<< overlay\nx\n"[..], 0));
    }
}
