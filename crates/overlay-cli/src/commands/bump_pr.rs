//! `bump-pr`: bump the pin on a new branch of the fork, to upstream's head or, when that bump
//! stops (a conflict, a review), to the newest commit where it is clean (drift's per-commit blame
//! says where), commit it, and write a pull request's body (`target/bump-pr/PR.md`). When even the
//! next upstream commit stops the bump, nothing is bumped: the forecast goes to
//! `target/bump-pr/ISSUE.md` and the exit code is 1. The checkout is left as it was found: a dirty
//! tree is refused before anything, and a failure puts the original branch back.

use crate::error::HintedError;
use overlay::help::{Help, NextStep};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::drift::{Report, Status};
use overlay::lock::Mode as LockMode;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct BumpPrArgs {
    /// The upstream commit-ish to bump to [default: the head of the upstream branch in pins.toml]
    #[arg(long, value_name = "REV")]
    pub to: Option<String>,
    /// The branch to commit the bump on [default: bump/<12 hex of the new pin>]; it must not exist
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
}

/// What the forecast decided.
struct Plan {
    upstream: String,
    pin: git2::Oid,
    /// The target asked for (upstream's head by default).
    head: git2::Oid,
    /// The newest commit up to `head` where the bump is clean (`pin`: none after it is).
    target: git2::Oid,
    /// Drift from the pin to `head`, blamed per commit.
    at_head: Report,
    /// Drift from the pin to `target`, blamed per commit.
    at_target: Report,
    /// Each overlay's kind and `Upstream-Status:`.
    statuses: Vec<(String, String, String)>,
}

/// The fork's checkout as it was found.
struct Checkout {
    /// The git work tree's top folder.
    top: PathBuf,
    /// The branch HEAD was on, or HEAD's commit when detached.
    original: String,
    /// HEAD's commit.
    head: String,
}

pub fn bump_pr(g: &Global, a: &BumpPrArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "bump-pr")?;
    let checkout = clean_checkout(&ctx.project.root)?;
    refuse_bump_in_progress(&ctx)?;
    let plan = forecast(&ctx, a)?;
    let dir = ctx.project.root.join("target").join("bump-pr");
    if plan.head == plan.pin {
        return up_to_date(&ctx, &plan);
    }
    if plan.target == plan.pin {
        let path = write_body(&dir, "ISSUE.md", &issue_body(g, &plan))?;
        return report(&ctx, &plan, None, &path, ExitCode::from(1));
    }
    let branch = a
        .branch
        .clone()
        .unwrap_or_else(|| format!("bump/{}", short(&plan.target.to_string())));
    refuse_existing_branch(&checkout, &branch)?;
    ctx.unlock();
    let commit = bump_on_branch(g, &ctx, &checkout, &plan, &branch)?;
    let inter = overlay::interdiff::run(&overlay::interdiff::Options {
        root: ctx.project.root.clone(),
        upstream: Some(plan.upstream.clone()),
        from: Some(checkout.head.clone()),
        to: Some(commit.clone()),
    })?;
    let body = pr_body(g, &plan, &branch, &inter);
    let path = write_body(&dir, "PR.md", &body)?;
    report(
        &ctx,
        &plan,
        Some((&branch, &commit)),
        &path,
        ExitCode::SUCCESS,
    )
}

/// The checkout, refused when it holds uncommitted changes (bump-pr would carry them along).
fn clean_checkout(root: &Path) -> Result<Checkout> {
    let top = git_output(root, &["rev-parse", "--show-toplevel"])
        .map_err(|e| {
            HintedError::error(
                format!("{}: not in a git work tree ({e:#}); nothing was changed", root.display()),
                "bump-pr commits the bump on a branch of the fork's git repository: run it in the fork's checkout",
            )
        })?;
    let top = PathBuf::from(top.trim());
    let dirty = git_output(&top, &["status", "--porcelain", "--untracked-files=all"])?;
    if let Some(first) = dirty.lines().next() {
        return Err(HintedError::error(
            format!(
                "{}: the working tree has uncommitted changes ({} path(s), first `{}`); nothing was changed",
                top.display(),
                dirty.lines().count(),
                first.trim()
            ),
            "bump-pr commits on a new branch and would carry them along: commit or stash them (`git stash -u`), then run it again",
        ));
    }
    let head = git_output(&top, &["rev-parse", "HEAD"])?.trim().to_string();
    let original = git_output(&top, &["symbolic-ref", "-q", "--short", "HEAD"])
        .map(|b| b.trim().to_string())
        .unwrap_or_else(|_| head.clone());
    Ok(Checkout {
        top,
        original,
        head,
    })
}

