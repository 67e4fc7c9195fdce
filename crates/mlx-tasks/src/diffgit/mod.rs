//! `cargo xtask diffgit`: the differential test against git on real upstream history.
//!
//! Each first-parent, non-merge commit C of a range becomes a one-overlay project (`git
//! format-patch -1 C`, pinned at C^), carried to a target D. Three answers are compared:
//! - `bump-pin` (the engine's merge) against `git cherry-pick` (`git merge-tree --write-tree
//!   --merge-base=C^ D C`): both conflict, or both give the same files (an empty cherry-pick is
//!   "upstreamed");
//! - `drift` against `bump-pin`: they share one classification, so conflict, upstreamed and review
//!   must coincide;
//! - the control D = C (upstream took the overlay verbatim): drift must say `upstreamed`.
//!
//! Exit 0 when everything agrees, 1 with the disagreements listed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::bump::Action;
use overlay::drift::Status;
use overlay::series::Series;
use overlay::tree::{BlobSource, Content, Tree};

use crate::Global;
use crate::commands::{Ctx, resolve_rev};

mod resolutions;

#[derive(clap::Args)]
pub struct DiffgitArgs {
    /// First-parent commits A..B, each one an overlay pinned at its parent
    #[arg(long, value_name = "A..B")]
    pub range: Option<String>,
    /// Where every overlay of the range is carried [default: B]
    #[arg(long, value_name = "REV")]
    pub to: Option<String>,
    /// Also these (overlay commit, target) pairs, as C:D
    #[arg(long = "pair", value_name = "C:D")]
    pub pairs: Vec<String>,
    /// Take at most N commits of the range, evenly spaced
    #[arg(long, value_name = "N")]
    pub sample: Option<usize>,
    /// Also resolve every file git conflicts on four scripted ways (upstream's side, the
    /// overlay's, both, upstream's plus the overlay's additions) and check that the resolution
    /// audit agrees with line accounting on each
    #[arg(long)]
    pub resolutions: bool,
}

/// What one side said about one pair, in the words of the comparison.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum Verdict {
    Conflict,
    Upstreamed,
    /// The resulting blob ids of the paths involved.
    Files(BTreeMap<String, Option<String>>),
}

#[derive(Default, serde::Serialize)]
struct Counts {
    pairs: usize,
    skipped: usize,
    bump_agrees_with_git: usize,
    bump_review_stops: usize,
    drift_agrees_with_bump: usize,
    controls: usize,
    control_upstreamed: usize,
    disagreements: Vec<String>,
    /// `--resolutions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    resolutions: Option<resolutions::Counts>,
}

