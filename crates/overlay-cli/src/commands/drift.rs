//! `drift`: classify every overlay against another upstream commit.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use overlay::lock::Mode as LockMode;
use overlay::upstream::UpstreamRepo;

use crate::Global;
use crate::progress::Progress;

use super::*;

#[derive(clap::Args)]
pub struct DriftArgs {
    /// Target commit-ish [default: the head of the upstream branch named in pins.toml]
    #[arg(long, value_name = "REV")]
    pub to: Option<String>,
    /// Starting commit-ish [default: the pin]
    #[arg(long, value_name = "REV")]
    pub from: Option<String>,
    /// Walk first-parent commits and blame the commit where each overlay reached its status
    #[arg(long)]
    pub per_commit: bool,
    /// Also write a Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

/// Resolves a commit-ish in the upstream cache, fetching once if it is unknown
/// (`overlay::revs::resolve_rev`, with a progress bar).
pub fn resolve_rev(ctx: &Ctx, repo: &UpstreamRepo, rev: &str) -> Result<git2::Oid> {
    Ok(overlay::revs::resolve_rev(repo, rev, &mut || {
        refetch(ctx, repo)
    })?)
}

/// The upstream branch head after a fetch: what `drift` and the CI canary compare against.
pub fn branch_head(ctx: &Ctx, repo: &UpstreamRepo) -> Result<git2::Oid> {
    Ok(overlay::revs::branch_head(ctx.upstream(), &mut || {
        refetch(ctx, repo)
    })?)
}

/// Fetches the upstream (with a progress bar) and opens a fresh handle that sees what it brought.
fn refetch(ctx: &Ctx, repo: &UpstreamRepo) -> overlay::Result<UpstreamRepo> {
    let up = ctx.upstream();
    let mut bar = Progress::new(&format!("fetching {}", up.name));
    repo.fetch(&up.url, &mut |p| bar.fetch(p))?;
    bar.finish();
    // A fresh handle sees what the fetch brought (what `Ctx::open_upstream` does).
    let mut bar = Progress::new(&format!("fetching {}", up.name));
    let fresh =
        ctx.project
            .open_upstream(up, &overlay::upstream::default_cache_root(), &mut |p| {
                bar.fetch(p)
            })?;
    bar.finish();
    Ok(fresh)
}

fn paint(s: &str, status: overlay::drift::Status) -> String {
    let code = match status {
        overlay::drift::Status::Clean => "32",
        overlay::drift::Status::Moved => "36",
        overlay::drift::Status::ContextDrift => "33",
        overlay::drift::Status::Review => "33;1",
        overlay::drift::Status::Upstreamed => "35",
        overlay::drift::Status::Blocked => "90",
        overlay::drift::Status::Conflict => "31",
    };
    colour(s, code)
}

pub fn render_drift(r: &overlay::drift::Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "drift: {} {} -> {}",
        r.upstream,
        short(&r.from),
        short(&r.to)
    );
    if let (Some(c), Some(e)) = (r.commits, r.evaluated) {
        let _ = write!(
            h,
            " ({c} first-parent commit(s) walked; {e} of them changed a file the overlays touch or depend on, and only those were checked)"
        );
    }
    h.push('\n');
    for o in &r.overlays {
        render_overlay(&mut h, o);
    }
    let mut counts = std::collections::BTreeMap::new();
    for o in &r.overlays {
        *counts.entry(o.drift.status.as_str()).or_insert(0) += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(
        h,
        "{} overlay(s){}{}",
        r.overlays.len(),
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    );
    h
}

/// One overlay of the report: its status and blame, what blocks it and its forecast, conflicts,
/// review notes, watched symbols upstream changed, and its hunks.
fn render_overlay(h: &mut String, o: &overlay::drift::ReportOverlay) {
    let d = &o.drift;
    let mut status = d.status.as_str().to_string();
    if d.partially_upstreamed {
        status.push_str(" (partially)");
    }
    let _ = write!(
        h,
        "  {}  {}",
        paint(&format!("{status:<13}"), d.status),
        d.name
    );
    if let Some(b) = &o.blame {
        let _ = write!(h, "  since {} {}", short(&b.sha), b.subject);
    }
    h.push('\n');
    if let Some(by) = &d.blocked_by {
        let _ = writeln!(
            h,
            "      blocked by {by}: it touches the same files; it is evaluated once that conflict is resolved"
        );
    }
    if let Some(f) = &d.forecast {
        render_forecast(h, d.blocked_by.as_deref(), f);
    }
    for c in &d.conflicts {
        let _ = writeln!(h, "      the 3-way merge conflicts in {c}");
    }
    for r in &d.review {
        let _ = writeln!(h, "      review: {r}");
    }
    for c in &d.symbol_changes {
        render_symbol_change(h, c);
    }
    for hk in &d.hunks {
        render_hunk(h, hk);
    }
}

/// A blocked overlay's forecast on the conflicting overlay's side.
fn render_forecast(h: &mut String, blocked_by: Option<&str>, f: &overlay::drift::BlockedForecast) {
    let _ = write!(
        h,
        "      forecast on {}'s side (ours): {}",
        blocked_by.unwrap_or("?"),
        f.status.as_str()
    );
    if let Some(b) = &f.blame {
        let _ = write!(h, "  since {} {}", short(&b.sha), b.subject);
    }
    h.push('\n');
    if !f.changed_symbols.is_empty() {
        let _ = writeln!(
            h,
            "        changed upstream: {}",
            f.changed_symbols.join(", ")
        );
    }
    for r in &f.review {
        let _ = writeln!(h, "        review: {r}");
    }
}

/// A watched definition upstream changed or removed, with its diff (or where it is shown).
fn render_symbol_change(h: &mut String, c: &overlay::drift::SymbolChange) {
    let what = if c.removed { "removed" } else { "changed" };
    let _ = writeln!(
        h,
        "      {what} upstream: {}::{} ({})",
        c.path, c.symbol, c.watched_because
    );
    if let Some(outer) = &c.diff_under {
        let _ = writeln!(h, "        (its diff is shown under {outer})");
        return;
    }
    for l in c.diff.lines() {
        // No whitespace-only lines: they do not survive copy and paste (or rustfmt).
        match l.trim_end() {
            "" => h.push('\n'),
            l => {
                let _ = writeln!(h, "        {l}");
            }
        }
    }
}

/// One hunk's fate and its blame (an exact hunk without blame says nothing).
fn render_hunk(h: &mut String, hk: &overlay::drift::HunkDrift) {
    use overlay::drift::HunkStatus as H;
    let line = match (hk.status, hk.actual) {
        (H::Exact, _) if hk.blame.is_empty() => return,
        (H::Exact, _) => "exact".to_string(),
        (H::Moved, Some(a)) => format!(
            "moved {} -> {a} ({:+})",
            hk.recorded,
            a as isize - hk.recorded as isize
        ),
        (H::Upstreamed, _) => "already upstream".to_string(),
        (H::Merged, _) => format!("merged: {}", hk.reason.as_deref().unwrap_or("")),
        (H::Conflict, _) => format!("conflict: {}", hk.reason.as_deref().unwrap_or("")),
        (H::Moved, None) => "moved".to_string(),
    };
    let _ = writeln!(h, "      {} hunk #{}: {line}", hk.file, hk.hunk);
    for b in &hk.blame {
        let _ = writeln!(h, "        {}", hunk_blame_text(b));
    }
}

/// One commit of a hunk's blame: what it did to the hunk, the hunk's status after it, and whether
/// it gave the hunk its final status (for a conflict: it broke the hunk).
fn hunk_blame_text(b: &overlay::drift::blame::HunkBlame) -> String {
    let what: Vec<String> = b.changes.iter().map(|c| change_text(c)).collect();
    let what = if what.is_empty() {
        "changed the hunk's status".to_string()
    } else {
        what.join(", ")
    };
    let status = b.status.map_or("blocked".to_string(), |s| {
        serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .map_or_else(String::new, |s| match s.as_str() {
                "conflict" => "in conflict".to_string(),
                _ => s,
            })
    });
    let mark = match (b.decisive, b.status) {
        (true, Some(overlay::drift::HunkStatus::Conflict)) => "; this commit broke it",
        (true, _) => "; it has had this status since this commit",
        _ => "",
    };
    format!(
        "{} {what} (the hunk is {status} after it{mark}): {}",
        short(&b.sha),
        b.subject
    )
}

/// One change a commit made to a hunk (`HunkBlame::changes`), in words.
fn change_text(change: &str) -> String {
    match change {
        "context" => "changed the lines around the hunk".to_string(),
        "moved" => "moved the hunk to other lines".to_string(),
        "file deleted" => "deleted the hunk's file".to_string(),
        "file moved" => "moved the hunk's file".to_string(),
        other => other
            .strip_prefix("symbol ")
            .map_or(other.to_string(), |s| format!("changed {s}")),
    }
}

/// The drift report as a Markdown table (GitHub step summaries append to one file).
pub fn markdown_drift(r: &overlay::drift::Report) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "### Overlay drift: {} `{}` → `{}`\n",
        r.upstream,
        short(&r.from),
        short(&r.to)
    );
    if r.overlays.is_empty() {
        let _ = writeln!(m, "No overlays.\n");
        return m;
    }
    let _ = writeln!(
        m,
        "| overlay | status | since | changed upstream symbols |\n|---|---|---|---|"
    );
    for o in &r.overlays {
        let d = &o.drift;
        let since = o.blame.as_ref().map_or(String::new(), |b| {
            format!("`{}` {}", short(&b.sha), b.subject.replace('|', "\\|"))
        });
        let syms: Vec<String> = d.changed_symbols.iter().map(|s| format!("`{s}`")).collect();
        let _ = writeln!(
            m,
            "| {} | {}{} | {since} | {} |",
            d.name,
            d.status.as_str(),
            if d.partially_upstreamed {
                " (partially)"
            } else {
                ""
            },
            syms.join(", ")
        );
    }
    m.push('\n');
    for o in &r.overlays {
        for c in o
            .drift
            .symbol_changes
            .iter()
            .filter(|c| c.diff_under.is_none())
        {
            let _ = writeln!(
                m,
                "<details><summary>{}: upstream changed <code>{}</code> ({})</summary>\n\n```diff\n{}```\n</details>\n",
                o.drift.name, c.symbol, c.watched_because, c.diff
            );
        }
    }
    m
}

