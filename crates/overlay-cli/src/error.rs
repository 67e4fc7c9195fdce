//! The CLI's one error type: every failure of a command becomes a [`CliError`], which decides the
//! exit code and renders the one error shape (`error: …` on stderr, and under `--json`
//! `{"schema": 1, "error": …, "kind": …, "hint": …}` on stdout; docs/json.md). Library errors
//! (the engine's `overlay::Error`, git's, io's) are mapped here, in one place, as jj's
//! `command_error.rs` does; errors of crates this one does not name (a fork's build) come
//! classified by the fork's tasks as a [`Classified`], made with this module's [`Link`].

use std::process::ExitCode;

use overlay::Help;

use crate::steps::Steps;

/// What kind of failure, for machines (`"kind"` in the JSON error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad input or a refusal: a file and line and what to do (the engine's `Input`).
    Input,
    /// An overlay does not apply where it is meant to (the engine's `Apply`).
    Apply,
    /// The build driver's failures the user can act on (missing dependencies, a failed configure,
    /// build or install).
    Build,
    /// A file could not be read or written.
    Io,
    /// git or libgit2 failed.
    Git,
    /// A documented refusal of the engine (`overlay::Refusal`, docs/refusals.md): nothing was written.
    Refused,
    /// Anything else (with its context chain).
    Other,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Apply => "apply",
            Kind::Build => "build",
            Kind::Io => "io",
            Kind::Git => "git",
            Kind::Refused => "refused",
            Kind::Other => "other",
        }
    }
}

/// The engine's own classification (`overlay::Error::kind`), mapped onto the CLI's kinds.
impl From<&overlay::Error> for Kind {
    fn from(err: &overlay::Error) -> Kind {
        match err.kind() {
            overlay::error::ErrorKind::Input(_) => Kind::Input,
            overlay::error::ErrorKind::Refused => Kind::Refused,
            overlay::error::ErrorKind::Apply => Kind::Apply,
            overlay::error::ErrorKind::Io => Kind::Io,
            overlay::error::ErrorKind::Git => Kind::Git,
        }
    }
}

/// interdiff's errors: the engine's keep their kind, its own are bad input (a revision, a folder).
impl From<&overlay::interdiff::Error> for Kind {
    fn from(err: &overlay::interdiff::Error) -> Kind {
        err.engine().map_or(Kind::Input, Kind::from)
    }
}

/// import's errors: the engine's keep their kind; a folder or copy it cannot take is bad input;
/// an overlay that exists already and a series changed while it ran are refusals (nothing was
/// written, as the engine's "changed on disk").
impl From<&overlay::import::Error> for Kind {
    fn from(err: &overlay::import::Error) -> Kind {
        use overlay::import::Error as E;
        match err {
            E::Engine(e) => Kind::from(e),
            E::OverlayExists { .. } | E::Raced(_) => Kind::Refused,
            E::NoDir(_) | E::Empty(_) | E::BadCopy { .. } | E::NotUpstreamPath { .. } => {
                Kind::Input
            }
        }
    }
}

/// A failure the user can act on, with what to do: the CLI's (and a fork's tasks') own errors
/// that have a `help:` line. Its steps are written like the engine's (program name and this
/// run's flags, by [`Steps`]).
#[derive(Debug)]
pub struct HintedError {
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: Help,
    /// Its kind, when not [`Kind::Other`].
    pub kind: Option<Kind>,
}

impl HintedError {
    /// `message` with `help`, as an error for `?` and `bail!`-like returns.
    pub fn error(message: impl Into<String>, help: impl Into<Help>) -> anyhow::Error {
        Self::of_kind(None, message, help)
    }

    /// [`HintedError::error`] of a kind (`Some(Kind::Build)`: missing build tools).
    pub fn of_kind(
        kind: Option<Kind>,
        message: impl Into<String>,
        help: impl Into<Help>,
    ) -> anyhow::Error {
        anyhow::Error::new(HintedError {
            message: message.into(),
            help: help.into(),
            kind,
        })
    }
}

impl std::fmt::Display for HintedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  help: {}", self.message, self.help)
    }
}

impl std::error::Error for HintedError {}

/// A command's failure as the user sees it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    pub kind: Kind,
    /// The whole message, `help:` lines included, with this run's `--root`/`--upstream` added to
    /// the commands it suggests.
    pub message: String,
    /// What to do: the message's `help:` lines, when it has some.
    pub hint: Option<String>,
}

impl CliError {
    /// Maps an error a command returned; `g` supplies the globals its next steps carry.
    pub fn from_anyhow(g: &crate::Global, e: &anyhow::Error) -> CliError {
        let all = Link::join(e.chain().map(|c| Link::of(c, &Steps::new(g))));
        CliError {
            kind: all.kind.unwrap_or(Kind::Other),
            hint: (!all.help.is_empty()).then(|| all.help.join("\n")),
            message: all.text,
        }
    }