pub fn run(g: &Global, a: &DiffgitArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, overlay::lock::Mode::Shared, "diffgit")?;
    let repo = ctx.open_upstream()?;
    let git_dir = repo.repo().path().to_path_buf();
    let scratch = tempfile::tempdir().context("a scratch folder")?;
    let scratch_git = scratch.path().join("scratch.git");
    git(
        scratch.path(),
        &["init", "-q", "--bare", path_str(&scratch_git)],
    )?;
    std::fs::write(
        scratch_git.join("objects/info/alternates"),
        format!("{}\n", git_dir.join("objects").display()),
    )?;
    let scratch_repo = git2::Repository::open(&scratch_git)?;
    let mut pairs: Vec<(git2::Oid, git2::Oid)> = Vec::new();
    if let Some(range) = &a.range {
        let Some((from, to)) = range.split_once("..") else {
            bail!("--range {range}: expected A..B");
        };
        let end = resolve_rev(&ctx, &repo, to)?;
        let start = resolve_rev(&ctx, &repo, from)?;
        let target = match &a.to {
            Some(t) => resolve_rev(&ctx, &repo, t)?,
            None => end,
        };
        let list = git(
            &git_dir,
            &[
                "rev-list",
                "--first-parent",
                "--no-merges",
                "--reverse",
                &format!("{start}..{end}"),
            ],
        )?;
        let mut commits: Vec<git2::Oid> = list
            .lines()
            .map(git2::Oid::from_str)
            .collect::<Result<_, _>>()?;
        if let Some(n) = a.sample.filter(|&n| n > 0 && n < commits.len()) {
            let step = commits.len() as f64 / n as f64;
            commits = (0..n)
                .map(|i| commits[(i as f64 * step) as usize])
                .collect();
        }
        pairs.extend(commits.into_iter().map(|c| (c, target)));
    }
    for p in &a.pairs {
        let Some((c, d)) = p.split_once(':') else {
            bail!("--pair {p}: expected C:D (overlay commit, target)");
        };
        pairs.push((resolve_rev(&ctx, &repo, c)?, resolve_rev(&ctx, &repo, d)?));
    }
    if pairs.is_empty() {
        bail!("nothing to compare: give --range A..B and/or --pair C:D");
    }
    let mut counts = Counts {
        resolutions: a.resolutions.then(resolutions::Counts::default),
        ..Counts::default()
    };
    let mut controls_done = BTreeSet::new();
    for (i, (c, d)) in pairs.iter().enumerate() {
        if !ctx.json && i % 25 == 0 && i > 0 {
            eprintln!("diffgit: {i}/{} pairs", pairs.len());
        }
        let Some(ov_raw) = overlay_text(&git_dir, *c)? else {
            counts.skipped += 1;
            continue;
        };
        let series = match one_overlay_series(*c, &ov_raw) {
            Ok(s) => s,
            Err(_) => {
                // Binary or otherwise refused patches (docs/overlay-format.md): not comparable.
                counts.skipped += 1;
                continue;
            }
        };
        compare_pair(repo.repo(), &scratch_repo, &series, *c, *d, &mut counts)?;
        if let Some(r) = &mut counts.resolutions {
            resolutions::audit_pair(repo.repo(), &scratch_repo, &series, (*c, *d), r)?;
        }
        if controls_done.insert(*c) {
            control(repo.repo(), &series, *c, &mut counts)?;
        }
    }
    report(&ctx, &counts)
}

fn report(ctx: &Ctx, counts: &Counts) -> Result<ExitCode> {
    let n = counts.pairs;
    let mut h = String::new();
    let c = counts;
    let _ = writeln!(
        h,
        "diffgit: {n} (overlay, target) pair(s) compared, {} skipped (merges, binary patches)\n\
         \x20 bump-pin agrees with git cherry-pick: {}/{n} ({} of them stop for review)\n\
         \x20 drift agrees with bump-pin:           {}/{n}\n\
         \x20 control (target = the commit itself) drift says upstreamed: {}/{}",
        c.skipped,
        c.bump_agrees_with_git,
        c.bump_review_stops,
        c.drift_agrees_with_bump,
        c.control_upstreamed,
        c.controls
    );
    if let Some(r) = &counts.resolutions {
        resolutions::render(&mut h, r);
    }
    let resolved = counts.resolutions.iter().flat_map(|r| r.disagreements());
    for d in counts.disagreements.iter().chain(resolved) {
        let _ = writeln!(h, "  DISAGREE {d}");
    }
    if ctx.json {
        println!(
            "{}",
            crate::commands::versioned(serde_json::json!({ "diffgit": counts }))
        );
    } else {
        print!("{h}");
    }
    let all = counts.bump_agrees_with_git == n
        && counts.drift_agrees_with_bump == n
        && counts.control_upstreamed == counts.controls
        && counts.resolutions.as_ref().is_none_or(|r| r.all_agree());
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    crate::commands::git_output(dir, args)
}

/// `git format-patch -1 C` with the trailer every overlay carries; None for a merge.
fn overlay_text(git_dir: &Path, c: git2::Oid) -> Result<Option<String>> {
    let raw = git(git_dir, &["format-patch", "-1", "--stdout", &c.to_string()])?;
    let Some(at) = raw.find("\n---\n") else {
        return Ok(None);
    };
    Ok(Some(format!(
        "{}\n\nOverlay-Kind: upstreamable{}",
        &raw[..at],
        &raw[at..]
    )))
}

