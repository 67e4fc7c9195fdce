//! `cargo xtask import`: whole-file copies -> overlays (the engine's `overlay::import`), and the
//! "reverts upstream work" lines `check` and `drift` add (`overlay::reverts`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use overlay::import::{FileStatus, Outcome};
use overlay::lock::Mode as LockMode;
use overlay::reverts::{OverlayReverts, Revert};

use crate::Global;
use crate::commands::{Ctx, colour, refuse_during_bump, versioned};

#[derive(clap::Args)]
pub struct ImportArgs {
    /// Folder of whole-file copies laid out like upstream (DIR/mlx/backend/cuda/matmul.cpp)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Every copy's base is this upstream commit-ish (default: search for the closest version)
    #[arg(long, value_name = "REV", conflicts_with = "find_base")]
    pub base: Option<String>,
    /// Search each copy's closest upstream version (the default)
    #[arg(long)]
    pub find_base: bool,
    /// How many first-parent commits the search goes before and after the pin
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub bound: usize,
    /// One overlay per file instead of one for the whole set
    #[arg(long)]
    pub one_per_file: bool,
    /// Keep the copies' deletions of upstream lines added after their base (recorded as
    /// Reverts-Upstream: trailers); without it such a finding writes nothing and exits 1
    #[arg(long)]
    pub accept_reverts: bool,
    /// Report what would be written; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Overlay-Kind of the new overlays
    #[arg(long, value_parser = ["upstreamable", "local-only"], default_value = "local-only")]
    pub kind: String,
}

pub fn import(g: &Global, a: &ImportArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "import")?;
    if !a.dry_run {
        refuse_during_bump(&ctx, g, "import")?;
    }
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let pin = git2::Oid::from_str(&up.rev)?;
    let base = match &a.base {
        Some(rev) => Some(crate::commands::resolve_rev(&ctx, &repo, rev)?),
        None => None,
    };
    // Later commits, when the upstream has a branch: the search goes after the pin on it.
    let head = match &up.branch {
        Some(_) => match crate::commands::branch_head(&ctx, &repo) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("note: searching before the pin only ({e:#})");
                None
            }
        },
        None => None,
    };
    let repo = ctx.open_upstream()?;
    let signature = series
        .overlays
        .last()
        .and_then(|o| o.signature.clone())
        .unwrap_or_else(|| format!("cargo-xtask {}", env!("CARGO_PKG_VERSION")));
    let opts = overlay::import::Options {
        base,
        bound: a.bound,
        branch_head: head,
        one_per_file: a.one_per_file,
        accept_reverts: a.accept_reverts,
        dry_run: a.dry_run,
        kind: if a.kind == "upstreamable" {
            overlay::patch::OverlayKind::Upstreamable
        } else {
            overlay::patch::OverlayKind::LocalOnly
        },
        author: crate::commands::identity()?,
        date: crate::commands::author_date()?,
        signature,
        tool: crate::steps::program().to_string(),
    };
    let outcome = overlay::import::import(&repo, pin, &series, &a.dir, &ctx.project.root, &opts)?;
    let human = render(&outcome, &up.name, a);
    if ctx.json {
        let mut v = serde_json::to_value(&outcome)?;
        v["upstream"] = up.name.clone().into();
        println!("{}", serde_json::to_string_pretty(&versioned(v))?);
    } else {
        print!("{human}");
    }
    Ok(if outcome.unconfirmed_reverts > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn distance(d: Option<i64>) -> String {
    match d {
        Some(0) => "the pin".into(),
        Some(d) if d < 0 => format!("{} commit(s) before the pin", -d),
        Some(d) => format!("{d} commit(s) after the pin"),
        None => "off the pin's first-parent line".into(),
    }
}

fn render(o: &Outcome, upstream: &str, a: &ImportArgs) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "import: {} file(s) from {} against {upstream}@{} (searched {} commit(s) before the pin, {} after)",
        o.files.len(),
        a.dir.display(),
        &o.pin[..12],
        o.searched_before,
        o.searched_after
    );
    for f in &o.files {
        let status = match f.status {
            FileStatus::Changed => "changed",
            FileStatus::NewFile => "new-file",
            FileStatus::Unchanged => "unchanged",
        };
        let _ = writeln!(h, "  {:<9} {}", status, f.path);
        match &f.base {
            Some(b) => {
                let _ = writeln!(
                    h,
                    "      base {} ({}) {:?}: diff {} line(s) there, {} at the pin",
                    &b.commit[..12],
                    distance(b.distance),
                    b.subject,
                    f.diff_at_base.map_or("-".into(), |n| n.to_string()),
                    f.diff_at_pin
                );
            }
            None => {
                let _ = writeln!(
                    h,
                    "      no upstream version in the searched history; {} line(s)",
                    f.diff_at_pin
                );
            }
        }
        if f.base_at_search_edge {
            let _ = writeln!(
                h,
                "      {}: that is the oldest commit searched (--bound {}): the copy may be older; widen --bound, or give --base REV if you know it",
                colour("warning", "33"),
                a.bound
            );
        }
        if let Some(d) = &f.deleted_before_base {
            let _ = writeln!(
                h,
                "      {}: {} line(s) of the copy are upstream's before {} \"{}\", which deleted them, and not at the base: if the copy was taken before it, import with --base {}^ (the lines it brings back are then REVERTS)",
                colour("warning", "33"),
                d.lines,
                &d.commit[..12.min(d.commit.len())],
                d.subject,
                &d.commit[..12.min(d.commit.len())]
            );
        }
        if f.status != FileStatus::Unchanged {
            let _ = writeln!(
                h,
                "      overlay: +{} -{} in {} hunk(s){}",
                f.added,
                f.removed,
                f.hunks,
                f.overlay
                    .as_ref()
                    .map_or(String::new(), |n| format!(" -> {n}"))
            );
        }
        for r in &f.reverts {
            revert_lines(&mut h, r, "      ");
        }
    }
    let names: Vec<&str> = o.overlays.iter().map(|n| n.name.as_str()).collect();
    if o.unconfirmed_reverts > 0 {
        let _ = writeln!(
            h,
            "{} run(s) of upstream lines or of earlier overlays' lines would be reverted; nothing was written\n  help: restore those lines in the copies (or remove the lines upstream deleted), or rerun with --accept-reverts to keep the copies as they are (each upstream commit is recorded as a Reverts-Upstream: trailer, each earlier overlay as Reverts-Overlay:)",
            o.unconfirmed_reverts
        );
    } else if names.is_empty() {
        let _ = writeln!(
            h,
            "nothing to import: every copy already matches the pin plus the series; nothing was written"
        );
    } else if o.written {
        let _ = writeln!(h, "wrote {} and the series", names.join(", "));
    } else {
        let _ = writeln!(
            h,
            "dry run: would write {} and the series; nothing was written",
            names.join(", ")
        );
    }
    h
}

