//! The commands: load the project, call the engine, print.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::bump::{Action, BUMP_STATE, BumpState};
use overlay::check::FindingKind;
use overlay::lock::{Mode as LockMode, ProjectLock};
use overlay::manifest::Upstream;
use overlay::materialize::{Origin, State};
use overlay::project::{Project, apply_series};
use overlay::series::Series;
use overlay::txn::Recovery;
use overlay::upstream::{UpstreamRepo, default_cache_root};

use crate::Global;
use crate::progress::Progress;

/// The project: `--root`, else the nearest folder holding pins.toml from the current directory
/// upward (as git and cargo find theirs).
pub fn project_root(g: &Global) -> Result<PathBuf> {
    let pins = overlay::manifest::PINS_FILE;
    if let Some(r) = &g.root {
        if !r.join(pins).is_file() {
            bail!(
                "{}: not a project (no {pins} there); pass the folder that holds {pins} to --root",
                r.display()
            );
        }
        return Ok(r.clone());
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    match cwd.ancestors().find(|d| d.join(pins).is_file()) {
        Some(d) => Ok(d.to_path_buf()),
        None => bail!(
            "not in a project: no {pins} in {} or any folder above it; run inside a project or pass --root DIR",
            cwd.display()
        ),
    }
}

pub struct Ctx {
    pub project: Project,
    pub json: bool,
    upstream: Option<String>,
    /// The project lock, held until the command ends (or [`Ctx::unlock`]).
    lock: std::cell::RefCell<Option<ProjectLock>>,
}

impl Ctx {
    /// Loads the project under its lock: `Shared` for commands that only read it, `Exclusive` for
    /// those that write the project or a tree. Finishes a write a killed process left first.
    pub fn load(g: &Global, mode: LockMode, command: &str) -> Result<Ctx> {
        let root = project_root(g)?;
        // No lock (and no target/ created) where there is no project: let load explain.
        let lock = if root.join(overlay::manifest::PINS_FILE).exists()
            || overlay::txn::pending(&root)
        {
            let mut waited = false;
            let lock = overlay::lock::lock_project(&root, mode, command, &mut |msg| {
                if !waited {
                    eprintln!("{msg}");
                    waited = true;
                }
            })?;
            match &lock.recovery {
                Recovery::Nothing => {}
                Recovery::RolledBack { command, pid } => eprintln!(
                    "recovered: `{command}` (pid {pid}) was interrupted before its commit point; nothing it meant to write was kept"
                ),
                Recovery::RolledForward {
                    command,
                    pid,
                    files,
                } => eprintln!(
                    "recovered: `{command}` (pid {pid}) was interrupted after its commit point; finished writing {} file(s)",
                    files.len()
                ),
            }
            Some(lock)
        } else {
            None
        };
        let project = Project::load(&root)?;
        project.upstream(g.upstream.as_deref())?;
        Ok(Ctx {
            project,
            json: g.json,
            upstream: g.upstream.clone(),
            lock: std::cell::RefCell::new(lock),
        })
    }

    /// Releases the project lock early (build-mlx, once the source tree is written).
    pub fn unlock(&self) {
        self.lock.borrow_mut().take();
    }

    pub fn upstream(&self) -> &Upstream {
        self.project
            .upstream(self.upstream.as_deref())
            .expect("checked in load")
    }

    pub fn series(&self) -> Result<Series> {
        Ok(self.project.series(self.upstream())?)
    }

    pub fn open_upstream(&self) -> Result<UpstreamRepo> {
        let up = self.upstream();
        let mut bar = Progress::new(&format!("fetching {}", up.name));
        let repo = self
            .project
            .open_upstream(up, &default_cache_root(), &mut |p| {
                bar.update(p.received_objects as u64, p.total_objects as u64)
            })?;
        bar.finish();
        Ok(repo)
    }

    fn rel<'a>(&self, p: &'a Path) -> std::borrow::Cow<'a, str> {
        match p.strip_prefix(&self.project.root) {
            Ok(r) => r.to_string_lossy(),
            Err(_) => p.to_string_lossy(),
        }
    }

    pub fn default_dir(&self) -> PathBuf {
        self.project
            .root
            .join("target")
            .join("apply")
            .join(&self.upstream().name)
    }
}

fn short(rev: &str) -> &str {
    &rev[..12.min(rev.len())]
}

/// The version of every `--json` report's shape (docs/json.md); bumped on a breaking change.
pub const JSON_SCHEMA: u32 = 1;

/// A `--json` report: the command's object with `"schema"` added.
pub fn versioned(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(fields) => {
            let mut out = serde_json::Map::new();
            out.insert("schema".into(), JSON_SCHEMA.into());
            out.extend(fields.into_iter().filter(|(k, _)| k != "schema"));
            serde_json::Value::Object(out)
        }
        other => serde_json::json!({ "schema": JSON_SCHEMA, "report": other }),
    }
}

fn emit(json: bool, value: serde_json::Value, human: String) {
    if json {
        let value = versioned(value);
        println!("{}", serde_json::to_string_pretty(&value).expect("json"));
    } else {
        print!("{human}");
    }
}

/// The default applied tree, when it holds edits no overlay has: (its state, the edits).
fn applied_edits(ctx: &Ctx) -> Result<Option<(State, overlay::materialize::Edits)>> {
    let dir = ctx.default_dir();
    let Some(st) = State::load(&dir)? else {
        return Ok(None);
    };
    if st.upstream != ctx.upstream().name || st.pending.is_some() {
        return Ok(None);
    }
    let edits = overlay::materialize::edits(&dir, &st)?;
    Ok((!edits.is_empty()).then_some((st, edits)))
}

/// "modified: a, added: b" for the first few edits.
fn list_edits(e: &overlay::materialize::Edits) -> String {
    let all: Vec<String> = e
        .modified
        .iter()
        .map(|p| format!("modified: {p}"))
        .chain(e.added.iter().map(|p| format!("added: {p}")))
        .chain(e.deleted.iter().map(|p| format!("deleted: {p}")))
        .chain(e.mode.iter().map(|p| format!("mode changed: {p}")))
        .collect();
    let more = all.len().saturating_sub(10);
    let mut s = all.into_iter().take(10).collect::<Vec<_>>().join(", ");
    if more > 0 {
        let _ = write!(s, ", and {more} more");
    }
    s
}

/// `--upstream NAME` when the command named one, for printed next steps.
fn upstream_flag(ctx: &Ctx) -> String {
    ctx.upstream
        .as_ref()
        .map(|u| format!(" --upstream {u}"))
        .unwrap_or_default()
}

