//! One `bump-pin` run once its target is known, new or `--continue`d (gix-merge style: an
//! [`Options`], a [`Run`] naming what it works on, an [`Outcome`]): the downgrade check, the
//! resolution checks when continuing (the project unchanged since the bump started, the bump tree
//! whole, no conflict markers left), drift's guidance, then the merge (`bump::bump_guided`) or,
//! for a dry run, the forecast. Refusals are typed ([`crate::Refusal`]); the command renders.
//!
//! What lives on disk between two runs (state, bump tree, ordered writes) is `session`'s.

use std::collections::BTreeMap;

use crate::bump::forecast::{self, Forecast};
use crate::bump::session::{self, Carried, Session, SessionState};
use crate::bump::{self, Action, Guidance};
use crate::drift;
use crate::help::{Help, NextStep};
use crate::manifest::Upstream;
use crate::merge::Labels;
use crate::series::Series;
use crate::tree::Tree;
use crate::upstream::UpstreamRepo;
use crate::{Error, Refusal, Result};

/// The merge's bare conflict-marker labels (drift's classification and the forecast use them; a
/// bump's markers say what each side is, `bump::side_labels`).
pub const LABELS: Labels<'static> = Labels {
    base: "old pin",
    ours: "overlay",
    theirs: "new upstream",
};

/// How to carry the series.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Retire overlays that upstream already contains.
    pub drop_upstreamed: bool,
    /// Forecast every conflict instead of stopping at the first (`--dry-run`).
    pub dry_run: bool,
    /// Accept a resolution the audit finds losing lines, recording the confirmation as trailers.
    pub accept_reverts: bool,
    /// Take a resolution that still holds marker-like lines (`--allow-markers`).
    pub allow_markers: bool,
}

/// What one run works on.
pub struct Run<'a> {
    /// The upstream, as pinned (its name and the pin the bump starts from).
    pub upstream: &'a Upstream,
    /// The upstream's repository.
    pub repo: &'a UpstreamRepo,
    /// The pin the bump starts from (`upstream.rev`).
    pub from: git2::Oid,
    /// The commit it goes to.
    pub to: git2::Oid,
    /// The series at the pin.
    pub series: &'a Series,
    /// The project's pins.toml (guarded with the series and the overlays).
    pub pins_path: &'a std::path::Path,
    /// The bump tree.
    pub session: &'a Session,
    /// The saved progress, when continuing.
    pub state: Option<&'a SessionState>,
}

/// What one run found.
#[derive(Debug)]
pub struct Outcome {
    /// What happened to each overlay (for a dry run, the forecast's view of it).
    pub bump: bump::Outcome,
    /// Drift's classification between the pins (the review list and statuses of the report).
    pub drift: drift::Report,
    /// The bump tree has to be written again: an earlier bump-pin was killed while writing it.
    pub tree_rewritten: bool,
    /// The forecast, for a dry run.
    pub forecast: Option<Forecast>,
}

