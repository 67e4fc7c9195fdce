//! `export-upstream`: upstreamable overlays as a clean `git format-patch` series and PR.md.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::lock::Mode as LockMode;
use overlay::manifest::Upstream;
use overlay::upstream::UpstreamRepo;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Export only these overlays (default: every upstreamable one)
    #[arg(long = "overlay", value_name = "NAME")]
    pub overlays: Vec<String>,
    /// Re-base onto this upstream commit-ish [default: the pin]
    #[arg(long, value_name = "REV", conflicts_with = "onto_upstream_head")]
    pub onto: Option<String>,
    /// Re-base onto the head of the upstream branch named in pins.toml
    #[arg(long)]
    pub onto_upstream_head: bool,
    /// Where to write the series and PR.md [default: target/export/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also create this branch in the upstream cache clone (ready to push to a fork)
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Add a Signed-off-by trailer with your git identity
    #[arg(long)]
    pub signoff: bool,
    /// Also configure and build the exported tree (CPU backend)
    #[arg(long)]
    pub build: bool,
}

fn run_git(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(git_output(dir, args)?.trim().to_string())
}

/// The measured numbers an overlay's message points at: the first table of each `docs/*.md` it names.
fn measured_from_docs(root: &Path, body: &str) -> String {
    let mut out = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for word in body.split(|c: char| c.is_whitespace() || "`()[],;".contains(c)) {
        let w = word.trim_end_matches(['.', ':']);
        if !(w.starts_with("docs/") && w.ends_with(".md") && seen.insert(w.to_string())) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(w)) else {
            continue;
        };
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .collect();
        if !table.is_empty() {
            let _ = writeln!(out, "From `{w}`:\n\n{}\n", table.join("\n"));
        }
    }
    out
}

pub fn export_upstream(g: &Global, a: &ExportArgs, hooks: &crate::Hooks) -> Result<ExitCode> {
    use overlay::export::{Outcome, export, select};
    let build_hook = match (a.build, &hooks.export_build) {
        (true, None) => return Err(no_build()),
        (true, Some(h)) => Some(h),
        (false, _) => None,
    };
    let ctx = Ctx::load(g, LockMode::Shared, "export-upstream")?;
    let up = ctx.upstream().clone();
    let series = ctx.series()?;
    let selected = select(&series, &a.overlays)?;
    if selected.is_empty() {
        bail!("no upstreamable overlay in the series: nothing to export");
    }
    let repo = ctx.open_upstream()?;
    let onto = match (&a.onto, a.onto_upstream_head) {
        (Some(rev), _) => resolve_rev(&ctx, &repo, rev)?,
        (None, true) => branch_head(&ctx, &repo)?,
        (None, false) => git2::Oid::from_str(&up.rev)?,
    };
    let repo = ctx.open_upstream()?;
    let signoff = if a.signoff { Some(identity()?) } else { None };
    let pin_tree = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let onto_tree = repo.tree_at(onto)?;
    let exported = match export(
        &pin_tree,
        &onto_tree,
        &series,
        &selected,
        &repo,
        signoff.as_deref(),
    )? {
        Outcome::Exported(e) => e,
        Outcome::Blocked(b) => {
            let msg = blocked_message(&b, onto);
            emit(ctx.json, serde_json::json!({ "blocked": b }), msg);
            return Ok(ExitCode::from(1));
        }
    };
    let out = a.out.clone().unwrap_or_else(|| {
        ctx.project
            .root
            .join("target")
            .join("export")
            .join(&up.name)
    });
    refuse_foreign_out(&out)?;
    // Verify with git itself before writing anything: the series must `git am` onto the target.
    let scratch = tempfile::tempdir()?;
    let (clone, head) = git_am_onto(scratch.path(), &repo, &exported, onto)?;
    if let Some(b) = &a.branch {
        run_git(
            &clone,
            &[
                "push",
                "--quiet",
                &repo.cache_path.to_string_lossy(),
                &format!("HEAD:refs/heads/{b}"),
            ],
        )
        .with_context(|| {
            format!("creating branch {b} in the upstream cache (it may exist already)")
        })?;
    }
    let mut built = None;
    if let Some(hook) = build_hook {
        hook(&crate::ExportBuild {
            pins: &ctx.project.pins,
            upstream: &up,
            onto,
            head: git2::Oid::from_str(&head)?,
            clone: &clone,
            scratch: scratch.path(),
        })?;
        built =
            Some("configured and built for the CPU backend (cargo xtask export-upstream --build)");
    }
    let ovs: Vec<&overlay::patch::Overlay> =
        selected.iter().map(|&i| &series.overlays[i]).collect();
    let pr = pr_text(&ctx.project.root, &ovs, onto, built);
    // Write: replace an earlier export wholesale.
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&out)?;
    for e in &exported {
        std::fs::write(out.join(&e.file_name), &e.raw)?;
    }
    std::fs::write(out.join("PR.md"), &pr)?;
    let h = export_report(a, &up, &repo, &exported, onto, &out, built.is_some());
    emit(
        ctx.json,
        serde_json::json!({ "onto": onto.to_string(), "out": out, "patches": exported, "branch": a.branch, "built": built.is_some() }),
        h,
    );
    Ok(ExitCode::SUCCESS)
}

