//! `diffgit --resolutions` (issue 24): the resolution audit on real conflicts. For every pair whose
//! cherry-pick git itself conflicts on, each conflicted file is resolved four scripted ways from
//! git's own 3-way result (`git merge-file --diff3`: upstream's side, the merge base, the
//! overlay's side of every conflict region):
//! - `take-upstream`: upstream's side (the overlay's change in that region given up);
//! - `take-overlay`: the overlay's side ("ours" at a bump: upstream's change thrown away);
//! - `both`: upstream's side, then the overlay's;
//! - `upstream+redo`: upstream's side, then the lines the overlay's side adds to the base (the
//!   usual by-hand resolution: keep upstream, redo the change).
//!
//! Each resolution is judged twice: by the engine's audit (`overlay::audit`, what `bump-pin
//! --continue` runs), and by line accounting on the three texts alone: a resolution loses upstream
//! work when a non-blank line upstream has and the base lacks is missing from it, or a non-blank
//! line of the base that upstream no longer has anywhere is in it. The two must agree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Context, Result};
use overlay::apply::Text;
use overlay::series::Series;
use overlay::tree::{BlobSource, Content, Entry, MODE_FILE, Tree};

/// How each kind of resolution fared, and every disagreement.
#[derive(Default, serde::Serialize)]
pub(super) struct Counts {
    /// Pairs git conflicts on that were resolved.
    pairs: usize,
    /// Conflicted files resolved (each four ways).
    files: usize,
    /// Conflicted files left out: added or deleted on a side (no three texts to resolve).
    skipped_files: usize,
    kinds: BTreeMap<&'static str, KindCount>,
    disagreements: Vec<String>,
}

#[derive(Default, serde::Serialize)]
struct KindCount {
    audited: usize,
    /// The audit refuses it (lines of upstream lost, or upstream's deletions brought back).
    refused: usize,
    /// Line accounting says it loses upstream work.
    loses: usize,
    agree: usize,
}

const KINDS: [&str; 4] = ["take-upstream", "take-overlay", "both", "upstream+redo"];

/// A stretch of git's 3-way result: lines both sides agree on, or a conflict region.
enum Piece {
    Same(Vec<String>),
    Conflict {
        upstream: Vec<String>,
        base: Vec<String>,
        overlay: Vec<String>,
    },
}

/// Resolves and judges every file git conflicts on when carrying the one overlay of `series`
/// (commit `c`) from `c^` to `d`; nothing when git merges cleanly.
pub(super) fn audit_pair(
    repo: &git2::Repository,
    scratch: &git2::Repository,
    series: &Series,
    (c, d): (git2::Oid, git2::Oid),
    counts: &mut Counts,
) -> Result<()> {
    let base = repo.find_commit(c)?.parent_id(0)?;
    let Some(files) = conflicted_files(scratch, c, d, base)? else {
        return Ok(());
    };
    counts.pairs += 1;
    let list = overlay::drift::relevant_paths(series);
    let from = overlay::drift::subset_tree(repo, base, &list)?;
    let to = overlay::drift::subset_tree(repo, d, &list)?;
    let mut from_after = from.clone();
    from_after.apply_overlay(&series.overlays[0], repo as &dyn BlobSource)?;
    let text = |commit: git2::Oid, f: &str| overlay::reverts::text_at(repo, commit, f);
    for f in files {
        let (Some(b), Some(o), Some(u)) = (text(base, &f)?, text(c, &f)?, text(d, &f)?) else {
            counts.skipped_files += 1;
            continue;
        };
        counts.files += 1;
        let pieces = diff3(&u, &b, &o)?;
        for kind in KINDS {
            let r = resolve(&pieces, kind, u.final_newline);
            let mut post = to.clone();
            post.entries.insert(
                f.clone(),
                Entry {
                    mode: MODE_FILE,
                    content: Content::Bytes(r.render().into_bytes().into()),
                },
            );
            let trees = Trees {
                from: &from,
                from_after: &from_after,
                to: &to,
                post: &post,
            };
            let refused = audit(repo, &trees, &f, (base, d))?;
            let loses = loses_upstream_work(&b, &u, &r);
            let k = counts.kinds.entry(kind).or_default();
            k.audited += 1;
            k.refused += usize::from(!refused.is_empty());
            k.loses += usize::from(loses.is_some());
            if refused.is_empty() == loses.is_none() {
                k.agree += 1;
            } else {
                counts.disagreements.push(format!(
                    "{}:{} {f} {kind}: the audit {}, line accounting {}",
                    &c.to_string()[..10],
                    &d.to_string()[..10],
                    refused
                        .first()
                        .map_or("keeps every line".into(), |l| format!("refuses ({l})")),
                    loses.map_or("finds no loss".into(), |l| format!("finds {l}")),
                ));
            }
        }
    }
    Ok(())
}

