//! What to do next, typed (as jj's `command_error.rs` hints are): a [`Help`] is text with
//! [`NextStep`]s in it, each a command of the tool (subcommand and arguments) that the CLI writes
//! with its own program name and the run's global flags. The engine never writes the tool's
//! name itself; `Display` shows a step as its bare subcommand (`` `check` ``).

use std::fmt;

/// The word of `known` closest to `key` by edit distance (case-insensitive), when it is close
/// enough to be a misspelling: at most a third of the longer word, and at least one edit away.
pub fn did_you_mean<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    known
        .into_iter()
        .map(|k| (edit_distance(&key, &k.to_ascii_lowercase()), k))
        .filter(|(d, k)| *d > 0 && *d * 3 <= key.len().max(k.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes (the keys are ASCII).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// One argument of a [`NextStep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// A word to type as it is (a renderer quotes it where a shell needs quotes).
    Word(String),
    /// A value the user fills in, written `<name>`.
    Slot(String),
}

impl Arg {
    /// A value the user fills in (`<name>`).
    pub fn slot(name: impl Into<String>) -> Arg {
        Arg::Slot(name.into())
    }
}

impl From<&str> for Arg {
    fn from(w: &str) -> Arg {
        Arg::Word(w.to_string())
    }
}

impl From<String> for Arg {
    fn from(w: String) -> Arg {
        Arg::Word(w)
    }
}

/// A command of the tool to run next: its subcommand and arguments, without the program name or
/// the global flags (the CLI adds those).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextStep {
    /// The subcommand (`bump-pin`).
    pub command: String,
    /// Its arguments, in order.
    pub args: Vec<Arg>,
}

impl NextStep {
    /// `command` with `args` (`NextStep::new("bump-pin", ["--continue"])`).
    pub fn new<A: Into<Arg>>(command: &str, args: impl IntoIterator<Item = A>) -> NextStep {
        NextStep {
            command: command.to_string(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// `command` without arguments.
    pub fn plain(command: &str) -> NextStep {
        NextStep::new(command, [] as [Arg; 0])
    }
}

/// The bare step: subcommand and arguments as they are, slots as `<name>`.
impl fmt::Display for NextStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.command)?;
        for a in &self.args {
            match a {
                Arg::Word(w) => write!(f, " {w}")?,
                Arg::Slot(s) => write!(f, " <{s}>")?,
            }
        }
        Ok(())
    }
}

/// `bump-pin <rev> --drop-upstreamed`: the way to retire an overlay upstream already has.
pub fn drop_upstreamed() -> NextStep {
    NextStep::new("bump-pin", [Arg::slot("rev"), "--drop-upstreamed".into()])
}

/// One piece of a [`Help`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text as it is.
    Text(String),
    /// A command, written in backticks.
    Step(NextStep),
}

/// What to do about an error or a finding: text and the commands it names, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Help {
    parts: Vec<Part>,
}

impl Help {
    /// Help that starts with `text`.
    pub fn new(text: impl Into<String>) -> Help {
        Help::default().text(text)
    }

    /// `text` appended.
    pub fn text(mut self, text: impl Into<String>) -> Help {
        let text = text.into();
        if !text.is_empty() {
            self.parts.push(Part::Text(text));
        }
        self
    }

    /// `step` appended (written in backticks).
    pub fn step(mut self, step: NextStep) -> Help {
        self.parts.push(Part::Step(step));
        self
    }

    /// `other`'s pieces appended.
    pub fn append(mut self, other: Help) -> Help {
        self.parts.extend(other.parts);
        self
    }

    /// The pieces, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The commands it names, in order.
    pub fn steps(&self) -> impl Iterator<Item = &NextStep> {
        self.parts.iter().filter_map(|p| match p {
            Part::Step(s) => Some(s),
            Part::Text(_) => None,
        })
    }

    /// The text, each step written by `step` (a CLI's program name and flags) in backticks.
    pub fn render(&self, step: &dyn Fn(&NextStep) -> String) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Step(s) => {
                    out.push('`');
                    out.push_str(&step(s));
                    out.push('`');
                }
            }
        }
        out
    }
}

impl From<&str> for Help {
    fn from(text: &str) -> Help {
        Help::new(text)
    }
}

impl From<String> for Help {
    fn from(text: String) -> Help {
        Help::new(text)
    }
}

/// Its `Display` (a CLI writes its own rendering where it shows steps).
impl serde::Serialize for Help {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Steps as their bare subcommands (see [`NextStep`]'s `Display`).
impl fmt::Display for Help {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|s| s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_renders_its_steps_with_the_renderer_in_backticks() {
        let h = Help::new("run ")
            .step(NextStep::new(
                "bump-pin",
                [Arg::slot("rev"), "--drop-upstreamed".into()],
            ))
            .text(", then ")
            .step(NextStep::plain("check"));
        assert_eq!(
            h.render(&|s| format!("tool {s}")),
            "run `tool bump-pin <rev> --drop-upstreamed`, then `tool check`"
        );
        assert_eq!(
            h.to_string(),
            "run `bump-pin <rev> --drop-upstreamed`, then `check`"
        );
        assert_eq!(h.steps().count(), 2);
        assert_eq!(Help::from("plain").steps().count(), 0);
    }
}