/// What moving the pin from `from` to `to` reverts, when `to` is not a descendant of `from`: the
/// commits the pin has and `to` lacks. None for a forward move.
pub fn reverted_commits(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Option<String>> {
    let git = |e| Error::git("walking the upstream history", e);
    if to == from || repo.graph_descendant_of(to, from).map_err(git)? {
        return Ok(None);
    }
    let (f, t) = (short_id(from), short_id(to));
    let base = match repo.merge_base(from, to) {
        Ok(b) => b,
        Err(_) => return Ok(Some(format!("{t} shares no history with the pin {f}"))),
    };
    let mut walk = repo.revwalk().map_err(git)?;
    walk.push(from).map_err(git)?;
    walk.hide(to).map_err(git)?;
    let n = walk.count();
    Ok(Some(if base == to {
        format!(
            "{t} is an ancestor of the pin {f}: the bump reverts {n} upstream commit(s) ({t}..{f})"
        )
    } else {
        format!(
            "{t} is not a descendant of the pin {f}: the bump reverts {n} upstream commit(s) the pin has and {t} lacks ({t}..{f}, merge base {})",
            short_id(base)
        )
    }))
}

/// Refuses to move the pin backwards unless `allow`ed ([`Refusal::Downgrade`]); returns what an
/// allowed downgrade reverts.
pub fn refuse_downgrade(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
    allow: bool,
) -> Result<Option<String>> {
    let Some(reverts) = reverted_commits(repo, from, to)? else {
        return Ok(None);
    };
    if !allow {
        return Err(Error::from(Refusal::Downgrade { reverts }).with_help(format!(
            "`git log {}..{}` in the upstream lists them; pass --allow-downgrade if reverting them is what you want",
            short_id(to),
            short_id(from)
        )));
    }
    Ok(Some(reverts))
}

/// Whether a run may start: a new bump refuses while one is in progress
/// ([`Refusal::BumpInProgress`], naming `ways_out`: the caller's commands that finish and abandon
/// it); `--continue` and `--abort` need one ([`Refusal::NoBumpInProgress`]).
pub fn admit(
    session: &Session,
    state: Option<&SessionState>,
    continuing: bool,
    aborting: bool,
    ways_out: impl FnOnce() -> (String, String),
) -> Result<()> {
    let dir = session.dir.display().to_string();
    match state {
        Some(s) if !continuing && !aborting => {
            let (finish, abandon) = ways_out();
            Err(
                Refusal::BumpInProgress(Box::new(crate::error::BumpInProgress {
                    to: s.to[..12.min(s.to.len())].to_string(),
                    dir,
                    resolving: s.resolving.clone(),
                    finish,
                    abandon,
                }))
                .into(),
            )
        }
        None if continuing || aborting => Err(Refusal::NoBumpInProgress {
            dir,
            continuing: continuing && !aborting,
        }
        .into()),
        _ => Ok(()),
    }
}

/// A bump carries the series only: an overlay file the series does not list would stay at the
/// old pin, never carried, never applied ([`Refusal::UnlistedOverlays`], at the series file).
pub fn refuse_unlisted(series: &Series) -> Result<()> {
    let files = series.unlisted()?;
    if files.is_empty() {
        return Ok(());
    }
    let series_file = series.dir.join(crate::series::SERIES_FILE);
    Err(
        Error::refused(&series_file, None, Refusal::UnlistedOverlays { files }).with_help(
            Help::new("add each to the series where it belongs (")
                .step(NextStep::plain("check"))
                .text(" lists them as UNLISTED), or delete the file if it is retired (`git rm`), then bump"),
        ),
    )
}

/// A `--continue` goes where the bump in progress goes ([`Refusal::OtherBumpTarget`]).
pub fn check_target(state: &SessionState, to: git2::Oid) -> Result<()> {
    let to = to.to_string();
    if state.to != to {
        return Err(Refusal::OtherBumpTarget {
            goes_to: state.to[..12.min(state.to.len())].to_string(),
            asked: to[..12].to_string(),
        }
        .into());
    }
    Ok(())
}

fn short9(id: git2::Oid) -> String {
    id.to_string()[..9].to_string()
}

fn short_id(id: git2::Oid) -> String {
    id.to_string()[..12].to_string()
}

impl Run<'_> {
    /// The project files the bump guards (pins.toml, the series, every overlay), as blob ids:
    /// as saved when continuing, else now.
    pub fn start_guards(&self) -> BTreeMap<String, String> {
        self.state.map(|s| s.guards.clone()).unwrap_or_else(|| {
            session::guards(
                &self.session.root,
                &session::guard_paths(self.pins_path, self.series),
            )
        })
    }

    /// Carries the series across to the new pin, guided by drift, with the conflict resolved by
    /// hand when continuing. A dry run is the forecast, which crosses every conflict
    /// (`crate::bump::forecast`).
    pub fn carry(&self, opts: &Options) -> Result<Outcome> {
        let old_base = self.repo.tree_at(self.from)?;
        let new_base = self.repo.tree_at(self.to)?;
        // Statuses for the review list (context drift is carried across but named).
        let report = drift::drift(
            self.repo.repo(),
            self.repo,
            self.series,
            &drift::Options {
                upstream: &self.upstream.name,
                from: self.from,
                to: self.to,
                per_commit: false,
            },
        )?;
        let (resolved_tree, tree_rewritten) = self.resolution()?;
        let resolved = match (&resolved_tree, self.state) {
            (Some(tree), Some(s)) => Some((s.resolving.as_str(), tree)),
            _ => None,
        };
        let done = self.state.map(carried_pairs).unwrap_or_default();
        let mut guidance = self.guidance(&report)?;
        if let (Some((_, tree)), Some(s)) = (&resolved, self.state) {
            if !opts.allow_markers {
                self.refuse_markers(tree, s, &old_base, &new_base)?;
            }
            let trailers =
                self.audit_resolution(tree, s, (&old_base, &new_base), &guidance, opts)?;
            guidance.trailers.insert(s.resolving.clone(), trailers);
        }
        if opts.dry_run {
            let f = forecast::forecast(
                &old_base,
                &new_base,
                self.series,
                self.repo,
                opts.drop_upstreamed,
                LABELS,
                &guidance,
            )?;
            let bump = bump::Outcome {
                overlays: f.outcome.overlays.clone(),
                conflict_tree: f.outcome.conflict_tree.clone(),
                series_raw: f.outcome.series_raw.clone(),
            };
            return Ok(Outcome {
                bump,
                drift: report,
                tree_rewritten,
                forecast: Some(f),
            });
        }
        let carry = bump::Options {
            drop_upstreamed: opts.drop_upstreamed,
            done: &done,
            resolved,
            labels: LABELS,
        };
        let bump = bump::bump_guided(
            &old_base,
            &new_base,
            self.series,
            self.repo,
            &carry,
            &guidance,
        )?;
        Ok(Outcome {
            bump,
            drift: report,
            tree_rewritten,
            forecast: None,
        })
    }

    /// When continuing: the resolution in the bump tree (None when the tree is a half-written one,
    /// with `true`: it is written again). Refuses when the project changed since the bump started
    /// ([`Refusal::ChangedSinceBumpStarted`]).
    fn resolution(&self) -> Result<(Option<Tree>, bool)> {
        let Some(s) = self.state else {
            return Ok((None, false));
        };
        let now = session::guards(
            &self.session.root,
            &session::guard_paths(self.pins_path, self.series),
        );
        if now != s.guards {
            return Err(Refusal::ChangedSinceBumpStarted.into());
        }
        if self.session.tree_is_for(&s.resolving) {
            Ok((Some(bump::tree_from_dir(&self.session.dir)?), false))
        } else {
            // The tree for this conflict was being written when a bump-pin was killed: it is
            // not a resolution. Write it again from the saved progress.
            Ok((None, true))
        }
    }

    /// The resolution audit (`crate::audit`): a resolution that loses lines of upstream or of an
    /// earlier overlay is refused ([`Refusal::ResolutionReverts`]) unless accepted; returns the
    /// trailers that record what was accepted.
    fn audit_resolution(
        &self,
        tree: &Tree,
        s: &SessionState,
        (old_base, new_base): (&Tree, &Tree),
        guidance: &Guidance,
        opts: &Options,
    ) -> Result<Vec<String>> {
        let losses = self.resolution_losses(tree, s, (old_base, new_base), guidance)?;
        let open: Vec<&crate::audit::Loss> = losses.iter().filter(|l| !l.accepted).collect();
        if open.is_empty() {
            return Ok(Vec::new());
        }
        if !opts.accept_reverts {
            return Err(Error::from(Refusal::ResolutionReverts {
                overlay: s.resolving.clone(),
                losses: crate::audit::summarize(&open)
                    .into_iter()
                    .map(|(m, _)| m)
                    .collect(),
            })
            .with_help(format!(
                "restore those lines in {} and --continue again; or, if dropping them is what you want, --continue --accept-reverts (recorded in the overlay as trailers)",
                self.session.dir.display()
            )));
        }
        let open: Vec<crate::audit::Loss> = open.into_iter().cloned().collect();
        Ok(crate::audit::confirming_trailers(&open, self.from))
    }

    /// What the resolution in `tree` loses: the overlay's new version over the carried chain,
    /// against its previous version over the old chain.
    fn resolution_losses(
        &self,
        tree: &Tree,
        s: &SessionState,
        (old_base, new_base): (&Tree, &Tree),
        guidance: &Guidance,
    ) -> Result<Vec<crate::audit::Loss>> {
        let at = self
            .series
            .overlays
            .iter()
            .position(|o| o.name == s.resolving);
        let Some(at) = at else {
            return Ok(Vec::new());
        };
        let ov = &self.series.overlays[at];
        let mut old_before = old_base.clone();
        for o in &self.series.overlays[..at] {
            old_before.apply_overlay(o, self.repo)?;
        }
        let mut old_after = old_before.clone();
        old_after.apply_overlay(ov, self.repo)?;
        let earlier = self.carried_overlays(s)?;
        let back: BTreeMap<&String, &String> =
            guidance.renames.iter().map(|(a, b)| (b, a)).collect();
        let paths: std::collections::BTreeSet<String> = crate::drift::overlay_paths(ov)
            .into_iter()
            .flat_map(|p| [guidance.renames.get(&p).cloned(), Some(p)])
            .flatten()
            .collect();
        let base_text = |p: &str| -> Result<Option<crate::apply::Text>> {
            let old = back.get(&p.to_string()).map_or(p, |o| o.as_str());
            Ok(Some(crate::check::text_of(
                &old_before,
                Some(old),
                self.repo,
            )?))
        };
        let raw = crate::audit::audit_overlay(
            &crate::audit::OverlayAudit {
                pin: new_base,
                earlier: &earlier,
                post: tree,
                previous: Some((&old_before, &old_after)),
                paths: &paths,
            },
            self.repo,
            &base_text,
        )?;
        let history = crate::audit::History {
            repo: self.repo.repo(),
            base: self.from,
            pin: self.to,
        };
        let confirmed = crate::reverts::recorded(ov)?.confirmed();
        let mut out = Vec::new();
        for (path, raw) in &raw {
            out.extend(crate::audit::attribute(
                Some(&history),
                path,
                raw,
                &confirmed,
            )?);
        }
        Ok(out)
    }

    /// The overlays carried before the one being resolved, as they apply at the new pin.
    fn carried_overlays(&self, s: &SessionState) -> Result<Vec<crate::patch::Overlay>> {
        let mut out = Vec::new();
        for Carried { name, text } in &s.carried {
            let Some(raw) = text else { continue };
            let path = self
                .series
                .overlays
                .iter()
                .find(|o| &o.name == name)
                .map_or_else(|| self.series.dir.join(name), |o| o.path.clone());
            out.push(crate::patch::parse_overlay(name, &path, raw)?);
        }
        Ok(out)
    }

    /// Conflict markers left in the files the merge wrote are not a resolution
    /// ([`Refusal::ConflictMarkers`]): lines the merge wrote, told from content by comparing with
    /// both of its sides (`bump::conflict_markers`).
    fn refuse_markers(
        &self,
        tree: &Tree,
        s: &SessionState,
        old_base: &Tree,
        new_base: &Tree,
    ) -> Result<()> {
        let mut theirs = new_base.clone();
        for Carried { name, text } in &s.carried {
            if let Some(raw) = text {
                let ov = self.overlay(name)?;
                theirs.apply_overlay(
                    &crate::patch::parse_overlay(name, &ov.path, raw)?,
                    self.repo,
                )?;
            }
        }
        let mut ours = old_base.clone();
        for ov in &self.series.overlays {
            ours.apply_overlay(ov, self.repo)?;
            if ov.name == s.resolving {
                break;
            }
        }
        let markers = bump::conflict_markers(tree, &theirs, &ours, self.repo)?;
        if !markers.is_empty() {
            return Err(Error::from(Refusal::ConflictMarkers {
                dir: self.session.dir.display().to_string(),
                markers,
            })
            .with_help(
                Help::new("resolve them, then --continue again; if those lines are content (the overlay or the resolution means them), ")
                    .step(NextStep::new("bump-pin", ["--continue", "--allow-markers"]))
                    .text(" takes the tree as it is"),
            ));
        }
        Ok(())
    }

    /// The series' overlay `name` (a saved state names only overlays the guards kept).
    fn overlay(&self, name: &str) -> Result<&crate::patch::Overlay> {
        self.series
            .overlays
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| {
                Error::input(
                    self.series.dir.join(crate::series::SERIES_FILE),
                    None,
                    format!("{name}: overlay vanished from the series"),
                )
            })
    }

    /// The overlays drift's classification stops at for review (bump and drift share it), and
    /// upstream's renames.
    fn guidance(&self, report: &drift::Report) -> Result<Guidance> {
        let review: BTreeMap<String, Vec<String>> = report
            .overlays
            .iter()
            .filter(|o| o.drift.status == drift::Status::Review)
            .map(|o| (o.drift.name.clone(), o.drift.review.clone()))
            .collect();
        Ok(Guidance {
            review,
            renames: drift::upstream_renames(
                self.repo.repo(),
                self.from,
                self.to,
                &drift::relevant_paths(self.series),
            )?,
            trailers: BTreeMap::new(),
            pins: Some((short9(self.from), short9(self.to))),
        })
    }

    /// The progress a stop saves for `--continue`: the overlays carried before the stop, the one
    /// being resolved, and the guards from the start.
    pub fn stop_state(&self, opts: &Options, outcome: &bump::Outcome) -> SessionState {
        SessionState {
            upstream: self.upstream.name.clone(),
            from: self.upstream.rev.clone(),
            to: self.to.to_string(),
            drop_upstreamed: opts.drop_upstreamed,
            // An upstreamed overlay not retired is merged again next time: it is not carried
            // (saved as dropped, it would be deleted without --drop-upstreamed).
            carried: outcome
                .overlays
                .iter()
                .take_while(|o| !matches!(o.action, Action::Conflict | Action::Review))
                .filter(|o| o.action != Action::Upstreamed)
                .map(|o| Carried {
                    name: o.name.clone(),
                    text: o.raw.clone(),
                })
                .collect(),
            resolving: resolving(outcome).to_string(),
            guards: self.start_guards(),
            tree: Some(self.session.tree_for_state()),
        }
    }
}

