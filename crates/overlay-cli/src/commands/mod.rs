//! The commands: load the project, call the engine, print. One module per command; what they
//! share (the loaded project, JSON envelope, colours, next-step command lines) is here.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use overlay::lock::{Mode as LockMode, ProjectLock};
use overlay::manifest::Upstream;
use overlay::materialize::State;
use overlay::project::Project;
use overlay::series::Series;
use overlay::txn::Recovery;
use overlay::upstream::{UpstreamRepo, default_cache_root};

use crate::Global;
use crate::progress::Progress;

mod apply;
mod bump_pin;
mod bump_pr;
mod canonicalize;
mod check;
mod drift;
mod export_upstream;
mod import;
mod interdiff;
mod new_overlay;
mod refresh;
mod status;

pub use apply::{ApplyArgs, apply, materialize, materialize_unpatched};
pub use bump_pin::{BumpArgs, bump_pin};
pub use bump_pr::{BumpPrArgs, bump_pr};
pub use canonicalize::{CanonicalizeArgs, canonicalize};
pub use check::check;
pub use drift::{DriftArgs, branch_head, drift, markdown_drift, render_drift, resolve_rev};
pub use export_upstream::{ExportArgs, export_upstream};
pub use import::{ImportArgs, add_drift_reverts, import};
pub use interdiff::{InterdiffArgs, interdiff, markdown_interdiff, render_interdiff};
pub use new_overlay::{NewOverlayArgs, new_overlay};
pub use refresh::{RefreshArgs, refresh};
pub use status::status;

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
    /// Writes the next steps this run suggests (with its `--root`/`--upstream`).
    pub steps: crate::steps::Steps,
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
        let project = g.extensions.with(|extras| Project::load(&root, extras))?;
        project.upstream(g.upstream.as_deref())?;
        Ok(Ctx {
            project,
            json: g.json,
            upstream: g.upstream.clone(),
            steps: crate::steps::Steps::new(g),
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
            .open_upstream(up, &default_cache_root(), &mut |p| bar.fetch(p))?;
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

/// While a bump of this upstream is in progress, `command` (one that writes overlays, the series
/// or the applied tree) is refused: it would change what the bump started from, and the only way
/// on would be `--abort`, which loses the resolutions ([`overlay::Refusal::BumpInProgress`]).
pub(crate) fn refuse_during_bump(ctx: &Ctx, g: &Global, command: &str) -> Result<()> {
    let up = &ctx.upstream().name;
    let session = overlay::bump::session::Session::for_project(&ctx.project.root, up, None);
    let Some(state) = session.read_state()? else {
        return Ok(());
    };
    let session = session.resumed(Some(&state), false);
    let refusal = overlay::Refusal::BumpInProgress(Box::new(overlay::error::BumpInProgress {
        to: short(&state.to).to_string(),
        dir: ctx.rel(&session.dir).into_owned(),
        resolving: state.resolving.clone(),
        finish: xtask_command(g, "bump-pin --continue"),
        abandon: xtask_command(g, "bump-pin --abort"),
    }));
    Err(overlay::Error::from(refusal)
        .with_help(format!(
            "{command} would change overlays/ or the applied tree the bump started from; nothing was written. Finish the bump first (the resolutions so far are kept), then {command} at the new pin"
        ))
        .into())
}

/// The first 12 characters of a commit id, as reports show it.
pub fn short(rev: &str) -> &str {
    &rev[..12.min(rev.len())]
}

/// The version of every `--json` report's shape (docs/json.md); bumped on a breaking change.
pub const JSON_SCHEMA: u32 = 1;

/// A `--json` report: the command's object with `"schema"` added.
pub fn versioned(value: serde_json::Value) -> Versioned {
    match value {
        serde_json::Value::Object(mut fields) => {
            fields.remove("schema");
            Versioned(fields)
        }
        other => Versioned(serde_json::Map::from_iter([("report".to_string(), other)])),
    }
}

/// A report as printed: `"schema"` first, then the command's fields in their (sorted) order.
/// `{}` prints it on one line, `{:#}` pretty.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned(pub serde_json::Map<String, serde_json::Value>);

impl serde::Serialize for Versioned {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len() + 1))?;
        map.serialize_entry("schema", &JSON_SCHEMA)?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl std::fmt::Display for Versioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = if f.alternate() {
            serde_json::to_string_pretty(self)
        } else {
            serde_json::to_string(self)
        };
        f.write_str(&text.map_err(|_| std::fmt::Error)?)
    }
}