pub fn status(g: &Global) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "status")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let overlays: Vec<serde_json::Value> = series
        .overlays
        .iter()
        .map(|o| {
            serde_json::json!({
                "name": o.name, "subject": o.subject, "kind": o.trailers.kind,
                "upstream_status": o.trailers.status.as_ref().map(|s| s.to_string()),
                "depends_on": o.trailers.depends_on, "files": o.files.iter().map(|f| f.path()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut h = String::new();
    let _ = writeln!(h, "upstream {}: {} @ {}", up.name, up.url, up.rev);
    if let Some(b) = &up.branch {
        let _ = writeln!(h, "  follows branch {b}");
    }
    let _ = writeln!(
        h,
        "overlays in {} ({}):",
        ctx.rel(&series.dir),
        series.overlays.len()
    );
    for (i, o) in series.overlays.iter().enumerate() {
        let st = o
            .trailers
            .status
            .as_ref()
            .map_or("-".to_string(), |s| s.to_string());
        let _ = writeln!(
            h,
            "  {:>2}. {}  [{}, {}]",
            i + 1,
            o.name,
            o.trailers.kind.as_str(),
            st
        );
        let _ = writeln!(h, "      {}", o.subject);
    }
    // Work left unfinished in the default trees, and how to finish it.
    let mut pending = Vec::new();
    let apply_dir = ctx.default_dir();
    if let Ok(Some(st)) = State::load(&apply_dir)
        && st.pending.is_some()
    {
        pending.push(format!(
            "an apply into {} was interrupted: `{}` finishes it",
            ctx.rel(&apply_dir),
            xtask_command(g, "apply")
        ));
    }
    if let Some((st, e)) = applied_edits(&ctx)? {
        let n = e.all().count();
        pending.push(if st.rev == up.rev {
            format!(
                "{} holds {n} edit(s) no overlay has ({}): `cargo xtask refresh{u}` keeps them, `cargo xtask apply{u} --force` discards them",
                ctx.rel(&apply_dir),
                list_edits(&e),
                u = upstream_flag(&ctx)
            )
        } else {
            format!(
                "{} was applied at {}, not at the pin, and holds {n} edit(s) no overlay has ({}): refresh cannot take them at another pin; save them elsewhere, then `cargo xtask apply{} --force`",
                ctx.rel(&apply_dir),
                short(&st.rev),
                list_edits(&e),
                upstream_flag(&ctx)
            )
        });
    }
    let bump_dir = ctx.project.root.join("target").join("bump").join(&up.name);
    if let Ok(t) = std::fs::read_to_string(bump_dir.join(overlay::bump::BUMP_STATE))
        && let Ok(b) = serde_json::from_str::<overlay::bump::BumpState>(&t)
    {
        pending.push(format!(
            "a bump to {} is in progress in {} (resolving {}): resolve, then `{}`, or `{}`",
            short(&b.to),
            ctx.rel(&bump_dir),
            b.resolving,
            xtask_command(g, "bump-pin --continue"),
            xtask_command(g, "bump-pin --abort")
        ));
    }
    for p in &pending {
        let _ = writeln!(h, "note: {p}");
    }
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up, "overlays": overlays, "pending": pending }),
        h,
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Where to materialize the tree [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Discard edits in DIR that the overlays do not account for
    #[arg(long)]
    pub force: bool,
}

/// Materializes the pinned upstream plus the series into `dir`; used by apply and build-mlx.
pub fn materialize(
    ctx: &Ctx,
    dir: &Path,
    force: bool,
) -> Result<(overlay::project::Applied, overlay::materialize::WriteReport)> {
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let applied = apply_series(&repo, &up.rev, &series)?;
    let report = overlay::materialize::write_tree(
        dir,
        &applied.result,
        &repo,
        Origin {
            upstream: &up.name,
            rev: &up.rev,
            series_hash: &series.content_hash(),
        },
        force,
    )?;
    Ok((applied, report))
}

pub fn apply(g: &Global, a: &ApplyArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "apply")?;
    let up = ctx.upstream();
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    let (applied, report) = materialize(&ctx, &dir, a.force)?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "applied {} overlay(s) onto {}@{} in {}",
        applied.outcomes.len(),
        up.name,
        short(&up.rev),
        dir.display()
    );
    for o in &applied.outcomes {
        let hunks: usize = o.files.iter().map(|f| f.placements.len()).sum();
        let _ = writeln!(
            h,
            "  {}: {} hunk(s) in {} file(s)",
            o.overlay,
            hunks,
            o.files.len()
        );
        for (path, p) in o.offsets() {
            let _ = writeln!(
                h,
                "    offset: {path} hunk #{} applied at line {} (recorded {}, {:+})",
                p.hunk,
                p.actual,
                p.recorded,
                p.offset()
            );
        }
    }
    if !report.discarded.is_empty() {
        let _ = writeln!(
            h,
            "discarded {} edit(s) (--force): {}",
            report.discarded.len(),
            report.discarded.join(", ")
        );
    }
    let _ = writeln!(
        h,
        "wrote {} file(s), removed {}, unchanged {}",
        report.written.len(),
        report.removed.len(),
        report.unchanged
    );
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up.name, "rev": up.rev, "dir": dir, "overlays": applied.outcomes,
            "written": report.written.len(), "removed": report.removed, "unchanged": report.unchanged, "discarded": report.discarded }),
        h,
    );
    Ok(ExitCode::SUCCESS)
}