    /// A usage error clap found in the arguments (an unknown command, a missing value): bad
    /// input, with clap's text (usage included) and its tips and `--help` pointer as the hint.
    pub fn usage(e: &clap::Error) -> CliError {
        let text = e.render().to_string();
        let message = text.trim_end().trim_start_matches("error: ").to_string();
        let helps: Vec<&str> = message
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("tip:") || l.starts_with("For more information"))
            .collect();
        CliError {
            kind: Kind::Input,
            hint: (!helps.is_empty()).then(|| helps.join("\n")),
            message,
        }
    }

    /// Every error exits 2 (1 is for findings, which are not errors).
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(2)
    }

    /// The one JSON error shape (docs/json.md).
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "schema": crate::commands::JSON_SCHEMA,
            "error": self.message,
            "kind": self.kind.as_str(),
        });
        if let Some(h) = &self.hint {
            v["hint"] = h.clone().into();
        }
        v
    }
}

/// An error the fork's tasks classified (a build crate's, which this crate does not name), as
/// the CLI shows it: its whole text (the chain, next steps written out), its kind and its help.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.text)]
pub struct Classified(pub Link);

impl Classified {
    /// `link` as an error (no kind: [`Kind::Other`]).
    pub fn wrap(link: Link) -> anyhow::Error {
        anyhow::Error::new(Classified(link))
    }
}

/// One link of an error's chain as the CLI shows it: its text (next steps written by [`Steps`]),
/// its kind and its help, when the library that made it types them.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// The text, next steps written out.
    pub text: String,
    /// The kind, when the library says it.
    pub kind: Option<Kind>,
    /// Its help lines, steps written out.
    pub help: Vec<String>,
}

impl Link {
    /// One link, typed by the library that made it.
    pub fn of(cause: &(dyn std::error::Error + 'static), steps: &Steps) -> Link {
        if let Some(err) = cause.downcast_ref::<overlay::Error>() {
            return Link::engine(err, steps);
        }
        if let Some(err) = cause.downcast_ref::<overlay::interdiff::Error>() {
            let help = err.help();
            return Link::typed(err, Some(Kind::from(err)), help.as_ref(), steps);
        }
        if let Some(err) = cause.downcast_ref::<overlay::import::Error>() {
            return Link::typed(err, Some(Kind::from(err)), err.help().as_ref(), steps);
        }
        if let Some(err) = cause.downcast_ref::<HintedError>() {
            let text = format!("{}\n  help: {}", err.message, steps.help(&err.help));
            return Link::text(text, err.kind).with_help(Some(&err.help), steps);
        }
        if let Some(Classified(link)) = cause.downcast_ref::<Classified>() {
            return Link {
                kind: Some(link.kind.unwrap_or(Kind::Other)),
                ..link.clone()
            };
        }
        let kind = if cause.downcast_ref::<std::io::Error>().is_some() {
            Some(Kind::Io)
        } else if cause.downcast_ref::<git2::Error>().is_some() {
            Some(Kind::Git)
        } else {
            None
        };
        Link::text(cause.to_string(), kind)
    }

    /// A link of plain text.
    pub fn text(text: String, kind: Option<Kind>) -> Link {
        Link {
            text,
            kind,
            help: Vec::new(),
        }
    }

    fn with_help(mut self, help: Option<&Help>, steps: &Steps) -> Link {
        self.help.extend(help.map(|h| steps.help(h)));
        self
    }

    /// The engine's error: its kind, its text and help with the steps written out.
    pub fn engine(err: &overlay::Error, steps: &Steps) -> Link {
        Link::text(err.render(&|s| steps.render(s)), Some(Kind::from(err)))
            .with_help(err.help(), steps)
    }

    /// An error of the engine's commands that may wrap the engine's (import, interdiff).
    fn typed<E>(err: &E, kind: Option<Kind>, help: Option<&Help>, steps: &Steps) -> Link
    where
        E: std::fmt::Display + Engine,
    {
        match err.engine() {
            Some(e) => Link {
                kind,
                ..Link::engine(e, steps)
            },
            None => Link::text(err.to_string(), kind).with_help(help, steps),
        }
    }

    /// Links as `{:#}` chains them: texts joined by `: `, the first kind, every help.
    pub fn join(links: impl Iterator<Item = Link>) -> Link {
        let mut all: Option<Link> = None;
        for l in links {
            all = Some(match all {
                None => l,
                Some(mut a) => {
                    a.text = format!("{}: {}", a.text, l.text);
                    a.kind = a.kind.or(l.kind);
                    a.help.extend(l.help);
                    a
                }
            });
        }
        all.unwrap_or_default()
    }
}

/// The errors that wrap the engine's.
trait Engine {
    fn engine(&self) -> Option<&overlay::Error>;
}

impl Engine for overlay::interdiff::Error {
    fn engine(&self) -> Option<&overlay::Error> {
        overlay::interdiff::Error::engine(self)
    }
}

impl Engine for overlay::import::Error {
    fn engine(&self) -> Option<&overlay::Error> {
        overlay::import::Error::engine(self)
    }
}

/// A std error and its sources, outermost first.
pub fn std_chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| c.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global() -> crate::Global {
        crate::Global {
            root: None,
            upstream: None,
            json: true,
            extensions: Default::default(),
        }
    }