/// Prints a report: `value` (with `"schema"`) under `--json`, else the human text.
pub fn emit(json: bool, value: serde_json::Value, human: String) {
    if json {
        println!("{:#}", versioned(value));
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

pub(crate) fn identity() -> Result<String> {
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

pub(crate) fn author_date() -> Result<String> {
    if let Ok(d) = std::env::var("GIT_AUTHOR_DATE")
        && !d.is_empty()
    {
        return mail_date(&d);
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    Ok(overlay::render::rfc2822(secs, 0))
}

/// GIT_AUTHOR_DATE in any form git reads (`@<seconds> <+hhmm>`, RFC 2822, ISO 8601, ...: parsed
/// by gix-date as git parses it) as the RFC 2822 date a patch's mail header carries.
fn mail_date(d: &str) -> Result<String> {
    let now = gix_date::ZonedDateTime::now();
    let t = gix_date::parse(d, Some(now)).with_context(|| {
        format!("GIT_AUTHOR_DATE={d:?} is not a date git reads (e.g. \"@1700000000 +0100\")")
    })?;
    Ok(overlay::render::rfc2822(t.seconds, t.offset / 60))
}

/// `s` in the colour `code` (SGR parameters such as `"32"` or `"31;1"`) when stdout is a
/// terminal and `NO_COLOR` is unset (or empty, as no-color.org says), else `s` as it is: pipes,
/// files and tests get plain text.
pub fn colour(s: &str, code: &str) -> String {
    paint(s, code, std::io::stdout().is_terminal())
}

/// As [`colour`], for stderr.
pub fn colour_stderr(s: &str, code: &str) -> String {
    paint(s, code, std::io::stderr().is_terminal())
}

/// `s` styled by anstyle when the stream is a `terminal` and `NO_COLOR` (anstyle-query's reading
/// of it) does not say no. Deliberately not anstream's full `Auto` choice: `CLICOLOR_FORCE` would
/// colour pipes, which these reports never are.
fn paint(s: &str, code: &str, terminal: bool) -> String {
    if !terminal || anstyle_query::no_color() {
        return s.to_string();
    }
    let style = sgr_style(code);
    format!("{style}{s}{style:#}")
}

/// The anstyle [`Style`](anstyle::Style) the SGR parameters `code` name: bold (`1`), the eight
/// colours (`30`–`37`) and their bright forms (`90`–`97`), the codes the reports use.
fn sgr_style(code: &str) -> anstyle::Style {
    use anstyle::AnsiColor::*;
    const COLOURS: [anstyle::AnsiColor; 8] =
        [Black, Red, Green, Yellow, Blue, Magenta, Cyan, White];
    code.split(';')
        .fold(anstyle::Style::new(), |style, p| match p.parse::<usize>() {
            Ok(1) => style.bold(),
            Ok(n @ 30..=37) => style.fg_color(Some(COLOURS[n - 30].into())),
            Ok(n @ 90..=97) => style.fg_color(Some(COLOURS[n - 90].bright(true).into())),
            _ => {
                debug_assert!(false, "unsupported SGR code {p:?} in {code:?}");
                style
            }
        })
}

/// A command line to print as a next step, with the `--root` and `--upstream` this run was given
/// (written by [`crate::steps::Steps`], as the engine's typed next steps are).
pub fn xtask_command(g: &Global, rest: &str) -> String {
    crate::steps::Steps::new(g).line(rest)
}

/// `git ARGS` in `dir`: its stdout as it is, or its stderr in the error
/// (`overlay::export::verify::git_output`).
pub fn git_output(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(overlay::export::verify::git_output(dir, args)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anstyle::AnsiColor;

    #[test]
    fn git_author_date_in_every_form_git_reads_becomes_an_rfc_2822_date() {
        let want = "Tue, 14 Nov 2023 23:13:20 +0100";
        for d in [
            "@1700000000 +0100",
            "1700000000 +0100",
            "Tue, 14 Nov 2023 23:13:20 +0100",
            "2023-11-14 23:13:20 +0100",
            "2023-11-14T23:13:20+01:00",
        ] {
            assert_eq!(mail_date(d).unwrap(), want, "{d}");
        }
        let e = mail_date("next tuesday-ish").unwrap_err();
        assert!(
            format!("{e:#}").contains("GIT_AUTHOR_DATE=\"next tuesday-ish\""),
            "{e:#}"
        );
    }

    #[test]
    fn every_colour_code_the_reports_use_is_a_style() {
        let red = AnsiColor::Red.on_default();
        assert_eq!(sgr_style("31;1"), red.bold());
        assert_eq!(sgr_style("32"), AnsiColor::Green.on_default());
        assert_eq!(sgr_style("33;1"), AnsiColor::Yellow.on_default().bold());
        assert_eq!(sgr_style("90"), AnsiColor::BrightBlack.on_default());
        for code in ["31", "32", "33", "33;1", "35", "36", "90", "31;1"] {
            assert_ne!(sgr_style(code), anstyle::Style::new(), "{code}");
        }
    }

    #[test]
    fn colours_only_on_a_terminal() {
        assert_eq!(paint("ok", "32", false), "ok", "a pipe gets plain text");
        if !anstyle_query::no_color() {
            let on_tty = paint("ok", "32", true);
            assert!(
                on_tty.starts_with("\x1b[") && on_tty.ends_with("ok\x1b[0m"),
                "{on_tty:?}"
            );
        }
    }
}