pub fn check(g: &Global) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "check")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let findings = overlay::check::check(&base, &series, &repo)?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "check: {} overlay(s) against {}@{}",
        series.overlays.len(),
        up.name,
        short(&up.rev)
    );
    for o in &series.overlays {
        let mine: Vec<_> = findings.iter().filter(|f| f.overlay == o.name).collect();
        if mine.is_empty() {
            let _ = writeln!(h, "  {} {}", colour("ok      ", "32"), o.name);
        }
        for f in mine {
            let kind = match f.kind {
                FindingKind::DoesNotApply => "CONFLICT",
                FindingKind::Offset => "OFFSET",
                FindingKind::NotCanonical => "NONCANON",
                FindingKind::Unlisted => "UNLISTED",
                FindingKind::UnknownDependency => "DEPENDS",
            };
            let at = match (&f.file, f.hunk, f.patch_line) {
                (Some(file), Some(hk), Some(l)) => format!("{file} hunk #{hk} ({}:{l})", o.name),
                (Some(file), _, _) => file.clone(),
                _ => String::new(),
            };
            let code = if matches!(f.kind, FindingKind::DoesNotApply) {
                "31"
            } else {
                "33"
            };
            let kind = colour(&format!("{kind:<8}"), code);
            let _ = writeln!(h, "  {kind} {}: {at}: {}", o.name, f.message);
        }
    }
    for f in findings.iter().filter(|f| f.kind == FindingKind::Unlisted) {
        let _ = writeln!(h, "  UNLISTED {}: {}", f.overlay, f.message);
    }
    let _ = writeln!(h, "{} finding(s)", findings.len());
    if findings
        .iter()
        .any(|f| matches!(f.kind, FindingKind::Offset | FindingKind::NotCanonical))
    {
        let _ = writeln!(
            h,
            "OFFSET and NONCANON: `cargo xtask canonicalize{}` rewrites those overlays in place (same tree)",
            upstream_flag(&ctx)
        );
    }
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up.name, "rev": up.rev, "findings": findings }),
        h,
    );
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(clap::Args)]
pub struct CanonicalizeArgs {
    /// Overlays to rewrite, as the series names them [default: every one check flags]
    #[arg(value_name = "OVERLAY")]
    pub overlays: Vec<String>,
    /// Report what would be rewritten; write nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// `canonicalize`: rewrites the overlays `check` reports as OFFSET or NONCANON in place, in one
/// transaction, each verified to give the same tree. The default tree's state follows the new
/// series (its files are the same by construction), so unrefreshed edits there stay refreshable.
pub fn canonicalize(g: &Global, a: &CanonicalizeArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "canonicalize")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let rewrites = overlay::check::canonicalize(&base, &series, &repo, &a.overlays)?;
    let mut h = String::new();
    for r in &rewrites {
        let _ = writeln!(
            h,
            "{} {}: {}",
            if a.dry_run {
                "would rewrite"
            } else {
                "rewrote"
            },
            r.overlay,
            r.findings.join("; ")
        );
    }
    if rewrites.is_empty() {
        let _ = writeln!(
            h,
            "nothing to rewrite: every overlay applies at its line and is canonical"
        );
    }
    let json = serde_json::json!({ "upstream": up.name, "rev": up.rev, "dry_run": a.dry_run, "rewritten": rewrites });
    if a.dry_run || rewrites.is_empty() {
        emit(ctx.json, json, h);
        return Ok(ExitCode::SUCCESS);
    }
    let mut writes: Vec<(PathBuf, Option<String>)> = rewrites
        .iter()
        .map(|r| (r.path.clone(), Some(r.new.clone())))
        .collect();
    let mut guard: std::collections::BTreeMap<String, String> = rewrites
        .iter()
        .map(|r| {
            let id = overlay::tree::blob_id(r.old.as_bytes()).to_string();
            (r.path.to_string_lossy().to_string(), id)
        })
        .collect();
    let dir = ctx.default_dir();
    if let Some(mut st) = State::load(&dir)?
        && st.upstream == up.name
        && st.rev == up.rev
        && st.pending.is_none()
        && st.series_hash == series.content_hash()
    {
        let mut new_series = series.clone();
        for ov in &mut new_series.overlays {
            if let Some(r) = rewrites.iter().find(|r| r.overlay == ov.name) {
                ov.raw = r.new.clone();
            }
        }
        st.series_hash = new_series.content_hash();
        let state_path = dir.join(overlay::materialize::STATE_FILE);
        guard.insert(
            state_path.to_string_lossy().to_string(),
            overlay::tree::blob_id(&std::fs::read(&state_path)?).to_string(),
        );
        writes.push((state_path, Some(serde_json::to_string_pretty(&st)?)));
    }
    overlay::bump::write_all(&ctx.project.root, &writes, &guard, &[])?;
    let _ = writeln!(
        h,
        "{} overlay(s) rewritten; the series gives the same tree",
        rewrites.len()
    );
    emit(ctx.json, json, h);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct RefreshArgs {
    /// The materialized tree holding the edits [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Overlay that receives edits touching only upstream lines
    #[arg(long, value_name = "OVERLAY")]
    pub into: Option<String>,
}

#[derive(clap::Args)]
pub struct NewOverlayArgs {
    /// File name of the new overlay, e.g. 0003-fix-foo.patch (".patch" is added if missing)
    pub name: String,
    /// The materialized tree holding the edits [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// upstreamable or local-only
    #[arg(long, value_parser = ["upstreamable", "local-only"])]
    pub kind: String,
    /// Subject line; repeat for body paragraphs (the first -m is the subject, as with git commit)
    #[arg(short = 'm', long = "message", required = true)]
    pub message: Vec<String>,
    /// Print every edit and the overlay it went to (default: one line per overlay written)
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

fn identity() -> Result<String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let cfg = git2::Config::open_default().ok();
    let get = |k: &str| cfg.as_ref().and_then(|c| c.get_string(k).ok());
    let name = env("GIT_AUTHOR_NAME").or_else(|| get("user.name"));
    let email = env("GIT_AUTHOR_EMAIL").or_else(|| get("user.email"));
    match (name, email) {
        (Some(n), Some(e)) => Ok(format!("{n} <{e}>")),
        _ => bail!(
            "no author identity: set git's user.name and user.email (git config --global user.name \"You\"), or GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL"
        ),
    }
}

fn author_date() -> Result<String> {
    // Honour GIT_AUTHOR_DATE like git does ("@<secs> <+hhmm>" or an RFC 2822 date).
    if let Ok(d) = std::env::var("GIT_AUTHOR_DATE")
        && !d.is_empty()
    {
        if let Some(rest) = d.strip_prefix('@') {
            let mut it = rest.split_whitespace();
            let secs: i64 = it
                .next()
                .unwrap_or("")
                .parse()
                .context("GIT_AUTHOR_DATE: expected @<seconds> <+hhmm>")?;
            let off = it.next().unwrap_or("+0000");
            let sign = if off.starts_with('-') { -1 } else { 1 };
            let digits: i32 = off
                .trim_start_matches(['+', '-'])
                .parse()
                .context("GIT_AUTHOR_DATE offset")?;
            return Ok(overlay::render::rfc2822(
                secs,
                sign * (digits / 100 * 60 + digits % 100),
            ));
        }
        return Ok(d);
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    Ok(overlay::render::rfc2822(secs, 0))
}

/// `detail`: one line per edit (refresh, `new-overlay --verbose`), else one per overlay written.
fn run_refresh(
    ctx: &Ctx,
    dir: &Path,
    into: Option<overlay::refresh::Target>,
    detail: bool,
) -> Result<ExitCode> {
    let up = ctx.upstream();
    let series = ctx.series()?;
    let state = State::load(dir)?.with_context(|| {
        format!(
            "{}: not a tree written by `cargo xtask apply` (no state file)",
            dir.display()
        )
    })?;
    if state.upstream != up.name || state.rev != up.rev {
        bail!(
            "{}: materialized from {}@{}, but pins.toml pins {}@{}; apply again first",
            dir.display(),
            state.upstream,
            short(&state.rev),
            up.name,
            short(&up.rev)
        );
    }
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let plan = overlay::refresh::plan(&base, &series, &repo, dir, &state, into)?;
    overlay::refresh::commit(&plan, dir, &ctx.project.root)?;
    let mut h = String::new();
    if !detail {
        for w in plan.written() {
            let what = if w.created {
                format!("created {} (appended to the series)", w.overlay)
            } else {
                format!("rewrote {}", w.overlay)
            };
            let _ = writeln!(
                h,
                "{what}: {} edit(s) in {} file(s) of {}",
                w.edits,
                w.files,
                dir.display()
            );
        }
        if h.is_empty() {
            let _ = writeln!(h, "nothing to refresh: the tree matches the overlays");
        }
        emit(ctx.json, serde_json::to_value(&plan)?, h);
        return Ok(ExitCode::SUCCESS);
    }
    let _ = writeln!(h, "refresh: {}", dir.display());
    for a in &plan.assignments {
        let at = if a.line == 0 {
            format!("{} (whole file)", a.file)
        } else {
            format!("{}:{}", a.file, a.line)
        };
        let _ = writeln!(h, "  {at} -> {} ({})", a.overlay, a.why);
    }
    if let Some(c) = &plan.created {
        let _ = writeln!(h, "created {c} (appended to the series)");
    }
    for r in &plan.rewritten {
        let _ = writeln!(h, "rewrote {r}");
    }
    if plan.rewritten.is_empty() && plan.created.is_none() {
        let _ = writeln!(h, "nothing to refresh: the tree matches the overlays");
    }
    emit(ctx.json, serde_json::to_value(&plan)?, h);
    Ok(ExitCode::SUCCESS)
}

pub fn refresh(g: &Global, a: &RefreshArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "refresh")?;
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    run_refresh(
        &ctx,
        &dir,
        a.into.clone().map(overlay::refresh::Target::Existing),
        true,
    )
}

pub fn new_overlay(g: &Global, a: &NewOverlayArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "new-overlay")?;
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    let file_name = if a.name.ends_with(".patch") {
        a.name.clone()
    } else {
        format!("{}.patch", a.name)
    };
    // The series parser's own rule, so the series never lists a name it then rejects.
    if let Some(why) = overlay::series::name_problem(&file_name).or_else(|| {
        file_name
            .starts_with('.')
            .then_some("not a hidden file (starting with `.`)")
    }) {
        bail!(
            "{file_name:?}: not a valid overlay name: expected a plain file name, {why}; nothing was written\n  help: use letters, digits, `-`, `_` and `.`, like 0003-fix-foo.patch"
        );
    }
    let series = ctx.series()?;
    if series.dir.join(&file_name).exists() {
        bail!(
            "{}: already exists; pick another name or use `refresh --into`",
            series.dir.join(&file_name).display()
        );
    }
    let subject = a.message[0].trim();
    if subject.is_empty() || subject.contains('\n') {
        bail!("-m: the first message is the one-line subject");
    }
    let body = a.message[1..].join("\n\n");
    let trailers = vec![
        ("Overlay-Kind".to_string(), a.kind.clone()),
        ("Upstream-Status".to_string(), "not-submitted".to_string()),
    ];
    let prelude =
        overlay::render::new_prelude(&identity()?, &author_date()?, subject, &body, &trailers);
    let signature = series
        .overlays
        .last()
        .and_then(|o| o.signature.clone())
        .unwrap_or_else(|| format!("cargo-xtask {}", env!("CARGO_PKG_VERSION")));
    run_refresh(
        &ctx,
        &dir,
        Some(overlay::refresh::Target::New {
            file_name,
            prelude,
            signature,
        }),
        a.verbose,
    )
}

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