fn one_overlay_series(c: git2::Oid, raw: &str) -> Result<Series> {
    let name = format!("0001-{}.patch", &c.to_string()[..12]);
    let dir = std::path::PathBuf::from("overlays/diffgit");
    let ov = overlay::patch::parse_overlay(&name, &dir.join(&name), raw)?;
    Ok(Series {
        dir,
        raw: format!("{name}\n"),
        overlays: vec![ov],
    })
}

fn parent(repo: &git2::Repository, c: git2::Oid) -> Result<git2::Oid> {
    Ok(repo.find_commit(c)?.parent_id(0)?)
}

/// The blob ids a tree holds at `paths`.
fn files_of(tree: &Tree, paths: &BTreeSet<String>) -> BTreeMap<String, Option<String>> {
    paths
        .iter()
        .map(|p| {
            let id = tree.entries.get(p).map(|e| match &e.content {
                Content::Blob(id) => id.to_string(),
                Content::Bytes(b) => overlay::tree::blob_id(b).to_string(),
            });
            (p.clone(), id)
        })
        .collect()
}

fn git_tree_files(
    repo: &git2::Repository,
    tree: git2::Oid,
    paths: &BTreeSet<String>,
) -> Result<BTreeMap<String, Option<String>>> {
    let t = repo.find_tree(tree)?;
    Ok(paths
        .iter()
        .map(|p| {
            let id = t
                .get_path(Path::new(p))
                .ok()
                .filter(|e| e.kind() == Some(git2::ObjectType::Blob))
                .map(|e| e.id().to_string());
            (p.clone(), id)
        })
        .collect())
}

/// `git merge-tree --write-tree --name-only` of C onto D with C's parent as the base: a
/// cherry-pick without a work tree (exit 1: conflicts, whose files follow the tree's line).
fn cherry_pick_tree(
    scratch: &git2::Repository,
    c: git2::Oid,
    d: git2::Oid,
    base: git2::Oid,
) -> Result<std::process::Output> {
    // Exit 1 is a conflict, an answer like a clean merge: the caller reads the status.
    xshell::Shell::new()?
        .cmd("git")
        .arg("--git-dir")
        .arg(scratch.path())
        .args(["merge-tree", "--write-tree", "--name-only"])
        .arg(format!("--merge-base={base}"))
        .arg(d.to_string())
        .arg(c.to_string())
        .ignore_status()
        .output()
        .context("running git merge-tree")
}

