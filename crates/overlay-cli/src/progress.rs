//! Progress: a bar on a terminal, throttled plain lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    /// stderr is a terminal: draw a bar (from the first non-empty update) instead of lines.
    tty: bool,
    label: String,
    last: Option<Instant>,
    done: bool,
}

impl Progress {
    pub fn new(label: &str) -> Progress {
        Progress {
            bar: None,
            tty: std::io::stderr().is_terminal(),
            label: label.to_string(),
            last: None,
            done: false,
        }
    }

    pub fn update(&mut self, pos: u64, len: u64) {
        // Nothing to receive (an up-to-date fetch): no `0/0` bar or line. The bar is made at the
        // first real update, so a terminal never shows an empty one either.
        if len == 0 {
            return;
        }
        if self.tty {
            let label = &self.label;
            let b = self.bar.get_or_insert_with(|| {
                let b = ProgressBar::new(len);
                b.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_message(label.clone());
                b
            });
            b.set_length(len);
            b.set_position(pos);
            return;
        }
        if let Some(line) = self.line(pos, len) {
            eprintln!("{line}");
        }
    }

    /// The plain line to print for this update, if one is due.
    fn line(&mut self, pos: u64, len: u64) -> Option<String> {
        if len == 0 {
            return None;
        }
        let complete = pos == len;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if (due || complete) && !self.done {
            self.done = complete;
            self.last = Some(Instant::now());
            return Some(format!("{}: {pos}/{len}", self.label));
        }
        None
    }

    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// The build driver's progress on stderr: its news as lines, Ninja's status as a bar on a
/// terminal, else as lines throttled to one per 10 s (CI logs stay readable).
pub struct BuildProgress {
    tty: bool,
    /// Created on the first status line: before Ninja reports a total there is nothing to show.
    bar: Option<ProgressBar>,
    last_print: Instant,
}

impl Default for BuildProgress {
    fn default() -> Self {
        BuildProgress {
            tty: std::io::stderr().is_terminal(),
            bar: None,
            last_print: Instant::now() - Duration::from_secs(60),
        }
    }
}

impl mlx_build::Progress for BuildProgress {
    fn message(&mut self, msg: &str) {
        eprintln!("{msg}");
    }

    fn ninja(&mut self, n: u64, m: u64, desc: &str) {
        if self.tty {
            let pb = self.bar.get_or_insert_with(|| {
                let pb = ProgressBar::new(m);
                pb.set_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
                    )
                    .expect("static template")
                    .progress_chars("=> "),
                );
                pb.enable_steady_tick(Duration::from_millis(200));
                pb
            });
            pb.set_length(m);
            pb.set_position(n);
            pb.set_message(desc.to_string());
        } else if n == m || self.last_print.elapsed() >= Duration::from_secs(10) {
            eprintln!("[{n}/{m}] {desc}");
            self.last_print = Instant::now();
        }
    }

    fn ninja_done(&mut self) {
        if let Some(pb) = self.bar.take() {
            pb.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_fetch_prints_no_zero_of_zero() {
        let mut p = Progress {
            bar: None,
            tty: false,
            label: "fetching up".into(),
            last: None,
            done: false,
        };
        assert_eq!(p.line(0, 0), None, "an up-to-date fetch draws nothing");
        assert_eq!(p.line(1, 4).as_deref(), Some("fetching up: 1/4"));
        assert_eq!(p.line(2, 4), None, "throttled");
        assert_eq!(p.line(4, 4).as_deref(), Some("fetching up: 4/4"));
        assert_eq!(p.line(4, 4), None, "once complete, done");
        // On a terminal, no bar exists until there is something to fetch.
        let mut t = Progress {
            bar: None,
            tty: true,
            label: "fetching up".into(),
            last: None,
            done: false,
        };
        t.update(0, 0);
        assert!(t.bar.is_none(), "an up-to-date fetch makes no bar");
    }
}