fn refuse_bump_in_progress(ctx: &Ctx) -> Result<()> {
    let up = &ctx.upstream().name;
    let session = overlay::bump::session::Session::for_project(&ctx.project.root, up, None);
    if session.read_state()?.is_some() {
        return Err(HintedError::error(
            format!("a bump of {up} is in progress; nothing was changed"),
            Help::new("finish it (")
                .step(NextStep::new("bump-pin", ["--continue"]))
                .text(") or abandon it (")
                .step(NextStep::new("bump-pin", ["--abort"]))
                .text(") first"),
        ));
    }
    Ok(())
}

fn refuse_existing_branch(c: &Checkout, branch: &str) -> Result<()> {
    if git_output(&c.top, &["check-ref-format", "--branch", branch]).is_err() {
        bail!("--branch {branch:?}: not a valid branch name; nothing was changed");
    }
    let r = format!("refs/heads/{branch}");
    if git_output(&c.top, &["rev-parse", "--verify", "-q", &r]).is_ok() {
        return Err(HintedError::error(
            format!("branch {branch} already exists; nothing was changed"),
            format!("delete it (`git branch -D {branch}`) or pass --branch NAME"),
        ));
    }
    Ok(())
}

/// Drift to the target, then back from the first commit that stops the bump until it is clean.
fn forecast(ctx: &Ctx, a: &BumpPrArgs) -> Result<Plan> {
    let up = ctx.upstream().clone();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let head = match &a.to {
        Some(rev) => resolve_rev(ctx, &repo, rev)?,
        None => branch_head(ctx, &repo)?,
    };
    let repo = ctx.open_upstream()?;
    let pin = git2::Oid::from_str(&up.rev)?;
    let line = first_parents(repo.repo(), pin, head)?;
    let drift = |to| {
        let opts = overlay::drift::Options {
            upstream: &up.name,
            from: pin,
            to,
            per_commit: true,
        };
        overlay::drift::drift(repo.repo(), &repo, &series, &opts)
    };
    let at_head = drift(head)?;
    let (mut target, mut at_target) = (head, at_head.clone());
    while target != pin {
        let Some(stop) = first_stop(&at_target, &line) else {
            break;
        };
        target = line.get(stop + 1).copied().unwrap_or(pin);
        at_target = drift(target)?;
    }
    let statuses = upstream_statuses_of(&series);
    Ok(Plan {
        upstream: up.name,
        pin,
        head,
        target,
        at_head,
        at_target,
        statuses,
    })
}

/// Each overlay's name, kind and `Upstream-Status:` (`-` when it has none).
fn upstream_statuses_of(series: &overlay::series::Series) -> Vec<(String, String, String)> {
    series
        .overlays
        .iter()
        .map(|o| {
            let status = o
                .trailers
                .status
                .as_ref()
                .map_or("-".into(), |s| s.to_string());
            (o.name.clone(), o.trailers.kind.as_str().to_string(), status)
        })
        .collect()
}

/// The first-parent commits from `head` down to the pin (newest first, the pin last).
fn first_parents(
    repo: &git2::Repository,
    pin: git2::Oid,
    head: git2::Oid,
) -> Result<Vec<git2::Oid>> {
    let mut line = vec![head];
    let mut c = repo.find_commit(head)?;
    while c.id() != pin {
        c = match c.parent(0) {
            Ok(p) => p,
            Err(_) => {
                return Err(HintedError::error(
                    format!(
                        "{}: the pin {} is not on its first-parent history; nothing was changed",
                        short(&head.to_string()),
                        short(&pin.to_string())
                    ),
                    "bump-pr only moves the pin forward: pass --to a descendant of the pin",
                ));
            }
        };
        line.push(c.id());
    }
    Ok(line)
}

/// Whether a bump stops at the overlay (a conflict, a review, after a conflict). An upstreamed
/// overlay does not stop it: bump-pr retires it (`--drop-upstreamed`).
fn stops(s: Status) -> bool {
    matches!(s, Status::Conflict | Status::Review | Status::Blocked)
}

/// The index in `line` of the oldest commit that stops the bump (an overlay's blame), or of the
/// target itself when a stopping overlay has no blame.
fn first_stop(r: &Report, line: &[git2::Oid]) -> Option<usize> {
    let stopping: Vec<_> = r
        .overlays
        .iter()
        .filter(|o| stops(o.drift.status))
        .collect();
    if stopping.is_empty() {
        return None;
    }
    let at = |sha: &str| line.iter().position(|c| c.to_string() == sha);
    let target = line.iter().position(|c| c.to_string() == r.to).unwrap_or(0);
    stopping
        .iter()
        .map(|o| o.blame.as_ref().and_then(|b| at(&b.sha)).unwrap_or(target))
        .max()
}