/// git's answer: cherry-pick C onto D, through `git merge-tree` (no work tree needed).
fn git_verdict(
    scratch: &git2::Repository,
    c: git2::Oid,
    d: git2::Oid,
    base: git2::Oid,
    paths: &BTreeSet<String>,
) -> Result<Verdict> {
    let out = cherry_pick_tree(scratch, c, d, base)?;
    match out.status.code() {
        Some(1) => return Ok(Verdict::Conflict),
        Some(0) => {}
        _ => bail!(
            "git merge-tree {c} onto {d}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
    let first = String::from_utf8_lossy(&out.stdout);
    let tree = git2::Oid::from_str(first.lines().next().unwrap_or_default())?;
    if tree == scratch.find_commit(d)?.tree_id() {
        return Ok(Verdict::Upstreamed);
    }
    Ok(Verdict::Files(git_tree_files(scratch, tree, paths)?))
}

fn compare_pair(
    repo: &git2::Repository,
    scratch: &git2::Repository,
    series: &Series,
    c: git2::Oid,
    d: git2::Oid,
    counts: &mut Counts,
) -> Result<()> {
    let base = parent(repo, c)?;
    let relevant = overlay::drift::relevant_paths(series);
    let renames = overlay::drift::upstream_renames(repo, base, d, &relevant)?;
    let paths: BTreeSet<String> = relevant
        .into_iter()
        .chain(renames.values().cloned())
        .collect();
    let list: Vec<String> = paths.iter().cloned().collect();
    let from = overlay::drift::subset_tree(repo, base, &list)?;
    let to = overlay::drift::subset_tree(repo, d, &list)?;
    let mut caches = overlay::drift::Caches::default();
    let drift = overlay::drift::classify(&from, &to, series, repo, &mut caches, &renames)?;
    let status = drift[0].status;
    let review: BTreeMap<String, Vec<String>> = drift
        .iter()
        .filter(|o| o.status == Status::Review)
        .map(|o| (o.name.clone(), o.review.clone()))
        .collect();
    let guidance = overlay::bump::Guidance {
        review,
        renames,
        ..Default::default()
    };
    let opts = overlay::bump::Options {
        drop_upstreamed: false,
        done: &[],
        resolved: None,
        labels: overlay::bump::resume::LABELS,
    };
    let out = overlay::bump::bump_guided(&from, &to, series, repo, &opts, &guidance)?;
    let action = out.overlays[0].action.clone();
    let ours = match (&action, &out.conflict_tree) {
        (Action::Conflict, _) => Verdict::Conflict,
        (Action::Upstreamed, _) => Verdict::Upstreamed,
        (Action::Review, Some(t)) => Verdict::Files(files_of(t, &paths)),
        _ => {
            let raw = out.overlays[0].raw.as_deref().unwrap_or_default();
            let ov = overlay::patch::parse_overlay(&series.overlays[0].name, Path::new("x"), raw)?;
            let mut t = to.clone();
            t.apply_overlay(&ov, repo as &dyn BlobSource)?;
            Verdict::Files(files_of(&t, &paths))
        }
    };
    let theirs = git_verdict(scratch, c, d, base, &paths)?;
    counts.pairs += 1;
    let pair = format!("{}:{}", &c.to_string()[..10], &d.to_string()[..10]);
    if ours == theirs {
        counts.bump_agrees_with_git += 1;
    } else {
        counts.disagreements.push(format!(
            "{pair}: bump-pin {} ({action:?}), git cherry-pick {}",
            verdict_word(&ours),
            verdict_word(&theirs)
        ));
    }
    if action == Action::Review {
        counts.bump_review_stops += 1;
    }
    let agree = (status == Status::Conflict) == (action == Action::Conflict)
        && (status == Status::Upstreamed) == (action == Action::Upstreamed)
        && (status == Status::Review) == (action == Action::Review);
    if agree {
        counts.drift_agrees_with_bump += 1;
    } else {
        counts.disagreements.push(format!(
            "{pair}: drift says {}, bump-pin {action:?}",
            status.as_str()
        ));
    }
    Ok(())
}

fn verdict_word(v: &Verdict) -> &'static str {
    match v {
        Verdict::Conflict => "conflicts",
        Verdict::Upstreamed => "finds it upstream",
        Verdict::Files(_) => "merges",
    }
}

/// The control: pinned at C^, carried to C itself, every overlay is upstream.
fn control(
    repo: &git2::Repository,
    series: &Series,
    c: git2::Oid,
    counts: &mut Counts,
) -> Result<()> {
    let list = overlay::drift::relevant_paths(series);
    let from = overlay::drift::subset_tree(repo, parent(repo, c)?, &list)?;
    let to = overlay::drift::subset_tree(repo, c, &list)?;
    let mut caches = overlay::drift::Caches::default();
    let renames = overlay::drift::upstream_renames(repo, parent(repo, c)?, c, &list)?;
    let d = overlay::drift::classify(&from, &to, series, repo, &mut caches, &renames)?;
    counts.controls += 1;
    if d[0].status == Status::Upstreamed {
        counts.control_upstreamed += 1;
    } else {
        counts.disagreements.push(format!(
            "control {}: drift says {} where upstream has the overlay verbatim",
            &c.to_string()[..10],
            d[0].status.as_str()
        ));
    }
    Ok(())
}