/// Why the selected overlays do not export onto `onto` without the ones left out.
fn blocked_message(b: &overlay::export::Blocked, onto: git2::Oid) -> String {
    let hunk = b.hunk.map(|h| format!(" hunk #{h}")).unwrap_or_default();
    let needs = if b.needs.is_empty() {
        "upstream changed it too (see `cargo xtask drift`)".to_string()
    } else {
        format!("it needs {}", b.needs.join(", "))
    };
    format!(
        "export-upstream: {}: {}{hunk} does not merge onto {} without the overlays left out: {needs}\nnothing was written\n",
        b.overlay,
        b.file,
        short(&onto.to_string())
    )
}

/// Only ever replace an earlier export: a folder of *.patch files and PR.md.
fn refuse_foreign_out(out: &Path) -> Result<()> {
    if out.exists() {
        for e in std::fs::read_dir(out)? {
            let name = e?.file_name().to_string_lossy().to_string();
            if !(name.ends_with(".patch") || name == "PR.md") {
                bail!(
                    "{}: holds {name}, which export-upstream did not write; choose an empty folder with --out",
                    out.display()
                );
            }
        }
    }
    Ok(())
}

/// `git am`s the exported series onto `onto` in a scratch clone of the upstream cache under
/// `scratch` (`overlay::export::verify`). Returns the clone and its HEAD.
fn git_am_onto(
    scratch: &Path,
    repo: &UpstreamRepo,
    exported: &[overlay::export::Exported],
    onto: git2::Oid,
) -> Result<(PathBuf, String)> {
    let v = overlay::export::verify::git_am_onto(scratch, repo, exported, onto)?;
    Ok((v.clone, v.head))
}

/// `--build` with no build to run: this crate builds nothing, the fork's xtask supplies it.
fn no_build() -> anyhow::Error {
    crate::error::HintedError::of_kind(
        Some(crate::error::Kind::Input),
        "export-upstream --build: this xtask supplies no build for the exported tree",
        "a fork's xtask passes one in `overlay_cli::Hooks::export_build` (`overlay_cli::run_with`); drop --build to export without building",
    )
}

/// PR.md: title, motivation, what was measured, how it was tested.
fn pr_text(
    root: &Path,
    ovs: &[&overlay::patch::Overlay],
    onto: git2::Oid,
    built: Option<&str>,
) -> String {
    let title = if ovs.len() == 1 {
        ovs[0].subject.clone()
    } else {
        format!("{} (series of {})", ovs[0].subject, ovs.len())
    };
    let mut pr = format!("# {title}\n\n## Motivation\n\n");
    for o in ovs {
        let _ = writeln!(
            pr,
            "### {}\n\n{}\n",
            o.subject,
            overlay::export::clean_message(&o.body, None).trim()
        );
    }
    let measured: String = ovs
        .iter()
        .map(|o| measured_from_docs(root, &o.body))
        .collect();
    let _ = writeln!(
        pr,
        "## What was measured\n\n{}",
        if measured.is_empty() {
            "The commit messages above carry the measurements.\n".to_string()
        } else {
            measured
        }
    );
    let _ = writeln!(pr, "## How it was tested\n");
    let _ = writeln!(
        pr,
        "- The series applies with `git am` onto {onto} (verified when this was generated)."
    );
    if let Some(b) = built {
        let _ = writeln!(pr, "- The result {b}.");
    }
    let _ = writeln!(
        pr,
        "- In the fork these changes are carried as overlays checked by `cargo xtask check` and exercised by the fork's test suite at the pin."
    );
    pr
}

/// The human report of a written export.
fn export_report(
    a: &ExportArgs,
    up: &Upstream,
    repo: &UpstreamRepo,
    exported: &[overlay::export::Exported],
    onto: git2::Oid,
    out: &Path,
    built: bool,
) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "export-upstream: {} overlay(s) onto {}@{} in {}",
        exported.len(),
        up.name,
        short(&onto.to_string()),
        out.display()
    );
    for e in exported {
        let _ = writeln!(h, "  {}  (from {})", e.file_name, e.overlay);
    }
    let _ = writeln!(
        h,
        "verified: the series `git am`s onto {}{}",
        short(&onto.to_string()),
        if built { " and builds" } else { "" }
    );
    if let Some(b) = &a.branch {
        let _ = writeln!(
            h,
            "branch {b} created in {} (push it to your fork)",
            repo.cache_path.display()
        );
    }
    h
}
