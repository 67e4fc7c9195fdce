//! `interdiff`: the series at two commits of the fork (or a commit and the working tree), overlay
//! by overlay: context-only changes against content changes (`overlay::interdiff`).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use overlay::interdiff::{Options, Outcome, OverlayChange, Status};
use overlay::lock::Mode as LockMode;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct InterdiffArgs {
    /// The old side: a commit of the fork whose pins.toml and overlays are read (e.g. HEAD~3)
    /// [default: the newest commit, first parents from --to's (or HEAD), whose pin differs from
    /// the new side's; that commit itself when none does]
    #[arg(long, value_name = "REV")]
    pub from: Option<String>,
    /// The new side: a commit of the fork [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub to: Option<String>,
    /// Print Markdown (for a pull request's body) instead of the human report
    #[arg(long)]
    pub markdown: bool,
    /// Exit 1 when an overlay's content changed, or one was added or removed: a refresh (or a
    /// clean bump) changes context only
    #[arg(long)]
    pub lint_refresh: bool,
}

pub fn interdiff(g: &Global, a: &InterdiffArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "interdiff")?;
    let out = overlay::interdiff::run(&Options {
        root: ctx.project.root.clone(),
        upstream: Some(ctx.upstream().name.clone()),
        from: a.from.clone(),
        to: a.to.clone(),
    })?;
    let findings: Vec<String> = if a.lint_refresh {
        out.refresh_findings().iter().map(|o| finding(o)).collect()
    } else {
        Vec::new()
    };
    let mut value = serde_json::to_value(&out)?;
    value["lint_refresh"] = a.lint_refresh.into();
    value["findings"] = findings.clone().into();
    let mut text = if a.markdown {
        markdown_interdiff(&out)
    } else {
        render_interdiff(&out)
    };
    for f in &findings {
        let _ = writeln!(text, "{} {f}", colour("not a refresh:", "31;1"));
    }
    emit(ctx.json, value, text);
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Why an overlay's change is more than a refresh.
fn finding(o: &OverlayChange) -> String {
    let what: Vec<String> = o
        .content
        .iter()
        .map(|c| match &c.file {
            Some(f) => format!("{} in {f}", c.what),
            None => c.what.to_string(),
        })
        .collect();
    match o.status {
        Status::Content => format!("{}: its content changed ({})", o.name, what.join(", ")),
        s => format!("{}: {}", o.name, s.as_str()),
    }
}

fn paint(s: &str, status: Status) -> String {
    let code = match status {
        Status::Unchanged => "90",
        Status::Context => "32",
        Status::Content => "33;1",
        Status::Added => "36",
        Status::Removed => "31",
    };
    colour(s, code)
}

/// The name, with the old one when it was renamed.
fn shown_name(o: &OverlayChange) -> String {
    match &o.renamed_from {
        Some(old) => format!("{} (renamed from {old})", o.name),
        None => o.name.clone(),
    }
}

pub fn render_interdiff(r: &Outcome) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "interdiff: {} {} (pin {}) -> {} (pin {})",
        r.upstream,
        r.from.label(),
        short(&r.from.pin),
        r.to.label(),
        short(&r.to.pin)
    );
    for o in &r.overlays {
        let status = format!("{:<10}", o.status.as_str());
        let _ = writeln!(h, "  {}  {}", paint(&status, o.status), shown_name(o));
        if !o.context.is_empty() {
            let _ = writeln!(h, "      context: {}", o.context.join(", "));
        }
        for c in &o.content {
            let what = c
                .file
                .as_ref()
                .map_or(c.what.to_string(), |f| format!("{} in {f}", c.what));
            let _ = writeln!(h, "      {what}:");
            for l in &c.lines {
                let code = if l.starts_with('-') { "31" } else { "32" };
                let _ = writeln!(h, "        {}", colour(l, code));
            }
        }
    }
    let _ = writeln!(h, "{}", summary(r));
    h
}

/// `5 overlay(s): 1 content, 4 context`.
fn summary(r: &Outcome) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for o in &r.overlays {
        *counts.entry(o.status.as_str()).or_insert(0) += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let renamed = r
        .overlays
        .iter()
        .filter(|o| o.renamed_from.is_some())
        .count();
    let mut s = format!("{} overlay(s)", r.overlays.len());
    if !parts.is_empty() {
        let _ = write!(s, ": {}", parts.join(", "));
    }
    if renamed > 0 {
        let _ = write!(s, " ({renamed} renamed)");
    }
    s
}

/// The interdiff as Markdown: a table, then each content change as a diff block.
pub fn markdown_interdiff(r: &Outcome) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "### Overlay interdiff: {} {} (pin `{}`) → {} (pin `{}`)\n",
        r.upstream,
        r.from.label(),
        short(&r.from.pin),
        r.to.label(),
        short(&r.to.pin)
    );
    let _ = writeln!(m, "{}\n", summary(r));
    if r.overlays.is_empty() {
        return m;
    }
    let _ = writeln!(m, "| overlay | change | what changed |\n|---|---|---|");
    for o in &r.overlays {
        let mut what: Vec<String> = o.context.clone();
        what.extend(o.content.iter().map(|c| match &c.file {
            Some(f) => format!("**{}** in `{f}`", c.what),
            None => format!("**{}**", c.what),
        }));
        let _ = writeln!(
            m,
            "| {} | {} | {} |",
            shown_name(o).replace('|', "\\|"),
            o.status.as_str(),
            what.join(", ").replace('|', "\\|")
        );
    }
    m.push('\n');
    m.push_str(&markdown_content(r));
    m
}

/// Each overlay's content changes as a folded diff block.
fn markdown_content(r: &Outcome) -> String {
    let mut m = String::new();
    for o in r.overlays.iter().filter(|o| !o.content.is_empty()) {
        let _ = writeln!(
            m,
            "<details><summary>{}: content changes</summary>\n\n```diff",
            o.name
        );
        for c in &o.content {
            let what = c
                .file
                .as_ref()
                .map_or(c.what.to_string(), |f| format!("{} in {f}", c.what));
            let _ = writeln!(m, "# {what}");
            for l in &c.lines {
                let _ = writeln!(m, "{l}");
            }
        }
        let _ = writeln!(m, "```\n</details>\n");
    }
    m
}
