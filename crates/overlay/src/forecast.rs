//! `bump-pin --dry-run`: the forecast of a whole bump, conflicts included.
//!
//! A real bump stops at the first conflict (`crate::bump::bump_guided`): what follows depends on
//! how the user resolves it. The forecast does not stop. It performs the same merges, and where an
//! overlay conflicts it goes on from a deterministic stand-in for the resolution: the overlay's
//! side ("ours") of every conflicting region, as `git merge -X ours` resolves it (upstream's
//! changes elsewhere in the file are kept; a file one side deleted keeps the overlay's side).
//! Later overlays that touch a file such a resolution wrote are evaluated on top of it and marked
//! `depends_on_resolution_of` that overlay: the same rule by which drift calls them `blocked`
//! (`crate::drift::classify`), so the two commands agree overlay by overlay. A review stop does not
//! stop the forecast either: the merge it would show is carried as it is.

use std::collections::{BTreeMap, BTreeSet};

use crate::bump::{
    Action, Guidance, Outcome, OverlayBump, canonical_files, merge_overlay, rewrite,
};
use crate::error::Result;
use crate::patch::Overlay;
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

/// One overlay of a forecast: what the bump would do with it, and whose resolution that assumes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ForecastOverlay {
    /// What the bump would do with the overlay (flattened into this record when serialized).
    #[serde(flatten)]
    pub bump: OverlayBump,
    /// An earlier conflicting overlay whose resolution this outcome depends on (it touches a file
    /// that overlay's merge left with conflicts); the forecast took that overlay's side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on_resolution_of: Option<String>,
}

/// The forecast: an [`Outcome`] as a bump would report it (its `conflict_tree` is the first
/// conflict's or review's merge, so a caller stops the same way), and each overlay's dependency.
#[derive(Debug)]
pub struct Forecast {
    /// The bump's outcome, as [`crate::bump::bump_guided`] would report it had it not stopped.
    pub outcome: Outcome,
    /// For each overlay, in series order: the earlier conflicting overlay whose resolution its
    /// outcome depends on, if any (see [`ForecastOverlay::depends_on_resolution_of`]).
    pub depends_on_resolution_of: Vec<Option<String>>,
}

impl Forecast {
    /// Each overlay's outcome with its dependency, for reports.
    pub fn overlays(&self) -> Vec<ForecastOverlay> {
        self.outcome
            .overlays
            .iter()
            .zip(&self.depends_on_resolution_of)
            .map(|(b, d)| ForecastOverlay {
                bump: b.clone(),
                depends_on_resolution_of: d.clone(),
            })
            .collect()
    }
}

/// The paths an overlay's merge may write: its own, and where upstream moved them.
pub(crate) fn carried_paths(ov: &Overlay, renames: &BTreeMap<String, String>) -> BTreeSet<String> {
    crate::drift::overlay_paths(ov)
        .into_iter()
        .flat_map(|p| [renames.get(&p).cloned(), Some(p)])
        .flatten()
        .collect()
}

fn bump_of(
    ov: &Overlay,
    action: Action,
    conflicts: Vec<String>,
    raw: Option<String>,
) -> OverlayBump {
    OverlayBump {
        name: ov.name.clone(),
        action,
        conflicts,
        notes: Vec::new(),
        raw,
    }
}

/// Evaluates every overlay of `series` carried from `old_base` to `new_base`, never stopping:
/// a conflicting overlay is carried with its side of each conflict (see the module docs).
pub fn forecast(
    old_base: &Tree,
    new_base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    drop_upstreamed: bool,
    labels: (&str, &str, &str),
    guidance: &Guidance,
) -> Result<Forecast> {
    let (mut old_chain, mut new_chain) = (old_base.clone(), new_base.clone());
    let (mut overlays, mut depends) = (Vec::new(), Vec::new());
    let mut first_stop: Option<Tree> = None;
    // Files a conflict's resolution decides, and the overlay whose resolution that is (drift's
    // `blocked` rule: the first holder stays, dependents pass it on).
    let mut stuck: BTreeMap<String, String> = BTreeMap::new();
    for ov in &series.overlays {
        let mut old_next = old_chain.clone();
        old_next.apply_overlay(ov, src)?;
        let own = crate::drift::overlay_paths(ov);
        let dep = own.iter().find_map(|p| stuck.get(p)).cloned();
        let (merged, conflicts) = merge_overlay(
            ov,
            &old_chain,
            &old_next,
            &new_chain,
            src,
            labels,
            &guidance.renames,
        )?;
        let paths = carried_paths(ov, &guidance.renames);
        let bump = if !conflicts.is_empty() {
            first_stop.get_or_insert_with(|| merged.clone());
            new_chain = ours_side(
                ov,
                &old_chain,
                &old_next,
                merged,
                &new_chain,
                &paths,
                &guidance.renames,
                src,
                labels,
            )?;
            bump_of(ov, Action::Conflict, conflicts, None)
        } else {
            let files = canonical_files(&new_chain, &merged, &paths, src)?;
            if files.is_empty() {
                let action = if drop_upstreamed {
                    Action::Dropped
                } else {
                    Action::Upstreamed
                };
                bump_of(ov, action, Vec::new(), None)
            } else if let Some(why) = guidance.review.get(&ov.name) {
                first_stop.get_or_insert_with(|| merged.clone());
                new_chain = merged;
                bump_of(ov, Action::Review, why.clone(), None)
            } else {
                let (raw, changed) = rewrite(ov, files, &new_chain, &merged, src)?;
                new_chain = merged;
                let action = if changed {
                    Action::Rewritten
                } else {
                    Action::Kept
                };
                bump_of(ov, action, Vec::new(), Some(raw))
            }
        };
        let holder = match (&dep, bump.action == Action::Conflict) {
            (Some(by), _) => Some(by.clone()),
            (None, true) => Some(ov.name.clone()),
            (None, false) => None,
        };
        if let Some(h) = holder {
            for p in own {
                stuck.entry(p).or_insert_with(|| h.clone());
            }
        }
        overlays.push(bump);
        depends.push(dep);
        old_chain = old_next;
    }
    Ok(Forecast {
        outcome: Outcome {
            overlays,
            conflict_tree: first_stop,
            // A forecast writes nothing: the series is reported as it is.
            series_raw: series.raw.clone(),
        },
        depends_on_resolution_of: depends,
    })
}

/// The merge of a conflicting overlay resolved to the overlay's side: each conflict region of
/// the files it wrote replaced by its "ours" part; a file upstream deleted that the overlay
/// changed comes back as the overlay has it, one the overlay deleted that upstream changed goes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ours_side(
    ov: &Overlay,
    old_before: &Tree,
    old_after: &Tree,
    mut merged: Tree,
    new_before: &Tree,
    paths: &BTreeSet<String>,
    renames: &BTreeMap<String, String>,
    src: &dyn BlobSource,
    labels: (&str, &str, &str),
) -> Result<Tree> {
    for p in paths {
        if merged.blob_id(p) == new_before.blob_id(p) {
            continue;
        }
        let Some(bytes) = merged.bytes(p, src)? else {
            continue;
        };
        let (resolved, regions) = take_ours(&bytes, labels.1, labels.2);
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
        if crate::bump::follow_rename(fp, new_before, renames).is_some() {
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
    let r = crate::bump::rewrite_regions(content, ours, theirs, |o, _| Some(o.to_vec()));
    (r.text, r.resolved)
}

#[cfg(test)]
mod tests {
    use super::take_ours;

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