/// Creates the branch, runs `bump-pin` there and commits; on any failure the original branch is
/// checked out again and the new one deleted. Returns the commit.
fn bump_on_branch(
    g: &Global,
    ctx: &Ctx,
    c: &Checkout,
    plan: &Plan,
    branch: &str,
) -> Result<String> {
    git_output(&c.top, &["checkout", "-q", "-b", branch])?;
    let done = bump_and_commit(g, ctx, c, plan);
    let back = restore(g, c, branch, done.is_err());
    let commit = done?;
    back?;
    Ok(commit)
}

fn bump_and_commit(g: &Global, ctx: &Ctx, c: &Checkout, plan: &Plan) -> Result<String> {
    let target = plan.target.to_string();
    run_self(g, &["bump-pin", &target, "--drop-upstreamed"])?;
    let up = ctx.upstream();
    let root = &ctx.project.root;
    let overlays = up.overlays.to_string_lossy().to_string();
    git_output(
        root,
        &["add", "-A", "--", overlay::manifest::PINS_FILE, &overlays],
    )?;
    let msg = format!(
        "Bump {} to {} (bump-pr)\n\nFrom {} to {}; upstream's head is {}.",
        plan.upstream,
        short(&target),
        plan.pin,
        target,
        plan.head
    );
    git_output(root, &["commit", "-q", "-m", &msg])?;
    Ok(git_output(&c.top, &["rev-parse", "HEAD"])?
        .trim()
        .to_string())
}

/// Back to the original branch. After a failure: the bump abandoned, the files reset to the
/// commit the branch started from, and the branch deleted.
fn restore(g: &Global, c: &Checkout, branch: &str, failed: bool) -> Result<()> {
    if failed {
        let _ = run_self(g, &["bump-pin", "--abort"]);
        git_output(&c.top, &["reset", "-q", "--hard", &c.head])?;
    }
    git_output(&c.top, &["checkout", "-q", &c.original])?;
    if failed {
        git_output(&c.top, &["branch", "-q", "-D", branch])?;
    }
    Ok(())
}

