//! Per-hunk blame for `drift --per-commit`: every first-parent commit of the range that changed a
//! hunk's context, moved it, or changed a definition it is watched through (the one it sits in,
//! the overlay's `Depends-On`), in order, and the one after which the hunk has the status drift
//! reports (for a conflict: the commit that broke it).
//!
//! A hunk's context is followed through upstream's own history as a line range: placed at the
//! starting commit on the series applied so far, taken back to upstream's lines, then carried
//! across each commit's diff (git's differ, no context). A commit whose diff touches the range
//! changed the context; one that only shifts it moved it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apply::Text;
use crate::drift::{Caches, HunkStatus, OverlayDrift};
use crate::error::{Error, Result};
use crate::patch::Hunk;
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

/// One commit that changed a hunk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HunkBlame {
    /// The commit's id (full hex).
    pub sha: String,
    /// Its subject line.
    pub subject: String,
    /// What it did: `context` (changed lines of the hunk's context), `moved` (shifted it),
    /// `symbol NAME` (changed a watched definition), `file moved` (upstream's rename), `file deleted`.
    pub changes: Vec<String>,
    /// The hunk's status once this commit is in (none while its overlay is blocked).
    pub status: Option<HunkStatus>,
    /// The commit after which the hunk has the status drift reports (the last change of status).
    pub decisive: bool,
}

/// The statuses of every overlay after one commit (as `drift::classify` gave them).
pub type Evaluation = Arc<Vec<OverlayDrift>>;

/// One commit of the range: its id, its tree (the paths drift reads), the statuses after it.
pub type Step = (git2::Oid, Tree, Evaluation);

/// A hunk followed through history.
struct Tracked {
    overlay: usize,
    /// The hunk as drift names it (its file, as the overlay names it, and its number).
    file: String,
    hunk: usize,
    /// The file at upstream.
    path: String,
    /// Its context as upstream's lines, 0-based, end exclusive; None once the file is gone.
    range: Option<(usize, usize)>,
    /// (path, symbol) pairs it is watched through.
    symbols: Vec<(String, String)>,
    blame: Vec<HunkBlame>,
    /// Its status before the next commit.
    status: Option<HunkStatus>,
}

fn hunk_status(ev: &[OverlayDrift], overlay: usize, file: &str, hunk: usize) -> Option<HunkStatus> {
    ev.get(overlay)?
        .hunks
        .iter()
        .find(|h| h.file == file && h.hunk == hunk)
        .map(|h| h.status)
}

/// Carries `range` (0-based, end exclusive) across a diff's hunks (no context): its new range,
/// and whether a hunk touched it (changed, removed or inserted lines inside it) or only moved it.
pub fn carry(range: (usize, usize), hunks: &[Hunk]) -> ((usize, usize), bool, bool) {
    let (s, e) = range;
    let (mut ns, mut ne) = (s as isize, e as isize);
    let (mut touched, mut shift) = (false, 0isize);
    for h in hunks {
        // Old lines [os, os + ol) become new lines [nw, nw + nl); an insertion goes before os.
        let (os, ol) = (h.old_start - usize::from(h.old_len > 0), h.old_len);
        let (nw, nl) = (h.new_start - usize::from(h.new_len > 0), h.new_len);
        let delta = nl as isize - ol as isize;
        let inside = if ol == 0 {
            s < os && os < e
        } else {
            os < e && s < os + ol
        };
        touched |= inside;
        if os + ol <= s {
            ns += delta;
            shift += delta;
        } else if os < s {
            ns = nw as isize;
        }
        if (ol > 0 && os + ol <= e) || (ol == 0 && os < e) {
            ne += delta;
        } else if os < e && e < os + ol {
            ne = (nw + nl) as isize;
        }
    }
    let ns = ns.max(0) as usize;
    let ne = (ne.max(0) as usize).max(ns);
    ((ns, ne), touched, !touched && shift != 0)
}