/// A revert as report lines: what, which commit, the first lines themselves.
fn revert_lines(h: &mut String, r: &Revert, indent: &str) {
    let tag = if r.accepted {
        colour("reverts (accepted)", "33")
    } else {
        colour("REVERTS", "31")
    };
    let _ = writeln!(
        h,
        "{indent}{tag} {}: {}",
        r.file,
        overlay::reverts::describe(r)
    );
    for l in r.lines.iter().take(3) {
        // No trailing whitespace for an empty line: it does not survive copy and paste.
        let sign = if r.resurrected { '+' } else { '-' };
        let _ = writeln!(h, "{indent}  {}", format!("{sign} {l}").trim_end());
    }
    if r.lines.len() > 3 {
        let _ = writeln!(h, "{indent}  ... {} more", r.lines.len() - 3);
    }
}

/// `drift`: every overlay object gets a `reverts` list (empty for most); the human report gets a
/// section. True when a revert is not confirmed (a finding: exit 1).
pub fn add_drift_reverts(
    value: &mut serde_json::Value,
    human: &mut String,
    all: &[OverlayReverts],
) -> bool {
    if let Some(list) = value.get_mut("overlays").and_then(|v| v.as_array_mut()) {
        for o in list {
            let name = o.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let mine = all
                .iter()
                .find(|r| r.overlay == name)
                .map_or(Vec::new(), |r| r.reverts.clone());
            o["reverts"] = serde_json::to_value(mine).expect("reverts serialize");
        }
    }
    for o in all {
        let _ = writeln!(human, "  {} reverts upstream work:", o.overlay);
        for r in &o.reverts {
            revert_lines(human, r, "      ");
        }
    }
    all.iter().flat_map(|o| &o.reverts).any(|r| !r.accepted)
}