pub fn drift(g: &Global, a: &DriftArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "drift")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let to = match &a.to {
        Some(rev) => resolve_rev(&ctx, &repo, rev)?,
        None => branch_head(&ctx, &repo)?,
    };
    let repo = ctx.open_upstream()?;
    let from = match &a.from {
        Some(rev) => resolve_rev(&ctx, &repo, rev)?,
        None => git2::Oid::from_str(&up.rev)?,
    };
    let report = overlay::drift::drift(
        repo.repo(),
        &repo,
        &series,
        &overlay::drift::Options {
            upstream: &up.name,
            from,
            to,
            per_commit: a.per_commit,
        },
    )?;
    if let Some(path) = &a.summary {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("{}: cannot write the summary", path.display()))?;
        f.write_all(markdown_drift(&report).as_bytes())
            .with_context(|| format!("{}: cannot write the summary", path.display()))?;
    }
    // Upstream lines an overlay deletes that upstream added after its recorded base (issue 18).
    let reverts = overlay::reverts::series_reverts(repo.repo(), &repo, from, &series)?;
    let (mut value, mut human) = (serde_json::to_value(&report)?, render_drift(&report));
    let reverting = super::add_drift_reverts(&mut value, &mut human, &reverts);
    emit(ctx.json, value, human);
    let quiet = !reverting && report.overlays.iter().all(|o| o.drift.status.is_quiet());
    Ok(if quiet {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