/// Where each hunk of the series sits in upstream's lines at `from`, and what it is watched
/// through. Hunks of files upstream lacks (new files) are not followed.
fn track(
    from: &Tree,
    series: &Series,
    drift: &[OverlayDrift],
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<Vec<Tracked>> {
    let mut chain = from.clone();
    let mut out = Vec::new();
    for (i, ov) in series.overlays.iter().enumerate() {
        let depends: Vec<(String, String)> = ov
            .trailers
            .depends_on
            .iter()
            .map(|d| (d.path.clone(), d.symbol.clone()))
            .collect();
        for fp in &ov.files {
            let Some(path) = fp.old_path.as_deref() else {
                continue;
            };
            let (Some(up), Some(mine)) = (
                caches.text(from, path, src)?,
                caches.text(&chain, path, src)?,
            ) else {
                continue;
            };
            let Ok((_, placed)) = crate::apply::apply_hunks(&mine, fp) else {
                continue;
            };
            // The series so far, taken back to upstream's lines.
            let back = crate::diff::text_hunks(&mine, &up, 0)?;
            for (j, (h, p)) in fp.hunks.iter().zip(&placed).enumerate() {
                let Some(d) = drift[i]
                    .hunks
                    .iter()
                    .find(|d| d.file == fp.path() && d.hunk == j + 1)
                else {
                    continue;
                };
                let start = p.actual - usize::from(h.old_len > 0);
                let range = (start, start + h.preimage().count());
                let (range, _, _) = carry(range, &back);
                let symbols = d
                    .symbol
                    .iter()
                    .map(|s| (path.to_string(), s.clone()))
                    .chain(depends.iter().cloned())
                    .collect();
                out.push(Tracked {
                    overlay: i,
                    file: fp.path().to_string(),
                    hunk: j + 1,
                    path: path.to_string(),
                    range: Some(range),
                    symbols,
                    blame: Vec::new(),
                    status: Some(HunkStatus::Exact),
                });
            }
        }
        chain.apply_overlay(ov, src)?;
    }
    Ok(out)
}

/// The range a blame walks: the series at `from`, and the first-parent commits after it.
#[derive(Debug, Clone, Copy)]
pub struct Range<'a> {
    /// The upstream tree the range starts from.
    pub from: &'a Tree,
    /// Upstream's renames within the range (old path -> new path).
    pub renames: &'a BTreeMap<String, String>,
    /// The series whose hunks are blamed.
    pub series: &'a Series,
    /// The commits after `from`, oldest first, each with its tree and classification.
    pub history: &'a [Step],
}

/// The per-hunk blame of `drift` (the final classification) over `range`. Returns, per overlay,
/// per hunk of `drift[i].hunks`, the commits that changed it.
pub fn hunk_blames(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    caches: &mut Caches,
    range: Range<'_>,
    drift: &[OverlayDrift],
) -> Result<Vec<Vec<Vec<HunkBlame>>>> {
    let Range {
        from,
        renames,
        series,
        history,
    } = range;
    let mut tracked = track(from, series, drift, src, caches)?;
    let mut prev = from.clone();
    for (c, tree, ev) in history {
        // Where a tree has the file: upstream may have moved it within the range.
        let at = |t: &Tree, p: &str| -> String {
            match renames.get(p) {
                Some(n) if !t.entries.contains_key(p) => n.clone(),
                _ => p.to_string(),
            }
        };
        let mut diffs: BTreeMap<String, Vec<Hunk>> = BTreeMap::new();
        for t in &mut tracked {
            let mut changes = Vec::new();
            if at(&prev, &t.path) != at(tree, &t.path) && t.range.is_some() {
                changes.push("file moved".to_string());
            }
            let (was, now) = (
                prev.blob_id(&at(&prev, &t.path)),
                tree.blob_id(&at(tree, &t.path)),
            );
            if let Some(range) = t.range.filter(|_| was != now) {
                match caches.text(tree, &at(tree, &t.path), src)? {
                    None => {
                        changes.push("file deleted".to_string());
                        t.range = None;
                    }
                    Some(new) => {
                        if !diffs.contains_key(&t.path) {
                            let old = caches
                                .text(&prev, &at(&prev, &t.path), src)?
                                .unwrap_or_else(|| Arc::new(Text::parse("")));
                            diffs.insert(t.path.clone(), crate::diff::text_hunks(&old, &new, 0)?);
                        }
                        let (r, touched, moved) = carry(range, &diffs[&t.path]);
                        t.range = Some(r);
                        if touched {
                            changes.push("context".to_string());
                        } else if moved {
                            changes.push("moved".to_string());
                        }
                    }
                }
            }
            for (p, s) in &t.symbols {
                if prev.blob_id(&at(&prev, p)) == tree.blob_id(&at(tree, p)) {
                    continue;
                }
                let fp = |tr: &Tree, c: &mut Caches| -> Result<Option<String>> {
                    let ix = c.symbols(tr, &at(tr, p), src)?;
                    Ok(ix.and_then(|ix| ix.fingerprint_of(s)))
                };
                if fp(&prev, caches)? != fp(tree, caches)? {
                    changes.push(format!("symbol {s}"));
                }
            }
            let status = hunk_status(ev, t.overlay, &t.file, t.hunk);
            if status != t.status || !changes.is_empty() {
                t.blame.push(HunkBlame {
                    sha: c.to_string(),
                    subject: subject(repo, *c)?,
                    changes,
                    status,
                    decisive: status != t.status,
                });
                t.status = status;
            }
        }
        prev = tree.clone();
    }
    Ok(assemble(tracked, drift))
}