/// This program again (the same CLI, a fork's own xtask included) with this run's globals.
fn run_self(g: &Global, args: &[&str]) -> Result<()> {
    let exe = std::env::current_exe().context("finding this program to run bump-pin")?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(r) = &g.root {
        cmd.arg("--root").arg(r);
    }
    if let Some(u) = &g.upstream {
        cmd.args(["--upstream", u]);
    }
    let out = cmd.args(args).output().context("running bump-pin")?;
    if !out.status.success() {
        bail!(
            "`{}` did not finish (exit {}); the original branch is checked out again and nothing was kept\n{}{}",
            args.join(" "),
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Writes `name` (PR.md or ISSUE.md) atomically, removing the other one a previous run left.
fn write_body(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    overlay::fsx::create_dir_all(dir)?;
    for old in ["PR.md", "ISSUE.md"] {
        if dir.join(old).exists() {
            overlay::fsx::remove_file(&dir.join(old))?;
        }
    }
    let path = dir.join(name);
    overlay::fsx::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

fn report(
    ctx: &Ctx,
    plan: &Plan,
    bumped: Option<(&str, &str)>,
    path: &Path,
    code: ExitCode,
) -> Result<ExitCode> {
    let value = serde_json::json!({
        "upstream": plan.upstream,
        "from": plan.pin.to_string(),
        "head": plan.head.to_string(),
        "to": plan.target.to_string(),
        "branch": bumped.map(|b| b.0),
        "commit": bumped.map(|b| b.1),
        "body": path.to_string_lossy(),
        "conflicts_beyond": beyond(plan).iter().map(|o| o.drift.name.clone()).collect::<Vec<_>>(),
    });
    let human = match bumped {
        Some((branch, commit)) => format!(
            "bump-pr: {} {} -> {} committed on {branch} ({}); upstream's head is {}\n{}\n",
            plan.upstream,
            short(&plan.pin.to_string()),
            short(&plan.target.to_string()),
            short(commit),
            short(&plan.head.to_string()),
            path.display()
        ),
        None => format!(
            "bump-pr: {} cannot move: the next upstream commit already stops the bump; nothing was bumped, the forecast is in\n{}\n",
            plan.upstream,
            path.display()
        ),
    };
    emit(ctx.json, value, human);
    Ok(code)
}

/// Already pinned at the target: nothing to bump, nothing written.
fn up_to_date(ctx: &Ctx, plan: &Plan) -> Result<ExitCode> {
    let pin = plan.pin.to_string();
    emit(
        ctx.json,
        serde_json::json!({ "upstream": plan.upstream, "from": pin, "head": pin, "to": pin, "branch": null, "commit": null, "body": null, "conflicts_beyond": [] }),
        format!(
            "bump-pr: {} is already pinned at {}; nothing to do\n",
            plan.upstream,
            short(&pin)
        ),
    );
    Ok(ExitCode::SUCCESS)
}

/// The overlays the bump to upstream's head stops at (beyond the chosen commit).
fn beyond(plan: &Plan) -> Vec<&overlay::drift::ReportOverlay> {
    plan.at_head
        .overlays
        .iter()
        .filter(|o| stops(o.drift.status))
        .collect()
}

fn pr_body(g: &Global, plan: &Plan, branch: &str, inter: &overlay::interdiff::Outcome) -> String {
    let (pin, to, head) = (
        plan.pin.to_string(),
        plan.target.to_string(),
        plan.head.to_string(),
    );
    let mut m = format!("## Bump {} to `{}`\n\n", plan.upstream, short(&to));
    let _ = writeln!(
        m,
        "From `{}` to `{}`, on branch `{branch}` (written by `cargo xtask bump-pr`).",
        short(&pin),
        short(&to)
    );
    if plan.target != plan.head {
        let _ = writeln!(
            m,
            "Upstream's head is `{}`; the bump stops at `{}`, the newest commit where it is clean: the commits after it stop it (below).",
            short(&head),
            short(&to)
        );
    }
    m.push('\n');
    m.push_str(&markdown_drift(&plan.at_target));
    m.push_str(&markdown_interdiff(inter));
    m.push_str(&conflicts_beyond(plan));
    m.push_str(&upstream_statuses(plan));
    m.push_str(&finish_by_hand(g, plan, Some(branch)));
    m
}

fn issue_body(g: &Global, plan: &Plan) -> String {
    let mut m = format!(
        "## {} cannot move past `{}` without a resolution\n\nThe next upstream commit already stops the bump to upstream's head `{}` (`cargo xtask bump-pr`'s forecast); nothing was bumped.\n\n",
        plan.upstream,
        short(&plan.pin.to_string()),
        short(&plan.head.to_string())
    );
    m.push_str(&markdown_drift(&plan.at_head));
    m.push_str(&conflicts_beyond(plan));
    m.push_str(&upstream_statuses(plan));
    m.push_str(&finish_by_hand(g, plan, None));
    m
}

fn conflicts_beyond(plan: &Plan) -> String {
    let stops = beyond(plan);
    if stops.is_empty() {
        return String::new();
    }
    let mut m = format!(
        "### What stops the bump to `{}`\n\n",
        short(&plan.head.to_string())
    );
    for o in stops {
        let d = &o.drift;
        let _ = write!(m, "- **{}**: {}", d.name, d.status.as_str());
        if let Some(b) = &o.blame {
            let _ = write!(m, " since `{}` {}", short(&b.sha), b.subject);
        }
        if let Some(by) = &d.blocked_by {
            let _ = write!(m, " (blocked by {by})");
        }
        for c in &d.conflicts {
            let _ = write!(m, "; conflicts in `{c}`");
        }
        for r in &d.review {
            let _ = write!(m, "; review: {r}");
        }
        m.push('\n');
    }
    m.push('\n');
    m
}

fn upstream_statuses(plan: &Plan) -> String {
    let mut m = String::from(
        "### Each overlay's upstream status\n\n| overlay | kind | upstream status |\n|---|---|---|\n",
    );
    for (name, kind, status) in &plan.statuses {
        let _ = writeln!(m, "| {name} | {kind} | {status} |");
    }
    m.push('\n');
    m
}

fn finish_by_hand(g: &Global, plan: &Plan, branch: Option<&str>) -> String {
    let head = plan.head.to_string();
    let mut m = String::from("### Finish by hand\n\n```sh\n");
    if let Some(b) = branch {
        let _ = writeln!(m, "git push origin {b}");
        let _ = writeln!(
            m,
            "gh pr create --head {b} --title 'Bump {} to {}' --body-file target/bump-pr/PR.md",
            plan.upstream,
            short(&plan.target.to_string())
        );
        if plan.target == plan.head {
            m.push_str("```\n");
            return m;
        }
        let _ = writeln!(m, "# then, to go on to upstream's head:\ngit checkout {b}");
    }
    let _ = writeln!(m, "{}", xtask_command(g, &format!("bump-pin {head}")));
    let _ = writeln!(
        m,
        "# resolve each conflict in target/bump/{}, then",
        plan.upstream
    );
    let _ = writeln!(m, "{}", xtask_command(g, "bump-pin --continue"));
    let _ = writeln!(m, "{}", xtask_command(g, "check"));
    let _ = writeln!(
        m,
        "git commit -am 'Bump {} to {}'",
        plan.upstream,
        short(&head)
    );
    m.push_str("```\n");
    m
}