/// Resolves a commit-ish in the upstream cache, fetching once if it is unknown.
pub fn resolve_rev(ctx: &Ctx, repo: &UpstreamRepo, rev: &str) -> Result<git2::Oid> {
    match repo.resolve(rev) {
        Ok(id) => return Ok(id),
        // More history cannot make an abbreviation less ambiguous.
        Err(e) if e.to_string().contains("is ambiguous") => return Err(e.into()),
        Err(_) => {}
    }
    let up = ctx.upstream();
    let mut bar = Progress::new(&format!("fetching {}", up.name));
    repo.fetch(&up.url, &mut |p| {
        bar.update(p.received_objects as u64, p.total_objects as u64)
    })?;
    bar.finish();
    // A fresh handle sees what the fetch brought.
    let fresh = ctx.open_upstream()?;
    Ok(fresh.resolve(rev)?)
}

/// The upstream branch head after a fetch: what `drift` and the CI canary compare against.
pub fn branch_head(ctx: &Ctx, repo: &UpstreamRepo) -> Result<git2::Oid> {
    let up = ctx.upstream();
    let Some(branch) = &up.branch else {
        bail!(
            "pins.toml: upstream.{} has no `branch`, so there is no upstream head to compare with; pass --to REV",
            up.name
        );
    };
    let mut bar = Progress::new(&format!("fetching {}", up.name));
    repo.fetch(&up.url, &mut |p| {
        bar.update(p.received_objects as u64, p.total_objects as u64)
    })?;
    bar.finish();
    let fresh = ctx.open_upstream()?;
    Ok(fresh.resolve(&format!("refs/heads/{branch}"))?)
}

