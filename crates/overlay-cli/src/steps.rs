//! The one writer of the commands the tool suggests (the engine's typed [`NextStep`]s, and the
//! CLI's own next steps): the program's name, as clap names the binary (`cargo xtask`, or what a
//! fork's own xtask calls itself), this run's `--root`/`--upstream`, then the subcommand and its
//! arguments, each quoted where a POSIX shell needs it.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::OnceLock;

use overlay::help::{Arg, NextStep};

use crate::Global;

static PROGRAM: OnceLock<String> = OnceLock::new();

/// Records the program name [`crate::parse_from`] found (clap's bin name); the first one wins.
pub(crate) fn set_program(name: &str) {
    let _ = PROGRAM.set(name.to_string());
}

/// The name the binary gives its command: what [`crate::parse`] read, else the name of this
/// crate's [`crate::Cli`] (`cargo xtask`).
pub fn program() -> &'static str {
    PROGRAM.get_or_init(|| {
        use clap::CommandFactory;
        crate::Cli::command().get_name().to_string()
    })
}

/// Writes next steps as command lines.
#[derive(Debug, Clone)]
pub struct Steps {
    /// The program with this run's global flags (`cargo xtask --root DIR`).
    prefix: String,
}

impl Steps {
    /// Steps as this run would type them: the program and `g`'s `--root`/`--upstream`.
    pub fn new(g: &Global) -> Steps {
        let mut prefix = program().to_string();
        if let Some(r) = &g.root {
            let _ = write!(prefix, " --root {}", r.display());
        }
        if let Some(u) = &g.upstream {
            let _ = write!(prefix, " --upstream {u}");
        }
        Steps { prefix }
    }

    /// Steps with the program alone (text that outlives the run: findings, overlay files).
    pub fn program_only() -> Steps {
        Steps {
            prefix: program().to_string(),
        }
    }

    /// `step` as a command line.
    pub fn render(&self, step: &NextStep) -> String {
        let mut out = format!("{} {}", self.prefix, step.command);
        for a in &step.args {
            match a {
                Arg::Word(w) => {
                    let _ = write!(out, " {}", quote(w));
                }
                Arg::Slot(s) => {
                    let _ = write!(out, " <{s}>");
                }
            }
        }
        out
    }

    /// A command line the CLI writes itself (`rest`: the subcommand and its arguments, as typed).
    pub fn line(&self, rest: &str) -> String {
        format!("{} {rest}", self.prefix)
    }

    /// `help` with its steps written by [`Steps::render`].
    pub fn help(&self, help: &overlay::Help) -> String {
        help.render(&|s| self.render(s))
    }
}

/// `word` as a POSIX shell reads it back: as it is when every character is safe, else in single
/// quotes (a `'` inside written `'\''`).
fn quote(word: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(root: Option<&str>, upstream: Option<&str>) -> Global {
        Global {
            root: root.map(Into::into),
            upstream: upstream.map(Into::into),
            json: false,
            extensions: Default::default(),
        }
    }

    #[test]
    fn a_step_carries_the_program_and_this_runs_globals() {
        let step = NextStep::new("bump-pin", ["--continue", "--drop-upstreamed"]);
        assert_eq!(
            Steps::new(&global(None, None)).render(&step),
            "cargo xtask bump-pin --continue --drop-upstreamed"
        );
        assert_eq!(
            Steps::new(&global(Some("/tmp/p"), Some("mlx"))).render(&step),
            "cargo xtask --root /tmp/p --upstream mlx bump-pin --continue --drop-upstreamed"
        );
        assert_eq!(
            Steps::program_only().render(&NextStep::plain("check")),
            "cargo xtask check"
        );
        assert_eq!(
            Steps::new(&global(Some("/p"), None)).line("apply --force"),
            "cargo xtask --root /p apply --force"
        );
    }

    #[test]
    fn a_step_quotes_the_words_a_shell_would_split_and_keeps_slots() {
        let step = NextStep::new(
            "apply",
            [
                Arg::from("--dir"),
                Arg::from("my tree/it's"),
                Arg::slot("rev"),
                Arg::from(""),
            ],
        );
        assert_eq!(
            Steps::new(&global(Some("/p"), None)).render(&step),
            r"cargo xtask --root /p apply --dir 'my tree/it'\''s' <rev> ''"
        );
        let help = overlay::Help::new("run ").step(step).text(" first");
        assert_eq!(
            Steps::program_only().help(&help),
            r"run `cargo xtask apply --dir 'my tree/it'\''s' <rev> ''` first"
        );
    }
}