/// Keeps `decisive` only on the last change of status, when it led to the final one.
fn assemble(tracked: Vec<Tracked>, drift: &[OverlayDrift]) -> Vec<Vec<Vec<HunkBlame>>> {
    let mut out: Vec<Vec<Vec<HunkBlame>>> = drift
        .iter()
        .map(|d| vec![Vec::new(); d.hunks.len()])
        .collect();
    for mut t in tracked {
        let Some(k) = drift[t.overlay]
            .hunks
            .iter()
            .position(|h| h.hunk == t.hunk && h.file == t.file)
        else {
            continue;
        };
        let last = t.blame.iter().rposition(|b| b.decisive);
        let final_status = drift[t.overlay].hunks[k].status;
        for (i, b) in t.blame.iter_mut().enumerate() {
            b.decisive = Some(i) == last
                && b.status == Some(final_status)
                && final_status != HunkStatus::Exact;
        }
        out[t.overlay][k] = t.blame;
    }
    out
}

fn subject(repo: &git2::Repository, c: git2::Oid) -> Result<String> {
    let commit = repo
        .find_commit(c)
        .map_err(|e| Error::git("reading commit", e))?;
    Ok(commit.summary().ok().flatten().unwrap_or("").to_string())
}

#[cfg(test)]
mod tests {
    use super::carry;
    use crate::diff::hunks;

    fn lines(v: &[&str]) -> String {
        v.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn a_range_moves_with_lines_above_and_is_touched_by_lines_inside() {
        let old = lines(&["a", "b", "c", "d", "e", "f"]);
        // Two lines inserted at the top: range c..e (2..5) moves to 4..7.
        let h = hunks(&old, &lines(&["x", "y", "a", "b", "c", "d", "e", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((4, 7), false, true));
        // A line inside changed: touched, same place.
        let h = hunks(&old, &lines(&["a", "b", "c", "D", "e", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((2, 5), true, false));
        // A line inserted inside: touched, one longer.
        let h = hunks(&old, &lines(&["a", "b", "c", "n", "d", "e", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((2, 6), true, false));
        // Right after the range or right before it: not inside.
        let h = hunks(&old, &lines(&["a", "b", "c", "d", "e", "n", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((2, 5), false, false));
        let h = hunks(&old, &lines(&["a", "b", "n", "c", "d", "e", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((3, 6), false, true));
        // A change straddling the start: touched, the range starts where the change does.
        let h = hunks(&old, &lines(&["a", "B", "C", "d", "e", "f"]), 0).unwrap();
        assert_eq!(carry((2, 5), &h), ((1, 5), true, false));
    }
}