/// The overlays a stop carried, as `bump::bump_guided` takes them. A dropped one in a bump that
/// never had `--drop-upstreamed` is what an earlier build saved for an upstreamed overlay it did
/// not retire: it is merged again (and so stops the bump for `--drop-upstreamed`).
fn carried_pairs(s: &SessionState) -> Vec<(String, Option<String>)> {
    s.done_pairs()
        .into_iter()
        .filter(|(_, text)| s.drop_upstreamed || text.is_some())
        .collect()
}

/// The overlay a stop is at (the first conflict or review), or "" when the bump did not stop.
pub fn resolving(outcome: &bump::Outcome) -> &str {
    outcome
        .overlays
        .iter()
        .find(|o| matches!(o.action, Action::Conflict | Action::Review))
        .map(|o| o.name.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with two commits, `a` then `b` (b a child of a).
    fn two_commits() -> (tempfile::TempDir, git2::Repository, git2::Oid, git2::Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let a = repo.commit(None, &sig, &sig, "a", &tree, &[]).unwrap();
        let parent = repo.find_commit(a).unwrap();
        let b = repo
            .commit(None, &sig, &sig, "b", &tree, &[&parent])
            .unwrap();
        drop((tree, parent));
        (dir, repo, a, b)
    }

    /// Moving the pin backwards is the typed `Downgrade` refusal (about no one file: its message
    /// starts with the refusal), with the `git log` help; allowed, it says what it reverts; a
    /// forward move reverts nothing.
    #[test]
    fn downgrade_is_refused_unless_allowed() {
        let (_dir, repo, a, b) = two_commits();
        let e = refuse_downgrade(&repo, b, a, false).unwrap_err();
        assert!(
            matches!(e.refusal(), Some(Refusal::Downgrade { reverts }) if reverts.contains("is an ancestor of the pin")),
            "{e}"
        );
        assert!(e.location().is_none());
        let (sa, sb) = (short_id(a), short_id(b));
        assert_eq!(
            e.to_string(),
            format!(
                "refusing to move the pin backwards: {sa} is an ancestor of the pin {sb}: the bump reverts 1 upstream commit(s) ({sa}..{sb}); nothing was written\n  help: `git log {sa}..{sb}` in the upstream lists them; pass --allow-downgrade if reverting them is what you want"
            )
        );
        let allowed = refuse_downgrade(&repo, b, a, true).unwrap();
        assert!(allowed.is_some_and(|w| w.contains("reverts 1 upstream commit")));
        assert_eq!(refuse_downgrade(&repo, a, b, false).unwrap(), None);
        assert_eq!(refuse_downgrade(&repo, a, a, false).unwrap(), None);
    }

    /// A new bump while one is in progress, `--continue`/`--abort` with none, and a `--continue`
    /// to another target are typed refusals with the messages users saw before.
    #[test]
    fn admission_refusals_are_typed() {
        let session = Session::for_project(std::path::Path::new(""), "up", None);
        let state = SessionState {
            upstream: "up".into(),
            from: "a".repeat(40),
            to: "b".repeat(40),
            drop_upstreamed: false,
            carried: vec![],
            resolving: "0001-x.patch".into(),
            guards: BTreeMap::new(),
            tree: None,
        };
        let ways = || ("xt --continue".to_string(), "xt --abort".to_string());
        let e = admit(&session, Some(&state), false, false, ways).unwrap_err();
        assert!(matches!(e.refusal(), Some(Refusal::BumpInProgress(_))));
        assert_eq!(
            e.to_string(),
            "a bump to bbbbbbbbbbbb is in progress in target/bump/up (resolving 0001-x.patch): finish it with `xt --continue`, or abandon it with `xt --abort`"
        );
        admit(&session, Some(&state), true, false, ways).unwrap();
        admit(&session, Some(&state), false, true, ways).unwrap();
        admit(&session, None, false, false, ways).unwrap();
        for (cont, abort, msg) in [
            (
                true,
                false,
                "no bump in progress in target/bump/up to continue",
            ),
            (false, true, "no bump in progress in target/bump/up"),
        ] {
            let e = admit(&session, None, cont, abort, ways).unwrap_err();
            assert!(matches!(
                e.refusal(),
                Some(Refusal::NoBumpInProgress { .. })
            ));
            assert_eq!(e.to_string(), msg);
        }
        let c = git2::Oid::from_str(&"c".repeat(40)).unwrap();
        let e = check_target(&state, c).unwrap_err();
        assert!(matches!(e.refusal(), Some(Refusal::OtherBumpTarget { .. })));
        assert_eq!(
            e.to_string(),
            "the bump in progress goes to bbbbbbbbbbbb, not cccccccccccc"
        );
        check_target(&state, git2::Oid::from_str(&state.to).unwrap()).unwrap();
    }
}