/// The files `git merge-tree` (a cherry-pick of `c` onto `d`) leaves conflicted; `None` when it
/// merges cleanly.
fn conflicted_files(
    scratch: &git2::Repository,
    c: git2::Oid,
    d: git2::Oid,
    base: git2::Oid,
) -> Result<Option<Vec<String>>> {
    let out = super::cherry_pick_tree(scratch, c, d, base)?;
    if out.status.code() != Some(1) {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let files = text
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    Ok(Some(files))
}

const MARK: usize = 17;

/// git's 3-way result of one file, as pieces (`git merge-file -p --diff3`, markers of an unusual
/// length so that content does not read as one).
fn diff3(upstream: &Text, base: &Text, overlay: &Text) -> Result<Vec<Piece>> {
    let dir = tempfile::tempdir()?;
    let write = |name: &str, t: &Text| -> Result<String> {
        let p = dir.path().join(name);
        std::fs::write(&p, t.render())?;
        Ok(p.to_string_lossy().into_owned())
    };
    let (u, b, o) = (
        write("upstream", upstream)?,
        write("base", base)?,
        write("overlay", overlay)?,
    );
    // Its exit status is the number of conflicts: read below, not an error.
    let out = xshell::Shell::new()?
        .cmd("git")
        .args([
            "merge-file",
            "-p",
            "--diff3",
            &format!("--marker-size={MARK}"),
        ])
        .args(["-L", "upstream", "-L", "base", "-L", "overlay"])
        .args([&u, &b, &o])
        .ignore_status()
        .output()
        .context("running git merge-file")?;
    anyhow::ensure!(
        out.status.code().is_some_and(|c| c >= 0),
        "git merge-file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(parse_diff3(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_diff3(merged: &str) -> Vec<Piece> {
    let mark = |c: char, label: &str| format!("{}{}", c.to_string().repeat(MARK), label);
    let (open, mid, sep, close) = (
        mark('<', " upstream"),
        mark('|', " base"),
        mark('=', ""),
        mark('>', " overlay"),
    );
    let mut out = Vec::new();
    let mut same = Vec::new();
    let mut side: Option<usize> = None;
    let mut parts: [Vec<String>; 3] = Default::default();
    for line in merged.lines() {
        match side {
            None if line == open => {
                out.push(Piece::Same(std::mem::take(&mut same)));
                side = Some(0);
            }
            None => same.push(line.to_string()),
            Some(0) if line == mid => side = Some(1),
            Some(1) if line == sep => side = Some(2),
            Some(2) if line == close => {
                let [upstream, base, overlay] = std::mem::take(&mut parts);
                out.push(Piece::Conflict {
                    upstream,
                    base,
                    overlay,
                });
                side = None;
            }
            Some(i) => parts[i].push(line.to_string()),
        }
    }
    out.push(Piece::Same(same));
    out
}

/// One scripted resolution of the whole file.
fn resolve(pieces: &[Piece], kind: &str, final_newline: bool) -> Text {
    let mut lines = Vec::new();
    for p in pieces {
        match p {
            Piece::Same(l) => lines.extend(l.iter().cloned()),
            Piece::Conflict {
                upstream,
                base,
                overlay,
            } => match kind {
                "take-upstream" => lines.extend(upstream.iter().cloned()),
                "take-overlay" => lines.extend(overlay.iter().cloned()),
                "both" => lines.extend(upstream.iter().chain(overlay).cloned()),
                _ => {
                    lines.extend(upstream.iter().cloned());
                    lines.extend(overlay.iter().filter(|l| !base.contains(l)).cloned());
                }
            },
        }
    }
    Text {
        lines,
        final_newline,
    }
}

/// Line accounting on the three texts: an upstream line (non-blank, in upstream's text and not in
/// the base's) missing from the resolution, or a base line upstream no longer has anywhere kept
/// in it.
fn loses_upstream_work(base: &Text, upstream: &Text, r: &Text) -> Option<String> {
    let set = |t: &Text| -> BTreeSet<String> {
        t.lines
            .iter()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let (b, u, r) = (set(base), set(upstream), set(r));
    if let Some(l) = u.difference(&b).find(|l| !r.contains(*l)) {
        return Some(format!("upstream's `{l}` dropped"));
    }
    b.difference(&u)
        .find(|l| r.contains(*l))
        .map(|l| format!("`{l}`, which upstream deleted, brought back"))
}

struct Trees<'a> {
    from: &'a Tree,
    from_after: &'a Tree,
    to: &'a Tree,
    post: &'a Tree,
}

/// The engine's audit of the resolution of `file`, as `bump-pin --continue` runs it for a
/// one-overlay series: each loss described.
fn audit(
    repo: &git2::Repository,
    t: &Trees<'_>,
    file: &str,
    (base, pin): (git2::Oid, git2::Oid),
) -> Result<Vec<String>> {
    let paths: BTreeSet<String> = [file.to_string()].into();
    let src = repo as &dyn BlobSource;
    let base_text = |p: &str| -> overlay::Result<Option<Text>> {
        Ok(Some(overlay::check::text_of(t.from, Some(p), src)?))
    };
    let raw = overlay::audit::audit_overlay(
        &overlay::audit::OverlayAudit {
            pin: t.to,
            earlier: &[],
            post: t.post,
            previous: Some((t.from, t.from_after)),
            paths: &paths,
        },
        src,
        &base_text,
    )?;
    let history = overlay::audit::History { repo, base, pin };
    let mut out = Vec::new();
    for (path, raw) in &raw {
        for l in overlay::audit::attribute(Some(&history), path, raw, &Default::default())? {
            out.push(overlay::audit::describe(&l));
        }
    }
    Ok(out)
}

/// The report's lines for the resolutions.
pub(super) fn render(h: &mut String, c: &Counts) {
    let _ = writeln!(
        h,
        "  resolutions: {} conflicting pair(s), {} file(s) resolved four ways ({} left out: added or deleted on a side)",
        c.pairs, c.files, c.skipped_files
    );
    for kind in KINDS {
        let k = c.kinds.get(kind);
        let (n, refused, loses, agree) =
            k.map_or((0, 0, 0, 0), |k| (k.audited, k.refused, k.loses, k.agree));
        let _ = writeln!(
            h,
            "    {kind:<14} audit refuses {refused}/{n}, line accounting loses {loses}/{n}, agree {agree}/{n}"
        );
    }
}

impl Counts {
    pub(super) fn all_agree(&self) -> bool {
        self.disagreements.is_empty()
    }

    pub(super) fn disagreements(&self) -> &[String] {
        &self.disagreements
    }
}