/// `s` in the ANSI colour `code` when stdout is a terminal and `NO_COLOR` is unset (or empty,
/// as no-color.org says), else `s` as it is: pipes, files and tests get plain text.
pub fn colour(s: &str, code: &str) -> String {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    if !std::io::stdout().is_terminal() || no_color {
        return s.to_string();
    }
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// As [`colour`], for stderr.
pub fn colour_stderr(s: &str, code: &str) -> String {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    if !std::io::stderr().is_terminal() || no_color {
        return s.to_string();
    }
    format!("\x1b[{code}m{s}\x1b[0m")
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
        let _ = write!(h, " ({c} first-parent commit(s), {e} evaluated)");
    }
    h.push('\n');
    for o in &r.overlays {
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
        for c in &d.conflicts {
            let _ = writeln!(h, "      the 3-way merge conflicts in {c}");
        }
        for r in &d.review {
            let _ = writeln!(h, "      review: {r}");
        }
        for c in &d.symbol_changes {
            let what = if c.removed { "removed" } else { "changed" };
            let _ = writeln!(
                h,
                "      {what} upstream: {}::{} ({})",
                c.path, c.symbol, c.watched_because
            );
            if let Some(outer) = &c.diff_under {
                let _ = writeln!(h, "        (its diff is shown under {outer})");
                continue;
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
        for hk in &d.hunks {
            use overlay::drift::HunkStatus as H;
            let line = match (hk.status, hk.actual) {
                (H::Exact, _) if hk.blame.is_empty() => continue,
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

/// One commit of a hunk's blame: what it did to the hunk, the status after it, and whether it
/// gave the hunk its final status ("broke it", for a conflict).
fn hunk_blame_text(b: &overlay::blame::HunkBlame) -> String {
    let what: Vec<String> = b
        .changes
        .iter()
        .map(|c| match c.as_str() {
            "context" => "changed its context".to_string(),
            "moved" => "moved it".to_string(),
            "file deleted" => "deleted its file".to_string(),
            "file moved" => "moved its file".to_string(),
            other => other
                .strip_prefix("symbol ")
                .map_or(other.to_string(), |s| format!("changed {s}")),
        })
        .collect();
    let what = if what.is_empty() {
        "changed its status".to_string()
    } else {
        what.join(", ")
    };
    let status = b.status.map_or("blocked".to_string(), |s| {
        serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    });
    let mark = match (b.decisive, b.status) {
        (true, Some(overlay::drift::HunkStatus::Conflict)) => " (broke it)",
        (true, _) => " (its status since)",
        _ => "",
    };
    format!("{} {what} -> {status}{mark}: {}", short(&b.sha), b.subject)
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
        &up.name,
        from,
        to,
        &series,
        a.per_commit,
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
    emit(
        ctx.json,
        serde_json::to_value(&report)?,
        render_drift(&report),
    );
    let quiet = report.overlays.iter().all(|o| o.drift.status.is_quiet());
    Ok(if quiet {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn build_mlx(g: &Global, a: &crate::build_mlx::BuildMlxArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "build-mlx")?;
    if let Some(out) = &a.bundle {
        return build_mlx_bundle(&ctx, a, out);
    }
    let up = ctx.upstream();
    let series = ctx.series()?;
    let source = crate::build_mlx::SourceInfo {
        upstream: up.name.clone(),
        pin: up.rev.clone(),
        series_hash: series.content_hash(),
        fetchcontent: up.fetchcontent.clone(),
        cache_root: default_cache_root(),
        // The project's own target/ (mlx-sys's build.rs reads this workspace's); another project's
        // build (--root) must not replace what this workspace's crates link.
        workspace_target: ctx.project.root.join("target"),
    };
    crate::build_mlx::run(
        a,
        &source,
        &mut |dir| {
            let r = materialize(&ctx, dir, false).map(|_| ());
            // The source is written; the long build must not keep writers of the project waiting.
            ctx.unlock();
            r
        },
        ctx.json,
    )
}

fn build_mlx_bundle(ctx: &Ctx, a: &crate::build_mlx::BuildMlxArgs, out: &Path) -> Result<ExitCode> {
    if a.backend != Some(crate::build_mlx::Backend::Cuda) {
        anyhow::bail!("--bundle builds the CUDA backend only\n  help: add --backend cuda");
    }
    let report = crate::cuda_bundle::write(ctx, a, out)?;
    let mut human = format!(
        "bundle: {} ({:.1} MiB)\n  mlx@{} + {} overlay(s)\n",
        report.path.display(),
        report.bytes as f64 / (1024.0 * 1024.0),
        short(&report.manifest.pin),
        report.manifest.overlays.len()
    );
    for s in &report.manifest.sources {
        let tag = s.tag.as_deref().unwrap_or("-");
        human.push_str(&format!(
            "  {:<8} {} ({tag}): {} file(s)\n",
            s.name,
            short(&s.rev),
            s.files
        ));
    }
    human.push_str(&format!(
        "  next: unpack it on the GPU machine and run {}/cuda/bundle/build.sh\n",
        crate::cuda_bundle::BUNDLE_DIR
    ));
    emit(ctx.json, serde_json::to_value(&report)?, human);
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct BumpArgs {
    /// The new upstream commit-ish (resolved to a full commit id for pins.toml); with `--continue`
    /// or `--abort` it may be left out (the bump in progress knows it)
    #[arg(required_unless_present_any = ["cont", "abort"])]
    pub rev: Option<String>,
    /// Report what would happen; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Retire overlays that upstream already contains
    #[arg(long)]
    pub drop_upstreamed: bool,
    /// Carry on after resolving a conflict in the bump tree
    #[arg(long = "continue", conflicts_with_all = ["abort", "dry_run"])]
    pub cont: bool,
    /// Abandon a bump in progress (removes the bump tree)
    #[arg(long, conflicts_with = "dry_run")]
    pub abort: bool,
    /// Where conflicts are written for resolution [default: target/bump/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Allow a target that is not a descendant of the pin (it reverts upstream commits)
    #[arg(long)]
    pub allow_downgrade: bool,
}

/// What moving the pin from `from` to `to` reverts, when `to` is not a descendant of `from`: the
/// commits the pin has and `to` lacks. None for a forward move.
fn reverted_commits(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Option<String>> {
    if to == from || repo.graph_descendant_of(to, from)? {
        return Ok(None);
    }
    let (f, t) = (short_id(from), short_id(to));
    let base = match repo.merge_base(from, to) {
        Ok(b) => b,
        Err(_) => return Ok(Some(format!("{t} shares no history with the pin {f}"))),
    };
    let mut walk = repo.revwalk()?;
    walk.push(from)?;
    walk.hide(to)?;
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

fn short_id(id: git2::Oid) -> String {
    id.to_string()[..12].to_string()
}

fn guard_paths(ctx: &Ctx, series: &Series) -> Vec<PathBuf> {
    let mut v = vec![
        ctx.project.pins.path.clone(),
        series.dir.join(overlay::series::SERIES_FILE),
    ];
    v.extend(series.overlays.iter().map(|o| o.path.clone()));
    v
}

fn guards(paths: &[PathBuf]) -> std::collections::BTreeMap<String, String> {
    paths
        .iter()
        .map(|p| {
            let id = std::fs::read(p)
                .ok()
                .map(|b| overlay::tree::blob_id(&b).to_string())
                .unwrap_or_default();
            (p.to_string_lossy().to_string(), id)
        })
        .collect()
}

/// A bump tree without a bump state: what a killed `--continue`, `--abort` or conflict write leaves.
fn leftover_bump_tree(dir: &Path) -> bool {
    dir.exists()
        && !dir.join(overlay::bump::BUMP_STATE).exists()
        && State::load(dir)
            .ok()
            .flatten()
            .is_some_and(|s| s.series_hash.starts_with(BUMP_IN_PROGRESS))
}

/// Removes a tree this tool wrote: renamed aside first, so a kill mid-way leaves no half tree
/// under the real name (the aside copy is removed by the next bump-pin).
fn remove_tree(dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let parent = dir.parent().unwrap_or(Path::new("."));
    if let Ok(rd) = std::fs::read_dir(parent) {
        let prefix = format!(".{name}.overlay-trash-");
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok())
                && !overlay::fsx::pid_alive(pid)
            {
                overlay::fsx::remove_dir_all(&e.path())?;
            }
        }
    }
    if !dir.exists() {
        return Ok(());
    }
    let trash = parent.join(format!(".{name}.overlay-trash-{}", std::process::id()));
    overlay::fsx::rename(dir, &trash)?;
    overlay::fsx::remove_dir_all(&trash)?;
    Ok(())
}

const BUMP_IN_PROGRESS: &str = "bump-in-progress";

/// Whether `dir` holds the whole conflict tree written for `resolving` (not one half-written).
fn bump_tree_is_for(dir: &Path, resolving: &str) -> bool {
    State::load(dir).ok().flatten().is_some_and(|s| {
        s.pending.is_none() && s.series_hash == format!("{BUMP_IN_PROGRESS}:{resolving}")
    })
}

/// A `bump-pin` command line to print as a next step: with the `--root`, `--upstream` and `--dir`
/// this run was given, so it can be pasted as is.
fn bump_command(g: &Global, a: &BumpArgs, rest: &str) -> String {
    let mut c = xtask_command(g, &format!("bump-pin {rest}"));
    if let Some(d) = &a.dir {
        let _ = write!(c, " --dir {}", d.display());
    }
    c
}

/// A command line to print as a next step, with the `--root` and `--upstream` this run was given.
pub fn xtask_command(g: &Global, rest: &str) -> String {
    let mut c = String::from("cargo xtask");
    if let Some(r) = &g.root {
        let _ = write!(c, " --root {}", r.display());
    }
    if let Some(u) = &g.upstream {
        let _ = write!(c, " --upstream {u}");
    }
    let _ = write!(c, " {rest}");
    c
}

/// `text` with this run's `--root`/`--upstream` added to every `` `cargo xtask …` `` it suggests
/// (the engine's messages do not know them).
pub fn with_globals(g: &Global, text: &str) -> String {
    const CMD: &str = "`cargo xtask ";
    let prefix = xtask_command(g, "");
    let mut parts = text.split(CMD);
    let mut out = parts.next().unwrap_or_default().to_string();
    for p in parts {
        out.push('`');
        if p.starts_with("--root ") || p.starts_with("--upstream ") {
            out.push_str("cargo xtask ");
        } else {
            out.push_str(prefix.trim_end());
            out.push(' ');
        }
        out.push_str(p);
    }
    out
}

pub fn bump_pin(g: &Global, a: &BumpArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "bump-pin")?;
    let up = ctx.upstream().clone();
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| ctx.project.root.join("target").join("bump").join(&up.name));
    let state_path = dir.join(BUMP_STATE);
    let state = read_bump_state(&state_path)?;
    if state.is_none() && leftover_bump_tree(&dir) {
        // A bump finished or abandoned, killed before its tree was removed: debris, not work.
        remove_tree(&dir)?;
    }
    if a.abort {
        return bump_abort(g, a, &ctx, &dir, state.as_ref());
    }
    match (&state, a.cont) {
        (Some(s), false) => bail!(
            "a bump to {} is in progress in {} (resolving {}): finish it with `{}`, or abandon it with `{}`",
            short(&s.to),
            dir.display(),
            s.resolving,
            bump_command(g, a, "--continue"),
            bump_command(g, a, "--abort")
        ),
        (None, true) => bail!("no bump in progress in {} to continue", dir.display()),
        _ => {}
    }
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let to = match (&a.rev, &state) {
        (Some(rev), _) => resolve_rev(&ctx, &repo, rev)?,
        (None, Some(s)) => git2::Oid::from_str(&s.to)?,
        (None, None) => bail!("bump-pin needs a REV"),
    };
    let repo = ctx.open_upstream()?;
    let from = git2::Oid::from_str(&up.rev)?;
    if let Some(s) = &state
        && s.to != to.to_string()
    {
        bail!(
            "the bump in progress goes to {}, not {}",
            short(&s.to),
            short(&to.to_string())
        );
    }
    if to == from && state.is_none() {
        emit(
            ctx.json,
            serde_json::json!({ "upstream": up.name, "from": up.rev, "to": up.rev, "moved": false }),
            format!(
                "{} is already pinned at {}; nothing to do\n",
                up.name,
                short(&up.rev)
            ),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let downgrade_note = match &state {
        None => refuse_unsafe_bump(&ctx, a, &repo, from, to)?,
        Some(_) => None,
    };
    let bump = Bump {
        g,
        a,
        ctx: &ctx,
        up: &up,
        dir,
        state_path,
        state,
        series,
        repo,
        from,
        to,
        downgrade_note,
    };
    bump.run()
}

/// The saved progress of a bump stopped at a conflict, if there is one.
fn read_bump_state(state_path: &Path) -> Result<Option<BumpState>> {
    Ok(match std::fs::read_to_string(state_path) {
        Ok(t) => Some(serde_json::from_str(&t).with_context(|| {
            format!(
                "{}: corrupt bump state; `bump-pin --abort` discards it",
                state_path.display()
            )
        })?),
        Err(_) => None,
    })
}

/// `bump-pin --abort`: removes the bump tree (checking it goes to REV, when one is given).
fn bump_abort(
    g: &Global,
    a: &BumpArgs,
    ctx: &Ctx,
    dir: &Path,
    state: Option<&BumpState>,
) -> Result<ExitCode> {
    let Some(s) = state else {
        bail!("no bump in progress in {}", dir.display())
    };
    if let Some(rev) = &a.rev {
        let repo = ctx.open_upstream()?;
        let want = resolve_rev(ctx, &repo, rev)?;
        if want.to_string() != s.to {
            bail!(
                "the bump in progress goes to {}, not {} ({rev}); nothing was removed. `{}` abandons it",
                short(&s.to),
                short(&want.to_string()),
                bump_command(g, a, "--abort")
            );
        }
    }
    remove_tree(dir)?;
    emit(
        ctx.json,
        serde_json::json!({ "abandoned": s.to, "removed": dir }),
        format!(
            "bump abandoned; {} removed, nothing else changed\n",
            dir.display()
        ),
    );
    Ok(ExitCode::SUCCESS)
}

/// Before a new bump starts: refuses to strand edits in the applied tree, or to move the pin
/// backwards without --allow-downgrade. Returns what an allowed downgrade reverts.
fn refuse_unsafe_bump(
    ctx: &Ctx,
    a: &BumpArgs,
    repo: &UpstreamRepo,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Option<String>> {
    let up = ctx.upstream();
    if let Some((st, e)) = applied_edits(ctx)?
        && st.rev == up.rev
    {
        bail!(
            "{} holds {} edit(s) no overlay has ({}); a bump would strand them (refresh works only at the pin they were made on); nothing was written\n  help: keep them: `cargo xtask refresh{u}` (or `new-overlay`), then bump; discard them: `cargo xtask apply{u} --force`, then bump",
            ctx.rel(&ctx.default_dir()),
            e.all().count(),
            list_edits(&e),
            u = upstream_flag(ctx)
        );
    }
    let Some(what) = reverted_commits(repo.repo(), from, to)? else {
        return Ok(None);
    };
    if !a.allow_downgrade {
        bail!(
            "refusing to move the pin backwards: {what}; nothing was written\n  help: `git log {}..{}` in the upstream lists them; pass --allow-downgrade if reverting them is what you want",
            short(&to.to_string()),
            short(&up.rev)
        );
    }
    Ok(Some(what))
}

/// One `bump-pin` (new or `--continue`d) once its target is known and the checks have passed.
struct Bump<'a> {
    g: &'a Global,
    a: &'a BumpArgs,
    ctx: &'a Ctx,
    up: &'a Upstream,
    /// The bump tree, where a conflict is written for resolution.
    dir: PathBuf,
    state_path: PathBuf,
    /// The saved progress, when continuing.
    state: Option<BumpState>,
    series: Series,
    repo: UpstreamRepo,
    from: git2::Oid,
    to: git2::Oid,
    /// What an allowed downgrade reverts.
    downgrade_note: Option<String>,
}

impl Bump<'_> {
    fn run(&self) -> Result<ExitCode> {
        let (outcome, report, rewritten_note, forecast) = self.merge()?;
        let mut h = self.human_report(&outcome, &report, &forecast);
        let overlays = match &forecast {
            Some(f) => serde_json::to_value(f.overlays())?,
            None => serde_json::to_value(&outcome.overlays)?,
        };
        let json = serde_json::json!({ "upstream": self.up.name, "from": self.up.rev, "to": self.to.to_string(), "dry_run": self.a.dry_run,
            "overlays": overlays, "drift": report.overlays, "reverts": self.downgrade_note });

        if let Some(tree) = &outcome.conflict_tree {
            let resolving = outcome
                .overlays
                .iter()
                .find(|o| matches!(o.action, Action::Conflict | Action::Review))
                .map(|o| o.name.clone())
                .unwrap_or_default();
            if !self.a.dry_run {
                self.write_conflict(&outcome, tree, &resolving)?;
                self.conflict_next_steps(&outcome, &resolving, rewritten_note, &mut h);
            }
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::from(1));
        }
        if !outcome.is_clean() {
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::from(1));
        }
        if self.a.dry_run {
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::SUCCESS);
        }
        let written = self.write_bump(&outcome)?;
        let _ = writeln!(
            h,
            "pinned {} at {}; {} file(s) written",
            self.up.name, self.to, written
        );
        emit(self.ctx.json, json, h);
        Ok(ExitCode::SUCCESS)
    }

    /// Carries the series across to the new pin, guided by drift, with the conflict resolved by
    /// hand when continuing. Also returns drift's report, and whether the bump tree has to be
    /// written again (an earlier bump-pin was killed while writing it). A dry run is the
    /// forecast, which crosses every conflict (`overlay::forecast`).
    #[allow(clippy::type_complexity)]
    fn merge(
        &self,
    ) -> Result<(
        overlay::bump::Outcome,
        overlay::drift::Report,
        bool,
        Option<overlay::forecast::Forecast>,
    )> {
        let old_base = self.repo.tree_at(self.from)?;
        let new_base = self.repo.tree_at(self.to)?;
        // Statuses for the review list (context drift is carried across but named).
        let report = overlay::drift::drift(
            self.repo.repo(),
            &self.repo,
            &self.up.name,
            self.from,
            self.to,
            &self.series,
            false,
        )?;
        let (resolved_tree, rewritten_note) = self.resolution()?;
        let resolved = match (&resolved_tree, &self.state) {
            (Some(tree), Some(s)) => Some((s.resolving.as_str(), tree)),
            _ => None,
        };
        let done: Vec<(String, Option<String>)> = self
            .state
            .as_ref()
            .map(|s| s.done.clone())
            .unwrap_or_default();
        if let (Some((_, tree)), Some(s)) = (&resolved, &self.state) {
            self.refuse_markers(tree, s, &new_base)?;
        }
        let labels = ("old pin", "overlay", "new upstream");
        let guidance = self.guidance(&report)?;
        if self.a.dry_run {
            let f = overlay::forecast::forecast(
                &old_base,
                &new_base,
                &self.series,
                &self.repo,
                self.a.drop_upstreamed,
                labels,
                &guidance,
            )?;
            let outcome = overlay::bump::Outcome {
                overlays: f.outcome.overlays.clone(),
                conflict_tree: f.outcome.conflict_tree.clone(),
                series_raw: f.outcome.series_raw.clone(),
            };
            return Ok((outcome, report, rewritten_note, Some(f)));
        }
        let outcome = overlay::bump::bump_guided(
            &old_base,
            &new_base,
            &self.series,
            &self.repo,
            self.a.drop_upstreamed,
            &done,
            resolved,
            labels,
            &guidance,
        )?;
        Ok((outcome, report, rewritten_note, None))
    }

    /// When continuing: the resolution in the bump tree (None when the tree is a half-written one,
    /// with `true`: it is written again). Refuses when the project changed since the bump started.
    fn resolution(&self) -> Result<(Option<overlay::tree::Tree>, bool)> {
        let Some(s) = &self.state else {
            return Ok((None, false));
        };
        let now = guards(&guard_paths(self.ctx, &self.series));
        if now != s.guards {
            bail!(
                "pins.toml, the series or an overlay changed since the bump started; `bump-pin --abort` and start again"
            );
        }
        if bump_tree_is_for(&self.dir, &s.resolving) {
            Ok((Some(overlay::bump::tree_from_dir(&self.dir)?), false))
        } else {
            // The tree for this conflict was being written when a bump-pin was killed: it is
            // not a resolution. Write it again from the saved progress.
            Ok((None, true))
        }
    }

    /// Conflict markers left in the files the merge wrote are not a resolution.
    fn refuse_markers(
        &self,
        tree: &overlay::tree::Tree,
        s: &BumpState,
        new_base: &overlay::tree::Tree,
    ) -> Result<()> {
        let mut before = new_base.clone();
        for (name, raw) in &s.done {
            if let Some(raw) = raw {
                let ov = self
                    .series
                    .overlays
                    .iter()
                    .find(|o| &o.name == name)
                    .context("overlay vanished from the series")?;
                before.apply_overlay(
                    &overlay::patch::parse_overlay(name, &ov.path, raw)?,
                    &self.repo,
                )?;
            }
        }
        let markers = overlay::bump::conflict_markers(tree, &before, &self.repo)?;
        if !markers.is_empty() {
            bail!(
                "conflict markers remain in {}: {}",
                self.dir.display(),
                markers.join(", ")
            );
        }
        Ok(())
    }

    /// The overlays drift's classification stops at for review (bump and drift share it), and
    /// upstream's renames.
    fn guidance(&self, report: &overlay::drift::Report) -> Result<overlay::bump::Guidance> {
        let review: std::collections::BTreeMap<String, Vec<String>> = report
            .overlays
            .iter()
            .filter(|o| o.drift.status == overlay::drift::Status::Review)
            .map(|o| (o.drift.name.clone(), o.drift.review.clone()))
            .collect();
        Ok(overlay::bump::Guidance {
            review,
            renames: overlay::drift::upstream_renames(
                self.repo.repo(),
                self.from,
                self.to,
                &overlay::drift::relevant_paths(&self.series),
            )?,
        })
    }

    /// The human report: one line per overlay with what the bump did, and what to review.
    fn human_report(
        &self,
        outcome: &overlay::bump::Outcome,
        report: &overlay::drift::Report,
        forecast: &Option<overlay::forecast::Forecast>,
    ) -> String {
        let mut h = String::new();
        let _ = writeln!(
            h,
            "bump-pin: {} {} -> {}{}",
            self.up.name,
            short(&self.up.rev),
            short(&self.to.to_string()),
            if self.a.dry_run { " (dry run)" } else { "" }
        );
        if let Some(what) = &self.downgrade_note {
            let _ = writeln!(h, "  downgrade (--allow-downgrade): {what}");
        }
        for (i, (o, d)) in outcome.overlays.iter().zip(&report.overlays).enumerate() {
            let what = action_text(o, d);
            let _ = writeln!(h, "  {:<13} {}: {what}", d.drift.status.as_str(), o.name);
            if let Some(by) = forecast
                .as_ref()
                .and_then(|f| f.depends_on_resolution_of[i].as_ref())
            {
                let _ = writeln!(
                    h,
                    "      depends on the resolution of {by}: forecast on that overlay's side of each conflict (ours)"
                );
            }
            if o.action == Action::Review {
                for r in &o.conflicts {
                    let _ = writeln!(h, "      review: {r}");
                }
            }
            for c in &d.drift.symbol_changes {
                // (A review stop already listed the removed ones among its reasons.)
                let listed = o.action == Action::Review && c.removed;
                if matches!(o.action, Action::Kept | Action::Rewritten | Action::Review) && !listed
                {
                    let what = if c.removed { "removed" } else { "changed" };
                    let _ = writeln!(
                        h,
                        "      review: upstream {what} {}::{} ({})",
                        c.path, c.symbol, c.watched_because
                    );
                }
            }
            for n in &o.notes {
                let _ = writeln!(h, "      {n}");
            }
        }
        h
    }

    /// The bump's progress, for `--continue`: at the start, or as saved.
    fn start_guards(&self) -> std::collections::BTreeMap<String, String> {
        self.state
            .as_ref()
            .map(|s| s.guards.clone())
            .unwrap_or_else(|| guards(&guard_paths(self.ctx, &self.series)))
    }

    /// Writes the merge with markers into the bump tree, and the state `--continue` resumes
    /// from; pins.toml and overlays/ stay untouched.
    fn write_conflict(
        &self,
        outcome: &overlay::bump::Outcome,
        tree: &overlay::tree::Tree,
        resolving: &str,
    ) -> Result<()> {
        let new_state = BumpState {
            upstream: self.up.name.clone(),
            from: self.up.rev.clone(),
            to: self.to.to_string(),
            drop_upstreamed: self.a.drop_upstreamed,
            done: outcome
                .overlays
                .iter()
                .take_while(|o| !matches!(o.action, Action::Conflict | Action::Review))
                .map(|o| (o.name.clone(), o.raw.clone()))
                .collect(),
            resolving: resolving.to_string(),
            guards: self.start_guards(),
        };
        let tree_tag = format!("{BUMP_IN_PROGRESS}:{resolving}");
        let write_tree = || {
            overlay::materialize::write_tree(
                &self.dir,
                tree,
                &self.repo,
                Origin {
                    upstream: &self.up.name,
                    rev: &self.to.to_string(),
                    series_hash: &tree_tag,
                },
                self.state.is_some(),
            )
        };
        let write_state = || {
            overlay::fsx::write_atomic(
                &self.state_path,
                serde_json::to_string_pretty(&new_state)
                    .expect("serializes")
                    .as_bytes(),
            )
        };
        // Order matters if we are killed in between. A first conflict: the tree, then the state
        // (a tree without state is debris the next bump-pin clears). A later one: the state first,
        // so the resolutions made so far are saved before the tree is overwritten; the tree's tag
        // tells a half-written tree from a resolution.
        if self.state.is_none() {
            write_tree()?;
            write_state()?;
        } else {
            write_state()?;
            write_tree()?;
        }
        Ok(())
    }

    /// After a conflict was written: how to finish (or abandon) the bump.
    fn conflict_next_steps(
        &self,
        outcome: &overlay::bump::Outcome,
        resolving: &str,
        rewritten_note: bool,
        h: &mut String,
    ) {
        let (g, a) = (self.g, self.a);
        if rewritten_note {
            let _ = writeln!(
                h,
                "(the bump tree was rewritten: an earlier bump-pin was interrupted while writing it)"
            );
        }
        let _ = writeln!(
            h,
            "pins.toml and overlays/ are unchanged. To finish the bump:"
        );
        let reviewing = outcome.overlays.iter().any(|o| o.action == Action::Review);
        if reviewing {
            let _ = writeln!(
                h,
                "  1. review {resolving} as merged in {} (edit it there if needed; see docs/drift.md)",
                self.dir.display()
            );
        } else {
            let _ = writeln!(
                h,
                "  1. resolve the conflict markers in {}",
                self.dir.display()
            );
        }
        let _ = writeln!(h, "  2. {}", bump_command(g, a, "--continue"));
        let _ = writeln!(h, "  (or {})", bump_command(g, a, "--abort"));
    }

    /// A clean bump: moves the pin and writes the carried overlays (and series) in one
    /// transaction, then removes the bump tree. Returns how many files were written.
    fn write_bump(&self, outcome: &overlay::bump::Outcome) -> Result<usize> {
        let pins_path = &self.ctx.project.pins.path;
        let pins_text = std::fs::read_to_string(pins_path)?;
        let new_pins =
            overlay::bump::set_pin(&pins_text, pins_path, &self.up.name, &self.to.to_string())?;
        let mut writes: Vec<(PathBuf, Option<String>)> = Vec::new();
        for (o, ov) in outcome.overlays.iter().zip(&self.series.overlays) {
            match (&o.action, &o.raw) {
                (Action::Dropped, _) => writes.push((ov.path.clone(), None)),
                (_, Some(raw)) if *raw != ov.raw => {
                    writes.push((ov.path.clone(), Some(raw.clone())))
                }
                _ => {}
            }
        }
        if outcome.series_raw != self.series.raw {
            writes.push((
                self.series.dir.join(overlay::series::SERIES_FILE),
                Some(outcome.series_raw.clone()),
            ));
        }
        writes.push((pins_path.clone(), Some(new_pins)));
        let start_guards = self.start_guards();
        // The bump's state goes in the same transaction: once pins.toml moves, no bump is in progress.
        overlay::bump::write_all(
            &self.ctx.project.root,
            &writes,
            &start_guards,
            std::slice::from_ref(&self.state_path),
        )?;
        if self.state.is_some() {
            remove_tree(&self.dir)?;
        }
        Ok(writes.len())
    }
}

/// What the bump did with one overlay, for the human report.
fn action_text(o: &overlay::bump::OverlayBump, d: &overlay::drift::ReportOverlay) -> String {
    match o.action {
        Action::Kept => "kept".to_string(),
        Action::Rewritten => "rewritten".to_string(),
        Action::Dropped => "dropped (upstreamed)".to_string(),
        Action::Upstreamed => "upstreamed: pass --drop-upstreamed to retire it".to_string(),
        Action::Conflict => format!("CONFLICT in {}", o.conflicts.join(", ")),
        Action::Resolved => "resolved by hand".to_string(),
        Action::Pending => match &d.drift.blocked_by {
            Some(by) => format!("not reached (blocked by {by})"),
            None => "not reached".to_string(),
        },
        Action::Review => "STOPPED for review".to_string(),
    }
}

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

/// `git ARGS` in `dir`: its stdout as it is, or its stderr in the error.
pub fn git_output(dir: &Path, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

pub fn export_upstream(g: &Global, a: &ExportArgs) -> Result<ExitCode> {
    use overlay::export::{Outcome, export, select};
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
    if a.build {
        build_export(&up, scratch.path(), &clone, onto, &head)?;
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
/// `scratch`. Returns the clone and its HEAD.
fn git_am_onto(
    scratch: &Path,
    repo: &UpstreamRepo,
    exported: &[overlay::export::Exported],
    onto: git2::Oid,
) -> Result<(PathBuf, String)> {
    let patches = scratch.join("patches");
    std::fs::create_dir_all(&patches)?;
    for e in exported {
        std::fs::write(patches.join(&e.file_name), &e.raw)?;
    }
    let clone = scratch.join("upstream");
    run_git(
        scratch,
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            "--shared",
            &repo.cache_path.to_string_lossy(),
            "upstream",
        ],
    )?;
    run_git(
        &clone,
        &["checkout", "--quiet", "--detach", &onto.to_string()],
    )?;
    for e in exported {
        run_git(
            &clone,
            &[
                "-c",
                "user.name=export-upstream",
                "-c",
                "user.email=export@localhost",
                "am",
                "--quiet",
                "--committer-date-is-author-date",
                &patches.join(&e.file_name).to_string_lossy(),
            ],
        )
        .with_context(|| {
            format!(
                "{} does not `git am` onto {}",
                e.file_name,
                short(&onto.to_string())
            )
        })?;
    }
    let head = run_git(&clone, &["rev-parse", "HEAD"])?;
    Ok((clone, head))
}

/// `--build`: configures and builds the tree `git am` left in `clone` (CPU backend); an error when
/// it does not build.
fn build_export(
    up: &Upstream,
    scratch: &Path,
    clone: &Path,
    onto: git2::Oid,
    head: &str,
) -> Result<()> {
    let args = crate::build_mlx::BuildMlxArgs {
        backend: Some(crate::build_mlx::Backend::Cpu),
        profile: crate::build_mlx::Profile::Release,
        jobs: None,
        install_deps: false,
        bundle: None,
    };
    let source = crate::build_mlx::SourceInfo {
        // Same Ninja tree as the fork's own build when onto is the pin: only what differs recompiles.
        upstream: up.name.clone(),
        pin: onto.to_string(),
        series_hash: head.to_string(),
        fetchcontent: up.fetchcontent.clone(),
        cache_root: default_cache_root(),
        workspace_target: scratch.join("target"),
    };
    let am = git2::Repository::open(clone)?;
    let tree = overlay::upstream::tree_of_commit(&am, git2::Oid::from_str(head)?)?;
    let code = crate::build_mlx::run(
        &args,
        &source,
        &mut |dir| {
            // The tree exactly as git am left it, written incrementally (unchanged files keep
            // their mtimes, so only what the export changes recompiles).
            let rev = onto.to_string();
            let origin = Origin {
                upstream: &up.name,
                rev: &rev,
                series_hash: head,
            };
            overlay::materialize::write_tree(dir, &tree, &am, origin, true)?;
            Ok(())
        },
        false,
    )?;
    if code != ExitCode::SUCCESS {
        bail!("the exported series does not build (see above); nothing was written");
    }
    Ok(())
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