    #[test]
    fn engine_refusals_are_their_own_kind() {
        let e = overlay::Error::refused("tree", None, overlay::Refusal::NotRecovered);
        let c = CliError::from_anyhow(&global(), &anyhow::Error::new(e));
        assert_eq!(
            (c.kind, c.json()["kind"].as_str()),
            (Kind::Refused, Some("refused"))
        );
    }

    #[test]
    fn engine_input_errors_keep_their_text_and_give_the_hint() {
        let e = overlay::Error::input("pins.toml", Some(3), "bad rev").with_help("pin a full id");
        let c = CliError::from_anyhow(&global(), &anyhow::Error::new(e));
        assert_eq!(c.kind, Kind::Input);
        assert_eq!(c.message, "pins.toml:3: bad rev\n  help: pin a full id");
        assert_eq!(
            c.json(),
            serde_json::json!({"schema": 1, "error": c.message, "kind": "input", "hint": "pin a full id"})
        );
    }

    #[test]
    fn build_failures_are_their_own_kind_and_plain_errors_have_no_hint() {
        let link = Link::text("building: cmake configure failed".into(), Some(Kind::Build));
        let e = Classified::wrap(link).context("build-mlx");
        let c = CliError::from_anyhow(&global(), &e);
        assert_eq!((c.kind, c.hint.as_deref()), (Kind::Build, None));
        assert_eq!(c.message, "build-mlx: building: cmake configure failed");
        let c = CliError::from_anyhow(&global(), &anyhow::anyhow!("plain"));
        assert_eq!(c.kind, Kind::Other);
        assert_eq!(c.json()["kind"], "other");
        assert!(c.json().get("hint").is_none());
    }

    #[test]
    fn next_steps_carry_this_runs_globals_in_the_message_and_the_hint() {
        let g = crate::Global {
            root: Some("/p".into()),
            upstream: Some("mlx".into()),
            json: true,
            extensions: Default::default(),
        };
        let help = Help::new("run ")
            .step(overlay::NextStep::new("bump-pin", ["--continue"]))
            .text(" next");
        let e = overlay::Error::refused("tree", None, overlay::Refusal::NotRecovered)
            .with_help(help.clone());
        let c = CliError::from_anyhow(&g, &anyhow::Error::new(e).context("bump-pin"));
        let step = "`cargo xtask --root /p --upstream mlx bump-pin --continue`";
        assert_eq!(
            c.message,
            format!(
                "bump-pin: tree: an interrupted write was not recovered\n  help: run {step} next"
            )
        );
        assert_eq!(c.hint, Some(format!("run {step} next")));
        // Classified by a fork's tasks under a context of theirs, and as the CLI's own error, the
        // same.
        let inner = overlay::Error::input("a", None, "bad").with_help(help.clone());
        let mut link = Link::engine(&inner, &Steps::new(&g));
        link.text = format!("materializing: {}", link.text);
        let c = CliError::from_anyhow(&g, &Classified::wrap(link));
        assert_eq!(
            (c.kind, c.message.as_str()),
            (
                Kind::Input,
                &*format!("materializing: a: bad\n  help: run {step} next")
            )
        );
        let c = CliError::from_anyhow(&g, &HintedError::error("no", help));
        assert_eq!(c.message, format!("no\n  help: run {step} next"));
        assert_eq!(
            (c.kind, c.hint),
            (Kind::Other, Some(format!("run {step} next")))
        );
    }

    #[test]
    fn interdiff_errors_keep_their_kind_and_hint() {
        let e = overlay::interdiff::Error::NotARepository { root: "/p".into() };
        let c = CliError::from_anyhow(&global(), &anyhow::Error::new(e));
        assert_eq!(c.kind, Kind::Input);
        assert_eq!(
            c.hint.as_deref(),
            Some("run it in the fork's git checkout (or pass --root to a project inside one)")
        );
    }
}
