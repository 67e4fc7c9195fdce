//! The CLI's one error type: every failure of a command becomes a [`CliError`], which decides the
//! exit code and renders the one error shape (`error: …` on stderr, and under `--json`
//! `{"schema": 1, "error": …, "kind": …, "hint": …}` on stdout; docs/json.md). Library errors
//! (the engine's `overlay::Error`, git's, io's) are mapped here, in one place, as jj's
//! `command_error.rs` does; errors of crates this one does not name (a fork's build) come
//! classified by the fork's tasks as a [`Classified`].

use std::process::ExitCode;

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
fn engine_kind(err: &overlay::Error) -> Kind {
    match err.kind() {
        overlay::error::ErrorKind::Input(_) => Kind::Input,
        overlay::error::ErrorKind::Refused => Kind::Refused,
        overlay::error::ErrorKind::Apply => Kind::Apply,
        overlay::error::ErrorKind::Io => Kind::Io,
        overlay::error::ErrorKind::Git => Kind::Git,
    }
}

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
    /// Maps an error a command returned; `g` supplies the globals its suggested commands carry.
    pub fn from_anyhow(g: &crate::Global, e: &anyhow::Error) -> CliError {
        let message = crate::commands::with_globals(g, &format!("{e:#}"));
        CliError {
            kind: kind_of(e),
            hint: hint_of(&message),
            message,
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

/// An error the fork's tasks classified (a build crate's, which this crate does not name): its
/// whole message (the chain, as `{:#}` shows it) and the kind the CLI reports.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Classified {
    pub kind: Kind,
    pub message: String,
}

impl Classified {
    /// `e`, its text kept byte for byte, reported as `kind`.
    pub fn wrap(kind: Kind, e: &anyhow::Error) -> anyhow::Error {
        anyhow::Error::new(Classified {
            kind,
            message: format!("{e:#}"),
        })
    }
}

/// The kind of the first error in the chain that a library defines.
fn kind_of(e: &anyhow::Error) -> Kind {
    e.chain().find_map(cause_kind).unwrap_or(Kind::Other)
}

/// The kind of one link of a chain, when a library defines it (or a [`Classified`] says it).
pub fn cause_kind(cause: &(dyn std::error::Error + 'static)) -> Option<Kind> {
    if let Some(c) = cause.downcast_ref::<Classified>() {
        return Some(c.kind);
    }
    if let Some(err) = cause.downcast_ref::<overlay::Error>() {
        return Some(engine_kind(err));
    }
    if let Some(err) = cause.downcast_ref::<overlay::interdiff::Error>() {
        return Some(match err {
            overlay::interdiff::Error::Engine(e) => engine_kind(e),
            _ => Kind::Input,
        });
    }
    if cause.downcast_ref::<std::io::Error>().is_some() {
        return Some(Kind::Io);
    }
    if cause.downcast_ref::<git2::Error>().is_some() {
        return Some(Kind::Git);
    }
    None
}

/// A std error and its sources, outermost first.
pub fn std_chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| c.source())
}

/// The text after the message's `help:` markers (several are joined by newlines).
fn hint_of(message: &str) -> Option<String> {
    let helps: Vec<&str> = message
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("help:"))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    (!helps.is_empty()).then(|| helps.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global() -> crate::Global {
        crate::Global {
            root: None,
            upstream: None,
            json: true,
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
        let e = anyhow::anyhow!("cmake configure failed").context("building");
        let e = Classified::wrap(Kind::Build, &e).context("build-mlx");
        let c = CliError::from_anyhow(&global(), &e);
        assert_eq!((c.kind, c.hint.as_deref()), (Kind::Build, None));
        assert_eq!(c.message, "build-mlx: building: cmake configure failed");
        let c = CliError::from_anyhow(&global(), &anyhow::anyhow!("plain"));
        assert_eq!(c.kind, Kind::Other);
        assert_eq!(c.json()["kind"], "other");
        assert!(c.json().get("hint").is_none());
    }
}
